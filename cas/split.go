package cas

import (
	"bytes"
	"io"
	"math/bits"
	"slices"
	"sync"

	"github.com/restic/chunker"
)

// Chunking parameters: chunks are cut by restic's Rabin chunker between 4 KiB
// and 64 KiB, about 16 KiB on average.
const (
	MinChunkSize = 4 << 10
	MaxChunkSize = 64 << 10
	averageBits  = 14
	// Each 4 extra zero bits of the fingerprint at a cut close one more index
	// level, for a fanout of about 16, as in Ledger's split.cc.
	indexBitsPerLevel = 4
	// maxIndexChildren keeps an index piece under the maximum chunk size.
	maxIndexChildren = 800
)

// Sink receives the pieces of an object as they are made. Put may be called
// with a digest the sink already holds; deduplication is the sink's job.
// Put may keep data: the splitter never reuses a buffer it has handed over.
type Sink interface {
	Put(d Digest, data []byte) error
}

// A RepeatSink takes a piece put n times over in one call: a run of zeros
// puts the same chunk and index pieces once every MinChunkSize, a million
// times a GiB, and the sink only counts all but the first.
type RepeatSink interface {
	Sink
	PutRepeat(d Digest, data []byte, n uint64) error
}

// putRepeat puts data, whose digest is d, n times into sink.
func putRepeat(sink Sink, d Digest, data []byte, n uint64) error {
	if d.IsInline() || n == 0 {
		return nil
	}
	if rs, ok := sink.(RepeatSink); ok {
		return rs.PutRepeat(d, data, n)
	}
	for range n {
		if err := sink.Put(d, data); err != nil {
			return err
		}
	}
	return nil
}

// chunkStream cuts a stream into chunks at content-defined boundaries.
type chunkStream struct {
	c *chunker.Chunker
}

// chunkers are reused: a chunker holds a 512 KiB buffer and tables derived
// from the polynomial, too costly to build for every tree node.
var chunkers sync.Pool

func newChunkStream(r io.Reader, pol chunker.Pol) *chunkStream {
	return &chunkStream{c: getChunker(r, pol)}
}

// getChunker returns a chunker at ledgerfs's parameters reading r.
func getChunker(r io.Reader, pol chunker.Pol) *chunker.Chunker {
	c, ok := chunkers.Get().(*chunker.Chunker)
	if ok {
		c.ResetWithBoundaries(r, pol, MinChunkSize, MaxChunkSize)
	} else {
		c = chunker.NewWithBoundaries(r, pol, MinChunkSize, MaxChunkSize)
	}
	c.SetAverageBits(averageBits)
	return c
}

// release returns the chunker for reuse.
func (s *chunkStream) release() {
	chunkers.Put(s.c)
	s.c = nil
}

// next returns the next chunk in a freshly allocated buffer and the number of
// index levels the cut closes.
// chunkBufs are the chunker's working buffers. A chunk is copied out of
// one into a slice of its own size: a fresh MaxChunkSize buffer per chunk
// cost more in zeroing than the copy (four times the data, chunks averaging
// 16 KiB), and the chunk's slice lives on in the store's batch.
var chunkBufs = sync.Pool{New: func() any { b := make([]byte, 0, MaxChunkSize); return &b }}

func (s *chunkStream) next() ([]byte, int, error) {
	buf := chunkBufs.Get().(*[]byte)
	defer chunkBufs.Put(buf)
	ch, err := s.c.Next((*buf)[:0])
	if err != nil {
		return nil, 0, err
	}
	return append([]byte(nil), ch.Data...), cutLevels(ch.Cut), nil
}

// cutLevels is the number of index levels a cut closes: the extra zero bits of
// the fingerprint beyond the ones that made the cut, four per level.
func cutLevels(cut uint64) int {
	const mask = 1<<averageBits - 1
	if cut&mask != 0 { // cut at the maximum size, not by content
		return 0
	}
	extra := bits.TrailingZeros64(cut>>averageBits | 1<<(64-averageBits-1))
	return extra / indexBitsPerLevel
}

// splitter assembles chunks into an index tree and hands pieces to a sink. It
// holds back the latest chunk because the root piece's digest carries the
// object's kind and a lone chunk is its own root.
type splitter struct {
	kind Kind
	sink Sink
	// indexes, if not nil, takes the index pieces made, decoded: the
	// next edit of the value walks down through them.
	indexes *IndexCache
	levels  [][]IndexChild
	held    []byte
	heldLv  int
	have    bool
	size    uint64
	seen    repeats
}

