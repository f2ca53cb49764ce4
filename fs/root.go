package fs

import (
	"context"
	"syscall"

	gofs "github.com/hanwen/go-fuse/v2/fs"
	"github.com/hanwen/go-fuse/v2/fuse"

	"github.com/ledgerfs/ledgerfs/store"
)

// rootNode lists the ledgers.
type rootNode struct {
	gofs.Inode
	onlyDirs
	fs *FS
}

// onlyDirs refuses what is not a directory in the root and in a ledger,
// which hold ledgers and pages: EPERM, as for an operation the filesystem
// does not allow there (not EROFS: the filesystem is writable).
type onlyDirs struct{}

var (
	_ gofs.NodeCreater   = onlyDirs{}
	_ gofs.NodeMknoder   = onlyDirs{}
	_ gofs.NodeSymlinker = onlyDirs{}
	_ gofs.NodeLinker    = onlyDirs{}
)

func (onlyDirs) Create(ctx context.Context, name string, flags uint32, mode uint32, out *fuse.EntryOut) (*gofs.Inode, gofs.FileHandle, uint32, syscall.Errno) {
	return nil, nil, 0, syscall.EPERM
}

func (onlyDirs) Mknod(ctx context.Context, name string, mode uint32, dev uint32, out *fuse.EntryOut) (*gofs.Inode, syscall.Errno) {
	return nil, syscall.EPERM
}

func (onlyDirs) Symlink(ctx context.Context, target, name string, out *fuse.EntryOut) (*gofs.Inode, syscall.Errno) {
	return nil, syscall.EPERM
}

func (onlyDirs) Link(ctx context.Context, target gofs.InodeEmbedder, name string, out *fuse.EntryOut) (*gofs.Inode, syscall.Errno) {
	return nil, syscall.EPERM
}

var (
	_ gofs.NodeLookuper  = (*rootNode)(nil)
	_ gofs.NodeReaddirer = (*rootNode)(nil)
	_ gofs.NodeFsyncer   = (*rootNode)(nil)
	_ gofs.NodeMkdirer   = (*rootNode)(nil)
	_ gofs.NodeRmdirer   = (*rootNode)(nil)
	_ gofs.NodeRenamer   = (*rootNode)(nil)
	_ gofs.NodeGetattrer = (*rootNode)(nil)
	_ gofs.NodeStatfser  = (*rootNode)(nil)
)

func (r *rootNode) Getattr(ctx context.Context, f gofs.FileHandle, out *fuse.AttrOut) syscall.Errno {
	out.Mode = fuse.S_IFDIR | 0o755
	out.Nlink = 2
	r.fs.attrOwner(&out.Attr)
	setTime(&out.Attr, r.fs.repo.ModTime("").UnixNano())
	return 0
}

// Fsync makes the ledgers (their names) durable.
func (r *rootNode) Fsync(ctx context.Context, f gofs.FileHandle, flags uint32) syscall.Errno {
	return syncRepo(r.fs)
}

func syncRepo(f *FS) syscall.Errno {
	if f.opts.ReadOnly {
		return 0
	}
	return errno("fsync", f.repo.Sync())
}

func (r *rootNode) Statfs(ctx context.Context, out *fuse.StatfsOut) syscall.Errno {
	return statfs(r.fs, out)
}

// statfs reports the space of the filesystem that holds the repository.
func statfs(f *FS, out *fuse.StatfsOut) syscall.Errno {
	var st syscall.Statfs_t
	if err := syscall.Statfs(f.repo.Dir(), &st); err != nil {
		return errno("statfs", err)
	}
	// What changes would leave free: the reserve is kept (store.Options).
	reserve := f.repo.Reserve() / uint64(st.Bsize)
	st.Bavail -= min(st.Bavail, reserve)
	st.Bfree -= min(st.Bfree, reserve)
	out.FromStatfsT(&st)
	out.NameLen = 255
	return 0
}

func (r *rootNode) ledger(ctx context.Context, name string) *gofs.Inode {
	n := &ledgerNode{fs: r.fs, name: name}
	return r.NewInode(ctx, n, gofs.StableAttr{Mode: fuse.S_IFDIR, Ino: r.fs.inos.get(ledgerID(name))})
}

func (r *rootNode) Lookup(ctx context.Context, name string, out *fuse.EntryOut) (*gofs.Inode, syscall.Errno) {
	if name == StatsName && r.fs.opts.Stats != nil {
		ch := r.NewInode(ctx, &controlFile{text: r.fs.opts.Stats}, gofs.StableAttr{Mode: fuse.S_IFREG, Ino: r.fs.inos.get(statsID)})
		return ch, getattr(ctx, ch, &out.Attr)
	}
	if name == CollectName && r.fs.opts.Collector != nil {
		ch := r.NewInode(ctx, r.fs.collectFile(), gofs.StableAttr{Mode: fuse.S_IFREG, Ino: r.fs.inos.get(collectID)})
		return ch, getattr(ctx, ch, &out.Attr)
	}
	ok, err := r.fs.repo.HasLedger(name)
	if err != nil {
		return nil, errno("lookup", err)
	}
	if !ok {
		return nil, syscall.ENOENT
	}
	ch := r.ledger(ctx, name)
	return ch, getattr(ctx, ch, &out.Attr)
}

