package cas

import (
	"bytes"
	"slices"
	"testing"

	"pgregory.net/rapid"
)

// editing is a value under edit the way a file is: the content, and the
// ranges written since the old value (growth counts as written).
type editing struct {
	data    []byte
	changed []Range
}

func (e *editing) grow(n int) {
	if n > len(e.data) {
		e.changed = append(e.changed, Range{uint64(len(e.data)), uint64(n)})
		e.data = append(e.data, make([]byte, n-len(e.data))...)
	}
}

func (e *editing) write(off int, p []byte) {
	e.grow(off + len(p))
	copy(e.data[off:], p)
	e.changed = append(e.changed, Range{uint64(off), uint64(off + len(p))})
}

func (e *editing) truncate(n int) {
	if n < len(e.data) {
		e.data = e.data[:n]
	}
	e.grow(n)
}

// fill draws the bytes of a write: random, zeros or a short pattern.
func fill(t *rapid.T, n int) []byte {
	switch rapid.IntRange(0, 2).Draw(t, "fill") {
	case 0:
		return randBytes(rapid.Uint64().Draw(t, "seed"), n)
	case 1:
		return make([]byte, n)
	}
	pat := rapid.SliceOfN(rapid.Byte(), 1, 70).Draw(t, "pattern")
	b := make([]byte, 0, n+len(pat))
	for len(b) < n {
		b = append(b, pat...)
	}
	return b[:n]
}

// checkEdit edits old into e's content and checks the result is what a
// Writer makes of that content, with every piece it names stored.
func checkEdit(t tb, m *memStore, old ObjectIdentifier, e *editing) EditStats {
	return checkEditCached(t, m, nil, old, e)
}

func checkEditCached(t tb, m *memStore, shared *IndexCache, old ObjectIdentifier, e *editing) EditStats {
	t.Helper()
	id, st, err := Edit(m, shared, m, testPol, old, bytes.NewReader(e.data), uint64(len(e.data)), e.changed)
	if err != nil {
		t.Fatalf("Edit: %v", err)
	}
	want := write(t, newMemStore(), e.data, 1<<20)
	if id != want {
		t.Fatalf("edited value %s, a Writer makes %s", id, want)
	}
	if got := readAll(t, m, id); !bytes.Equal(got, e.data) {
		t.Fatalf("edited value reads %d bytes unlike its %d", len(got), len(e.data))
	}
	return st
}

// TestEditMatchesWriter: whatever the old content and the writes,
// truncations and extensions, Edit gives the id a Writer gives the new
// content (the pieces below it stored and read back), editing again on top
// of an edit too, with index pieces from a shared cache or not.
func TestEditMatchesWriter(t *testing.T) {
	rapid.Check(t, func(rt *rapid.T) {
		data := streamGen().Draw(rt, "old")
		m := newMemStore()
		var shared *IndexCache
		if rapid.Bool().Draw(rt, "shared") {
			var err error
			if shared, err = NewIndexCache(1 << 20); err != nil {
				rt.Fatal(err)
			}
			defer shared.Close()
		}
		old := write(rt, m, data, 1<<20)
		for range rapid.IntRange(1, 3).Draw(rt, "edits") {
			e := &editing{data: bytes.Clone(data)}
			for range rapid.IntRange(0, 5).Draw(rt, "ops") {
				size := len(e.data)
				switch rapid.IntRange(0, 4).Draw(rt, "op") {
				case 0, 1: // a write inside, often small
					off := rapid.IntRange(0, size).Draw(rt, "off")
					n := rapid.OneOf(rapid.IntRange(1, 64), rapid.IntRange(1, 200<<10)).Draw(rt, "n")
					e.write(off, fill(rt, n))
				case 2: // a write past the end
					off := size + rapid.IntRange(0, 100<<10).Draw(rt, "gap")
					e.write(off, fill(rt, rapid.IntRange(1, 100<<10).Draw(rt, "n")))
				case 3:
					e.truncate(rapid.IntRange(0, size).Draw(rt, "shrink"))
				case 4:
					e.truncate(size + rapid.IntRange(0, 300<<10).Draw(rt, "extend"))
				}
			}
			checkEditCached(rt, m, shared, old, e)
			old = write(rt, m, e.data, 1<<20)
			data = e.data
		}
	})
}

