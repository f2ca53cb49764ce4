package cas

import (
	"fmt"
	"io"
	"sort"
	"sync"
	"sync/atomic"
)

// Source returns stored pieces by digest (never inline ones).
type Source interface {
	// Get returns the piece d appended to buf[:0]. The result belongs to
	// the caller, who may reuse it as a later buf.
	Get(d Digest, buf []byte) ([]byte, error)
}

// A StreamSource also serves a read that goes on in order, and may read ahead
// of the piece asked for: GetStreaming's ahead is how many bytes of the
// object the read goes on to read from d's place on, which bounds what is
// worth reading ahead (the pieces stored after an object's last are
// another's).
type StreamSource interface {
	Source
	GetStreaming(d Digest, buf []byte, ahead int64) ([]byte, error)
}

// A CheckedSource finds damage to the pieces it returns by itself, for a
// fraction of a SHA-256's cost: a page db checks the CRC-32C of each
// value-log entry and table block it reads. GetPiece takes its pieces as
// they come. What a checksum cannot catch (a row written under the wrong
// digest) is fsck's and scrub's to find: they hash every stored piece.
type CheckedSource interface {
	Source
	ChecksPieces()
}

// streaming is the Source a read in order of an object reads through: ahead
// is the object's bytes from where the read is on. One read's own.
type streaming struct {
	StreamSource
	ahead int64
}

func (s *streaming) Get(d Digest, buf []byte) ([]byte, error) {
	return s.GetStreaming(d, buf, s.ahead)
}

// checkedStreaming is the streaming form of a CheckedSource.
type checkedStreaming struct{ *streaming }

func (checkedStreaming) ChecksPieces() {}

// GetPiece returns a piece's content, inline or stored; a stored piece is
// appended to buf[:0], and verified against its digest unless src is a
// CheckedSource.
func GetPiece(src Source, d Digest, buf []byte) ([]byte, error) {
	if d.IsInline() {
		return d.InlineData(), nil
	}
	data, err := src.Get(d, buf)
	if err != nil {
		return nil, err
	}
	if _, checked := src.(CheckedSource); !checked {
		if err := d.Verify(data); err != nil {
			return nil, err
		}
	}
	return data, nil
}

// Reader reads an object at any offset. It walks the index tree by sizes, so
// a read touches only the pieces that hold the bytes asked for; it keeps the
// last pieces it fetched, which makes sequential reads fetch each piece
// once, and concurrent reads of one piece (the kernel's neighbouring
// read-ahead requests) fetch it once. Chunks are copied out under the lock,
// so the buffer of a chunk that leaves the cache takes the next one: a
// stream of reads allocates nothing per chunk. A Reader is safe for
// concurrent use.
type Reader struct {
	src     Source
	stream  StreamSource // src as a StreamSource, or nil
	checked bool         // src is a CheckedSource
	root    Digest
	size    uint64
	shared  *IndexCache // may be nil

	mu sync.Mutex
	// Index pieces and chunks are kept apart, index pieces by last use: a
	// stream of chunks must not push out the index pieces every read walks
	// through, down from the root.
	indexes [maxIndexDepth]cached
	chunks  [8]cached
	nextCh  int
	spare   [][]byte // buffers of chunks that left the cache, up to maxSpare
	// A read that starts near where the last one ended continues a
	// stream; after streamAfter of them, chunks are fetched as streaming.
	lastEnd  uint64
	run      int
	read     bool // a read has been made
	tick     uint64
	fetching map[Digest]*fetch
	// zeros are pieces seen to hold only zeros: chunks, and index pieces
	// all of whose children are such pieces. A run of zeros (a file grown
	// by truncate) is one zero chunk under a chain of one-child index
	// pieces, over and over; reads of it are filled without walking down
	// to each chunk (a 2 GiB run cost a commit 13 s of such walks).
	zeros map[Digest]bool
	// anyZeros is whether zeros holds a piece: reads of a reader that
	// has seen none take no lock for it.
	anyZeros atomic.Bool
}

// maxZeros bounds Reader.zeros: a run of zeros needs a chunk and its
// chain of index pieces per length of chunk.
const maxZeros = 256

type cached struct {
	d     Digest
	data  []byte
	index *FileIndex
	ends  []uint64 // cumulative child ends, for index pieces
	used  uint64   // r.tick at the last use, for index pieces
}

