package cas

import (
	"bytes"
	"fmt"
	"io"
	"testing"

	"pgregory.net/rapid"
)

// tb is what the helpers need of testing.T and rapid.T.
type tb interface {
	Helper()
	Fatal(args ...any)
	Fatalf(format string, args ...any)
}

type testChunk struct {
	data []byte
	lv   int
}

// sequentialChunks is restic's chunker over the whole stream, the reference.
func sequentialChunks(t tb, data []byte) []testChunk {
	cs := newChunkStream(bytes.NewReader(data), testPol)
	defer cs.release()
	var out []testChunk
	for {
		c, lv, err := cs.next()
		if err == io.EOF {
			return out
		}
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, testChunk{c, lv})
	}
}

// parallelChunks writes data through a queue of segSize segments in writes
// of the given sizes (cycled) and collects the stitched chunks. With
// zeroRuns > 0, runs of at least that many zeros are queued as segments of
// zeros (queue.WriteZeros), as a file's holes are.
func parallelChunks(t tb, data []byte, segSize int, writes []int, zeroRuns ...int) []testChunk {
	q := newQueue(testPol)
	q.size = segSize
	var out []testChunk
	done := make(chan error, 1)
	go func() {
		done <- q.chunk(func(d []byte, lv int, n uint64) error {
			for range n {
				out = append(out, testChunk{d, lv})
			}
			return nil
		})
	}()
	for i, off := 0, 0; off < len(data); i++ {
		n := min(len(data)-off, max(1, writes[i%len(writes)]))
		if len(zeroRuns) > 0 && zeroRuns[0] > 0 {
			z := 0
			for off+z < len(data) && data[off+z] == 0 {
				z++
			}
			if z >= zeroRuns[0] {
				if err := q.WriteZeros(uint64(z)); err != nil {
					t.Fatal(err)
				}
				off += z
				continue
			}
			if z > 0 {
				n = min(n, z)
			} else if next := bytes.IndexByte(data[off:off+n], 0); next > 0 {
				n = next
			}
		}
		if _, err := q.Write(data[off : off+n]); err != nil {
			t.Fatal(err)
		}
		off += n
	}
	if err := q.Close(); err != nil {
		t.Fatal(err)
	}
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	return out
}

func sameChunks(t tb, got, want []testChunk) {
	t.Helper()
	if len(got) != len(want) {
		t.Fatalf("%d chunks, want %d", len(got), len(want))
	}
	for i := range want {
		if !bytes.Equal(got[i].data, want[i].data) || got[i].lv != want[i].lv {
			t.Fatalf("chunk %d: %d bytes at level %d, want %d bytes at level %d",
				i, len(got[i].data), got[i].lv, len(want[i].data), want[i].lv)
		}
	}
}

// streamGen draws streams that cut in every way: random bytes (cuts by
// content), zero and short repeated runs (cuts at the maximum size, or at
// the same place over and over), pieces shorter than the minimum chunk.
func streamGen() *rapid.Generator[[]byte] {
	return rapid.Custom(func(t *rapid.T) []byte {
		var data []byte
		for range rapid.IntRange(0, 6).Draw(t, "runs") {
			n := rapid.IntRange(0, 700<<10).Draw(t, "len")
			switch rapid.IntRange(0, 3).Draw(t, "kind") {
			case 0:
				data = append(data, randBytes(rapid.Uint64().Draw(t, "seed"), n)...)
			case 1:
				data = append(data, make([]byte, n)...)
			case 2:
				pat := rapid.SliceOfN(rapid.Byte(), 1, 100).Draw(t, "pattern")
				for len(pat) < n {
					pat = append(pat, pat...)
				}
				data = append(data, pat[:n]...)
			case 3:
				data = append(data, randBytes(rapid.Uint64().Draw(t, "seed"), n%MinChunkSize)...)
			}
		}
		return data
	})
}

// TestParallelChunksMatchSequential: chunking in segments and stitching
// gives the single-stream chunker's chunks, whatever the segment and write
// sizes.
func TestParallelChunksMatchSequential(t *testing.T) {
	rapid.Check(t, func(rt *rapid.T) {
		data := streamGen().Draw(rt, "data")
		segSize := rapid.OneOf(
			rapid.IntRange(1<<10, 3*MaxChunkSize),
			rapid.IntRange(3*MaxChunkSize, segmentSize),
			rapid.Just(segmentSize),
		).Draw(rt, "segment")
		writes := rapid.SliceOfN(rapid.IntRange(1, 2<<20), 1, 4).Draw(rt, "writes")
		zeroRuns := rapid.OneOf(rapid.Just(0), rapid.IntRange(1, 3*MaxChunkSize)).Draw(rt, "zero runs")
		sameChunks(rt, parallelChunks(rt, data, segSize, writes, zeroRuns), sequentialChunks(rt, data))
	})
}