func (r *rootNode) Readdir(ctx context.Context) (gofs.DirStream, syscall.Errno) {
	ls, err := r.fs.repo.Ledgers()
	if err != nil {
		return nil, errno("readdir", err)
	}
	es := make([]fuse.DirEntry, len(ls))
	for i, l := range ls {
		es[i] = fuse.DirEntry{Name: l, Mode: fuse.S_IFDIR, Ino: r.fs.inos.get(ledgerID(l))}
	}
	return listing(r.EmbeddedInode(), es), 0
}

func (r *rootNode) Mkdir(ctx context.Context, name string, mode uint32, out *fuse.EntryOut) (*gofs.Inode, syscall.Errno) {
	if r.fs.opts.ReadOnly {
		return nil, syscall.EROFS
	}
	if err := r.fs.repo.CreateLedger(name); err != nil {
		return nil, errno("mkdir", err)
	}
	ch := r.ledger(ctx, name)
	return ch, getattr(ctx, ch, &out.Attr)
}

func (r *rootNode) Rmdir(ctx context.Context, name string) syscall.Errno {
	if r.fs.opts.ReadOnly {
		return syscall.EROFS
	}
	return errno("rmdir", r.fs.repo.DeleteLedger(name))
}

func (r *rootNode) Rename(ctx context.Context, name string, newParent gofs.InodeEmbedder, newName string, flags uint32) syscall.Errno {
	if r.fs.opts.ReadOnly {
		return syscall.EROFS
	}
	if _, ok := newParent.(*rootNode); !ok {
		return syscall.EXDEV
	}
	if flags&^uint32(1) != 0 { // only RENAME_NOREPLACE
		return syscall.EINVAL
	}
	if ok, err := r.fs.repo.HasLedger(newName); err != nil {
		return errno("rename", err)
	} else if ok {
		return syscall.EEXIST // a ledger is never replaced
	}
	if r.fs.ledgerBusy(name) {
		return syscall.EBUSY
	}
	if err := r.fs.repo.RenameLedger(name, newName); err != nil {
		return errno("rename", err)
	}
	r.fs.renameLedger(name, newName)
	if ch := r.GetChild(name); ch != nil {
		if ln, ok := ch.Operations().(*ledgerNode); ok {
			r.fs.mu.Lock()
			ln.name = newName
			r.fs.mu.Unlock()
		}
	}
	return 0
}

func dirAttr(f *FS, a *fuse.Attr, ino uint64, perm uint32) {
	a.Ino = ino
	a.Mode = fuse.S_IFDIR | perm
	a.Nlink = 2
	a.Size = 4096
	f.attrOwner(a)
}

// ledgerNode lists a ledger's pages.
type ledgerNode struct {
	gofs.Inode
	onlyDirs
	fs   *FS
	name string
}

var (
	_ gofs.NodeLookuper  = (*ledgerNode)(nil)
	_ gofs.NodeReaddirer = (*ledgerNode)(nil)
	_ gofs.NodeMkdirer   = (*ledgerNode)(nil)
	_ gofs.NodeRmdirer   = (*ledgerNode)(nil)
	_ gofs.NodeRenamer   = (*ledgerNode)(nil)
	_ gofs.NodeGetattrer = (*ledgerNode)(nil)
	_ gofs.NodeFsyncer   = (*ledgerNode)(nil)
	_ gofs.NodeStatfser  = (*ledgerNode)(nil)
)

func (l *ledgerNode) Statfs(ctx context.Context, out *fuse.StatfsOut) syscall.Errno {
	return statfs(l.fs, out)
}

// Fsync makes the ledger's pages (their names) durable.
func (l *ledgerNode) Fsync(ctx context.Context, f gofs.FileHandle, flags uint32) syscall.Errno {
	return syncRepo(l.fs)
}

func (l *ledgerNode) Getattr(ctx context.Context, f gofs.FileHandle, out *fuse.AttrOut) syscall.Errno {
	dirAttr(l.fs, &out.Attr, l.StableAttr().Ino, 0o755)
	setTime(&out.Attr, l.fs.repo.ModTime(l.ledgerName()).UnixNano())
	return 0
}

// ledgerName is the ledger's current name; a rename changes it.
func (l *ledgerNode) ledgerName() string {
	l.fs.mu.Lock()
	defer l.fs.mu.Unlock()
	return l.name
}

func (l *ledgerNode) pageIno(name string) uint64 {
	return l.fs.inos.get(pageID(l.ledgerName(), name))
}

