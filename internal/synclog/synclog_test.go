package synclog

import (
	"bytes"
	"math/rand/v2"
	"os"
	"path/filepath"
	"reflect"
	"testing"
	"testing/quick"
)

func randRecord(rng *rand.Rand) Record {
	var journal []byte
	if rng.IntN(3) == 0 {
		journal = append([]byte{'j'}, randBytes(rng, 20)...)
	}
	if rng.IntN(4) == 0 {
		return Record{Key: randString(rng, 40), Delete: true, Journal: journal}
	}
	r := Record{Key: randString(rng, 40), Op: randBytes(rng, 60), Base: randBytes(rng, 33),
		Result: randBytes(rng, 33), Keep: rng.Uint64N(1 << 30), Size: 1 << 20, Journal: journal}
	switch rng.IntN(3) {
	case 1:
		r.Intent, r.Result, r.Journal = true, nil, nil
	case 2:
		r.Intent, r.Follows, r.Result, r.Journal = true, true, nil, nil
	}
	for range rng.IntN(4) {
		data := randBytes(rng, 300)
		r.Extents = append(r.Extents, Extent{Off: rng.Uint64N(r.Size - uint64(len(data))), Data: data})
	}
	return r
}

func randBytes(rng *rand.Rand, n int) []byte {
	b := make([]byte, rng.IntN(n+1))
	for i := range b {
		b[i] = byte(rng.Uint32())
	}
	return b
}

func randString(rng *rand.Rand, n int) string { return string(randBytes(rng, n)) }

// equal compares records treating nil and empty byte slices alike, as the
// encoding does.
func equal(a, b Record) bool {
	norm := func(r Record) Record {
		for _, p := range []*[]byte{&r.Journal, &r.Op, &r.Base, &r.Result} {
			if len(*p) == 0 {
				*p = nil
			}
		}
		for i := range r.Extents {
			if len(r.Extents[i].Data) == 0 {
				r.Extents[i].Data = nil
			}
		}
		return r
	}
	return reflect.DeepEqual(norm(a), norm(b))
}

func TestRecordRoundTrip(t *testing.T) {
	f := func(seed uint64) bool {
		rng := rand.New(rand.NewPCG(seed, 1))
		r := randRecord(rng)
		b, err := r.MarshalBinary()
		if err != nil || len(b) > r.Len() {
			t.Logf("marshal: %v, %d bytes against Len %d", err, len(b), r.Len())
			return false
		}
		var got Record
		if err := got.UnmarshalBinary(b); err != nil {
			t.Logf("unmarshal: %v", err)
			return false
		}
		return equal(r, got)
	}
	if err := quick.Check(f, &quick.Config{MaxCount: 2000}); err != nil {
		t.Fatal(err)
	}
}

func TestExtentPastSizeRefused(t *testing.T) {
	r := Record{Key: "k", Size: 10, Extents: []Extent{{Off: 8, Data: []byte("abc")}}}
	if _, err := r.MarshalBinary(); err == nil {
		t.Fatal("an extent past the value's end was encoded")
	}
}

func openLog(t *testing.T, path string) (*Log, []Record) {
	t.Helper()
	l, recs, err := Open(path, 64<<10)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	return l, recs
}

func TestAppendReopenReset(t *testing.T) {
	path := filepath.Join(t.TempDir(), FileName)
	l, recs := openLog(t, path)
	if len(recs) != 0 || !l.Empty() {
		t.Fatalf("new log: %d records, empty %v", len(recs), l.Empty())
	}
	st, err := os.Stat(path)
	if err != nil || st.Size() != 64<<10 {
		t.Fatalf("new log: %v, size %d, want it allocated whole", err, st.Size())
	}
	rng := rand.New(rand.NewPCG(1, 2))
	var want []Record
	for range 20 {
		r := randRecord(rng)
		if err := l.Append(&r); err != nil {
			t.Fatal(err)
		}
		want = append(want, r)
	}
	must(t, l.Sync())
	wantRecords(t, path, want)
	// A reset drops them all, though their bytes are still in the file;
	// a record appended after is the only one read back.
	must(t, l.Reset())
	one := randRecord(rng)
	must(t, l.Append(&one))
	must(t, l.Sync())
	l2, got := openLog(t, path)
	if len(got) != 1 || !equal(got[0], one) {
		t.Fatalf("after reset: %d records, want the one appended since", len(got))
	}
	if l2.Epoch() != l.Epoch() {
		t.Fatalf("epoch %d read back, %d written", l2.Epoch(), l.Epoch())
	}
}

