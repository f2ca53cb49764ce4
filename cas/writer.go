package cas

import (
	"errors"
	"runtime"
	"sync"

	"github.com/restic/chunker"
)

// Writer streams a value into pieces: bytes written are queued in
// segments, the segments chunked on every core (cut.go) while the chunks
// before them are hashed and stored on another goroutine, so a writer (a
// FUSE request) waits for none of it. Memory is bounded by the queue, the
// segments being chunked and a few chunks in flight, whatever the value's
// size.
//
// That pipeline starts once a segment is full. A value that fits in one is
// chunked, hashed and stored on the goroutine that closes it: for a small
// file the pipeline's goroutines and hand-offs cost its close more than the
// work itself.
type Writer struct {
	q       *queue
	sink    Sink
	kind    Kind
	started bool
	done    chan struct{}
	id      ObjectIdentifier
	size    uint64
	err     error
	closed  bool
}

type chunkMsg struct {
	data []byte
	lv   int
	n    uint64 // chunks like data
}

// NewWriter starts a streaming write of one object into sink, its
// segments chunked one after another on the writer's chunking goroutine.
// Cutters.NewWriter chunks them on every core.
func NewWriter(sink Sink, pol chunker.Pol, kind Kind) *Writer {
	return (*Cutters)(nil).NewWriter(sink, pol, kind)
}

// NewWriter starts a streaming write of one object into sink whose
// segments c chunks.
func (c *Cutters) NewWriter(sink Sink, pol chunker.Pol, kind Kind) *Writer {
	q := newQueue(pol)
	q.cutters = c
	return &Writer{q: q, sink: sink, kind: kind, done: make(chan struct{})}
}

// start runs the pipeline: chunking on one goroutine (and the cut finders),
// hashing and storing on another.
func (w *Writer) start() {
	w.started = true
	q := w.q
	chunks := make(chan chunkMsg, 4)
	chunkErr := make(chan error, 1)
	go func() {
		defer close(chunks)
		err := q.chunk(func(data []byte, lv int, n uint64) error {
			chunks <- chunkMsg{data, lv, n}
			return nil
		})
		if err != nil {
			q.CloseWithError(err)
		}
		chunkErr <- err
	}()
	go func() {
		defer close(w.done)
		s := &splitter{kind: w.kind, sink: w.sink}
		var err error
		for c := range chunks {
			if err != nil {
				continue // drain so the chunking goroutine ends
			}
			if err = s.addN(c.data, c.lv, c.n); err != nil {
				// Stop the writer side: further writes fail with err.
				q.CloseWithError(err)
			}
		}
		if cerr := <-chunkErr; err == nil {
			err = cerr
		}
		if err == nil {
			w.id, w.size, err = s.finish()
		}
		w.err = err
	}()
}

// Write adds p to the value.
func (w *Writer) Write(p []byte) (int, error) {
	if w.closed {
		return 0, errors.New("cas: write to closed writer")
	}
	if !w.started && w.q.buffered()+len(p) >= w.q.size {
		w.start()
	}
	return w.q.Write(p)
}

// zeroSegmentMin is the shortest run WriteZeros queues as a segment of
// zeros; a shorter one is written as bytes.
const zeroSegmentMin = segmentSize

// WriteZeros adds n zero bytes to the value, as Write would, without
// copying them: a file grown by truncate, or the holes of a sparse one,
// is stored in a time that grows with its index pieces, not its bytes.
func (w *Writer) WriteZeros(n uint64) error {
	if n < zeroSegmentMin {
		for n > 0 {
			m := min(n, uint64(len(zeroPage)))
			if _, err := w.Write(zeroPage[:m]); err != nil {
				return err
			}
			n -= m
		}
		return nil
	}
	if w.closed {
		return errors.New("cas: write to closed writer")
	}
	if !w.started {
		w.start()
	}
	return w.q.WriteZeros(n)
}

// Close ends the value and returns its identifier and size once every piece
// has reached the sink.
func (w *Writer) Close() (ObjectIdentifier, uint64, error) {
	if !w.closed {
		w.closed = true
		w.q.Close()
		if !w.started {
			// At most one segment, queued: chunk it here.
			s := &splitter{kind: w.kind, sink: w.sink}
			w.err = w.q.chunk(s.addN)
			if w.err == nil {
				w.id, w.size, w.err = s.finish()
			}
			close(w.done)
		}
	}
	<-w.done
	return w.id, w.size, w.err
}