func (l *ledgerNode) pageInode(ctx context.Context, name string) *gofs.Inode {
	pg := l.fs.page(l.ledgerName(), name)
	return l.NewInode(ctx, &dirNode{pg: pg}, gofs.StableAttr{Mode: fuse.S_IFDIR, Ino: l.pageIno(name)})
}

func (l *ledgerNode) Lookup(ctx context.Context, name string, out *fuse.EntryOut) (*gofs.Inode, syscall.Errno) {
	ok, err := l.fs.repo.HasPage(l.ledgerName(), name)
	if err != nil {
		return nil, errno("lookup", err)
	}
	if !ok {
		return nil, syscall.ENOENT
	}
	ch := l.pageInode(ctx, name)
	return ch, ch.Operations().(*dirNode).attr("", &out.Attr)
}

func (l *ledgerNode) Readdir(ctx context.Context) (gofs.DirStream, syscall.Errno) {
	ps, err := l.fs.repo.Pages(l.ledgerName())
	if err != nil {
		return nil, errno("readdir", err)
	}
	es := make([]fuse.DirEntry, len(ps))
	for i, p := range ps {
		es[i] = fuse.DirEntry{Name: p, Mode: fuse.S_IFDIR, Ino: l.pageIno(p)}
	}
	return listing(l.EmbeddedInode(), es), 0
}

func (l *ledgerNode) Mkdir(ctx context.Context, name string, mode uint32, out *fuse.EntryOut) (*gofs.Inode, syscall.Errno) {
	if l.fs.opts.ReadOnly {
		return nil, syscall.EROFS
	}
	if err := l.fs.repo.CreatePage(l.ledgerName(), name); err != nil {
		return nil, errno("mkdir", err)
	}
	ch := l.pageInode(ctx, name)
	return ch, ch.Operations().(*dirNode).attr("", &out.Attr)
}

// replaceBarePage deletes page name of ledger, which a rename is about to
// replace: as Linux replaces an empty directory, a page that never held an
// entry (its head is the first commit) goes; one with history is not empty
// (ENOTEMPTY: rmdir it first), and RENAME_NOREPLACE replaces nothing.
func (l *ledgerNode) replaceBarePage(ledger, name string, flags uint32) syscall.Errno {
	if flags&1 != 0 { // RENAME_NOREPLACE
		return syscall.EEXIST
	}
	pg := l.fs.page(ledger, name)
	if err := pg.settle(); err != nil {
		return errno("rename", err)
	}
	if pg.busy() {
		return syscall.EBUSY
	}
	p, err := pg.acquire()
	if err != nil {
		return errno("rename", err)
	}
	head, err := p.Head()
	pg.release(p)
	if err != nil {
		return errno("rename", err)
	}
	if head.ID != store.FirstCommitID {
		return syscall.ENOTEMPTY
	}
	if err := l.fs.repo.DeletePage(ledger, name); err != nil {
		return errno("rename", err)
	}
	l.fs.dropPage(ledger, name)
	return 0
}

// Rmdir deletes a page with no entries, like rmdir of an empty directory.
func (l *ledgerNode) Rmdir(ctx context.Context, name string) syscall.Errno {
	if l.fs.opts.ReadOnly {
		return syscall.EROFS
	}
	ledger := l.ledgerName()
	pg := l.fs.page(ledger, name)
	if err := pg.settle(); err != nil {
		return errno("rmdir", err)
	}
	empty, err := pg.empty()
	if err != nil {
		return errno("rmdir", err)
	}
	if !empty {
		return syscall.ENOTEMPTY
	}
	if pg.busy() {
		return syscall.EBUSY
	}
	if err := l.fs.repo.DeletePage(ledger, name); err != nil {
		return errno("rmdir", err)
	}
	l.fs.dropPage(ledger, name)
	return 0
}

func (l *ledgerNode) Rename(ctx context.Context, name string, newParent gofs.InodeEmbedder, newName string, flags uint32) syscall.Errno {
	if l.fs.opts.ReadOnly {
		return syscall.EROFS
	}
	ledger := l.ledgerName()
	np, ok := newParent.(*ledgerNode)
	if !ok {
		return syscall.EXDEV // a page is a page: not a directory of another page
	}
	// A page moves to another ledger whole, history and all, as it is
	// renamed within its own.
	toLedger := np.ledgerName()
	if flags&^uint32(1) != 0 {
		return syscall.EINVAL
	}
	if ok, err := l.fs.repo.HasPage(toLedger, newName); err != nil {
		return errno("rename", err)
	} else if ok {
		if eno := l.replaceBarePage(toLedger, newName, flags); eno != 0 {
			return eno
		}
	}
	pg := l.fs.page(ledger, name)
	if err := pg.settle(); err != nil {
		return errno("rename", err)
	}
	if pg.busy() {
		return syscall.EBUSY
	}
	if err := l.fs.repo.MovePage(ledger, name, toLedger, newName); err != nil {
		return errno("rename", err)
	}
	l.fs.movePage(ledger, name, toLedger, newName)
	return 0
}