func TestTornRecordEndsTheLog(t *testing.T) {
	path := filepath.Join(t.TempDir(), FileName)
	l, _ := openLog(t, path)
	rng := rand.New(rand.NewPCG(3, 4))
	var want []Record
	var ends []int64
	for range 5 {
		r := randRecord(rng)
		must(t, l.Append(&r))
		want = append(want, r)
		ends = append(ends, l.off)
	}
	must(t, l.Sync())
	data, err := os.ReadFile(path)
	must(t, err)
	// Damage one byte inside the fourth record: the first three remain.
	bad := bytes.Clone(data)
	bad[ends[2]+frameSize+1] ^= 0xff
	_, recs, end, err := Parse(bad)
	must(t, err)
	if len(recs) != 3 || end != ends[2] {
		t.Fatalf("damaged fourth record: %d records read, ending at %d; want 3 ending at %d", len(recs), end, ends[2])
	}
	// A length running past the file ends it too.
	bad = bytes.Clone(data)
	bad[ends[3]] = 0xff
	bad[ends[3]+3] = 0x7f
	if _, recs, _, _ = Parse(bad); len(recs) != 4 {
		t.Fatalf("length past the end: %d records, want 4", len(recs))
	}
	// A damaged header is an error, not an empty log.
	bad = bytes.Clone(data)
	bad[9] ^= 1
	if _, _, _, err := Parse(bad); err == nil {
		t.Fatal("damaged header parsed")
	}
}

func TestFull(t *testing.T) {
	path := filepath.Join(t.TempDir(), FileName)
	l, _ := openLog(t, path)
	// Each epoch has half the file: 28 KiB after its header.
	big := Record{Key: "k", Size: 20 << 10, Extents: []Extent{{Data: make([]byte, 20<<10)}}}
	if err := l.Append(&big); err != nil {
		t.Fatal(err)
	}
	if err := l.Append(&big); err != ErrFull {
		t.Fatalf("second 20 KiB record in a 64 KiB log: %v, want ErrFull", err)
	}
	must(t, l.Reset())
	if err := l.Append(&big); err != nil {
		t.Fatalf("after reset: %v", err)
	}
}

// Records appended together are read back in order, after those before
// them; a batch that does not fit writes none of its records.
func TestAppendMany(t *testing.T) {
	path := filepath.Join(t.TempDir(), FileName)
	l, _ := openLog(t, path)
	rng := rand.New(rand.NewPCG(3, 4))
	var want []Record
	for _, n := range []int{1, 3, 2} {
		batch := make([]*Record, n)
		for i := range batch {
			r := randRecord(rng)
			batch[i] = &r
			want = append(want, r)
		}
		must(t, l.Append(batch...))
	}
	big := Record{Key: "big", Size: 20 << 10, Extents: []Extent{{Data: make([]byte, 20<<10)}}}
	small := randRecord(rng)
	if err := l.Append(&small, &big, &big); err != ErrFull {
		t.Fatalf("40 KiB of records in a 64 KiB log: %v, want ErrFull", err)
	}
	must(t, l.Sync())
	wantRecords(t, path, want) // none of the batch that did not fit
}