// TestEditCostFollowsTheChange: a 4 KiB write into a large value chunks
// and hashes a few chunks, not the value, wherever it lands; so does one in
// a long run of zeros, where every cut closes a dozen levels and parents
// close for being full. In a run of zeros cuts fall every minimum chunk
// size from the last cut before it, so a write that holds a cut of its own
// moves every later cut of the run: the edit adds the run's chunks as a
// run (editor.zeroChunks) rather than chunking them. In the run each offset
// is tried with a write that holds a cut and one that does not.
func TestEditCostFollowsTheChange(t *testing.T) {
	for _, c := range []struct {
		name string
		data []byte
		cuts []bool // writes tried: with a cut in them, without
	}{
		{"random", randBytes(3, 24<<20), []bool{false}},
		{"zeros", append(append(randBytes(4, 1<<20), make([]byte, 6<<20)...), randBytes(5, 1<<20)...), []bool{false, true}},
	} {
		t.Run(c.name, func(t *testing.T) {
			m := newMemStore()
			old := write(t, m, c.data, 1<<20)
			cuts := cutsOf(t, c.data)
			for i, off := range []int{0, 4 << 20, len(c.data) / 2, len(c.data) - 5000, len(c.data) - 4096} {
				for _, cut := range c.cuts {
					var e *editing
					for seed := uint64(i); e == nil && seed < uint64(i)+400; seed += 10 {
						e = &editing{data: bytes.Clone(c.data)}
						e.write(off, randBytes(seed, 4096))
						if cutWithinAfter(t, e.data, cuts, off, off+4096) != cut {
							e = nil
						}
					}
					if e == nil {
						continue // no write of that kind here
					}
					st := checkEdit(t, m, old, e)
					t.Logf("4 KiB at %d (a cut in it: %v): chunked %d, probed %d, reused %d", off, cut, st.Chunked, st.Probed, st.Reused)
					if st.Chunked+st.Probed > 256<<10 {
						t.Errorf("a 4 KiB write at %d (a cut in it: %v) chunked %d bytes and probed %d", off, cut, st.Chunked, st.Probed)
					}
					if st.Reused == 0 {
						t.Errorf("a 4 KiB write at %d reused nothing of the old value", off)
					}
					if !allZero(zeroPage[:]) {
						t.Fatal("something wrote into zeroPage")
					}
				}
			}
		})
	}
}

// TestEditChangesInOneRunOfZeros: writes into one run of zeros, the first
// holding a cut (so the edit adds the zeros after it as a run), the others
// later in the same run or just past it: the run stops at the next change,
// and the edit gives the id a Writer gives.
func TestEditChangesInOneRunOfZeros(t *testing.T) {
	data := append(append(randBytes(6, 1<<20), make([]byte, 6<<20)...), randBytes(7, 1<<20)...)
	m := newMemStore()
	old := write(t, m, data, 1<<20)
	cuts := cutsOf(t, data)
	tried := 0
	for seed := uint64(1); tried < 3 && seed < 2000; seed += 7 {
		e := &editing{data: bytes.Clone(data)}
		e.write(2<<20+int(seed%4096), randBytes(seed, 4096))
		if !cutWithinAfter(t, e.data, cuts, 2<<20, 2<<20+8192) {
			continue
		}
		tried++
		for i, off := range []int{3 << 20, 5<<20 + 123, 7<<20 - 10} {
			e.write(off+i*int(seed%1000), randBytes(seed+uint64(i)+1, 1+int(seed)%5000))
		}
		st := checkEdit(t, m, old, e)
		t.Logf("seed %d: chunked %d", seed, st.Chunked)
	}
	if tried == 0 {
		t.Fatal("no write held a cut")
	}
}