// repeats remembers the pieces a run of zeros makes again and again.
// Rabin's fingerprint of a window of zeros is 0, so zeros cut at every
// MinChunkSize with a cut that closes every index level: each of their
// chunks is the same, and makes the same chain of one-child index pieces
// above it. A file grown by truncate or fallocate is such a run; storing a
// GiB of it hashed and encoded those same pieces 3 million times (16 s).
// The pieces still go to the sink each time, for it to count them.
type repeats struct {
	zeros  map[int]Digest           // a chunk of n zero bytes
	single map[IndexChild]onlyChild // a one-child index piece above zeros
	above  map[Digest]bool          // the digests of both
	towers map[tower][]onlyChild    // the whole chain above a zero chunk
	full   map[IndexChild]onlyChild // a full index piece of one child repeated, above zeros
	off    bool                     // remember nothing (tests compare)
}

// A tower is a zero chunk whose cut closes levels levels, all of them
// empty below it: the chain of one-child pieces above it is the same every
// time, and is pushed whole.
type tower struct {
	chunk  IndexChild
	levels int
}

// onlyChild is a one-child index piece: its identifier and encoding.
type onlyChild struct {
	id   ObjectIdentifier
	data []byte
}

// maxRepeats bounds what repeats remembers: a run of zeros needs one
// chunk and a chain of index pieces per length of its last chunk.
const maxRepeats = 256

// zeroChunk returns the digest of data, a chunk, if it is all zeros. A
// slice of zeroPage (the stitcher and the editor make one of each chunk of
// zeros they cut) is not scanned again.
func (r *repeats) zeroChunk(data []byte) (Digest, bool) {
	if r.off || len(data) == 0 || !isZeroPage(data) && (data[0] != 0 || data[len(data)-1] != 0 || !allZero(data)) {
		return "", false
	}
	d, ok := r.zeros[len(data)]
	if !ok {
		d = ComputeDigest(KindBlob, false, data)
		if r.zeros == nil {
			r.zeros, r.above = map[int]Digest{}, map[Digest]bool{}
		}
		if len(r.zeros) < maxRepeats {
			r.zeros[len(data)] = d
			r.above[d] = true
		}
	}
	return d, true
}

// onlyChild returns the one-child index piece over c, if remembered.
func (r *repeats) onlyChild(c IndexChild) (onlyChild, bool) {
	o, ok := r.single[c]
	return o, ok
}

// keepOnlyChild remembers o, the one-child index piece over c, if c is a
// zero chunk or such a piece above one.
func (r *repeats) keepOnlyChild(c IndexChild, o onlyChild) { r.keep(&r.single, c, o) }

// keepFull remembers o, the full index piece of children all c, if c is a
// zero chunk or a piece above one: a run of zeros fills a level with the
// same child again and again.
func (r *repeats) keepFull(c IndexChild, o onlyChild) { r.keep(&r.full, c, o) }

// keep remembers o in m under c, if c is a zero chunk or a piece above
// one; o is then a piece above one too.
func (r *repeats) keep(m *map[IndexChild]onlyChild, c IndexChild, o onlyChild) {
	if r.off || !r.above[c.ID.Digest] || len(*m) >= maxRepeats {
		return
	}
	if *m == nil {
		*m = map[IndexChild]onlyChild{}
	}
	(*m)[c] = o
	r.above[o.id.Digest] = true
}

// alike reports whether every child is the first.
func alike(children []IndexChild) bool {
	for _, c := range children[1:] {
		if c != children[0] {
			return false
		}
	}
	return true
}

// tower returns the chain of one-child pieces that closing levels levels
// above the zero chunk c makes, lowest first, once single holds each.
func (r *repeats) tower(c IndexChild, levels int) ([]onlyChild, bool) {
	if r.off || !r.above[c.ID.Digest] {
		return nil, false
	}
	k := tower{c, levels}
	if t, ok := r.towers[k]; ok {
		return t, true
	}
	if len(r.towers) >= maxRepeats {
		return nil, false
	}
	t := make([]onlyChild, 0, levels)
	for range levels {
		o, ok := r.single[c]
		if !ok {
			return nil, false
		}
		t = append(t, o)
		c = IndexChild{Size: c.Size, ID: o.id}
	}
	if r.towers == nil {
		r.towers = map[tower][]onlyChild{}
	}
	r.towers[k] = t
	return t, true
}

// zeroPage is what allZero compares with, and what chunks of zeros are
// slices of. Nothing writes to it.
var zeroPage [MaxChunkSize]byte

// isZeroPage reports whether b, not empty, is a slice of zeroPage.
func isZeroPage(b []byte) bool { return &b[0] == &zeroPage[0] }

func allZero(b []byte) bool {
	for len(b) > 0 {
		n := min(len(b), len(zeroPage))
		if !bytes.Equal(b[:n], zeroPage[:n]) {
			return false
		}
		b = b[n:]
	}
	return true
}

func (s *splitter) add(data []byte, lv int) error {
	if s.have {
		if err := s.flushHeld(); err != nil {
			return err
		}
	}
	s.held, s.heldLv, s.have = data, lv, true
	s.size += uint64(len(data))
	return nil
}

