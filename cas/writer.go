package cas

import (
	"errors"
	"io"
	"sync"

	"github.com/restic/chunker"
)

// Writer streams a value into pieces: bytes written are queued, chunked on
// one goroutine while the previous chunks are hashed and stored on
// another, so chunking and hashing use two cores and a writer (a FUSE
// request) does not wait for either. Memory is bounded by the queue, the
// chunker's buffer and a few chunks in flight, whatever the value's size.
type Writer struct {
	q      *queue
	done   chan struct{}
	id     ObjectIdentifier
	size   uint64
	err    error
	closed bool
}

type chunkMsg struct {
	data []byte
	lv   int
}

// NewWriter starts a streaming write of one object into sink.
func NewWriter(sink Sink, pol chunker.Pol, kind Kind) *Writer {
	q := newQueue()
	w := &Writer{q: q, done: make(chan struct{})}
	chunks := make(chan chunkMsg, 4)
	chunkErr := make(chan error, 1)
	go func() {
		defer close(chunks)
		cs := newChunkStream(q, pol)
		defer cs.release()
		for {
			data, lv, err := cs.next()
			if err == io.EOF {
				chunkErr <- nil
				return
			}
			if err != nil {
				q.CloseWithError(err)
				chunkErr <- err
				return
			}
			chunks <- chunkMsg{data, lv}
		}
	}()
	go func() {
		defer close(w.done)
		s := &splitter{kind: kind, sink: sink}
		var err error
		for c := range chunks {
			if err != nil {
				continue // drain so the chunker goroutine ends
			}
			if err = s.add(c.data, c.lv); err != nil {
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
	return w
}

// Write adds p to the value.
func (w *Writer) Write(p []byte) (int, error) {
	if w.closed {
		return 0, errors.New("cas: write to closed writer")
	}
	return w.q.Write(p)
}

// Close ends the value and returns its identifier and size once every piece
// has reached the sink.
func (w *Writer) Close() (ObjectIdentifier, uint64, error) {
	if !w.closed {
		w.closed = true
		w.q.Close()
	}
	<-w.done
	return w.id, w.size, w.err
}

// Abort ends the write without an object; pieces already stored stay.
func (w *Writer) Abort() {
	if !w.closed {
		w.closed = true
		w.q.CloseWithError(errors.New("cas: write aborted"))
	}
	<-w.done
}

// queueBytes bounds the bytes written but not yet chunked.
const queueBytes = 8 << 20

// queue hands written bytes to the chunker through a bounded channel of
// copies: unlike an io.Pipe, a write returns once its bytes are queued.
type queue struct {
	ch   chan []byte
	cur  []byte
	done chan struct{} // closed when the reading side stops early
	err  error         // why; set before done is closed
	once sync.Once
}

func newQueue() *queue {
	return &queue{ch: make(chan []byte, queueBytes/(1<<20)), done: make(chan struct{})}
}

// Write queues a copy of p.
func (q *queue) Write(p []byte) (int, error) {
	if len(p) == 0 {
		return 0, nil
	}
	b := append([]byte(nil), p...)
	select {
	case q.ch <- b:
		return len(p), nil
	case <-q.done:
		return 0, q.err
	}
}

// Close ends the stream: the reader gets io.EOF after the queued bytes.
func (q *queue) Close() error {
	close(q.ch)
	return nil
}

// CloseWithError stops the stream. From the writing side the reader gets
// err; from the reading side further writes fail with err.
func (q *queue) CloseWithError(err error) {
	q.once.Do(func() {
		q.err = err
		close(q.done)
	})
}

// Read implements io.Reader for the chunker.
func (q *queue) Read(p []byte) (int, error) {
	for len(q.cur) == 0 {
		select {
		case b, ok := <-q.ch:
			if !ok {
				return 0, io.EOF
			}
			q.cur = b
		case <-q.done:
			return 0, q.err
		}
	}
	n := copy(p, q.cur)
	q.cur = q.cur[n:]
	return n, nil
}
