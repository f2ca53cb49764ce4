package fs

import (
	"context"
	"sort"
	"syscall"

	gofs "github.com/hanwen/go-fuse/v2/fs"
	"github.com/hanwen/go-fuse/v2/fuse"

	"github.com/ledgerfs/ledgerfs/internal/btree"
	"github.com/ledgerfs/ledgerfs/internal/history"
	"github.com/ledgerfs/ledgerfs/store"
)

// The .ledger directory of a page (store.ReservedName), like ZFS's .zfs:
// hidden from readdir, reachable by path, read-only but for transactions.
//
//	log              one line per commit, newest first
//	latest           symlink to commits/<head>
//	heads/<id>       symlinks to commits/<id>
//	commits/<id>/    the page as it was at a commit
//	at/<time>/       symlink to the commit that was the head at a time
//	versions/<path>/ one file per version of the entry at path
//	transactions/    open transactions (see txnsDir)
//	commit/          where a transaction is moved to commit it

// metaNode is what the nodes under .ledger share: the page they describe
// and refusing changes with EROFS.
type metaNode struct {
	gofs.Inode
	pg *pageRef
}

var (
	_ gofs.NodeCreater   = (*metaNode)(nil)
	_ gofs.NodeMkdirer   = (*metaNode)(nil)
	_ gofs.NodeUnlinker  = (*metaNode)(nil)
	_ gofs.NodeRmdirer   = (*metaNode)(nil)
	_ gofs.NodeRenamer   = (*metaNode)(nil)
	_ gofs.NodeSymlinker = (*metaNode)(nil)
	_ gofs.NodeLinker    = (*metaNode)(nil)
	_ gofs.NodeMknoder   = (*metaNode)(nil)
	_ gofs.NodeSetattrer = (*metaNode)(nil)
	_ gofs.NodeStatfser  = (*metaNode)(nil)
	_ gofs.NodeFsyncer   = (*metaNode)(nil)
)

// Fsync has nothing to do: what .ledger shows is read from the db.
func (m *metaNode) Fsync(ctx context.Context, f gofs.FileHandle, flags uint32) syscall.Errno {
	return 0
}

func (m *metaNode) Create(ctx context.Context, name string, flags uint32, mode uint32, out *fuse.EntryOut) (*gofs.Inode, gofs.FileHandle, uint32, syscall.Errno) {
	return nil, nil, 0, syscall.EROFS
}
func (m *metaNode) Mkdir(ctx context.Context, name string, mode uint32, out *fuse.EntryOut) (*gofs.Inode, syscall.Errno) {
	return nil, syscall.EROFS
}
func (m *metaNode) Unlink(ctx context.Context, name string) syscall.Errno { return syscall.EROFS }
func (m *metaNode) Rmdir(ctx context.Context, name string) syscall.Errno  { return syscall.EROFS }
func (m *metaNode) Rename(ctx context.Context, name string, newParent gofs.InodeEmbedder, newName string, flags uint32) syscall.Errno {
	return syscall.EROFS
}
func (m *metaNode) Symlink(ctx context.Context, target, name string, out *fuse.EntryOut) (*gofs.Inode, syscall.Errno) {
	return nil, syscall.EROFS
}
func (m *metaNode) Link(ctx context.Context, target gofs.InodeEmbedder, name string, out *fuse.EntryOut) (*gofs.Inode, syscall.Errno) {
	return nil, syscall.EROFS
}
func (m *metaNode) Mknod(ctx context.Context, name string, mode uint32, dev uint32, out *fuse.EntryOut) (*gofs.Inode, syscall.Errno) {
	return nil, syscall.EROFS
}
func (m *metaNode) Setattr(ctx context.Context, f gofs.FileHandle, in *fuse.SetAttrIn, out *fuse.AttrOut) syscall.Errno {
	return syscall.EROFS
}
func (m *metaNode) Statfs(ctx context.Context, out *fuse.StatfsOut) syscall.Errno {
	return statfs(m.pg.fs, out)
}

