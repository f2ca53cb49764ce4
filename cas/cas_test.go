package cas

import (
	"bytes"
	"errors"
	"io"
	"math"
	"math/rand/v2"
	"runtime"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"
	"unsafe"

	"github.com/restic/chunker"
	"pgregory.net/rapid"

	"github.com/ledgerfs/ledgerfs/internal/testutil"
)

// testPol is a fixed irreducible polynomial so that test runs cut alike.
const testPol = chunker.Pol(0x3DA3358B4DC173)

// memStore keeps pieces in a map and counts gets, and how many ran at once.
type memStore struct {
	mu     sync.Mutex
	pieces map[Digest][]byte
	gets   int
	// With delay, a get takes that long; running and most count the gets
	// under way.
	delay         time.Duration
	running, most int
}

func newMemStore() *memStore { return &memStore{pieces: map[Digest][]byte{}} }

func (m *memStore) Put(d Digest, data []byte) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	if _, ok := m.pieces[d]; !ok {
		m.pieces[d] = data
	}
	return nil
}

func (m *memStore) Get(d Digest, buf []byte) ([]byte, error) {
	if m.delay > 0 {
		m.mu.Lock()
		m.running++
		m.most = max(m.most, m.running)
		m.mu.Unlock()
		time.Sleep(m.delay)
		defer func() {
			m.mu.Lock()
			m.running--
			m.mu.Unlock()
		}()
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	m.gets++
	p, ok := m.pieces[d]
	if !ok {
		return nil, ErrNotFound
	}
	return append(buf[:0], p...), nil
}

func randBytes(seed uint64, n int) []byte { return testutil.Random(seed, 0, n) }

// write stores data through a writer whose segments cut finders chunk on
// every core, in writes of blocks bytes.
func write(t tb, s Sink, data []byte, blocks int) ObjectIdentifier {
	t.Helper()
	cutters := NewCutters()
	defer cutters.Close()
	w := cutters.NewWriter(s, testPol, KindBlob)
	for len(data) > 0 {
		n := min(blocks, len(data))
		if _, err := w.Write(data[:n]); err != nil {
			t.Fatal(err)
		}
		data = data[n:]
	}
	id, _, err := w.Close()
	if err != nil {
		t.Fatal(err)
	}
	return id
}

// openReader opens a reader of id, failing the test if it cannot.
func openReader(t tb, src Source, id ObjectIdentifier) *Reader {
	t.Helper()
	r, err := NewReader(src, id, nil)
	if err != nil {
		t.Fatal(err)
	}
	return r
}

func readAll(t tb, src Source, id ObjectIdentifier) []byte {
	t.Helper()
	r := openReader(t, src, id)
	out := make([]byte, r.Size())
	if n, err := r.ReadAt(out, 0); err != nil && err != io.EOF || n != len(out) {
		t.Fatalf("ReadAt: %d, %v", n, err)
	}
	return out
}

func TestRoundTripSizes(t *testing.T) {
	for _, n := range []int{0, 1, 32, 33, 4095, 4096, 65536, 65537, 300_000, 5 << 20} {
		s := newMemStore()
		data := randBytes(uint64(n), n)
		id := write(t, s, data, 128<<10)
		if got := readAll(t, s, id); !bytes.Equal(got, data) {
			t.Fatalf("size %d: content differs", n)
		}
		if n <= MaxInlineSize && !id.Digest.IsInline() {
			t.Fatalf("size %d: not inline", n)
		}
		if n > MaxInlineSize && id.Digest.IsInline() {
			t.Fatalf("size %d: inline", n)
		}
		for d, p := range s.pieces {
			if len(p) > MaxChunkSize {
				t.Fatalf("piece %s of %d bytes exceeds the maximum", d, len(p))
			}
		}
	}
}

// The object id depends on the content only, not on how it was written.
func TestIdIndependentOfWriteSizes(t *testing.T) {
	data := randBytes(7, 3<<20)
	want := write(t, newMemStore(), data, len(data))
	for _, bs := range []int{1 << 10, 4096, 65536 + 3, 1 << 20} {
		if got := write(t, newMemStore(), data, bs); got != want {
			t.Fatalf("block size %d: id %s, want %s", bs, got, want)
		}
	}
	obj, err := WriteObject(newMemStore(), testPol, KindBlob, data)
	if err != nil || obj != want {
		t.Fatalf("WriteObject: %s %v, want %s", obj, err, want)
	}
}

// A value that fits in one segment is chunked on the closing goroutine,
// a larger one in the pipeline: both give WriteObject's id.
func TestIdAcrossSegmentBoundary(t *testing.T) {
	for _, n := range []int{MaxChunkSize + 1, 700_000, segmentSize - 1, segmentSize, segmentSize + 1} {
		data := randBytes(uint64(n)+11, n)
		want, err := WriteObject(newMemStore(), testPol, KindBlob, data)
		if err != nil {
			t.Fatal(err)
		}
		for _, bs := range []int{n, 4096, 65536 + 3} {
			if got := write(t, newMemStore(), data, bs); got != want {
				t.Fatalf("%d bytes at %d: id %s, want %s", n, bs, got, want)
			}
		}
	}
}

// A small value's sink error reaches Close, and an aborted small value
// stores nothing.
func TestSmallValueSinkErrorAndAbort(t *testing.T) {
	w := NewWriter(&failSink{after: 2, once: true}, testPol, KindBlob)
	if _, err := w.Write(randBytes(3, 500_000)); err != nil {
		t.Fatal(err)
	}
	if _, _, err := w.Close(); err == nil || err.Error() != "disk full" {
		t.Fatalf("Close: %v, want disk full", err)
	}
	m := newMemStore()
	w = NewWriter(m, testPol, KindBlob)
	if _, err := w.Write(randBytes(4, 500_000)); err != nil {
		t.Fatal(err)
	}
	w.Abort()
	w.Abort()
	if len(m.pieces) != 0 {
		t.Fatalf("an aborted value stored %d pieces", len(m.pieces))
	}
	if _, err := w.Write([]byte{1}); err == nil {
		t.Fatal("write after Abort succeeded")
	}
}

func TestDedupAndLocalEdit(t *testing.T) {
	const size = 16 << 20
	data := randBytes(1, size)
	s := newMemStore()
	id1 := write(t, s, data, 1<<20)
	n1 := len(s.pieces)
	if id2 := write(t, s, data, 1<<20); id2 != id1 || len(s.pieces) != n1 {
		t.Fatalf("second copy: id %s (want %s), pieces %d -> %d", id2, id1, n1, len(s.pieces))
	}
	edited := bytes.Clone(data)
	edited[size/2] ^= 0xff
	id3 := write(t, s, edited, 1<<20)
	added := len(s.pieces) - n1
	// The chunk around the edit, maybe its neighbour, and the index path.
	if id3 == id1 || added < 2 || added > 8 {
		t.Fatalf("1-byte edit added %d pieces", added)
	}
	if got := readAll(t, s, id3); !bytes.Equal(got, edited) {
		t.Fatal("edited content differs")
	}
}

func TestIndexTreeHasSeveralLevels(t *testing.T) {
	s := newMemStore()
	id := write(t, s, randBytes(3, 32<<20), 1<<20)
	depth := 0
	var walkDepth func(d Digest, lv int)
	walkDepth = func(d Digest, lv int) {
		depth = max(depth, lv)
		if !d.IsIndex() {
			return
		}
		ix, err := DecodeFileIndex(s.pieces[d])
		if err != nil {
			t.Fatal(err)
		}
		if len(ix.Children) > maxIndexChildren {
			t.Fatalf("index with %d children", len(ix.Children))
		}
		for _, c := range ix.Children {
			walkDepth(c.ID.Digest, lv+1)
		}
	}
	walkDepth(id.Digest, 0)
	// ~2000 chunks at a fanout of ~16 need at least two index levels.
	if depth < 3 {
		t.Fatalf("index depth %d", depth)
	}
}

func TestReadAtTouchesFewPieces(t *testing.T) {
	s := newMemStore()
	data := randBytes(5, 8<<20)
	id := write(t, s, data, 1<<20)
	r := openReader(t, s, id)
	rng := rand.New(rand.NewPCG(1, 2))
	buf := make([]byte, 4096)
	for range 200 {
		off := rng.Int64N(int64(len(data)))
		before := s.count()
		n, err := r.ReadAt(buf, off)
		if err != nil && err != io.EOF {
			t.Fatal(err)
		}
		if !bytes.Equal(buf[:n], data[off:off+int64(n)]) {
			t.Fatalf("offset %d: wrong bytes", off)
		}
		// A 4 KiB read spans at most two chunks; each path is a few index
		// levels deep.
		if got := s.count() - before; got > 10 {
			t.Fatalf("a 4 KiB read fetched %d pieces", got)
		}
	}
}

func TestCorruptPieceIsAnError(t *testing.T) {
	s := newMemStore()
	data := randBytes(9, 1<<20)
	id := write(t, s, data, 1<<20)
	for d, p := range s.pieces {
		if !d.IsIndex() {
			bad := bytes.Clone(p)
			bad[len(bad)/2] ^= 1
			s.pieces[d] = bad
			break
		}
	}
	r := openReader(t, s, id)
	_, err := r.ReadAt(make([]byte, len(data)), 0)
	var ce *CorruptError
	if !errors.As(err, &ce) {
		t.Fatalf("want CorruptError, got %v", err)
	}
}

// failSink fails its Put after `after` successful ones: every later one,
// or with once only the next.
type failSink struct {
	after int
	once  bool
}

func (f *failSink) Put(d Digest, data []byte) error {
	f.after--
	if f.after == -1 || f.after < -1 && !f.once {
		return errors.New("disk full")
	}
	return nil
}

func TestSinkErrorReachesWriter(t *testing.T) {
	w := NewWriter(&failSink{after: 3}, testPol, KindBlob)
	data := randBytes(2, 4<<20)
	var werr error
	for i := 0; i < len(data) && werr == nil; i += 64 << 10 {
		_, werr = w.Write(data[i : i+64<<10])
	}
	if _, _, err := w.Close(); err == nil || err.Error() != "disk full" {
		t.Fatalf("Close: %v (write error %v)", err, werr)
	}
}

func TestTreeNodeKindInRootDigest(t *testing.T) {
	for _, n := range []int{10, 1000, 40_000, MaxChunkSize, MaxChunkSize + 1, 200_000} {
		data := randBytes(4, n)
		m := newMemStore()
		id, err := WriteObject(m, testPol, KindTreeNode, data)
		if err != nil {
			t.Fatal(err)
		}
		if !id.Digest.IsTreeNode() {
			t.Fatalf("size %d: root digest %s lacks the tree-node bit", n, id)
		}
		// A node that fits in one chunk is one piece; a larger one is an index
		// over chunks, each within the chunk size limits.
		whole := n <= MaxChunkSize
		if want := ComputeDigest(KindTreeNode, false, data); (id.Digest == want) != whole || id.Digest.IsIndex() == whole {
			t.Fatalf("size %d: digest %s, stored whole: %v", n, id, whole)
		}
		if got := readAll(t, m, id); !bytes.Equal(got, data) {
			t.Fatalf("size %d: read back %d bytes", n, len(got))
		}
	}
}

func FuzzDecodeFileIndex(f *testing.F) {
	f.Add(EncodeFileIndex(FileIndex{Size: 40, Children: []IndexChild{{Size: 40, ID: ObjectIdentifier{Digest: ComputeDigest(KindBlob, false, make([]byte, 40))}}}}))
	f.Add([]byte{})
	f.Fuzz(func(t *testing.T, b []byte) {
		ix, err := DecodeFileIndex(b)
		if err != nil {
			return
		}
		// Whatever decodes re-encodes to something that decodes the same.
		ix2, err := DecodeFileIndex(EncodeFileIndex(ix))
		if err != nil || ix2.Size != ix.Size || len(ix2.Children) != len(ix.Children) {
			t.Fatalf("re-decode: %v", err)
		}
	})
}

func FuzzDecodeIdentifier(f *testing.F) {
	f.Add(EncodeIdentifier(ObjectIdentifier{Digest: ComputeDigest(KindBlob, false, []byte("x"))}))
	f.Fuzz(func(t *testing.T, b []byte) {
		id, rest, err := DecodeIdentifier(b)
		if err != nil {
			return
		}
		enc := EncodeIdentifier(id)
		id2, rest2, err := DecodeIdentifier(append(enc, rest...))
		if err != nil || id2 != id || !bytes.Equal(rest2, rest) {
			t.Fatalf("round trip: %v", err)
		}
	})
}

// FuzzSplitRoundTrip writes arbitrary content and reads it back at an
// arbitrary offset.
func FuzzSplitRoundTrip(f *testing.F) {
	f.Add([]byte("hello"), uint16(3), uint32(0))
	f.Add(randBytes(1, 200_000), uint16(4000), uint32(150_000))
	f.Fuzz(func(t *testing.T, data []byte, bs uint16, off uint32) {
		s := newMemStore()
		id := write(t, s, data, int(bs)+1)
		if got := readAll(t, s, id); !bytes.Equal(got, data) {
			t.Fatal("content differs")
		}
		if int(off) < len(data) {
			r, _ := NewReader(s, id, nil)
			buf := make([]byte, 100)
			n, _ := r.ReadAt(buf, int64(off))
			if !bytes.Equal(buf[:n], data[off:min(len(data), int(off)+100)]) {
				t.Fatal("ReadAt differs")
			}
		}
	})
}

func (m *memStore) count() int {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.gets
}

// Reading an object from start to end fetches every piece once: the
// stream of chunks does not push the index pieces out of the reader.
// Concurrent reads (the kernel's read-ahead requests) fetch in parallel.
func TestSequentialReadFetchesEachPieceOnce(t *testing.T) {
	s := newMemStore()
	data := randBytes(6, 32<<20)
	id := write(t, s, data, 1<<20)
	const block = 128 << 10
	read := func(r *Reader, got []byte, o int) {
		if _, err := r.ReadAt(got[o:min(o+block, len(data))], int64(o)); err != nil && err != io.EOF {
			t.Error(err)
		}
	}
	r := openReader(t, s, id)
	got := make([]byte, len(data))
	for off := 0; off < len(data); off += block {
		read(r, got, off)
	}
	if !bytes.Equal(got, data) {
		t.Fatal("wrong bytes")
	}
	if gets, pieces := s.count(), len(s.pieces); gets != pieces {
		t.Fatalf("%d fetches for %d pieces", gets, pieces)
	}

	s.delay = 50 * time.Microsecond
	r = openReader(t, s, id)
	clear(got)
	var wg sync.WaitGroup
	for off := 0; off < len(data); off += 4 * block {
		for k := range 4 {
			if o := off + k*block; o < len(data) {
				wg.Go(func() { read(r, got, o) })
			}
		}
		wg.Wait()
	}
	if !bytes.Equal(got, data) {
		t.Fatal("concurrent reads: wrong bytes")
	}
	if s.most < 2 {
		t.Fatalf("concurrent reads fetched one piece at a time")
	}
}

// intoStore records the gets whose buffer lies within dest.
type intoStore struct {
	*memStore
	dest       []byte
	into, gets int
}

func (s *intoStore) Get(d Digest, buf []byte) ([]byte, error) {
	if !d.IsIndex() {
		s.gets++
		lo := uintptr(unsafe.Pointer(unsafe.SliceData(s.dest)))
		if at := uintptr(unsafe.Pointer(unsafe.SliceData(buf))); cap(buf) > 0 && at >= lo && at < lo+uintptr(len(s.dest)) {
			s.into++
		}
	}
	return s.memStore.Get(d, buf)
}

// A large read fetches the chunks it holds whole straight into the
// caller's buffer; only the chunks at its ends go through the cache.
func TestLargeReadFetchesIntoTheBuffer(t *testing.T) {
	s := &intoStore{memStore: newMemStore()}
	data := randBytes(10, 8<<20)
	id := write(t, s, data, 1<<20)
	r := openReader(t, s, id)
	const block = 1 << 20
	s.dest = make([]byte, len(data))
	for off := 0; off < len(data); off += block {
		if _, err := r.ReadAt(s.dest[off:min(off+block, len(data))], int64(off)); err != nil && err != io.EOF {
			t.Fatal(err)
		}
	}
	if !bytes.Equal(s.dest, data) {
		t.Fatal("wrong bytes")
	}
	reads := len(data) / block
	if s.into < s.gets-2*reads {
		t.Fatalf("%d of %d chunks fetched into the buffer, want all but the %d at the reads' ends", s.into, s.gets, 2*reads)
	}
}

// A sequential read reuses the buffers of chunks that left the cache: it
// allocates far less than it reads (it allocated a buffer per chunk), and
// concurrent reads, copying out while buffers are reused, get the right
// bytes (run with -race).
func TestSequentialReadReusesBuffers(t *testing.T) {
	s := newMemStore()
	data := randBytes(7, 16<<20)
	id := write(t, s, data, 1<<20)
	r := openReader(t, s, id)
	got := make([]byte, len(data))
	const block = 128 << 10
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	for off := 0; off < len(data); off += block {
		if _, err := r.ReadAt(got[off:min(off+block, len(data))], int64(off)); err != nil && err != io.EOF {
			t.Fatal(err)
		}
	}
	runtime.ReadMemStats(&after)
	if !bytes.Equal(got, data) {
		t.Fatal("wrong bytes")
	}
	if alloc := after.TotalAlloc - before.TotalAlloc; alloc > uint64(len(data)/8) {
		t.Fatalf("reading %d MiB allocated %d KiB", len(data)>>20, alloc>>10)
	}

	clear(got)
	var wg sync.WaitGroup
	for w := range 4 {
		wg.Go(func() {
			for off := w * block; off < len(data); off += 4 * block {
				if _, err := r.ReadAt(got[off:min(off+block, len(data))], int64(off)); err != nil && err != io.EOF {
					t.Error(err)
				}
			}
		})
	}
	wg.Wait()
	if !bytes.Equal(got, data) {
		t.Fatal("concurrent reads: wrong bytes")
	}
}

// streamStore counts the gets made as streaming, and keeps the least and
// the most ahead they gave.
type streamStore struct {
	*memStore
	streamed atomic.Int64
	mu       sync.Mutex
	aheads   [2]int64
}

func (s *streamStore) GetStreaming(d Digest, buf []byte, ahead int64) ([]byte, error) {
	s.streamed.Add(1)
	s.mu.Lock()
	s.aheads = [2]int64{min(s.aheads[0], ahead), max(s.aheads[1], ahead)}
	s.mu.Unlock()
	return s.Get(d, buf)
}

// A reader streams (asks its source to read ahead) once reads follow each
// other, or from its first read if that is at offset 0, and not for reads
// at random offsets; a stream tells its source how much of the object is
// left from the read on, and no more.
func TestReaderStreamsSequentialReads(t *testing.T) {
	s := &streamStore{memStore: newMemStore()}
	data := randBytes(8, 64<<20)
	id := write(t, s, data, 1<<20)
	read := func(r *Reader, off, n int) {
		got := make([]byte, n)
		if _, err := r.ReadAt(got, int64(off)); err != nil && err != io.EOF {
			t.Fatal(err)
		}
		if !bytes.Equal(got, data[off:off+n]) {
			t.Fatalf("wrong bytes at %d", off)
		}
	}

	r := openReader(t, s, id)
	before := s.count()
	read(r, 0, 128<<10)
	if gets, streamed := s.count()-before, int(s.streamed.Load()); gets == 0 || streamed != gets {
		t.Fatalf("a first read at offset 0: %d of %d gets streaming", streamed, gets)
	}
	for off := 128 << 10; off < 16<<20; off += 128 << 10 {
		read(r, off, 128<<10)
	}
	if gets, streamed := s.count()-before, int(s.streamed.Load()); streamed < gets*3/4 {
		t.Fatalf("sequential reads: %d of %d gets streaming", streamed, gets)
	}
	last := len(data) - streamSpan // a stream by itself
	s.aheads = [2]int64{math.MaxInt64, 0}
	read(r, last, streamSpan)
	if got := s.aheads; got[1] != int64(len(data)-last) || got[0] > MaxChunkSize {
		t.Fatalf("a read in order of the last %d bytes asked its source to read %d to %d bytes ahead, "+
			"want from what is left of the object at each piece", len(data)-last, got[0], got[1])
	}

	r = openReader(t, s, id)
	s.streamed.Store(0)
	before = s.count()
	rng := rand.New(rand.NewPCG(9, 9))
	for range 2000 {
		read(r, rng.IntN(len(data)-4096), 4096)
	}
	if gets, streamed := s.count()-before, int(s.streamed.Load()); streamed > gets/10 {
		t.Fatalf("random reads: %d of %d gets streaming", streamed, gets)
	}
}

// indexCounter counts the index pieces fetched through it.
type indexCounter struct {
	Source
	index atomic.Int64
}

func (c *indexCounter) Get(d Digest, buf []byte) ([]byte, error) {
	if d.IsIndex() {
		c.index.Add(1)
	}
	return c.Source.Get(d, buf)
}

// A reader finds in the shared cache the index pieces that another reader
// of the same object decoded (pieces are content-addressed: of any page),
// so random reads through it fetch chunks only.
func TestSharedIndexCache(t *testing.T) {
	s := newMemStore()
	data := randBytes(7, 16<<20)
	id := write(t, s, data, 1<<20)
	ic, err := NewIndexCache(8 << 20)
	if err != nil {
		t.Fatal(err)
	}
	defer ic.Close()
	rng := rand.New(rand.NewPCG(7, 7))
	offsets := make([]int, 300)
	for i := range offsets {
		offsets[i] = rng.IntN(len(data) - 4096)
	}
	read := func(shared *IndexCache) int64 {
		t.Helper()
		src := &indexCounter{Source: s}
		r, err := NewReader(src, id, shared)
		if err != nil {
			t.Fatal(err)
		}
		buf := make([]byte, 4096)
		for _, o := range offsets {
			if _, err := r.ReadAt(buf, int64(o)); err != nil {
				t.Fatal(err)
			}
			if !bytes.Equal(buf, data[o:o+4096]) {
				t.Fatalf("wrong bytes at %d", o)
			}
		}
		return src.index.Load()
	}
	if n := read(nil); n < int64(len(offsets)/2) {
		t.Fatalf("without a shared cache %d random reads fetched only %d index pieces: the object's index is too small to test", len(offsets), n)
	}
	read(ic)
	ic.c.Wait()
	if n := read(ic); n != 0 {
		t.Fatalf("a second reader fetched %d index pieces the first one had decoded", n)
	}
}

// putLog records every Put in order, and fails a piece whose data does not
// hash to its digest.
type putLog struct {
	t    *testing.T
	puts []string
}

func (l *putLog) Put(d Digest, data []byte) error {
	if err := d.Verify(data); err != nil {
		l.t.Fatalf("piece %x: %v", d[:8], err)
	}
	l.puts = append(l.puts, string(d))
	return nil
}

// Runs of zeros (a file grown by truncate or fallocate) cut at every
// MinChunkSize and close every index level there; the splitter remembers
// those chunks and one-child index pieces rather than hashing and encoding
// them again. It must hand the sink exactly the pieces, in the order, that
// it does without remembering, and the value must read back.
func TestRunsOfZeros(t *testing.T) {
	var seen repeats
	zeros := make([]byte, MinChunkSize)
	if _, ok := seen.zeroChunk(zeros); !ok {
		t.Fatal("a chunk of zeros is not taken for one")
	}
	for _, at := range []int{1, MinChunkSize / 2, MinChunkSize - 2} {
		b := make([]byte, MinChunkSize)
		b[at] = 1
		if _, ok := seen.zeroChunk(b); ok {
			t.Fatalf("a chunk with byte %d set is taken for zeros", at)
		}
	}
	r := rand.New(rand.NewPCG(7, 11))
	for round := range 8 {
		var content []byte
		for range 1 + r.IntN(6) {
			if r.IntN(2) == 0 {
				content = append(content, randBytes(r.Uint64(), r.IntN(200<<10))...)
			} else {
				content = append(content, make([]byte, r.IntN(3<<20))...)
			}
		}
		split := func(off bool) (ObjectIdentifier, []string) {
			l := &putLog{t: t}
			s := &splitter{kind: KindBlob, sink: l, seen: repeats{off: off}}
			id, err := s.split(content, testPol)
			if err != nil {
				t.Fatal(err)
			}
			return id, l.puts
		}
		id, puts := split(false)
		want, wantPuts := split(true)
		if id != want {
			t.Fatalf("round %d (%d bytes): id %x remembering, %x not", round, len(content), id.Digest[:8], want.Digest[:8])
		}
		if !slices.Equal(puts, wantPuts) {
			t.Fatalf("round %d: %d puts remembering, %d not, or in another order", round, len(puts), len(wantPuts))
		}
		ms := newMemStore()
		if got := write(t, ms, content, 1<<20); got != id {
			t.Fatalf("round %d: the writer's id %x, the splitter's %x", round, got.Digest[:8], id.Digest[:8])
		}
		if !bytes.Equal(readAll(t, ms, id), content) {
			t.Fatalf("round %d: the value does not read back", round)
		}
	}
}

// TestReaderZeroRuns: reads of objects with runs of zeros (a file grown by
// truncate), with a stray byte in some, read the right bytes in order and
// at random, once the reader knows the zero pieces and fills from them.
func TestReaderZeroRuns(t *testing.T) {
	rapid.Check(t, func(rt *rapid.T) {
		var data []byte
		for range rapid.IntRange(1, 6).Draw(rt, "runs") {
			if rapid.Bool().Draw(rt, "zeros") {
				n := len(data)
				data = append(data, make([]byte, rapid.IntRange(0, 3<<20).Draw(rt, "zeros len"))...)
				if len(data) > n && rapid.Bool().Draw(rt, "stray") {
					data[rapid.IntRange(n, len(data)-1).Draw(rt, "at")] = 7
				}
			} else {
				data = append(data, randBytes(rapid.Uint64().Draw(rt, "seed"), rapid.IntRange(0, 200<<10).Draw(rt, "len"))...)
			}
		}
		s := newMemStore()
		id := write(rt, s, data, 1<<20)
		r := openReader(rt, s, id)
		read := func(off, n int) {
			got := make([]byte, n)
			m, err := r.ReadAt(got, int64(off))
			if err != nil && err != io.EOF {
				rt.Fatal(err)
			}
			if want := data[off:min(len(data), off+n)]; !bytes.Equal(got[:m], want) {
				rt.Fatalf("%d bytes at %d: other bytes", n, off)
			}
		}
		for off := 0; off < len(data); off += 128 << 10 {
			read(off, 128<<10)
		}
		for range 20 {
			if len(data) > 0 {
				read(rapid.IntRange(0, len(data)-1).Draw(rt, "off"), rapid.IntRange(1, 300<<10).Draw(rt, "n"))
			}
		}
		// Zero chunks went to the store as slices of zeroPage.
		if !allZero(zeroPage[:]) {
			rt.Fatal("something wrote into zeroPage")
		}
	})
}

// countSink counts the puts of each piece and checks its digest; with
// repeat, it takes repeated puts in one call (RepeatSink).
type countSink struct {
	t      tb
	mu     sync.Mutex
	puts   map[Digest]uint64
	pieces map[Digest][]byte
}

func newCountSink(t tb) *countSink {
	return &countSink{t: t, puts: map[Digest]uint64{}, pieces: map[Digest][]byte{}}
}

func (c *countSink) Put(d Digest, data []byte) error { return c.put(d, data, 1) }

func (c *countSink) put(d Digest, data []byte, n uint64) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if _, ok := c.pieces[d]; !ok {
		if err := d.Verify(data); err != nil {
			c.t.Fatalf("piece %x: %v", d[:8], err)
		}
		c.pieces[d] = data
	}
	c.puts[d] += n
	return nil
}

