package fs

import (
	"bufio"
	"context"
	"fmt"
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
// temporary file: a log of any length costs disk, not memory. Open handles
// keep the spool they opened.
type logSpool struct {
	head   store.CommitID
	pruned uint64 // store.Page.Pruned when written
	f      *os.File
	size   int64
	refs   atomic.Int32
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
// writing it if the head moved since the last one.
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
		s, err := writeLog(p, head.ID, pg.fs.opts.TmpDir)
		if err != nil {
			return nil, err
		}
		s.pruned = pruned
		if c.cur != nil {
			c.cur.unref()
		}
		c.cur = s
	}
	c.cur.refs.Add(1)
	return c.cur, nil
}

func writeLog(p *store.Page, head store.CommitID, dir string) (*logSpool, error) {
	f, err := os.CreateTemp(dir, "log-")
	if err != nil {
		return nil, fmt.Errorf("log spool: %w", err)
	}
	os.Remove(f.Name())
	w := bufio.NewWriterSize(f, 64<<10)
	err = history.WriteLog(w, p)
	if err == nil {
		err = w.Flush()
	}
	var size int64
	if err == nil {
		size, err = f.Seek(0, 1)
	}
	if err != nil {
		f.Close()
		return nil, fmt.Errorf("write log: %w", err)
	}
	s := &logSpool{head: head, f: f, size: size}
	s.refs.Store(1) // the cache's
	return s, nil
}

// logNode is .ledger/log.
type logNode struct{ metaNode }

var (
	_ gofs.NodeGetattrer = (*logNode)(nil)
	_ gofs.NodeOpener    = (*logNode)(nil)
)

func (l *logNode) Getattr(ctx context.Context, f gofs.FileHandle, out *fuse.AttrOut) syscall.Errno {
	var size int64
	if h, ok := f.(*logHandle); ok {
		size = h.s.size
	} else {
		s, err := l.pg.currentLog()
		if err != nil {
			return errno("log", err)
		}
		size = s.size
		s.unref()
	}
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
	return &logHandle{s: s}, 0, 0
}

// logHandle reads the spool it was opened on.
type logHandle struct{ s *logSpool }

var (
	_ gofs.FileReader   = (*logHandle)(nil)
	_ gofs.FileReleaser = (*logHandle)(nil)
)

func (h *logHandle) Read(ctx context.Context, dest []byte, off int64) (fuse.ReadResult, syscall.Errno) {
	n, err := h.s.f.ReadAt(dest, off)
	if n == 0 && err != nil && off < h.s.size {
		return nil, errno("read log", err)
	}
	return fuse.ReadResultData(dest[:n]), 0
}

func (h *logHandle) Release(ctx context.Context) syscall.Errno {
	h.s.unref()
	return 0
}
