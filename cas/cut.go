package cas

import (
	"bytes"
	"fmt"
	"runtime"
	"slices"
	"sync"

	"github.com/restic/chunker"
)

// Parallel chunking.
//
// restic's chunker decides whether to cut after offset p from two things
// only: the 64 bytes before p (its rolling fingerprint is reset at every
// chunk start and covers a full window of the chunk's own bytes before the
// first place it may cut, MinChunkSize in) and p's distance from the chunk's
// start (MinChunkSize, MaxChunkSize). So a chunker started at any offset, as
// if a chunk began there, makes the same cuts as the chunker over the whole
// stream from the first cut they share on.
//
// A stream is therefore cut in segments, each chunked from its own start on
// any free core, and one goroutine stitches them together: from the last
// cut it knows to be the stream's, it chunks for real until it reaches a cut
// the segment's chunker made too, and takes the segment's cuts from there.
// The chunks are the single-stream chunker's, byte for byte and with the
// same fingerprints (TestParallelChunksMatchSequential), so ids do not
// depend on how a value was written; the stitching re-chunks about two
// chunks per segment.

// segmentSize is the unit of parallel chunking.
const segmentSize = 1 << 20

// segBufs recycle segment buffers: a fresh 1 MiB buffer per segment cost
// its zeroing and GC work.
var segBufs = sync.Pool{New: func() any { b := make([]byte, 0, segmentSize); return &b }}

// cut is where a chunk ends in the stream, with the chunker's fingerprint
// there (chunker.Chunk.Cut).
type cut struct {
	end uint64
	fp  uint64
}

// segment is a run of the stream and the cuts a chunker started at its
// first byte makes in it, except one at its very end (which may be where
// the segment, not a chunk, ends). A segment of zeros (queue.WriteZeros)
// has no buffer and no cuts: the stitcher cuts its zeros itself.
type segment struct {
	off   uint64
	buf   *[]byte // nil: zeros bytes of zeros
	zeros uint64
	pol   chunker.Pol
	last  bool // the stream's last segment, often short
	cuts  []cut
	done  chan struct{} // closed once cuts are set
}

func (s *segment) data() []byte { return *s.buf }
func (s *segment) end() uint64 {
	if s.buf == nil {
		return s.off + s.zeros
	}
	return s.off + uint64(len(*s.buf))
}

// findCuts chunks the segment from its start with c, whose output goes to
// buf. A chunk that zeroCut ends is cut without c, which then starts again
// after it.
func (s *segment) findCuts(c *chunker.Chunker, buf *[]byte) {
	defer close(s.done)
	data := s.data()
	fresh := false // c chunks data from pos on
	for pos := 0; pos < len(data); {
		var next cut
		if zeroCut(data[pos:]) {
			next, fresh = cut{MinChunkSize, 0}, false
		} else {
			if !fresh {
				c.ResetWithBoundaries(bytes.NewReader(data[pos:]), s.pol, MinChunkSize, MaxChunkSize)
				c.SetAverageBits(averageBits)
				fresh = true
			}
			ch, err := c.Next((*buf)[:0])
			if err != nil { // io.EOF: a bytes.Reader fails no other way
				return
			}
			next = cut{uint64(ch.Length), ch.Cut}
		}
		pos += int(next.end)
		end := s.off + uint64(pos)
		if end == s.end() {
			return
		}
		s.cuts = append(s.cuts, cut{end, next.fp})
	}
}

// chunkerWindow is the bytes restic's chunker fingerprints (its
// windowSize).
const chunkerWindow = 64

// zeroCut reports whether a chunk that starts at span[0] ends at
// MinChunkSize for the window of zeros before it: the chunker does not
// fingerprint the bytes before that window, and Rabin's fingerprint of
// zeros is 0, which every mask matches, so it cuts there with fingerprint
// 0. Runs of zeros (a file grown by truncate, fallocate or a write past
// its end) are then cut by checking 64 bytes a chunk instead of reading
// them all through the chunker (TestZeroCutsMatchTheChunker).
func zeroCut(span []byte) bool {
	return len(span) >= MinChunkSize && allZero(span[MinChunkSize-chunkerWindow:MinChunkSize])
}