// TestParallelChunksLargeStream covers many full segments at the real size,
// as a large file write makes them.
func TestParallelChunksLargeStream(t *testing.T) {
	data := append(randBytes(7, 9<<20+12345), make([]byte, 3<<20)...)
	data = append(data, randBytes(8, 5<<20)...)
	for _, w := range []int{1 << 20, 128 << 10, 4096 + 17} {
		t.Run(fmt.Sprint(w), func(t *testing.T) {
			sameChunks(t, parallelChunks(t, data, segmentSize, []int{w}), sequentialChunks(t, data))
		})
	}
}

func FuzzParallelChunks(f *testing.F) {
	f.Add(randBytes(1, 40<<10), uint32(2<<10), uint32(4096))
	f.Add(make([]byte, 40<<10), uint32(3<<10), uint32(1))
	f.Fuzz(func(t *testing.T, data []byte, segSize, write uint32) {
		seg := int(segSize%(2*MaxChunkSize)) + 1<<10
		sameChunks(t, parallelChunks(t, data, seg, []int{int(write%(1<<20)) + 1}), sequentialChunks(t, data))
	})
}

// TestZeroCutsMatchTheChunker: wherever zeroCut cuts a chunk at
// MinChunkSize, restic's chunker does too, with fingerprint 0, and
// chunking in segments still gives its chunks on streams of short runs of
// zeros among other bytes (a zero window that begins or ends a byte away
// from the cut, a lone non-zero byte in it).
func TestZeroCutsMatchTheChunker(t *testing.T) {
	// A chunk that starts with p random bytes, then zeros: the chunker
	// cuts it at MinChunkSize with fingerprint 0 exactly when zeroCut says,
	// for every p about the window's start.
	for p := MinChunkSize - 2*chunkerWindow; p <= MinChunkSize; p++ {
		for seed := range uint64(3) {
			span := append(randBytes(seed, p), make([]byte, MinChunkSize-p)...)
			if p > 0 {
				span[p-1] |= 1 // the last random byte is not a zero
			}
			span = append(span, randBytes(seed+100, MaxChunkSize)...)
			first := sequentialChunks(t, span)[0]
			cuts := len(first.data) == MinChunkSize && first.lv == cutLevels(0)
			if zeroCut(span) != cuts {
				t.Fatalf("%d random bytes, then zeros: zeroCut %v, the chunker's first chunk %d bytes at level %d", p, zeroCut(span), len(first.data), first.lv)
			}
		}
	}
	// Streams of short runs, chunked in segments as writes are.
	rapid.Check(t, func(rt *rapid.T) {
		data := randBytes(rapid.Uint64().Draw(rt, "prefix seed"), rapid.IntRange(0, 4*MaxChunkSize).Draw(rt, "prefix"))
		for range rapid.IntRange(1, 60).Draw(rt, "runs") {
			n := rapid.OneOf(rapid.IntRange(0, 2*chunkerWindow), rapid.IntRange(0, 3*MinChunkSize)).Draw(rt, "len")
			switch rapid.IntRange(0, 2).Draw(rt, "kind") {
			case 0:
				data = append(data, randBytes(rapid.Uint64().Draw(rt, "seed"), n)...)
			case 1:
				data = append(data, make([]byte, n)...)
			case 2:
				data = append(data, make([]byte, n)...)
				if n > 0 {
					data[len(data)-1-rapid.IntRange(0, n-1).Draw(rt, "at")] = rapid.Byte().Draw(rt, "byte")
				}
			}
		}
		want := sequentialChunks(rt, data)
		at := 0
		for _, c := range want {
			if zeroCut(data[at:]) && (len(c.data) != MinChunkSize || c.lv != cutLevels(0)) {
				rt.Fatalf("zeroCut at %d, but the chunker cut %d bytes on (levels %d)", at, len(c.data), c.lv)
			}
			at += len(c.data)
		}
		segSize := rapid.IntRange(1<<10, 3*MaxChunkSize).Draw(rt, "segment")
		sameChunks(rt, parallelChunks(rt, data, segSize, []int{rapid.IntRange(1, 1<<20).Draw(rt, "write")}), want)
	})
}
