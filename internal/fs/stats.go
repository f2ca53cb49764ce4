package fs

import (
	"context"
	"syscall"

	gofs "github.com/hanwen/go-fuse/v2/fs"
	"github.com/hanwen/go-fuse/v2/fuse"

	"github.com/ledgerfs/ledgerfs/internal/store"
)

// StatsName is the read-only file at the mount's root that shows the
// mount's metrics as text; like .ledger in a page, it is not listed.
const StatsName = store.StatsName

// statsFile is the .stats file: each open takes a snapshot of the text
// Options.Stats returns, read past its size of 0 as files under /proc are
// (direct I/O).
type statsFile struct {
	gofs.Inode
	text func() []byte
}

var (
	_ gofs.NodeOpener    = (*statsFile)(nil)
	_ gofs.NodeGetattrer = (*statsFile)(nil)
)

func (s *statsFile) Getattr(ctx context.Context, fh gofs.FileHandle, out *fuse.AttrOut) syscall.Errno {
	out.Mode = fuse.S_IFREG | 0o444
	out.Nlink = 1
	out.Ino = s.StableAttr().Ino
	setTime(&out.Attr, nowNs())
	return 0
}

func (s *statsFile) Open(ctx context.Context, flags uint32) (gofs.FileHandle, uint32, syscall.Errno) {
	if flags&syscall.O_ACCMODE != syscall.O_RDONLY {
		return nil, 0, syscall.EACCES
	}
	return &statsHandle{b: s.text()}, fuse.FOPEN_DIRECT_IO, 0
}

type statsHandle struct{ b []byte }

var _ gofs.FileReader = (*statsHandle)(nil)

func (h *statsHandle) Read(ctx context.Context, dest []byte, off int64) (fuse.ReadResult, syscall.Errno) {
	if off >= int64(len(h.b)) {
		return fuse.ReadResultData(nil), 0
	}
	return fuse.ReadResultData(h.b[off:min(int64(len(h.b)), off+int64(len(dest)))]), 0
}