// wantRecords reopens the log at path and checks it holds want.
func wantRecords(t *testing.T, path string, want []Record) {
	t.Helper()
	_, got := openLog(t, path)
	if len(got) != len(want) {
		t.Fatalf("reopened: %d records, want %d", len(got), len(want))
	}
	for i := range want {
		if !equal(want[i], got[i]) {
			t.Fatalf("record %d differs after reopening", i)
		}
	}
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

// FuzzParse feeds arbitrary bytes after a valid header: parsing never
// panics, and what it returns encodes back to records that parse alike.
func FuzzParse(f *testing.F) {
	rng := rand.New(rand.NewPCG(5, 6))
	for range 4 {
		r := randRecord(rng)
		b, _ := r.MarshalBinary()
		f.Add(b)
	}
	f.Add([]byte{kindPut, 0, 0})
	f.Fuzz(func(t *testing.T, payload []byte) {
		var r Record
		if r.UnmarshalBinary(payload) != nil {
			return
		}
		b, err := r.MarshalBinary()
		if err != nil {
			t.Fatalf("a decoded record does not encode: %v", err)
		}
		var again Record
		if err := again.UnmarshalBinary(b); err != nil || !equal(r, again) {
			t.Fatalf("re-encoded record differs: %v", err)
		}
		l := &Log{epoch: 7}
		data := l.header()
		frame := make([]byte, frameSize)
		frame[0], frame[1], frame[2], frame[3] = byte(len(payload)), byte(len(payload)>>8), byte(len(payload)>>16), byte(len(payload)>>24)
		sum := checksum(7, payload)
		frame[4], frame[5], frame[6], frame[7] = byte(sum), byte(sum>>8), byte(sum>>16), byte(sum>>24)
		data = append(append(append(data, make([]byte, headerSize-len(data))...), frame...), payload...)
		half := max(2*headerSize, len(data)+frameSize)
		data = append(data, make([]byte, 2*half-len(data))...)
		if _, recs, _, err := Parse(data); err != nil || len(recs) != 1 {
			t.Fatalf("a valid frame parsed as %d records (%v)", len(recs), err)
		}
	})
}

// FuzzParseFile parses arbitrary bytes as a whole log: never a panic, and
// never a record past the end.
func FuzzParseFile(f *testing.F) {
	l := &Log{epoch: 3}
	f.Add(append(l.header(), make([]byte, 4*headerSize)...))
	v1 := header(magicV1, 3)
	f.Add(append(v1, make([]byte, 2*headerSize)...))
	f.Fuzz(func(t *testing.T, data []byte) {
		_, _, end, err := Parse(data)
		if err == nil && end > int64(len(data)) {
			t.Fatalf("end %d past %d bytes", end, len(data))
		}
	})
}

// A reset carries the records it is given into the new epoch, in the other
// half of the file, and drops the rest; halves alternate reset after reset.
func TestResetCarries(t *testing.T) {
	path := filepath.Join(t.TempDir(), FileName)
	l, _ := openLog(t, path)
	rng := rand.New(rand.NewPCG(7, 8))
	for round := range 4 {
		var all []Record
		for range 3 {
			r := randRecord(rng)
			must(t, l.Append(&r))
			all = append(all, r)
		}
		must(t, l.Sync())
		carry := all[1:2]
		must(t, l.Reset(&carry[0]))
		_, got := openLog(t, path)
		if len(got) != 1 || !equal(got[0], carry[0]) {
			t.Fatalf("round %d: %d records after a reset carrying one", round, len(got))
		}
		extra := randRecord(rng)
		must(t, l.Append(&extra))
		must(t, l.Sync())
		if _, got = openLog(t, path); len(got) != 2 || !equal(got[1], extra) {
			t.Fatalf("round %d: %d records after appending to the carried one, want 2", round, len(got))
		}
	}
	must(t, l.Reset())
	if _, got := openLog(t, path); len(got) != 0 {
		t.Fatalf("%d records after a reset carrying none", len(got))
	}
}

// A crash inside a reset, after its records reached the other half but
// before its header, leaves the old epoch to read; the next reset, after
// reopening, never reads those records as its own.
func TestCrashedResetLeavesOldEpoch(t *testing.T) {
	path := filepath.Join(t.TempDir(), FileName)
	l, _ := openLog(t, path)
	rng := rand.New(rand.NewPCG(9, 10))
	old := randRecord(rng)
	must(t, l.Append(&old))
	must(t, l.Sync())
	// What the reset would have written, without its header.
	stale := []*Record{ptr(randRecord(rng)), ptr(randRecord(rng))}
	buf, err := frames(l.next, stale)
	must(t, err)
	_, err = l.f.WriteAt(buf, l.size/2+headerSize)
	must(t, err)
	must(t, l.Close())

	l2, got := openLog(t, path)
	if len(got) != 1 || !equal(got[0], old) {
		t.Fatalf("after a crashed reset: %d records, want the old epoch's one", len(got))
	}
	must(t, l2.Reset())
	// Even should the reset's header reach the disk and not the empty
	// frame it writes after it, the stale records are of another epoch.
	_, err = l2.f.WriteAt(buf, l.size/2+headerSize)
	must(t, err)
	if _, got = openLog(t, path); len(got) != 0 {
		t.Fatalf("reset after a crashed one reads %d records, want none", len(got))
	}
	one := randRecord(rng)
	must(t, l2.Append(&one))
	must(t, l2.Sync())
	if _, got = openLog(t, path); len(got) != 1 || !equal(got[0], one) {
		t.Fatalf("%d records, want only the one appended", len(got))
	}
}

// A log of the first format (one epoch over the whole file) is read, and
// its reset rewrites it in the current one.
func TestReadsFirstFormat(t *testing.T) {
	path := filepath.Join(t.TempDir(), FileName)
	rng := rand.New(rand.NewPCG(11, 12))
	want := []*Record{ptr(randRecord(rng)), ptr(randRecord(rng)), ptr(randRecord(rng))}
	recs, err := frames(5, want)
	must(t, err)
	data := append(header(magicV1, 5), make([]byte, headerSize-len(header(magicV1, 5)))...)
	data = append(data, recs...)
	data = append(data, make([]byte, 64<<10-len(data))...)
	must(t, os.WriteFile(path, data, 0o600))
	l, got := openLog(t, path)
	if len(got) != 3 || !equal(got[2], *want[2]) {
		t.Fatalf("first format: %d records read, want 3", len(got))
	}
	must(t, l.Reset(want[1]))
	if _, got = openLog(t, path); len(got) != 1 || !equal(got[0], *want[1]) {
		t.Fatalf("after its reset: %d records, want the one carried", len(got))
	}
	head := make([]byte, len(magic))
	f, err := os.Open(path)
	must(t, err)
	defer f.Close()
	_, err = f.ReadAt(head, 0)
	must(t, err)
	if string(head) != magic {
		t.Fatalf("reset left magic %q, want %q", head, magic)
	}
	if st, err := f.Stat(); err != nil || st.Size() < DefaultSize {
		t.Fatalf("rewritten log: %v, %d bytes, want at least %d (each epoch now has half)", err, st.Size(), DefaultSize)
	}
}

func ptr(r Record) *Record { return &r }

// TestGrow: a log grows in place of its file, made or opened, into a new
// epoch past the old one's with none of its records; appends go on there.
func TestGrow(t *testing.T) {
	path := filepath.Join(t.TempDir(), FileName)
	small := int64(64 << 10)
	l, _, err := Open(path, small)
	must(t, err)
	rng := rand.New(rand.NewPCG(3, 4))
	for made := range 2 {
		r := randRecord(rng)
		must(t, l.Append(&r))
		must(t, l.Sync())
		epoch := l.Epoch()
		must(t, l.Grow(DefaultSize))
		if l.Size() != DefaultSize || l.Epoch() <= epoch {
			t.Fatalf("grown: %d bytes, epoch %d after %d", l.Size(), l.Epoch(), epoch)
		}
		if st, err := os.Stat(path); err != nil || st.Size() != DefaultSize {
			t.Fatalf("the file at the log's path after it grew: %v, %v", st, err)
		}
		if got, err := ReadFile(path); err != nil || len(got) != 0 {
			t.Fatalf("%d records (%v) after growing, want none", len(got), err)
		}
		extra := randRecord(rng)
		must(t, l.Append(&extra))
		must(t, l.Sync())
		if got, err := ReadFile(path); err != nil || len(got) != 1 || !equal(got[0], extra) {
			t.Fatalf("%d records (%v) after an append to the grown log, want 1", len(got), err)
		}
		must(t, l.Close())
		if made == 0 {
			// The same from a log opened, not made, and small again.
			must(t, os.Remove(path))
			l, _, err = Open(path, small)
			must(t, err)
			must(t, l.Close())
			l, _, err = Open(path, DefaultSize)
			must(t, err)
		}
	}
	matches, _ := filepath.Glob(filepath.Join(filepath.Dir(path), "*"))
	if len(matches) != 1 {
		t.Fatalf("files beside the log: %v", matches)
	}
}
