package fs

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"syscall"
	"time"

	gofs "github.com/hanwen/go-fuse/v2/fs"
	"github.com/hanwen/go-fuse/v2/fuse"

	"github.com/ledgerfs/ledgerfs/internal/btree"
	"github.com/ledgerfs/ledgerfs/internal/gc"
	"github.com/ledgerfs/ledgerfs/internal/keypath"
	"github.com/ledgerfs/ledgerfs/internal/retention"
	"github.com/ledgerfs/ledgerfs/store"
)

// StatsName is the read-only file at the mount's root that shows the
// mount's metrics as text; like .ledger in a page, it is not listed.
const StatsName = store.StatsName

// CollectName is the file at the mount's root that shows the last
// collections and, written a page's LEDGER/PAGE (or "all"), collects it
// before the write returns (EBUSY if the page is in use).
const CollectName = store.CollectName

// controlFile is a file whose content is computed: each open takes a
// snapshot of text, read past its size of 0 as files under /proc are
// (direct I/O). If write is set, what a descriptor writes is given to it
// at each write that ends a line, so that its error is the write's (a
// shell reports it, and ignores the close's), and the rest at close.
type controlFile struct {
	gofs.Inode
	text  func() []byte
	write func([]byte) error
}

var (
	_ gofs.NodeOpener    = (*controlFile)(nil)
	_ gofs.NodeGetattrer = (*controlFile)(nil)
	_ gofs.NodeSetattrer = (*controlFile)(nil)
)

func (s *controlFile) Getattr(ctx context.Context, fh gofs.FileHandle, out *fuse.AttrOut) syscall.Errno {
	out.Mode = fuse.S_IFREG | 0o444
	if s.write != nil {
		out.Mode |= 0o200
	}
	out.Nlink = 1
	out.Ino = s.StableAttr().Ino
	setTime(&out.Attr, nowNs())
	return 0
}

// Setattr accepts the truncation of open(O_TRUNC) and nothing else.
func (s *controlFile) Setattr(ctx context.Context, fh gofs.FileHandle, in *fuse.SetAttrIn, out *fuse.AttrOut) syscall.Errno {
	if sz, ok := in.GetSize(); !ok || sz != 0 || s.write == nil {
		return syscall.EPERM
	}
	return s.Getattr(ctx, fh, out)
}

func (s *controlFile) Open(ctx context.Context, flags uint32) (gofs.FileHandle, uint32, syscall.Errno) {
	if flags&syscall.O_ACCMODE == syscall.O_RDONLY {
		return &controlHandle{b: s.text()}, fuse.FOPEN_DIRECT_IO, 0
	}
	if s.write == nil {
		return nil, 0, syscall.EACCES
	}
	return &controlHandle{write: s.write}, fuse.FOPEN_DIRECT_IO, 0
}

type controlHandle struct {
	mu    sync.Mutex
	b     []byte
	write func([]byte) error
}

var (
	_ gofs.FileReader  = (*controlHandle)(nil)
	_ gofs.FileWriter  = (*controlHandle)(nil)
	_ gofs.FileFlusher = (*controlHandle)(nil)
)

func (h *controlHandle) Read(ctx context.Context, dest []byte, off int64) (fuse.ReadResult, syscall.Errno) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.write != nil {
		return nil, syscall.EBADF
	}
	if off >= int64(len(h.b)) {
		return fuse.ReadResultData(nil), 0
	}
	return fuse.ReadResultData(h.b[off:min(int64(len(h.b)), off+int64(len(dest)))]), 0
}

// maxControl bounds what a control file takes: a line or two.
const maxControl = 64 << 10

func (h *controlHandle) Write(ctx context.Context, data []byte, off int64) (uint32, syscall.Errno) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.write == nil {
		return 0, syscall.EBADF
	}
	if len(h.b)+len(data) > maxControl {
		return 0, syscall.EFBIG
	}
	h.b = append(h.b, data...)
	if len(data) > 0 && data[len(data)-1] == '\n' {
		b := h.b
		h.b = nil
		if err := h.write(b); err != nil {
			return 0, errno("control", err)
		}
	}
	return uint32(len(data)), 0
}