// OnForget drops the node's inode number.
func (m *metaNode) OnForget() { m.pg.fs.inos.forget(m.StableAttr().Ino) }

// headTime is the time shown on .ledger's own nodes: the head's.
func (m *metaNode) headTime() (int64, error) {
	var ts int64
	err := m.pg.view(func(p *store.Page, head *store.Commit, t *btree.Tree) error {
		ts = m.pg.shownTime(p, head)
		return nil
	})
	return ts, err
}

// dirAttr fills the attributes of a .ledger directory.
func (m *metaNode) dirAttr(a *fuse.Attr, perm uint32) syscall.Errno {
	ts, err := m.headTime()
	if err != nil {
		return errno("getattr", err)
	}
	dirAttr(m.pg.fs, a, m.StableAttr().Ino, perm)
	setTime(a, ts)
	return 0
}

// metaDir is a directory under .ledger: its attributes, and an empty
// listing unless the type lists something.
type metaDir struct {
	metaNode
	perm uint32
}

// roDir is a read-only metaDir of pg.
func roDir(pg *pageRef) metaDir { return metaDir{metaNode{pg: pg}, 0o555} }

func (d *metaDir) Getattr(ctx context.Context, f gofs.FileHandle, out *fuse.AttrOut) syscall.Errno {
	return d.dirAttr(&out.Attr, d.perm)
}

func (d *metaDir) Readdir(ctx context.Context) (gofs.DirStream, syscall.Errno) {
	return listing(d.EmbeddedInode(), nil), 0
}

// newMeta makes a child node of a .ledger directory.
func (m *metaNode) newMeta(ctx context.Context, n gofs.InodeEmbedder, mode uint32, id string) *gofs.Inode {
	return m.NewInode(ctx, n, gofs.StableAttr{Mode: mode, Ino: m.pg.fs.inos.get(m.pg.metaID(id))})
}

// withPage runs fn with the live page, once the commits of closed files have
// landed: history shows every close that returned.
func (m *metaNode) withPage(fn func(p *store.Page) error) error {
	if err := m.pg.settle(); err != nil {
		return err
	}
	p, err := m.pg.acquire()
	if err != nil {
		return err
	}
	defer m.pg.release(p)
	return fn(p)
}

// historyRoot is a page's .ledger directory (not a ledger: the root's
// children are ledgerNodes): its history, transactions and status.
type historyRoot struct{ metaDir }

var (
	_ gofs.NodeLookuper  = (*historyRoot)(nil)
	_ gofs.NodeReaddirer = (*historyRoot)(nil)
	_ gofs.NodeGetattrer = (*historyRoot)(nil)
)

var ledgerDirEntries = map[string]uint32{
	"at": fuse.S_IFDIR, "commit": fuse.S_IFDIR, "commits": fuse.S_IFDIR, "heads": fuse.S_IFDIR,
	"latest": fuse.S_IFLNK, "log": fuse.S_IFREG, "transactions": fuse.S_IFDIR, "versions": fuse.S_IFDIR,
	"retention": fuse.S_IFREG, "stats": fuse.S_IFREG, "sync": fuse.S_IFREG, "local": fuse.S_IFREG,
}

func (d *historyRoot) Readdir(ctx context.Context) (gofs.DirStream, syscall.Errno) {
	var es []fuse.DirEntry
	for name, mode := range ledgerDirEntries {
		es = append(es, fuse.DirEntry{Name: name, Mode: mode, Ino: d.pg.fs.inos.peek(d.pg.metaID(name))})
	}
	sort.Slice(es, func(i, j int) bool { return es[i].Name < es[j].Name })
	return listing(d.EmbeddedInode(), es), 0
}