// TestEditRunStopsAtOtherBytes: a run of zeros holding a chunk of other
// bytes exactly MinChunkSize long (zeros at its end, so cut there as zeros
// are): the edit after a write that moves the run's cuts takes the old
// chunks for zeros by what they hold, not by their length, and stops the
// run at that chunk.
func TestEditRunStopsAtOtherBytes(t *testing.T) {
	data := append(append(randBytes(8, 1<<20), make([]byte, 6<<20)...), randBytes(9, 1<<20)...)
	at := 0 // the first cut in the run past 4 MiB
	for _, c := range cutsOf(t, data) {
		if c >= 4<<20 {
			at = c
			break
		}
	}
	copy(data[at:], randBytes(10, MinChunkSize-chunkerWindow))
	m := newMemStore()
	old := write(t, m, data, 1<<20)
	cuts := cutsOf(t, data)
	if i := slices.Index(cuts, at+MinChunkSize); i < 0 || cuts[i-1] != at {
		t.Fatalf("the other bytes at %d are not a chunk of their own", at)
	}
	for seed := uint64(1); seed < 2000; seed += 7 {
		e := &editing{data: bytes.Clone(data)}
		e.write(2<<20+int(seed%4096), randBytes(seed, 4096))
		if cutWithinAfter(t, e.data, cuts, 2<<20, 2<<20+8192) {
			checkEdit(t, m, old, e)
			return
		}
	}
	t.Fatal("no write held a cut")
}

// TestEditAppends: appending to a value chunks the old last chunk and what
// was appended; a value of one chunk is written whole.
func TestEditAppends(t *testing.T) {
	m := newMemStore()
	data := randBytes(6, 8<<20)
	old := write(t, m, data, 1<<20)
	e := &editing{data: bytes.Clone(data)}
	e.write(len(data), randBytes(7, 10000))
	if st := checkEdit(t, m, old, e); st.Chunked > 10000+MaxChunkSize {
		t.Errorf("appending 10,000 bytes chunked %d", st.Chunked)
	}
	small := randBytes(8, 3000)
	old = write(t, m, small, 1<<20)
	e = &editing{data: bytes.Clone(small)}
	e.write(100, []byte("changed"))
	checkEdit(t, m, old, e)
}

func FuzzEdit(f *testing.F) {
	f.Add(uint64(1), uint32(300<<10), uint32(1000), uint32(4096), uint32(0))
	f.Add(uint64(2), uint32(900<<10), uint32(0), uint32(1), uint32(900<<10))
	f.Fuzz(func(t *testing.T, seed uint64, size, off, n, newSize uint32) {
		size %= 2 << 20
		data := randBytes(seed, int(size))
		if seed%3 == 0 {
			clear(data[size/4 : size/2])
		}
		m := newMemStore()
		old := write(t, m, data, 1<<20)
		e := &editing{data: bytes.Clone(data)}
		e.write(int(off%(size+1)), randBytes(seed+1, int(n%(256<<10))))
		if newSize%2 == 0 {
			e.truncate(int(newSize % (3 << 20)))
		}
		checkEdit(t, m, old, e)
	})
}

// TestEditLearnsCutsAtTheEnd: a run of zeros cuts closing a dozen levels
// makes the old tree tall; once an edit removes it, the new height comes
// from the cuts left, the value's last one included, which only its bytes
// tell.
func TestEditLearnsCutsAtTheEnd(t *testing.T) {
	for _, tail := range []int{100 << 10, 8 << 10, 0} {
		data := append(append(randBytes(9, 2<<20), make([]byte, 12<<10)...), randBytes(10, 2<<20)...)
		data = append(data, make([]byte, tail)...)
		m := newMemStore()
		old := write(t, m, data, 1<<20)
		e := &editing{data: bytes.Clone(data)}
		e.write(2<<20, randBytes(11, 12<<10))
		checkEdit(t, m, old, e)
		e = &editing{data: bytes.Clone(data)}
		e.write(100, randBytes(12, 10))
		checkEdit(t, m, old, e)
	}
}

// cutsOf returns where the chunks of data end.
func cutsOf(t tb, data []byte) []int {
	var cuts []int
	end := 0
	for _, c := range sequentialChunks(t, data) {
		end += len(c.data)
		cuts = append(cuts, end)
	}
	return cuts
}

// cutWithinAfter reports whether the chunker cuts data inside [lo, hi),
// for data whose bytes before lo are those of a value that cut at
// oldCuts: it chunks data from the last of them at or before lo, which
// cuts as chunking data whole does from there, and only up to hi.
func cutWithinAfter(t tb, data []byte, oldCuts []int, lo, hi int) bool {
	start := 0
	for _, c := range oldCuts {
		if c > lo {
			break
		}
		start = c
	}
	end := start
	for _, c := range sequentialChunks(t, data[start:min(len(data), hi+MaxChunkSize)]) {
		end += len(c.data)
		if end > lo && end < hi {
			return true
		}
		if end >= hi {
			break
		}
	}
	return false
}