// addN adds n chunks of data, each cut closing lv levels.
func (s *splitter) addN(data []byte, lv int, n uint64) error {
	if n == 1 {
		return s.add(data, lv)
	}
	return s.addRun(data, lv, n)
}

// addRun adds n chunks of data, each cut closing lv levels: chunks of
// zeros, all alike. Once the first two have made the chain of pieces above
// such a chunk (repeats.tower), each of the others only adds the chain's
// top at level lv: that is done for all of them at once, the chain's
// pieces put once with their count, and the pieces that gather the tops,
// the same each time a level fills, made once.
func (s *splitter) addRun(data []byte, lv int, n uint64) error {
	for ; n > 0 && !s.runs(data, lv); n-- {
		if err := s.add(data, lv); err != nil {
			return err
		}
	}
	if n == 0 {
		return nil
	}
	// The chunk held is data: pushing it and holding the next, n times,
	// pushes n chunks like it and holds the last.
	d, _ := s.seen.zeroChunk(data)
	c := IndexChild{Size: uint64(len(data)), ID: ObjectIdentifier{Digest: d}}
	t, _ := s.seen.tower(c, lv)
	if err := putRepeat(s.sink, d, data, n); err != nil {
		return err
	}
	for _, o := range t {
		if err := putRepeat(s.sink, o.id.Digest, o.data, n); err != nil {
			return err
		}
	}
	s.size += n * uint64(len(data))
	return s.pushRun(lv, IndexChild{Size: c.Size, ID: t[len(t)-1].id}, n)
}

// pushRun pushes n copies of c at level i, as n pushes of c closing no
// level above i would: each time level i fills it closes. Once a full
// piece of c alone is known (repeats.full), whole groups of copies that
// would fill level i from empty are that piece, put once with their count
// and pushed as a run a level up.
func (s *splitter) pushRun(i int, c IndexChild, n uint64) error {
	for n > 0 {
		for len(s.levels) <= i {
			s.levels = append(s.levels, nil)
		}
		if o, ok := s.seen.full[c]; ok && len(s.levels[i]) == 0 && n >= maxIndexChildren {
			g := n / maxIndexChildren
			if err := putRepeat(s.sink, o.id.Digest, o.data, g); err != nil {
				return err
			}
			if err := s.pushRun(i+1, IndexChild{Size: c.Size * maxIndexChildren, ID: o.id}, g); err != nil {
				return err
			}
			n -= g * maxIndexChildren
			continue
		}
		m := min(n, uint64(maxIndexChildren-len(s.levels[i])))
		s.levels[i] = slices.Grow(s.levels[i], int(m))
		for range m {
			s.levels[i] = append(s.levels[i], c)
		}
		n -= m
		if err := s.closeFull(i, i); err != nil {
			return err
		}
	}
	return nil
}

// runs reports whether the next chunk like data, cut closing lv levels,
// can be added as part of a run: the chunk held is one like it, the levels
// below lv are empty, and the chain above it is known.
func (s *splitter) runs(data []byte, lv int) bool {
	if !s.have || lv == 0 || len(s.held) != len(data) || s.heldLv != lv || !s.emptyBelow(lv) {
		return false
	}
	d, ok := s.seen.zeroChunk(s.held)
	if !ok {
		return false
	}
	_, ok = s.seen.tower(IndexChild{Size: uint64(len(data)), ID: ObjectIdentifier{Digest: d}}, lv)
	return ok
}

func (s *splitter) flushHeld() error {
	var id ObjectIdentifier
	var err error
	if d, ok := s.seen.zeroChunk(s.held); ok {
		id, err = ObjectIdentifier{Digest: d}, s.putDigest(d, s.held)
	} else {
		id, err = s.put(KindBlob, false, s.held)
	}
	if err != nil {
		return err
	}
	s.have = false
	return s.push(0, IndexChild{Size: uint64(len(s.held)), ID: id}, s.heldLv)
}

// push appends c, a piece at level i (a chunk is at level 0), and closes
// every level from i up that is below lv or full: lv is the number of
// levels the cut at the end of c's last chunk closes. Pushing a whole node
// at level i is the same as pushing its chunks one by one, if the levels
// below i are empty (Edit relies on it).
func (s *splitter) push(i int, c IndexChild, lv int) error {
	if i == 0 && lv > 0 && s.emptyBelow(lv) {
		// Closing the levels below lv over c alone makes the same
		// chain as last time: put it, and push its top at lv.
		if t, ok := s.seen.tower(c, lv); ok {
			for _, o := range t {
				if err := s.putDigest(o.id.Digest, o.data); err != nil {
					return err
				}
			}
			i, c = lv, IndexChild{Size: c.Size, ID: t[len(t)-1].id}
		}
	}
	for len(s.levels) <= i {
		s.levels = append(s.levels, nil)
	}
	s.levels[i] = append(s.levels[i], c)
	return s.closeFull(i, lv)
}