func (h *controlHandle) Flush(ctx context.Context) syscall.Errno {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.write == nil || h.b == nil {
		return 0
	}
	b := h.b
	h.b = nil
	return errno("control", h.write(b))
}

// collectFile is the root's .collect.
func (f *FS) collectFile() *controlFile {
	return &controlFile{text: f.opts.Collector.Status, write: func(b []byte) error {
		for _, line := range strings.Split(strings.TrimSpace(string(b)), "\n") {
			line = strings.TrimSpace(line)
			var err error
			if line == "all" || line == "" {
				err = f.opts.Collector.Now("", "")
			} else if l, p, ok := strings.Cut(line, "/"); ok {
				err = f.opts.Collector.Now(l, p)
			} else {
				err = fmt.Errorf("%q is not LEDGER/PAGE or all: %w", line, syscall.EINVAL)
			}
			if err != nil {
				return err
			}
		}
		return nil
	}}
}

// retentionFile is a page's .ledger/retention: the policy that applies to
// the page and where it was set; written, the page's own policy
// ("default" removes it).
func (pg *pageRef) retentionFile() *controlFile {
	repo := pg.fs.repo
	return &controlFile{
		text: func() []byte {
			l, n := pg.names()
			p, scope, err := gc.PolicyOf(repo, l, n)
			if err != nil {
				return []byte(fmt.Sprintf("# %v\n", err))
			}
			return []byte(fmt.Sprintf("%s\n# %s\n", p, scopeText(scope)))
		},
		write: func(b []byte) error {
			if pg.fs.opts.ReadOnly {
				return syscall.EROFS
			}
			l, n := pg.names()
			text := strings.TrimSpace(stripComments(string(b)))
			if text == "default" {
				return repo.SetRetention(l, n, "")
			}
			p, err := retention.Parse(text)
			if err != nil {
				return fmt.Errorf("%w: %w", err, syscall.EINVAL)
			}
			return repo.SetRetention(l, n, p.String())
		},
	}
}

func scopeText(s store.Scope) string {
	switch s {
	case store.ScopePage:
		return "set for this page"
	case store.ScopeLedger:
		return "set for the ledger"
	case store.ScopeRepository:
		return "set for the repository"
	}
	return "the default"
}

// stripComments drops what follows '#' on each line, so that what the file
// shows can be written back.
func stripComments(s string) string {
	var b strings.Builder
	for _, line := range strings.Split(s, "\n") {
		line, _, _ = strings.Cut(line, "#")
		b.WriteString(line)
		b.WriteByte('\n')
	}
	return b.String()
}

// statsFile is a page's .ledger/stats: where its space goes (gc.Usage).
func (pg *pageRef) statsFile() *controlFile {
	return &controlFile{text: func() []byte {
		var text string
		err := pg.view(func(p *store.Page, _ *store.Commit, _ *btree.Tree) error {
			u, err := gc.PageUsage(pg.fs.repo, p)
			text = u.Text()
			return err
		})
		if err != nil {
			return []byte(fmt.Sprintf("# %v\n", err))
		}
		return []byte(text)
	}}
}

// syncFile is a page's .ledger/sync: how its sync stands (Options.SyncStatus).
func (pg *pageRef) syncFile() *controlFile {
	return &controlFile{text: func() []byte {
		status := pg.fs.opts.SyncStatus
		if status == nil {
			return []byte("remote: none\n")
		}
		var text string
		err := pg.view(func(p *store.Page, _ *store.Commit, _ *btree.Tree) error {
			var err error
			text, err = status(p)
			return err
		})
		if err != nil {
			return []byte(fmt.Sprintf("# %v\n", err))
		}
		return []byte(text)
	}}
}