func (d *historyRoot) Lookup(ctx context.Context, name string, out *fuse.EntryOut) (*gofs.Inode, syscall.Errno) {
	var n gofs.InodeEmbedder
	switch name {
	case "log":
		n = &logNode{metaNode: metaNode{pg: d.pg}}
	case "latest":
		n = &linkNode{metaNode: metaNode{pg: d.pg}, target: func(p *store.Page) (string, error) {
			head, err := p.Head()
			if err != nil {
				return "", err
			}
			return "commits/" + head.ID.String(), nil
		}}
	case "heads":
		n = &headsDir{roDir(d.pg)}
	case "commits":
		n = &commitsDir{roDir(d.pg)}
	case "at":
		n = &atDir{roDir(d.pg)}
	case "versions":
		n = &versionsDir{metaDir: roDir(d.pg)}
	case "transactions":
		n = &txnsDir{metaDir{metaNode{pg: d.pg}, 0o755}}
	case "commit":
		n = &commitDir{metaDir{metaNode{pg: d.pg}, 0o755}}
	case "retention":
		n = d.pg.owner.retentionFile()
	case "stats":
		n = d.pg.owner.statsFile()
	case "sync":
		n = d.pg.owner.syncFile()
	case "local":
		n = d.pg.owner.localFile()
	default:
		return nil, syscall.ENOENT
	}
	ch := d.newMeta(ctx, n, ledgerDirEntries[name], name)
	return ch, getattr(ctx, ch, &out.Attr)
}

// getattr fills a new child's entry attributes through its own Getattr.
func getattr(ctx context.Context, ch *gofs.Inode, a *fuse.Attr) syscall.Errno {
	var out fuse.AttrOut
	eno := ch.Operations().(gofs.NodeGetattrer).Getattr(ctx, nil, &out)
	*a = out.Attr
	return eno
}

// linkNode is a symbolic link under .ledger whose target is computed when
// read: latest follows the head, at/<time> names a commit.
type linkNode struct {
	metaNode
	target func(p *store.Page) (string, error)
}

var (
	_ gofs.NodeReadlinker = (*linkNode)(nil)
	_ gofs.NodeGetattrer  = (*linkNode)(nil)
)

func (l *linkNode) read() (string, error) {
	var s string
	err := l.withPage(func(p *store.Page) error {
		var err error
		s, err = l.target(p)
		return err
	})
	return s, err
}

func (l *linkNode) Readlink(ctx context.Context) ([]byte, syscall.Errno) {
	s, err := l.read()
	if err != nil {
		return nil, errno("readlink", err)
	}
	return []byte(s), 0
}

func (l *linkNode) Getattr(ctx context.Context, f gofs.FileHandle, out *fuse.AttrOut) syscall.Errno {
	s, err := l.read()
	if err != nil {
		return errno("getattr", err)
	}
	out.Ino = l.StableAttr().Ino
	out.Mode = fuse.S_IFLNK | 0o777
	out.Size = uint64(len(s))
	out.Nlink = 1
	ts, err := l.headTime()
	if err != nil {
		return errno("getattr", err)
	}
	setTime(&out.Attr, ts)
	l.pg.fs.attrOwner(&out.Attr)
	return 0
}

// commitLink is the symlink from dir (heads/ or at/) to a commit's snapshot.
func (m *metaNode) commitLink(ctx context.Context, dir string, id store.CommitID, out *fuse.EntryOut) (*gofs.Inode, syscall.Errno) {
	target := "../commits/" + id.String()
	n := &linkNode{metaNode: metaNode{pg: m.pg}, target: func(*store.Page) (string, error) { return target, nil }}
	ch := m.newMeta(ctx, n, fuse.S_IFLNK, dir+"/"+target)
	return ch, getattr(ctx, ch, &out.Attr)
}

// commitsDir lists every commit as the page's snapshot at that commit.
type commitsDir struct{ metaDir }

var (
	_ gofs.NodeLookuper  = (*commitsDir)(nil)
	_ gofs.NodeReaddirer = (*commitsDir)(nil)
	_ gofs.NodeGetattrer = (*commitsDir)(nil)
)