func (c *countSink) Get(d Digest, buf []byte) ([]byte, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	p, ok := c.pieces[d]
	if !ok {
		return nil, ErrNotFound
	}
	return append(buf[:0], p...), nil
}

type repeatCountSink struct{ *countSink }

func (c repeatCountSink) PutRepeat(d Digest, data []byte, n uint64) error { return c.put(d, data, n) }

// TestWriteZerosMatchesBytes: a value whose runs of zeros are written with
// WriteZeros (a file's holes) has the id, the pieces and the count of puts
// of each piece (the sink's deduplication figures) of the same bytes
// written as bytes and split with nothing remembered, through a sink that
// takes repeated puts at once and one that does not.
func TestWriteZerosMatchesBytes(t *testing.T) {
	rapid.Check(t, func(rt *rapid.T) {
		type run struct {
			zeros bool
			n     int
		}
		var runs []run
		var data []byte
		for range rapid.IntRange(1, 5).Draw(rt, "runs") {
			r := run{zeros: rapid.Bool().Draw(rt, "zeros")}
			if r.zeros {
				r.n = rapid.OneOf(rapid.IntRange(0, 2*zeroSegmentMin), rapid.IntRange(3<<20, 7<<20)).Draw(rt, "zeros len")
				data = append(data, make([]byte, r.n)...)
			} else {
				r.n = rapid.IntRange(1, 300<<10).Draw(rt, "bytes len")
				data = append(data, randBytes(rapid.Uint64().Draw(rt, "seed"), r.n)...)
			}
			runs = append(runs, r)
		}
		oracle := newCountSink(rt)
		s := &splitter{kind: KindBlob, sink: oracle, seen: repeats{off: true}}
		want, err := s.split(data, testPol)
		if err != nil {
			rt.Fatal(err)
		}
		for _, repeat := range []bool{false, true} {
			cs := newCountSink(rt)
			var sink Sink = cs
			if repeat {
				sink = repeatCountSink{cs}
			}
			cutters := NewCutters()
			w := cutters.NewWriter(sink, testPol, KindBlob)
			off := 0
			for _, r := range runs {
				var err error
				if r.zeros {
					err = w.WriteZeros(uint64(r.n))
				} else {
					_, err = w.Write(data[off : off+r.n])
				}
				if err != nil {
					rt.Fatal(err)
				}
				off += r.n
			}
			id, size, err := w.Close()
			cutters.Close()
			if err != nil {
				rt.Fatal(err)
			}
			if id != want || size != uint64(len(data)) {
				rt.Fatalf("repeat %v: id %x size %d, want %x size %d", repeat, id.Digest[:8], size, want.Digest[:8], len(data))
			}
			if len(cs.puts) != len(oracle.puts) {
				rt.Fatalf("repeat %v: %d pieces, want %d", repeat, len(cs.puts), len(oracle.puts))
			}
			for d, n := range oracle.puts {
				if cs.puts[d] != n {
					rt.Fatalf("repeat %v: piece %x put %d times, want %d", repeat, d[:8], cs.puts[d], n)
				}
			}
			if !bytes.Equal(readAll(rt, cs, id), data) {
				rt.Fatalf("repeat %v: the value does not read back", repeat)
			}
		}
	})
}