// closeFull closes every level from i up that is below lv or full.
func (s *splitter) closeFull(i, lv int) error {
	for j := i; j < len(s.levels); j++ {
		if j >= lv && len(s.levels[j]) < maxIndexChildren {
			break
		}
		if err := s.closeLevel(j); err != nil {
			return err
		}
	}
	return nil
}

// closeLevel turns level j's children into an index piece at level j+1.
func (s *splitter) closeLevel(j int) error {
	children := s.levels[j]
	if len(children) == 0 {
		return nil
	}
	s.levels[j] = nil
	ix := FileIndex{Children: children}
	for _, c := range children {
		ix.Size += c.Size
	}
	var id ObjectIdentifier
	if o, ok := s.seen.onlyChild(children[0]); ok && len(children) == 1 {
		id = o.id
		if err := s.putDigest(id.Digest, o.data); err != nil {
			return err
		}
	} else if o, ok := s.seen.full[children[0]]; ok && len(children) == maxIndexChildren && alike(children) {
		id = o.id
		if err := s.putDigest(id.Digest, o.data); err != nil {
			return err
		}
	} else {
		data := EncodeFileIndex(ix)
		var err error
		if id, err = s.put(KindBlob, true, data); err != nil {
			return err
		}
		if s.indexes != nil {
			s.indexes.set(indexEntry(id.Digest, ix))
		}
		if len(children) == 1 {
			s.seen.keepOnlyChild(children[0], onlyChild{id, data})
		} else if len(children) == maxIndexChildren && alike(children) {
			s.seen.keepFull(children[0], onlyChild{id, data})
		}
	}
	for len(s.levels) <= j+1 {
		s.levels = append(s.levels, nil)
	}
	s.levels[j+1] = append(s.levels[j+1], IndexChild{Size: ix.Size, ID: id})
	return nil
}

func (s *splitter) put(kind Kind, index bool, data []byte) (ObjectIdentifier, error) {
	d := ComputeDigest(kind, index, data)
	return ObjectIdentifier{Digest: d}, s.putDigest(d, data)
}

// putDigest hands data, whose digest is d, to the sink unless it is inline.
func (s *splitter) putDigest(d Digest, data []byte) error {
	if d.IsInline() {
		return nil
	}
	return s.sink.Put(d, data)
}

// finish closes every level and returns the object's identifier and size.
func (s *splitter) finish() (ObjectIdentifier, uint64, error) {
	if len(s.levels) == 0 {
		// Zero or one chunk: the chunk (or the empty content) is the root.
		id, err := s.put(s.kind, false, s.held)
		return id, s.size, err
	}
	if s.have {
		if err := s.flushHeld(); err != nil {
			return ObjectIdentifier{}, 0, err
		}
	}
	for j := 0; j < len(s.levels)-1; j++ {
		if err := s.closeLevel(j); err != nil {
			return ObjectIdentifier{}, 0, err
		}
	}
	top := s.levels[len(s.levels)-1]
	if len(top) == 1 && s.kind == KindBlob {
		return top[0].ID, s.size, nil
	}
	// The root index carries the object's kind in its digest.
	ix := FileIndex{Size: s.size, Children: top}
	id, err := s.put(s.kind, true, EncodeFileIndex(ix))
	if err == nil && s.indexes != nil {
		s.indexes.set(indexEntry(id.Digest, ix))
	}
	return id, s.size, err
}

// WriteObject splits data held in memory (tree nodes, small values) and
// returns its identifier.
//
// A tree node that fits in one chunk is stored whole: only large nodes go
// through the chunker (DESIGN.md), which cost a third of a one-entry
// commit. Values are always chunked, so that a value gets the same id
// whether it was written here or streamed through a Writer.
func WriteObject(sink Sink, pol chunker.Pol, kind Kind, data []byte) (ObjectIdentifier, error) {
	s := &splitter{kind: kind, sink: sink}
	if len(data) <= MinChunkSize || (kind == KindTreeNode && len(data) <= MaxChunkSize) {
		// One chunk: the content is its own root.
		return s.put(kind, false, data)
	}
	return s.split(data, pol)
}

// split chunks data, all of the object, on this goroutine and finishes.
func (s *splitter) split(data []byte, pol chunker.Pol) (ObjectIdentifier, error) {
	cs := newChunkStream(bytes.NewReader(data), pol)
	defer cs.release()
	for {
		c, lv, err := cs.next()
		if err == io.EOF {
			break
		}
		if err != nil {
			return ObjectIdentifier{}, err
		}
		if err := s.add(c, lv); err != nil {
			return ObjectIdentifier{}, err
		}
	}
	id, _, err := s.finish()
	return id, err
}
