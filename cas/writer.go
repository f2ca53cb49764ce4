package cas

import (
	"errors"
	"io"

	"github.com/restic/chunker"
)

// Writer streams a value into pieces: bytes written are chunked on one
// goroutine while the previous chunks are hashed and stored on another, so
// chunking and hashing use two cores. Memory is bounded by the chunker's
// buffer and a few chunks in flight, whatever the value's size.
type Writer struct {
	pw     *io.PipeWriter
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
	pr, pw := io.Pipe()
	w := &Writer{pw: pw, done: make(chan struct{})}
	chunks := make(chan chunkMsg, 4)
	chunkErr := make(chan error, 1)
	go func() {
		defer close(chunks)
		cs := newChunkStream(pr, pol)
		defer cs.release()
		for {
			data, lv, err := cs.next()
			if err == io.EOF {
				chunkErr <- nil
				return
			}
			if err != nil {
				pr.CloseWithError(err)
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
				pr.CloseWithError(err)
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
	return w.pw.Write(p)
}

// Close ends the value and returns its identifier and size once every piece
// has reached the sink.
func (w *Writer) Close() (ObjectIdentifier, uint64, error) {
	if !w.closed {
		w.closed = true
		w.pw.Close()
	}
	<-w.done
	return w.id, w.size, w.err
}

// Abort ends the write without an object; pieces already stored stay.
func (w *Writer) Abort() {
	if !w.closed {
		w.closed = true
		w.pw.CloseWithError(errors.New("cas: write aborted"))
	}
	<-w.done
}