// Cutters find the chunk boundaries of writers' segments, one goroutine
// per core, shared by the writers made with them (Cutters.NewWriter).
// Whoever makes them closes them; the goroutines end then, and a writer
// still running chunks its segments itself.
type Cutters struct {
	jobs chan *segment
	stop chan struct{}
	once sync.Once
	wg   sync.WaitGroup
}

// NewCutters starts the cut finders.
func NewCutters() *Cutters {
	c := &Cutters{jobs: make(chan *segment), stop: make(chan struct{})}
	for range runtime.GOMAXPROCS(0) {
		c.wg.Go(func() {
			ch := getChunker(nil, 0)
			defer chunkers.Put(ch)
			buf := make([]byte, 0, MaxChunkSize)
			for {
				select {
				case s := <-c.jobs:
					s.findCuts(ch, &buf)
				case <-c.stop:
					return
				}
			}
		})
	}
	return c
}

// Close stops the cut finders and waits for them to end.
func (c *Cutters) Close() {
	c.once.Do(func() { close(c.stop) })
	c.wg.Wait()
}

// dispatch has the segment's cuts found on another core, or by a writer
// made without cutters on the chunking goroutine itself. A short last
// segment (a small value, the end of any) is left to the stitcher, which
// would chunk much of it again anyway.
func (c *Cutters) dispatch(s *segment) {
	if s.buf == nil || s.last && len(s.data()) < 4*MaxChunkSize {
		close(s.done)
		return
	}
	if c != nil {
		select {
		case c.jobs <- s:
			return
		case <-c.stop:
		}
	}
	ch := getChunker(nil, 0)
	defer chunkers.Put(ch)
	buf := make([]byte, 0, MaxChunkSize)
	s.findCuts(ch, &buf)
}

// stitcher turns segments, in stream order, into the stream's chunks.
type stitcher struct {
	pol  chunker.Pol
	segs []*segment // from the one holding pos on
	pos  uint64     // the stream's last cut
	c    *chunker.Chunker
	buf  *[]byte                                   // the chunker's output, unused
	span *[]byte                                   // bytes from pos for the chunker
	emit func(data []byte, lv int, n uint64) error // n chunks like data
}

func newStitcher(pol chunker.Pol, emit func(data []byte, lv int, n uint64) error) *stitcher {
	return &stitcher{
		pol:  pol,
		c:    getChunker(nil, pol),
		buf:  chunkBufs.Get().(*[]byte),
		span: chunkBufs.Get().(*[]byte),
		emit: emit,
	}
}

// release returns the stitcher's buffers and any segments it holds.
func (st *stitcher) release() {
	chunkers.Put(st.c)
	chunkBufs.Put(st.buf)
	chunkBufs.Put(st.span)
	for _, s := range st.segs {
		s.recycle()
	}
	st.segs = nil
}

// recycle returns the segment's buffer, if it has one.
func (s *segment) recycle() {
	if s.buf != nil {
		segBufs.Put(s.buf)
	}
}

// add takes the next segment once its cuts are found and emits the chunks
// that end in it, but for the last, which may go on in the next segment.
func (st *stitcher) add(s *segment) error {
	<-s.done
	st.segs = append(st.segs, s)
	end := s.end()
	for end-st.pos >= MaxChunkSize {
		if n := st.zeroChunks(); n > 0 {
			// Every chunk within a segment of zeros is MinChunkSize
			// of them, cut with fingerprint 0 (zeroCut).
			if err := st.emit(zeroPage[:MinChunkSize:MinChunkSize], cutLevels(0), n); err != nil {
				return err
			}
			st.pos += n * MinChunkSize
			continue
		}
		c := st.next(end)
		if err := st.chunk(c); err != nil {
			return err
		}
		i, found := slices.BinarySearchFunc(s.cuts, c.end, func(a cut, e uint64) int {
			switch {
			case a.end < e:
				return -1
			case a.end > e:
				return 1
			}
			return 0
		})
		if !found {
			continue
		}
		for _, c := range s.cuts[i+1:] {
			if err := st.chunk(c); err != nil {
				return err
			}
		}
		// Less than a full chunk is left in s: no cut in it is certain.
	}
	st.drop()
	return nil
}

// finish emits the chunks after the last segment's, up to the stream's end.
func (st *stitcher) finish() error {
	if len(st.segs) == 0 {
		return nil
	}
	end := st.segs[len(st.segs)-1].end()
	for st.pos < end {
		if err := st.chunk(st.next(end)); err != nil {
			return err
		}
	}
	st.drop()
	return nil
}