func (d *commitsDir) Readdir(ctx context.Context) (gofs.DirStream, syscall.Errno) {
	var es []fuse.DirEntry
	err := d.withPage(func(p *store.Page) error {
		return history.IDs(p, func(id store.CommitID) error {
			es = append(es, fuse.DirEntry{Name: id.String(), Mode: fuse.S_IFDIR, Ino: d.pg.fs.inos.peek(d.pg.snapshotID(id))})
			return nil
		})
	})
	if err != nil {
		return nil, errno("readdir", err)
	}
	return listing(d.EmbeddedInode(), es), 0
}

// snapshotID is the inode id of a snapshot's root.
func (pg *pageRef) snapshotID(id store.CommitID) string {
	return pg.snapshot(&store.Commit{ID: id}).id('d', "")
}

// Lookup opens a snapshot: the commit's tree, read-only. Nothing is copied,
// so a snapshot of any page opens as fast as the head.
func (d *commitsDir) Lookup(ctx context.Context, name string, out *fuse.EntryOut) (*gofs.Inode, syscall.Errno) {
	id, ok := history.ParseID(name)
	if !ok {
		return nil, syscall.ENOENT
	}
	var c *store.Commit
	err := d.withPage(func(p *store.Page) error {
		var err error
		c, err = p.Commit(id)
		return err
	})
	if err != nil {
		return nil, syscall.ENOENT
	}
	n := &dirNode{pg: d.pg.snapshot(c)}
	ch := d.NewInode(ctx, n, gofs.StableAttr{Mode: fuse.S_IFDIR, Ino: d.pg.fs.inos.get(n.pg.id('d', ""))})
	return ch, n.attr("", &out.Attr)
}

// headsDir lists the page's heads as links to their snapshots.
type headsDir struct{ metaDir }

var (
	_ gofs.NodeLookuper  = (*headsDir)(nil)
	_ gofs.NodeReaddirer = (*headsDir)(nil)
	_ gofs.NodeGetattrer = (*headsDir)(nil)
)

func (d *headsDir) heads() ([]*store.Commit, error) {
	var heads []*store.Commit
	err := d.withPage(func(p *store.Page) error {
		var err error
		heads, err = p.Heads()
		return err
	})
	return heads, err
}

func (d *headsDir) Readdir(ctx context.Context) (gofs.DirStream, syscall.Errno) {
	heads, err := d.heads()
	if err != nil {
		return nil, errno("readdir", err)
	}
	var es []fuse.DirEntry
	for _, h := range heads {
		es = append(es, fuse.DirEntry{Name: h.ID.String(), Mode: fuse.S_IFLNK, Ino: d.pg.fs.inos.peek(d.pg.metaID("heads/../commits/" + h.ID.String()))})
	}
	return listing(d.EmbeddedInode(), es), 0
}

func (d *headsDir) Lookup(ctx context.Context, name string, out *fuse.EntryOut) (*gofs.Inode, syscall.Errno) {
	heads, err := d.heads()
	if err != nil {
		return nil, errno("lookup", err)
	}
	for _, h := range heads {
		if h.ID.String() == name {
			return d.commitLink(ctx, "heads", h.ID, out)
		}
	}
	return nil, syscall.ENOENT
}

// atDir resolves a time (RFC 3339 or Unix seconds) to a link to the commit
// that was the head then. It lists nothing: times are not enumerable.
type atDir struct{ metaDir }

var (
	_ gofs.NodeLookuper  = (*atDir)(nil)
	_ gofs.NodeReaddirer = (*atDir)(nil)
	_ gofs.NodeGetattrer = (*atDir)(nil)
)

