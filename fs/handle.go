package fs

import (
	"context"
	"io"
	"log/slog"
	"math"
	"syscall"

	gofs "github.com/hanwen/go-fuse/v2/fs"
	"github.com/hanwen/go-fuse/v2/fuse"
	"golang.org/x/sys/unix"

	"github.com/ledgerfs/ledgerfs/cas"
	"github.com/ledgerfs/ledgerfs/store"
)

// handle is an open file. A read-only handle of a file nobody writes reads
// the committed value it opened; other handles go through the file's
// content.
type handle struct {
	f     *fileNode
	write bool
	// opener is the thread that opened a writing handle: only its
	// process's closes commit (see Flush).
	opener uint32
	p      *store.Page // read-only: the page held open
	r      *cas.Reader
	id     cas.ObjectIdentifier
	size   int64
	seen   int // f.committed when r was opened
	// atimeDue: the first read advances the file's access time
	// (fileNode.advanceAtime). Guarded by f.mu.
	atimeDue bool
}

// current points a read-only handle at the file's content as another
// descriptor changed it: the content being written, or the value committed
// since the handle was opened. It returns true when the read must go
// through the node's content. Called with f.mu held.
func (h *handle) current() (bool, error) {
	f := h.f
	if f.c != nil {
		return true, nil
	}
	if f.committed == h.seen {
		return false, nil
	}
	h.seen = f.committed
	if f.latest == h.id {
		return false, nil
	}
	f.pg.pin(f.latest)
	f.pg.unpin(h.id)
	h.id, h.size, h.r = f.latest, f.latestSize, nil
	if h.size > 0 {
		r, err := h.p.OpenValue(f.latest)
		if err != nil {
			return false, err
		}
		h.r = r
	}
	return false, nil
}

var (
	_ gofs.FileReader    = (*handle)(nil)
	_ gofs.FileWriter    = (*handle)(nil)
	_ gofs.FileFlusher   = (*handle)(nil)
	_ gofs.FileFsyncer   = (*handle)(nil)
	_ gofs.FileReleaser  = (*handle)(nil)
	_ gofs.FileGetattrer = (*handle)(nil)
	_ gofs.FileAllocater = (*handle)(nil)
)

func (h *handle) Read(ctx context.Context, dest []byte, off int64) (fuse.ReadResult, syscall.Errno) {
	if h.p != nil {
		h.f.mu.Lock()
		if h.atimeDue {
			h.atimeDue = false
			h.f.advanceAtime(h.f.meta, h.f.metaTs)
		}
		viaContent, err := h.current()
		if viaContent {
			defer h.f.mu.Unlock()
			n, err := h.f.c.readAt(dest, off)
			if err != nil && err != io.EOF {
				return nil, errno("read", err)
			}
			return fuse.ReadResultData(dest[:n]), 0
		}
		h.f.mu.Unlock()
		if err != nil {
			return nil, errno("read", err)
		}
		if h.r == nil || off >= h.size {
			return fuse.ReadResultData(nil), 0
		}
		n, err := h.r.ReadAt(dest[:min(int64(len(dest)), h.size-off)], off)
		if err != nil && err != io.EOF {
			return nil, errno("read", err)
		}
		return fuse.ReadResultData(dest[:n]), 0
	}
	f := h.f
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.c == nil {
		return nil, syscall.EBADF
	}
	n, err := f.c.readAt(dest, off)
	if err != nil && err != io.EOF {
		return nil, errno("read", err)
	}
	return fuse.ReadResultData(dest[:n]), 0
}

func (h *handle) Write(ctx context.Context, data []byte, off int64) (uint32, syscall.Errno) {
	if !h.write {
		return 0, syscall.EBADF
	}
	f := h.f
	f.mu.Lock()
	defer f.mu.Unlock()
	if err := f.c.write(data, off); err != nil {
		return 0, errno("write", err)
	}
	f.meta.MtimeNs, f.meta.HasMtime = nowNs(), true
	if !privileged(ctx) && killPriv(&f.meta) {
		f.changed = true
	}
	return uint32(len(data)), 0
}

// Flush runs at every close of a descriptor: a written file is recorded in
// the page's journal before close returns, and its commit is queued; until
// the commit lands, the node is pending at its key and shows what was
// closed.
//
// Committing at every flush, not only at the last release, matters: the
// kernel sends the release asynchronously and may forget the inode first,
// so a file left for the release to commit is missing from the page for a
// while after close returned.
//
// A close by another process, which inherited the descriptor, commits
// nothing: a multithreaded program that forks while writing (any Go
// program running a command) has its child close every descriptor at
// exec, and committing then would make a version of a half-written file
// (after open(O_TRUNC), an empty one), which a crash could leave as the
// file. The opener's close, or else the last one (the release), commits.
func (h *handle) Flush(ctx context.Context) syscall.Errno {
	if !h.write {
		return 0
	}
	f := h.f
	f.pg.keys.RLock()
	defer f.pg.keys.RUnlock()
	f.mu.Lock()
	defer f.mu.Unlock()
	if k, ok := f.key(); ok {
		f.placed = k
	}
	if !sameProcess(h.opener, callerPid(ctx)) {
		f.pg.noteUnflushed(f)
		return 0
	}
	if f.onlyEmptied() {
		// A shell's "> f" and dd open the file, truncating it, then dup2
		// the descriptor to stdout and close the original: that close
		// is this flush, and the writes come after it. Committing here
		// would make an empty version first, which a crash could leave
		// as the file. The emptied file commits at the next flush with
		// bytes in it, or at its release (": > f" empties a file).
		f.pg.noteUnflushed(f)
		return 0
	}
	if f.writers == 1 && f.closeDeferrable() {
		// The commit is left to the intents timer, from here and not
		// from the release: the kernel sends that after close returns,
		// and a view of history in between would not know to commit the
		// file first (settle), and miss it.
		f.pg.forgetUnflushed(f)
		f.deferClose()
		return 0
	}
	return f.commitLocked(commitQueue)
}