// next chunks for real from pos and returns the next cut: one within
// MaxChunkSize bytes, or end if the stream ends first.
func (st *stitcher) next(end uint64) cut {
	n := int(min(end-st.pos, MaxChunkSize))
	span := (*st.span)[:n]
	st.read(span, st.pos)
	c := firstCut(st.c, st.pol, span, st.buf)
	c.end += st.pos
	return c
}

// firstCut returns the first cut in span, a stream's bytes from one of its
// cuts on, at most MaxChunkSize of them; its end is relative to span's start
// (len(span) if the stream ends first). c is reset to chunk span, and buf
// takes the chunker's output.
func firstCut(c *chunker.Chunker, pol chunker.Pol, span []byte, buf *[]byte) cut {
	if zeroCut(span) {
		return cut{MinChunkSize, 0}
	}
	c.ResetWithBoundaries(bytes.NewReader(span), pol, MinChunkSize, MaxChunkSize)
	c.SetAverageBits(averageBits)
	ch, err := c.Next((*buf)[:0])
	if err != nil { // io.EOF, which a non-empty span never gives
		panic(fmt.Sprintf("cas: chunker returned no chunk of %d bytes: %v", len(span), err))
	}
	return cut{uint64(ch.Length), ch.Cut}
}

// chunk emits the chunk from pos to c. A chunk of zeros (a zero cut's) is
// emitted as a slice of zeroPage, not copied into a buffer of its own: a
// file grown by truncate is a million of them a GiB.
func (st *stitcher) chunk(c cut) error {
	n := c.end - st.pos
	var data []byte
	if c.fp == 0 && n <= MaxChunkSize && st.zeros(st.pos, n) {
		data = zeroPage[:n:n]
	} else {
		data = make([]byte, n)
		st.read(data, st.pos)
	}
	st.pos = c.end
	return st.emit(data, cutLevels(c.fp), 1)
}

// zeroChunks returns how many chunks of zeros follow pos within the
// segment of zeros that holds it, if one does.
func (st *stitcher) zeroChunks() uint64 {
	for _, s := range st.segs {
		if s.buf == nil && s.off <= st.pos && st.pos < s.end() {
			return (s.end() - st.pos) / MinChunkSize
		}
	}
	return 0
}

// chunkOf returns a chunk's bytes, b, cut with fingerprint fp, in a slice
// of its own: zeroPage's for a chunk of zeros, else a copy.
func chunkOf(b []byte, fp uint64) []byte {
	if fp == 0 && len(b) <= MaxChunkSize && allZero(b) {
		return zeroPage[:len(b):len(b)]
	}
	return bytes.Clone(b)
}

// zeros reports whether the n held bytes from off on are all zeros.
func (st *stitcher) zeros(off, n uint64) bool {
	zero := true
	st.held(off, n, func(b []byte) bool {
		zero = isZeroPage(b) || allZero(b)
		return zero
	})
	return zero
}

// read copies the held bytes from off on into p.
func (st *stitcher) read(p []byte, off uint64) {
	st.held(off, uint64(len(p)), func(b []byte) bool {
		p = p[copy(p, b):]
		return true
	})
}

// held calls fn with the n held bytes from off on, a segment's part at a
// time, until fn returns false.
func (st *stitcher) held(off, n uint64, fn func([]byte) bool) {
	for _, s := range st.segs {
		for off < s.end() && n > 0 {
			var b []byte
			if s.buf == nil {
				b = zeroPage[:min(s.end()-off, n, uint64(len(zeroPage)))]
			} else {
				b = s.data()[off-s.off:]
				b = b[:min(uint64(len(b)), n)]
			}
			if !fn(b) {
				return
			}
			off, n = off+uint64(len(b)), n-uint64(len(b))
		}
	}
	if n > 0 {
		panic("cas: stitcher read past the bytes it holds")
	}
}

// drop recycles the segments wholly before pos.
func (st *stitcher) drop() {
	i := 0
	for i < len(st.segs) && st.segs[i].end() <= st.pos {
		st.segs[i].recycle()
		i++
	}
	st.segs = slices.Delete(st.segs, 0, i)
}