func (d *atDir) Lookup(ctx context.Context, name string, out *fuse.EntryOut) (*gofs.Inode, syscall.Errno) {
	t, err := history.ParseTime(name)
	if err != nil {
		return nil, syscall.ENOENT
	}
	var c *store.Commit
	err = d.withPage(func(p *store.Page) error {
		var err error
		c, err = history.AsOf(p, t)
		return err
	})
	if err != nil {
		return nil, errno("lookup", err)
	}
	ch, eno := d.commitLink(ctx, "at/"+name, c.ID, out)
	// The head at a past time can still change while commits arrive with
	// older clocks; keep the kernel from caching a name for long.
	out.SetEntryTimeout(0)
	return ch, eno
}

// commitDir takes transactions moved into it and commits them; it is
// always empty.
type commitDir struct{ metaDir }

var (
	_ gofs.NodeLookuper  = (*commitDir)(nil)
	_ gofs.NodeReaddirer = (*commitDir)(nil)
	_ gofs.NodeGetattrer = (*commitDir)(nil)
)

func (d *commitDir) Lookup(ctx context.Context, name string, out *fuse.EntryOut) (*gofs.Inode, syscall.Errno) {
	return nil, syscall.ENOENT
}

// txnsDir holds the page's open transactions: mkdir begins one, rmdir rolls
// it back, moving it into ../commit/ commits it. Each shows the page as the
// transaction sees it and takes any change a page takes.
type txnsDir struct{ metaDir }

var (
	_ gofs.NodeLookuper  = (*txnsDir)(nil)
	_ gofs.NodeReaddirer = (*txnsDir)(nil)
	_ gofs.NodeGetattrer = (*txnsDir)(nil)
)

func (d *txnsDir) Readdir(ctx context.Context) (gofs.DirStream, syscall.Errno) {
	var es []fuse.DirEntry
	for _, name := range d.pg.txnNames() {
		if ref := d.pg.txn(name); ref != nil {
			es = append(es, fuse.DirEntry{Name: name, Mode: fuse.S_IFDIR, Ino: d.pg.fs.inos.peek(ref.id('d', ""))})
		}
	}
	return listing(d.EmbeddedInode(), es), 0
}

func (d *txnsDir) txnRoot(ctx context.Context, ref *pageRef, out *fuse.EntryOut) (*gofs.Inode, syscall.Errno) {
	n := &dirNode{pg: ref}
	ch := d.NewInode(ctx, n, gofs.StableAttr{Mode: fuse.S_IFDIR, Ino: d.pg.fs.inos.get(ref.id('d', ""))})
	return ch, n.attr("", &out.Attr)
}

func (d *txnsDir) Lookup(ctx context.Context, name string, out *fuse.EntryOut) (*gofs.Inode, syscall.Errno) {
	ref := d.pg.txn(name)
	if ref == nil {
		return nil, syscall.ENOENT
	}
	return d.txnRoot(ctx, ref, out)
}

func (d *txnsDir) Mkdir(ctx context.Context, name string, mode uint32, out *fuse.EntryOut) (*gofs.Inode, syscall.Errno) {
	if d.pg.readOnly() {
		return nil, syscall.EROFS
	}
	if store.CheckName(name) != nil {
		return nil, syscall.EINVAL
	}
	ref, err := d.pg.begin(name)
	if err != nil {
		return nil, errno("begin transaction", err)
	}
	return d.txnRoot(ctx, ref, out)
}

// Rmdir rolls the transaction back, whatever it holds: its directory shows
// the page, so it is never empty.
func (d *txnsDir) Rmdir(ctx context.Context, name string) syscall.Errno {
	return errno("roll back transaction", d.pg.endTxn(name, false))
}

// Rename into ../commit/ commits the transaction; other renames are
// refused, never with EXDEV, which would make mv copy the page instead.
func (d *txnsDir) Rename(ctx context.Context, name string, newParent gofs.InodeEmbedder, newName string, flags uint32) syscall.Errno {
	if _, ok := newParent.(*commitDir); !ok {
		return syscall.EPERM
	}
	return errno("commit transaction", d.pg.endTxn(name, true))
}