// fetch is a piece being fetched; done is closed once c or err is set.
type fetch struct {
	done chan struct{}
	c    cached
	err  error
}

// NewReader opens the object id for reading. Index pieces are looked up
// in shared, if not nil, before they are fetched, and kept there.
func NewReader(src Source, id ObjectIdentifier, shared *IndexCache) (*Reader, error) {
	r := &Reader{src: src, root: id.Digest, shared: shared, fetching: map[Digest]*fetch{}}
	r.stream, _ = src.(StreamSource)
	_, r.checked = src.(CheckedSource)
	p, err := r.piece(id.Digest)
	if err != nil {
		return nil, err
	}
	if p.index != nil {
		r.size = p.index.Size
	} else {
		r.size = uint64(len(p.data))
	}
	return r, nil
}

// Size is the object's length in bytes.
func (r *Reader) Size() uint64 { return r.size }

// lookup returns the cached piece d, or the fetch of it under way. Called
// with r.mu held.
func (r *Reader) lookup(d Digest) (cached, *fetch, bool) {
	cache := r.chunks[:]
	if d.IsIndex() {
		cache = r.indexes[:]
	}
	for i, c := range cache {
		if c.d == d && c.d != "" {
			r.tick++
			cache[i].used = r.tick
			return c, nil, true
		}
	}
	f, ok := r.fetching[d]
	return cached{}, f, ok
}

// piece returns the piece d: cached, being fetched by another read, or
// fetched now. Chunks are read through readChunk, which copies them out
// under the lock; piece serves index pieces and the root of a new reader.
func (r *Reader) piece(d Digest) (cached, error) { return r.pieceFrom(r.src, d) }

// pieceFrom is piece, fetching from src: a stream's index pieces come
// from the stream's source, which may bring the chunks after them along.
func (r *Reader) pieceFrom(src Source, d Digest) (cached, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	c, f, ok := r.lookup(d)
	switch {
	case ok && f == nil:
		return c, nil
	case ok:
		r.mu.Unlock()
		<-f.done
		r.mu.Lock()
		return f.c, f.err
	}
	if c, ok := r.shared.get(d); ok {
		r.keep(c)
		return c, nil
	}
	c, err := r.fetchLocked(src, d, nil)
	if err == nil && c.index != nil {
		r.shared.set(c)
	}
	return c, err
}

// fetchLocked fetches, verifies and decodes the piece d, into buf if it is
// a chunk, and caches it. Concurrent reads of d wait for this fetch. Called
// with r.mu held, which it releases while fetching.
func (r *Reader) fetchLocked(src Source, d Digest, buf []byte) (cached, error) {
	f := &fetch{done: make(chan struct{})}
	r.fetching[d] = f
	r.mu.Unlock()
	f.c, f.err = decodePiece(src, d, buf)
	r.mu.Lock()
	delete(r.fetching, d)
	if f.err == nil {
		r.keep(f.c)
	}
	close(f.done)
	return f.c, f.err
}

// keep caches a fetched piece: an index piece in place of the one used
// least lately, a chunk in place of the oldest, whose buffer it keeps for
// the next fetch. Called with r.mu held.
func (r *Reader) keep(c cached) {
	r.noteZeros(c)
	if c.d.IsIndex() {
		lru := 0
		for i, ic := range r.indexes {
			if ic.used < r.indexes[lru].used {
				lru = i
			}
		}
		r.tick++
		c.used = r.tick
		r.indexes[lru] = c
		return
	}
	if old := r.chunks[r.nextCh]; old.data != nil && !old.d.IsInline() && len(r.spare) < maxSpare {
		r.spare = append(r.spare, old.data)
	}
	r.chunks[r.nextCh] = c
	r.nextCh = (r.nextCh + 1) % len(r.chunks)
}

// noteZeros adds c to r.zeros if it holds only zeros. Called with r.mu
// held.
func (r *Reader) noteZeros(c cached) {
	if r.zeros[c.d] || len(r.zeros) >= maxZeros {
		return
	}
	if c.index != nil {
		if len(r.zeros) == 0 || len(c.index.Children) == 0 {
			return
		}
		for _, ch := range c.index.Children {
			if !r.zeros[ch.ID.Digest] {
				return
			}
		}
	} else if len(c.data) == 0 || c.data[0] != 0 || c.data[len(c.data)-1] != 0 || !allZero(c.data) {
		return
	}
	if r.zeros == nil {
		r.zeros = map[Digest]bool{}
	}
	r.zeros[c.d] = true
	r.anyZeros.Store(true)
}