// Abort ends the write without an object; pieces already stored stay.
func (w *Writer) Abort() {
	if !w.closed {
		w.closed = true
		w.q.CloseWithError(errors.New("cas: write aborted"))
		if !w.started {
			w.q.release()
			close(w.done)
		}
	}
	<-w.done
}

// queueSegments bounds the bytes written but not yet being chunked. The
// chunking, not the writer, is the slower side of a long write: a deeper
// queue only holds more of the heap (each segment is segmentSize).
const queueSegments = 4

// queue hands written bytes to the chunking in segments, through a bounded
// channel: unlike an io.Pipe, a write returns once its bytes are copied.
// Writes must not be concurrent.
type queue struct {
	cutters *Cutters // nil: segments are chunked on the chunking goroutine
	pol     chunker.Pol
	size    int // of a segment: segmentSize, less in tests
	ch      chan *segment
	cur     *segment
	off     uint64
	done    chan struct{} // closed when the chunking side stops early
	err     error         // why; set before done is closed
	once    sync.Once
}

func newQueue(pol chunker.Pol) *queue {
	return &queue{pol: pol, size: segmentSize, ch: make(chan *segment, queueSegments), done: make(chan struct{})}
}

// Write copies p into segments and queues each one filled.
func (q *queue) Write(p []byte) (int, error) {
	n := 0
	for len(p) > 0 {
		if q.cur == nil {
			q.cur = &segment{off: q.off, buf: segBufs.Get().(*[]byte), pol: q.pol, done: make(chan struct{})}
			*q.cur.buf = (*q.cur.buf)[:0]
		}
		b := q.cur.buf
		m := min(len(p), q.size-len(*b))
		*b = append(*b, p[:m]...)
		p, n, q.off = p[m:], n+m, q.off+uint64(m)
		if len(*b) == q.size {
			if err := q.send(); err != nil {
				return n, err
			}
		}
	}
	return n, nil
}

// WriteZeros queues n zero bytes as a segment of their own, after the
// bytes written before (a partly filled segment is queued as it is).
func (q *queue) WriteZeros(n uint64) error {
	if q.cur != nil {
		if err := q.send(); err != nil {
			return err
		}
	}
	q.cur = &segment{off: q.off, zeros: n, pol: q.pol, done: make(chan struct{})}
	q.off += n
	return q.send()
}

func (q *queue) send() error {
	s := q.cur
	q.cur = nil
	select {
	case q.ch <- s:
		return nil
	case <-q.done:
		s.recycle()
		return q.err
	}
}

// buffered returns the bytes written but not yet queued.
func (q *queue) buffered() int {
	if q.cur == nil {
		return 0
	}
	return len(*q.cur.buf)
}

// release recycles the segment being filled, of a stream that will not be
// chunked.
func (q *queue) release() {
	if q.cur != nil {
		q.cur.recycle()
		q.cur = nil
	}
}

// Close ends the stream after the queued bytes.
func (q *queue) Close() error {
	if q.cur != nil {
		q.cur.last = true
		if err := q.send(); err != nil {
			return err
		}
	}
	close(q.ch)
	return nil
}

// CloseWithError stops the stream. From the writing side the chunking gets
// err; from the chunking side further writes fail with err.
func (q *queue) CloseWithError(err error) {
	q.once.Do(func() {
		q.err = err
		close(q.done)
	})
}

// chunk cuts the queued stream into chunks, in order, for emit. Each segment
// is handed to the cut finders as it arrives; up to one per core is ahead
// of the stitching.
func (q *queue) chunk(emit func(data []byte, lv int, n uint64) error) error {
	st := newStitcher(q.pol, emit)
	var ahead []*segment
	defer func() {
		for _, s := range ahead {
			<-s.done
			s.recycle()
		}
		st.release()
	}()
	for {
		select {
		case s, ok := <-q.ch:
			if !ok {
				for len(ahead) > 0 {
					s := ahead[0]
					ahead = ahead[1:]
					if err := st.add(s); err != nil {
						return err
					}
				}
				return st.finish()
			}
			q.cutters.dispatch(s)
			ahead = append(ahead, s)
			if len(ahead) > runtime.GOMAXPROCS(0) {
				s := ahead[0]
				ahead = ahead[1:]
				if err := st.add(s); err != nil {
					return err
				}
			}
		case <-q.done:
			return q.err
		}
	}
}