func (h *handle) Fsync(ctx context.Context, flags uint32) syscall.Errno {
	if !h.write {
		return errno("fsync", h.f.pg.apply(true))
	}
	return h.f.fsync()
}

func (h *handle) Release(ctx context.Context) syscall.Errno {
	f := h.f
	if h.p != nil {
		f.mu.Lock()
		f.readers--
		if f.unlinked {
			f.endChange()
		}
		id := h.id
		f.mu.Unlock()
		f.pg.doneReading(h.p, id)
		return 0
	}
	f.pg.keys.RLock()
	defer f.pg.keys.RUnlock()
	f.mu.Lock()
	defer f.mu.Unlock()
	if h.write {
		f.writers--
		if f.writers == 0 && f.closeDeferrable() {
			f.pg.forgetUnflushed(f)
			f.deferClose()
			return 0
		}
	}
	if f.c != nil && (f.c.dirty || f.changed) && (f.writers == 0 || h.write && f.onlyEmptied()) {
		// Normally committed by Flush; this catches changes made after the
		// last flush, which nobody else would commit, and an emptying
		// the flushes left (see Flush), even while other descriptors
		// stay open for writing.
		if eno := f.commitLocked(commitQueue); eno != 0 {
			slog.Warn("change dropped: commit on release failed", "errno", eno)
			// The kernel may hold pages of it, which descriptors still
			// open would read. Not from this request.
			node := f.EmbeddedInode()
			f.pg.fs.background.Go(func() { node.NotifyContent(0, 0) })
		}
	}
	f.writerGone()
	return 0
}

// writerGone ends what a writer's release ends once the file has none
// left, or is unlinked: a never-committed file's name, and its content.
// Called with f.pg.keys and f.mu held.
func (f *fileNode) writerGone() {
	if f.writers == 0 {
		f.pg.forgetUnflushed(f)
	}
	if f.unlinked || f.writers == 0 {
		// A file never committed leaves no name behind once its last
		// writer is gone: unlinked, or its first commit failed (the close
		// reported it; ENOSPC, say). While a writer is left (a close
		// left to the intents timer keeps one), the name is the unlink's
		// to drop: its mark comes before it looks for the name.
		if f.created && f.writers == 0 {
			k, ok := f.key()
			if ok {
				f.pg.unpend(k, f)
			}
			if !f.unlinked {
				// The kernel still has the name until the notice below
				// lands; an open of it (a retried cp) reaching this node
				// meanwhile gets ESTALE and walks the path again, and a
				// create of the name makes a new node (see goneErrno).
				if ok {
					f.pg.fs.inos.release(f.pg.id('f', k))
				}
				f.unlinked, f.behind = true, true
				// Not from this request, which the kernel may hold
				// locks for.
				name, parent := f.EmbeddedInode().Parent()
				if parent != nil {
					f.pg.fs.background.Go(func() { parent.NotifyEntry(name) })
				}
			}
		}
		f.endChange()
	}
}

func (h *handle) Getattr(ctx context.Context, out *fuse.AttrOut) syscall.Errno {
	return h.f.fillAttr(&out.Attr)
}

// Allocate is fallocate(2). Mode 0 extends the file with zeros to off+size
// when that is past its end; FALLOC_FL_KEEP_SIZE changes nothing. Neither
// reserves disk space: content is stored when written, deduplicated, so a
// later write may still fail with ENOSPC. Other modes (punching or
// collapsing ranges) are EOPNOTSUPP.
func (h *handle) Allocate(ctx context.Context, off, size uint64, mode uint32) syscall.Errno {
	if !h.write {
		return syscall.EBADF
	}
	if mode&^unix.FALLOC_FL_KEEP_SIZE != 0 {
		return syscall.EOPNOTSUPP
	}
	end := off + size
	if end < off || end > math.MaxInt64 {
		return syscall.EFBIG
	}
	if mode&unix.FALLOC_FL_KEEP_SIZE != 0 {
		return 0
	}
	f := h.f
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.c == nil {
		return syscall.EBADF
	}
	if int64(end) <= f.c.size {
		return 0
	}
	if err := f.c.truncate(int64(end)); err != nil {
		return errno("fallocate", err)
	}
	f.meta.MtimeNs, f.meta.HasMtime = nowNs(), true
	return 0
}
