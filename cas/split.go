package cas

import (
	"bytes"
	"io"
	"math/bits"
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

func (s *splitter) flushHeld() error {
	id, err := s.put(KindBlob, false, s.held)
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
	for len(s.levels) <= i {
		s.levels = append(s.levels, nil)
	}
	s.levels[i] = append(s.levels[i], c)
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
	id, err := s.put(KindBlob, true, EncodeFileIndex(ix))
	if err != nil {
		return err
	}
	if s.indexes != nil {
		s.indexes.set(indexEntry(id.Digest, ix))
	}
	for len(s.levels) <= j+1 {
		s.levels = append(s.levels, nil)
	}
	s.levels[j+1] = append(s.levels[j+1], IndexChild{Size: ix.Size, ID: id})
	return nil
}

func (s *splitter) put(kind Kind, index bool, data []byte) (ObjectIdentifier, error) {
	d := ComputeDigest(kind, index, data)
	if !d.IsInline() {
		if err := s.sink.Put(d, data); err != nil {
			return ObjectIdentifier{}, err
		}
	}
	return ObjectIdentifier{Digest: d}, nil
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