// decodePiece fetches and verifies the piece d, into buf if it is a chunk,
// and decodes it if it is an index piece.
func decodePiece(src Source, d Digest, buf []byte) (cached, error) {
	data, err := GetPiece(src, d, buf)
	if err != nil {
		return cached{}, fmt.Errorf("read piece %s: %w", d, err)
	}
	if !d.IsIndex() {
		return cached{d: d, data: data}, nil
	}
	ix, err := DecodeFileIndex(data)
	if err != nil {
		return cached{}, fmt.Errorf("read piece %s: %w", d, err)
	}
	return indexEntry(d, ix), nil
}

// indexEntry is the cached form of the index piece d.
func indexEntry(d Digest, ix FileIndex) cached {
	c := cached{d: d, index: &ix, ends: make([]uint64, len(ix.Children))}
	var sum uint64
	for i, ch := range ix.Children {
		sum += ch.Size
		c.ends[i] = sum
	}
	return c
}

// ReadAt implements io.ReaderAt.
func (r *Reader) ReadAt(p []byte, off int64) (int, error) {
	if off < 0 {
		return 0, fmt.Errorf("cas: negative offset %d", off)
	}
	src := r.src
	var s *streaming
	if r.streams(uint64(off), uint64(len(p))) && r.stream != nil {
		s = &streaming{StreamSource: r.stream}
		src = s
		if r.checked {
			src = checkedStreaming{s}
		}
	}
	n := 0
	for n < len(p) {
		pos := uint64(off) + uint64(n)
		if pos >= r.size {
			return n, io.EOF
		}
		if s != nil {
			s.ahead = int64(r.size - pos)
		}
		m, err := r.readAt(src, r.root, p[n:], pos, 0)
		if err != nil {
			return n, err
		}
		if m == 0 {
			return n, fmt.Errorf("cas: index of %s is inconsistent at offset %d", r.root, pos)
		}
		n += m
	}
	return n, nil
}

const maxIndexDepth = 16

// Reads that start within streamSlack of where the last one ended continue
// a stream (the kernel's read-ahead sends several at once, not in order);
// streamAfter of them in a row make the reader stream. Random reads seldom
// land near each other twice in a row.
// A read of streamSpan bytes or more is a stream by itself, and so is a
// reader's first read if it is at offset 0: most reads of a file from its
// start go on to its end, as the kernel's read-ahead assumes too. Without
// it, the chunks of that first read (a dozen in 128 KiB) would each be a
// request of their own to a remote store.
const (
	streamSlack = 4 << 20
	streamAfter = 2
	streamSpan  = 1 << 20
)

// streams records a read of n bytes at off and reports whether the reader
// is streaming.
func (r *Reader) streams(off, n uint64) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	if off+streamSlack >= r.lastEnd && off <= r.lastEnd+streamSlack {
		r.run++
		r.lastEnd = max(r.lastEnd, off+n)
	} else {
		r.run = 0
		r.lastEnd = off + n
	}
	first := !r.read && off == 0
	r.read = true
	return r.run >= streamAfter || n >= streamSpan || first
}

// readAt copies from the piece d, which starts at offset 0 of its own
// content, bytes from pos on into p, staying within one leaf chunk.
func (r *Reader) readAt(src Source, d Digest, p []byte, pos uint64, depth int) (int, error) {
	if depth > maxIndexDepth {
		return 0, fmt.Errorf("cas: index of %s is too deep", r.root)
	}
	if !d.IsIndex() {
		return r.readChunk(src, d, p, pos)
	}
	c, err := r.pieceFrom(src, d)
	if err != nil {
		return 0, err
	}
	i := sort.Search(len(c.ends), func(i int) bool { return c.ends[i] > pos })
	if i == len(c.ends) {
		return 0, nil
	}
	ch := c.index.Children[i]
	start := c.ends[i] - ch.Size
	if r.anyZeros.Load() {
		if len(c.ends) <= 4 {
			// A chain of one-child pieces above a zero chunk is
			// marked from the chunk up, one visit at a time.
			r.mu.Lock()
			r.noteZeros(c)
			r.mu.Unlock()
		}
		if n := r.fillZeros(c, i, p, pos); n > 0 {
			return n, nil
		}
	}
	if pos == start && ch.Size > 0 && ch.Size <= uint64(len(p)) && !ch.ID.Digest.IsIndex() && !ch.ID.Digest.IsInline() {
		return r.readWhole(src, ch.ID.Digest, p[:ch.Size])
	}
	return r.readAt(src, ch.ID.Digest, p, pos-start, depth+1)
}

