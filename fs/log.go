package fs

import (
	"context"
	"fmt"
	"io"
	"os"
	"sync"
	"sync/atomic"
	"syscall"

	gofs "github.com/hanwen/go-fuse/v2/fs"
	"github.com/hanwen/go-fuse/v2/fuse"

	"github.com/ledgerfs/ledgerfs/internal/btree"
	"github.com/ledgerfs/ledgerfs/internal/history"
	"github.com/ledgerfs/ledgerfs/store"
)

// logSpool is the text of .ledger/log for one head, in an unlinked
// temporary file: a log of any length costs disk, not memory. It is written
// as readers need it, a walk of history kept between reads: the first
// lines of a long log (head -3) cost their commits alone, where writing it
// whole took 22 s for 23,000 commits. Open handles keep the spool they
// opened.
type logSpool struct {
	head   store.CommitID
	pruned uint64 // store.Page.Pruned when started
	f      *os.File
	refs   atomic.Int32

	mu   sync.Mutex
	walk *history.Walker // nil once the log is whole
	size int64           // bytes written
	line []byte
}

// whole returns the log's size if it is written to its end.
func (s *logSpool) whole() (int64, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.size, s.walk == nil
}

// fill writes lines until the log holds want bytes or is whole.
func (s *logSpool) fill(pg *pageRef, want int64) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.walk == nil || s.size >= want {
		return nil
	}
	p, err := pg.acquire()
	if err != nil {
		return err
	}
	defer pg.release(p)
	buf := make([]byte, 0, 64<<10)
	for s.walk != nil && s.size+int64(len(buf)) < want {
		c, parents, err := s.walk.Next(p)
		if err == io.EOF {
			s.walk = nil
			break
		}
		if err == nil {
			buf, err = history.AppendLogLine(buf, p, c, parents)
		}
		if err != nil {
			return fmt.Errorf("log: %w", err)
		}
		if len(buf) >= 60<<10 {
			if err := s.write(buf); err != nil {
				return err
			}
			buf = buf[:0]
		}
	}
	return s.write(buf)
}

func (s *logSpool) write(b []byte) error {
	if len(b) == 0 {
		return nil
	}
	n, err := s.f.WriteAt(b, s.size)
	s.size += int64(n)
	if err != nil {
		return fmt.Errorf("log spool: %w", err)
	}
	return nil
}

func (s *logSpool) unref() {
	if s.refs.Add(-1) == 0 {
		s.f.Close()
	}
}

// logCache holds the live page's current log spool.
type logCache struct {
	mu  sync.Mutex
	cur *logSpool
}

// currentLog returns the log of the page's head with a reference taken,
// starting one if the head moved since the last one.
func (pg *pageRef) currentLog() (*logSpool, error) {
	if err := pg.settle(); err != nil {
		return nil, err
	}
	c := &pg.logs
	c.mu.Lock()
	defer c.mu.Unlock()
	p, err := pg.acquire()
	if err != nil {
		return nil, err
	}
	defer pg.release(p)
	head, err := p.Head()
	if err != nil {
		return nil, err
	}
	if pruned := p.Pruned(); c.cur == nil || c.cur.head != head.ID || c.cur.pruned != pruned {
		f, err := os.CreateTemp(pg.fs.opts.TmpDir, "log-")
		if err != nil {
			return nil, fmt.Errorf("log spool: %w", err)
		}
		os.Remove(f.Name())
		w, err := history.NewWalker(p)
		if err != nil {
			f.Close()
			return nil, err
		}
		s := &logSpool{head: head.ID, pruned: pruned, f: f, walk: w}
		s.refs.Store(1) // the cache's
		if c.cur != nil {
			c.cur.unref()
		}
		c.cur = s
	}
	c.cur.refs.Add(1)
	return c.cur, nil
}

// logNode is .ledger/log.
type logNode struct{ metaNode }

var (
	_ gofs.NodeGetattrer = (*logNode)(nil)
	_ gofs.NodeOpener    = (*logNode)(nil)
)

// Getattr gives the log's size once it is written whole, else 0 (as /proc
// files do): a stat writes none of it, and a read goes past the size (the
// file is opened with direct I/O).
func (l *logNode) Getattr(ctx context.Context, f gofs.FileHandle, out *fuse.AttrOut) syscall.Errno {
	h, ok := f.(*logHandle)
	var s *logSpool
	if ok {
		s = h.s
	} else {
		var err error
		if s, err = l.pg.currentLog(); err != nil {
			return errno("log", err)
		}
		defer s.unref()
	}
	size, _ := s.whole()
	m := btree.Meta{Size: uint64(size), Mode: syscall.S_IFREG | 0o444}
	ts, err := l.headTime()
	if err != nil {
		return errno("getattr", err)
	}
	fileAttr(l.pg.fs, &out.Attr, l.StableAttr().Ino, m, ts)
	return 0
}

func (l *logNode) Open(ctx context.Context, flags uint32) (gofs.FileHandle, uint32, syscall.Errno) {
	if flags&syscall.O_ACCMODE != syscall.O_RDONLY {
		return nil, 0, syscall.EROFS
	}
	s, err := l.pg.currentLog()
	if err != nil {
		return nil, 0, errno("log", err)
	}
	// Direct I/O whether whole or not: the kernel may still hold the size
	// 0 a stat gave before the log was whole (for the attribute timeout),
	// and reads through its page cache stop at that size: a second cat of
	// the log printed nothing.
	return &logHandle{s: s, pg: l.pg}, fuse.FOPEN_DIRECT_IO, 0
}

// logHandle reads the spool it was opened on.
type logHandle struct {
	s  *logSpool
	pg *pageRef
}

var (
	_ gofs.FileReader   = (*logHandle)(nil)
	_ gofs.FileReleaser = (*logHandle)(nil)
)

func (h *logHandle) Read(ctx context.Context, dest []byte, off int64) (fuse.ReadResult, syscall.Errno) {
	if err := h.s.fill(h.pg, off+int64(len(dest))); err != nil {
		return nil, errno("read log", err)
	}
	size, _ := h.s.whole()
	n, err := h.s.f.ReadAt(dest, off)
	if n == 0 && err != nil && off < size {
		return nil, errno("read log", err)
	}
	return fuse.ReadResultData(dest[:n]), 0
}

func (h *logHandle) Release(ctx context.Context) syscall.Errno {
	h.s.unref()
	return 0
}
