package fs

import (
	"fmt"
	"io"
	"os"
)

// memSpool is how many bytes a spool keeps in memory before it moves them
// to a file, and how long a new file stays in its spool before it streams
// (content.write). A small file written, fsynced and rewritten at its
// start — a database's rollback journal, created and deleted in every
// transaction — then never stores pieces it replaces a moment later, and
// an fsync's intent reads it from memory rather than back from the page
// (SQLite's DELETE mode: three fsyncs, a close and an unlink a
// transaction). It is the most one intent holds: logSource copies a small
// file whole only when an intent may take it.
const memSpool = maxIntent

// A spool holds the bytes written to an open file away from its stream,
// at their offsets: in memory while they end within memSpool bytes, then
// in an unlinked file of dir. Reads stay within what was written (the
// content's extents), so a hole reads as zeros either way.
type spool struct {
	dir string
	mem []byte
	f   *os.File
}

func (s *spool) WriteAt(p []byte, off int64) (int, error) {
	end := off + int64(len(p))
	if s.f == nil && end <= memSpool {
		if end > int64(len(s.mem)) {
			s.mem = append(s.mem, make([]byte, end-int64(len(s.mem)))...)
		}
		return copy(s.mem[off:], p), nil
	}
	if s.f == nil {
		f, err := os.CreateTemp(s.dir, "spool-")
		if err != nil {
			return 0, fmt.Errorf("spool: %w", err)
		}
		os.Remove(f.Name()) // lives as long as the descriptor
		if _, err := f.WriteAt(s.mem, 0); err != nil {
			f.Close()
			return 0, fmt.Errorf("spool: %w", err)
		}
		s.f, s.mem = f, nil
	}
	return s.f.WriteAt(p, off)
}

func (s *spool) ReadAt(p []byte, off int64) (int, error) {
	if s.f != nil {
		return s.f.ReadAt(p, off)
	}
	if off >= int64(len(s.mem)) {
		return 0, io.EOF
	}
	n := copy(p, s.mem[off:])
	if n < len(p) {
		return n, io.EOF
	}
	return n, nil
}

// Close drops the spool's bytes.
func (s *spool) Close() error {
	s.mem = nil
	if s.f == nil {
		return nil
	}
	err := s.f.Close()
	s.f = nil
	return err
}