// fillZeros fills p with the zeros that c's children from the i-th on
// hold from pos (within c) on, as long as they are zero pieces; it returns
// how many bytes it filled (0: the i-th child is not a zero piece).
func (r *Reader) fillZeros(c cached, i int, p []byte, pos uint64) int {
	r.mu.Lock()
	defer r.mu.Unlock()
	n := 0
	for ; i < len(c.ends) && n < len(p) && r.zeros[c.index.Children[i].ID.Digest]; i++ {
		m := min(len(p)-n, int(c.ends[i]-pos))
		clear(p[n : n+m])
		n += m
		pos += uint64(m)
	}
	return n
}

// readWhole reads the chunk d, which fills p, straight into p: a large
// read holds many whole chunks, and copying each through the cache cost
// the mount a second copy of every byte a stream read. Only the chunks at
// a read's ends, which the next read wants too, go through the cache.
func (r *Reader) readWhole(src Source, d Digest, p []byte) (int, error) {
	r.mu.Lock()
	_, _, ok := r.lookup(d)
	r.mu.Unlock()
	if ok {
		// Cached or being fetched by another read.
		return r.readChunk(src, d, p, 0)
	}
	data, err := GetPiece(src, d, p[:0:len(p)])
	if err != nil {
		return 0, fmt.Errorf("read piece %s: %w", d, err)
	}
	if len(data) != len(p) {
		return 0, fmt.Errorf("cas: index of %s gives chunk %s %d bytes, it holds %d", r.root, d, len(p), len(data))
	}
	if &data[0] != &p[0] {
		copy(p, data)
	}
	if p[0] == 0 {
		r.mu.Lock()
		r.noteZeros(cached{d: d, data: p})
		r.mu.Unlock()
	}
	return len(p), nil
}

// readChunk copies bytes of the chunk d from pos on into p. The copy is made
// under r.mu: the chunk's buffer is reused once the chunk leaves the cache.
func (r *Reader) readChunk(src Source, d Digest, p []byte, pos uint64) (int, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for {
		c, f, ok := r.lookup(d)
		if ok && f == nil {
			return copyFrom(p, c.data, pos), nil
		}
		if !ok {
			var buf []byte
			if n := len(r.spare); n > 0 {
				buf, r.spare = r.spare[n-1], r.spare[:n-1]
			}
			c, err := r.fetchLocked(src, d, buf)
			if err != nil {
				return 0, err
			}
			return copyFrom(p, c.data, pos), nil
		}
		// Another read fetches it; it is in the cache when done, unless
		// eight others pushed it out meanwhile.
		r.mu.Unlock()
		<-f.done
		r.mu.Lock()
		if f.err != nil {
			return 0, f.err
		}
	}
}

// maxSpare buffers serve the fetches of as many concurrent reads (the
// kernel keeps about two under way); more allocate.
const maxSpare = 2

func copyFrom(p, data []byte, pos uint64) int {
	if pos >= uint64(len(data)) {
		return 0
	}
	return copy(p, data[pos:])
}

// Walk visits the pieces of the object id. pre is called on a piece before
// its children and returns whether to visit them; post is called after them,
// so post sees children before their parents. post may be nil.
func Walk(src Source, id ObjectIdentifier, pre func(d Digest) (bool, error), post func(d Digest) error) error {
	return walk(src, id.Digest, pre, post, 0)
}

func walk(src Source, d Digest, pre func(d Digest) (bool, error), post func(d Digest) error, depth int) error {
	if depth > maxIndexDepth {
		return fmt.Errorf("cas: index of %s is too deep", d)
	}
	descend, err := pre(d)
	if err != nil || !descend {
		return err
	}
	if d.IsIndex() {
		data, err := GetPiece(src, d, nil)
		if err != nil {
			return err
		}
		ix, err := DecodeFileIndex(data)
		if err != nil {
			return err
		}
		for _, c := range ix.Children {
			if err := walk(src, c.ID.Digest, pre, post, depth+1); err != nil {
				return err
			}
		}
	}
	if post != nil {
		return post(d)
	}
	return nil
}