// localFile is .ledger/local: what of the page is kept local, a line each
// ("/" for the whole page); written "pin PATH" it fetches what PATH (a
// file or directory of the page, "/" for all of it) holds and keeps it
// local, before the write returns; "unpin PATH" lets it be fetched when
// read again; "evict" removes the page's db from the device, if every
// change is synced and nothing uses or pins it (EBUSY otherwise; the log
// says why).
func (pg *pageRef) localFile() *controlFile {
	return &controlFile{
		text: func() []byte {
			var b strings.Builder
			err := pg.view(func(p *store.Page, _ *store.Commit, _ *btree.Tree) error {
				kept, err := p.LocalPrefixes()
				for _, k := range kept {
					b.WriteString(localPath(k) + "\n")
				}
				return err
			})
			if err != nil {
				return []byte(fmt.Sprintf("# %v\n", err))
			}
			if b.Len() == 0 {
				return []byte("# nothing pinned: contents are fetched from the remote when first read\n")
			}
			return []byte(b.String())
		},
		write: func(b []byte) error {
			if pg.fs.opts.ReadOnly {
				return syscall.EROFS
			}
			for _, line := range strings.Split(strings.TrimSpace(stripComments(string(b))), "\n") {
				verb, path, _ := strings.Cut(strings.TrimSpace(line), " ")
				switch {
				case verb == "":
					continue
				case verb == "evict" && path == "":
					if err := pg.evictPage(); err != nil {
						return err
					}
					continue
				case verb != "pin" && verb != "unpin":
					return fmt.Errorf("%q: want pin PATH, unpin PATH or evict: %w", line, syscall.EINVAL)
				}
				if err := pg.keepLocal(strings.TrimSpace(path), verb == "pin"); err != nil {
					return err
				}
			}
			return nil
		},
	}
}

// evictWait bounds how long an evict waits for the page's users on their
// way out: a close returns before the kernel releases the descriptor, and
// before the close's commit lands.
const evictWait = 5 * time.Second

// evictPage removes the page's db from the device (store.Repository.Evict):
// it comes back when next read.
func (pg *pageRef) evictPage() error {
	l, n := pg.names()
	deadline := time.Now().Add(evictWait)
	pg.commitDeferred(false)
	if !pg.idleBy(deadline) {
		return fmt.Errorf("page %s/%s is in use: %w", l, n, syscall.EBUSY)
	}
	waiting := false
	err := pg.fs.repo.WhileBusy(l, n, deadline, func() error {
		_, err := pg.fs.repo.Evict(l, n)
		if errors.Is(err, store.ErrBusy) && !waiting {
			waiting = true
			slog.Info("page in use: the evict waits for its descriptors to close", "page", l+"/"+n, "at most", evictWait)
		}
		return err
	})
	if errors.Is(err, store.ErrNotEvictable) {
		// EBUSY, not EAGAIN: a writer would wait for its descriptor to
		// become writable (Go's os package does).
		slog.Info("page not evicted", "page", l+"/"+n, "err", err)
		return fmt.Errorf("%w: %w", err, syscall.EBUSY)
	}
	return err
}

// keepLocal keeps what path (within the page) holds local, fetching it
// now, or stops keeping it.
func (pg *pageRef) keepLocal(path string, on bool) error {
	return pg.view(func(p *store.Page, _ *store.Commit, t *btree.Tree) error {
		what, err := localKey(t, path)
		if err != nil {
			return err
		}
		if err := p.SetLocal(what, on); err != nil || !on {
			return err
		}
		n, size, err := p.MakeLocal(what)
		if n > 0 {
			l, name := pg.names()
			slog.Info("pinned: fetched", "page", l+"/"+name, "path", path, "pieces", n, "bytes", size)
		}
		return err
	})
}

// localKey returns what store.Page.SetLocal takes for path: "" for the
// page, a file's key, a directory's key prefix.
func localKey(t *btree.Tree, path string) (string, error) {
	path = strings.Trim(path, "/")
	if path == "" || path == "." {
		return "", nil
	}
	comps := strings.Split(path, "/")
	if key, coll, err := keypath.Key(comps); err == nil && !coll {
		if _, ok, err := t.Get(key); err != nil {
			return "", err
		} else if ok {
			return key, nil
		}
	}
	prefix, err := keypath.Prefix(comps)
	if err != nil {
		return "", fmt.Errorf("%q: not a path of the page: %w", path, syscall.EINVAL)
	}
	return prefix, nil
}

// localPath shows what LocalPrefixes gives as a path of the page.
func localPath(k string) string {
	if k == "" {
		return "/"
	}
	dir := strings.HasSuffix(k, "/")
	comps := keypath.Path(strings.TrimSuffix(k, "/"), false)
	p := strings.Join(comps, "/")
	if dir {
		p += "/"
	}
	return p
}
