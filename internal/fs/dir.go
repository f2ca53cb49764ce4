package fs

import (
	"context"
	"errors"
	"strings"
	"sync/atomic"
	"syscall"

	gofs "github.com/hanwen/go-fuse/v2/fs"
	"github.com/hanwen/go-fuse/v2/fuse"

	"github.com/ledgerfs/ledgerfs/internal/btree"
	"github.com/ledgerfs/ledgerfs/internal/journal"
	"github.com/ledgerfs/ledgerfs/internal/keypath"
	"github.com/ledgerfs/ledgerfs/internal/store"
)

// dirNode is a page's root or a directory inside a page: the keys that
// start with its prefix.
type dirNode struct {
	gofs.Inode
	pg    *pageRef
	below bool // a directory inside the page, not its root
	// removed holds the attributes the directory had when rmdir removed
	// it: a descriptor or working directory still on it sees an empty
	// directory with no link, as on a native filesystem, whatever is made
	// at its name later.
	removed atomic.Pointer[fuse.Attr]
}

var (
	_ gofs.NodeLookuper    = (*dirNode)(nil)
	_ gofs.NodeReaddirer   = (*dirNode)(nil)
	_ gofs.NodeGetattrer   = (*dirNode)(nil)
	_ gofs.NodeSetattrer   = (*dirNode)(nil)
	_ gofs.NodeMkdirer     = (*dirNode)(nil)
	_ gofs.NodeRmdirer     = (*dirNode)(nil)
	_ gofs.NodeCreater     = (*dirNode)(nil)
	_ gofs.NodeUnlinker    = (*dirNode)(nil)
	_ gofs.NodeRenamer     = (*dirNode)(nil)
	_ gofs.NodeSymlinker   = (*dirNode)(nil)
	_ gofs.NodeLinker      = (*dirNode)(nil)
	_ gofs.NodeMknoder     = (*dirNode)(nil)
	_ gofs.NodeStatfser    = (*dirNode)(nil)
	_ gofs.NodeOnForgetter = (*dirNode)(nil)
	_ gofs.NodeFsyncer     = (*dirNode)(nil)
)

// Fsync of a directory makes the changes in it durable, as programs that
// create or rename a file and then sync its directory expect (databases,
// git, editors): here every change of the page so far.
func (d *dirNode) Fsync(ctx context.Context, f gofs.FileHandle, flags uint32) syscall.Errno {
	if d.pg.readOnly() {
		return 0
	}
	return errno("fsync", d.pg.apply(true))
}

// pathFrom returns the components of n's path below the root of page pg,
// and false for a node no longer in the tree (deleted). The root is known by
// what it is, not by which node it is: the kernel may forget a page's root
// and look it up again as a new node while a file below it stays ours (a
// closed file whose commit is queued), and that file is then found again
// under the new root.
func pathFrom(n *gofs.Inode, pg *pageRef) ([]string, bool) {
	var comps []string
	for {
		if d, ok := n.Operations().(*dirNode); ok && !d.below && d.pg == pg {
			break
		}
		name, parent := n.Parent()
		if parent == nil {
			return nil, false
		}
		comps = append(comps, name)
		n = parent
	}
	for i, j := 0, len(comps)-1; i < j; i, j = i+1, j-1 {
		comps[i], comps[j] = comps[j], comps[i]
	}
	return comps, true
}

func (d *dirNode) comps() ([]string, bool) {
	return pathFrom(d.EmbeddedInode(), d.pg)
}

// prefix is the key prefix of the directory's keys.
func (d *dirNode) prefix() (string, []string, error) {
	comps, ok := d.comps()
	if !ok {
		return "", nil, syscall.ENOENT
	}
	p, err := keypath.Prefix(comps)
	if err != nil {
		return "", nil, syscall.ENOENT
	}
	return p, comps, nil
}

// childKey returns the key of name in d and whether name is the collision
// form of a file shadowed by a directory.
func (d *dirNode) childKey(name string) (string, bool, error) {
	comps, ok := d.comps()
	if !ok {
		return "", false, syscall.ENOENT
	}
	key, coll, err := keypath.Key(append(comps, name))
	if err != nil {
		return "", false, syscall.EINVAL
	}
	return key, coll, nil
}

func hasPrefixKey(t *btree.Tree, prefix string) (bool, error) {
	it := t.Prefix(prefix)
	if it.Next() {
		return true, nil
	}
	return false, it.Err()
}

// isMarker reports whether an entry only keeps an empty directory.
func isMarker(e btree.Entry) bool {
	return strings.HasSuffix(e.Key, "/") && e.Meta.Size == 0 && (e.Meta.Mode == 0 || e.Meta.IsDir())
}

func (d *dirNode) newDir(ctx context.Context, prefix string) *gofs.Inode {
	n := &dirNode{pg: d.pg, below: true}
	return d.NewInode(ctx, n, gofs.StableAttr{Mode: fuse.S_IFDIR, Ino: d.pg.fs.inos.get(d.pg.id('d', prefix))})
}

func (d *dirNode) newFile(ctx context.Context, key string, mode uint32) *gofs.Inode {
	n := &fileNode{pg: d.pg}
	return d.NewInode(ctx, n, gofs.StableAttr{Mode: mode & syscall.S_IFMT, Ino: d.pg.fs.inos.get(d.pg.id('f', key))})
}

// OnForget drops the node's inode number: the kernel no longer knows it.
func (d *dirNode) OnForget() { d.pg.fs.inos.forget(d.StableAttr().Ino) }

func (d *dirNode) Getattr(ctx context.Context, f gofs.FileHandle, out *fuse.AttrOut) syscall.Errno {
	if a := d.removed.Load(); a != nil {
		out.Attr = *a
		return 0
	}
	prefix, _, err := d.prefix()
	if err != nil {
		return errno("getattr", err)
	}
	return d.attr(prefix, &out.Attr)
}

func (d *dirNode) attr(prefix string, a *fuse.Attr) syscall.Errno {
	perm := uint32(0o755)
	var ts int64
	queued, isQueued := d.pg.queuedMarker(prefix) // before the tree; see listDir
	err := d.pg.view(func(p *store.Page, head *store.Commit, t *btree.Tree) error {
		ts = d.pg.shownTime(p, head)
		if isQueued {
			perm = queued.Meta.Mode & 0o7777
			if queued.Meta.HasMtime {
				ts = queued.Meta.MtimeNs
			}
			return nil
		}
		if prefix != "" && strings.HasSuffix(prefix, "/") {
			if m, ok, err := t.Get(prefix); err != nil {
				return err
			} else if ok && m.Meta.IsDir() {
				perm = m.Meta.Mode & 0o7777
				if m.Meta.HasMtime {
					ts = m.Meta.MtimeNs
				}
			}
		}
		return nil
	})
	if err != nil {
		return errno("getattr", err)
	}
	dirAttr(d.pg.fs, a, d.StableAttr().Ino, perm)
	setTime(a, ts)
	return 0
}

func (d *dirNode) Statfs(ctx context.Context, out *fuse.StatfsOut) syscall.Errno {
	return statfs(d.pg.fs, out)
}

func (d *dirNode) Lookup(ctx context.Context, name string, out *fuse.EntryOut) (*gofs.Inode, syscall.Errno) {
	comps, ok := d.comps()
	if !ok || d.removed.Load() != nil {
		return nil, syscall.ENOENT
	}
	if name == store.ReservedName && !d.below && d.pg.live == nil {
		ch := d.NewInode(ctx, &ledgerDir{roDir(d.pg)}, gofs.StableAttr{Mode: fuse.S_IFDIR, Ino: d.pg.fs.inos.get(d.pg.metaID(""))})
		return ch, getattr(ctx, ch, &out.Attr)
	}
	child := append(comps, name)
	if keypath.IsContinuation(name) {
		prefix, err := keypath.Prefix(child)
		if err != nil {
			return nil, syscall.ENOENT
		}
		found := false
		err = d.pg.view(func(p *store.Page, head *store.Commit, t *btree.Tree) error {
			it := t.Prefix(prefix)
			for it.Next() && !found {
				found = pathHasPrefix(keypath.Path(it.Entry().Key, false), child)
			}
			return it.Err()
		})
		if err != nil || !found {
			return nil, errno("lookup", errors.Join(err, syscall.ENOENT))
		}
		ch := d.newDir(ctx, prefix)
		return ch, ch.Operations().(*dirNode).attr(prefix, &out.Attr)
	}
	key, coll, err := keypath.Key(child)
	if err != nil {
		return nil, syscall.ENOENT
	}
	if f := d.pg.pendingFile(key); f != nil && !coll {
		return f.EmbeddedInode(), f.fillAttrAt(key, &out.Attr)
	}
	var entry btree.Entry
	var isFile, isDir bool
	var headTs int64
	pendingDir := d.pg.dirShown(key + "/") // before the tree; see listDir
	err = d.pg.view(func(p *store.Page, head *store.Commit, t *btree.Tree) error {
		var err error
		if entry, isFile, err = t.Get(key); err != nil {
			return err
		}
		if isFile && !entry.Meta.HasMtime {
			headTs = d.pg.shownTime(p, head) // shown only without an mtime of its own
		}
		isDir, err = hasPrefixKey(t, key+"/")
		return err
	})
	if err != nil {
		return nil, errno("lookup", err)
	}
	isDir = isDir || pendingDir
	switch {
	case coll && isFile && isDir, !coll && isFile && !isDir:
		// A file open for writing shows what is written, not what was
		// last committed: the kernel takes a lookup's size as the file's.
		if ch := d.GetChild(name); ch != nil {
			if f, ok := ch.Operations().(*fileNode); ok && f.hasContent() {
				return ch, f.fillAttrAt(key, &out.Attr)
			}
		}
		ch := d.newFile(ctx, key, entry.Meta.FileMode())
		f := ch.Operations().(*fileNode)
		f.shown(entry.Meta, headTs)
		fileAttr(d.pg.fs, &out.Attr, ch.StableAttr().Ino, entry.Meta, headTs)
		return ch, 0
	case !coll && isDir:
		ch := d.newDir(ctx, key+"/")
		return ch, ch.Operations().(*dirNode).attr(key+"/", &out.Attr)
	}
	return nil, syscall.ENOENT
}

func pathHasPrefix(p, prefix []string) bool {
	if len(p) <= len(prefix) {
		return false
	}
	for i := range prefix {
		if p[i] != prefix[i] {
			return false
		}
	}
	return true
}

func (d *dirNode) Readdir(ctx context.Context) (gofs.DirStream, syscall.Errno) {
	prefix, comps, err := d.prefix()
	if err != nil {
		return nil, errno("readdir", err)
	}
	es, err := listDir(d.pg, prefix, comps)
	if err != nil {
		return nil, errno("readdir", err)
	}
	return gofs.NewListDirStream(es), 0
}

// listDir lists the directory at comps (key prefix prefix) of a page view:
// a name per file and subdirectory, with the collision names of files
// shadowed by directories, and the files created but not committed yet.
func listDir(pg *pageRef, prefix string, comps []string) ([]fuse.DirEntry, error) {
	var es []fuse.DirEntry
	index := map[string]int{}
	files := map[string]string{} // name -> key of files listed, for collisions
	add := func(name string, mode uint32, id string) int {
		if i, ok := index[name]; ok {
			return i
		}
		index[name] = len(es)
		es = append(es, fuse.DirEntry{Name: name, Mode: mode, Ino: pg.fs.inos.peek(id)})
		return len(es) - 1
	}
	addKey := func(key string, mode uint32, marker bool) (skipTo string) {
		p := keypath.Path(key, false)
		if !pathHasPrefix(p, comps) {
			return ""
		}
		rel := p[len(comps):]
		if len(rel) == 1 {
			if marker && key == prefix {
				return "" // this directory's own marker
			}
			if i, ok := index[rel[0]]; ok && es[i].Mode == fuse.S_IFDIR {
				// A directory of the same name came first: not possible in
				// key order, but pending files are added late.
				cp := keypath.Path(key, true)
				add(cp[len(cp)-1], mode, pg.id('f', key))
				return ""
			}
			add(rel[0], mode, pg.id('f', key))
			files[rel[0]] = key
			return ""
		}
		childPrefix, err := keypath.Prefix(p[:len(comps)+1])
		if err != nil {
			return ""
		}
		if fk, ok := files[rel[0]]; ok {
			// File "a" and directory "a/": the file takes its collision name.
			i := index[rel[0]]
			cp := keypath.Path(fk, true)
			es[i].Name = cp[len(cp)-1]
			delete(index, rel[0])
			index[es[i].Name] = i
			delete(files, rel[0])
		}
		add(rel[0], fuse.S_IFDIR, pg.id('d', childPrefix))
		if strings.HasSuffix(childPrefix, "/") {
			// Skip the rest of the subdirectory: '0' follows '/'.
			return childPrefix[:len(childPrefix)-1] + "0"
		}
		return ""
	}
	// Pending files and queued markers first: one that lands meanwhile is
	// in the tree read after, as it leaves pending only once its commit is
	// the head.
	pending := pg.pendingUnder(prefix)
	markers := pg.queuedMarkersUnder(prefix)
	err := pg.view(func(p *store.Page, head *store.Commit, t *btree.Tree) error {
		it := t.Prefix(prefix)
		for it.Next() {
			e := it.Entry()
			if skip := addKey(e.Key, e.Meta.FileMode()&syscall.S_IFMT, isMarker(e)); skip != "" {
				it = t.SeekPrefix(skip, prefix)
			}
		}
		return it.Err()
	})
	if err != nil {
		return nil, err
	}
	for key, f := range pending {
		addKey(key, f.mode()&syscall.S_IFMT, false)
	}
	for _, key := range markers {
		addKey(key, fuse.S_IFDIR, true)
	}
	return es, nil
}

func (d *dirNode) Setattr(ctx context.Context, f gofs.FileHandle, in *fuse.SetAttrIn, out *fuse.AttrOut) syscall.Errno {
	if d.pg.readOnly() {
		return syscall.EROFS
	}
	if errno := checkOwner(d.pg.fs, in); errno != 0 {
		return errno
	}
	prefix, _, err := d.prefix()
	if err != nil {
		return errno("setattr", err)
	}
	_, hasMode := in.GetMode()
	_, hasMtime := in.GetMTime()
	if (hasMode || hasMtime) && strings.HasSuffix(prefix, "/") {
		// Permission bits and times of a directory live in its marker,
		// whose mode is always a directory's.
		marker, queued := d.pg.queuedMarker(prefix)
		if !queued {
			err := d.pg.view(func(p *store.Page, head *store.Commit, t *btree.Tree) error {
				var ok bool
				var err error
				marker, ok, err = t.Get(prefix)
				if !ok || !marker.Meta.IsDir() {
					marker = dirMarker(0o755, d.pg.shownTime(p, head))
				}
				return err
			})
			if err != nil {
				return errno("setattr", err)
			}
		}
		setModeTime(&marker.Meta, in)
		var err error
		if d.pg.tx == nil {
			err = d.pg.queueMarker(prefix, marker)
		} else {
			err = d.pg.apply(false, journal.Op{Key: prefix, Entry: marker})
		}
		if err != nil {
			return errno("setattr", err)
		}
	}
	return d.attr(prefix, &out.Attr)
}

func checkOwner(f *FS, in *fuse.SetAttrIn) syscall.Errno {
	if uid, ok := in.GetUID(); ok && uid != f.opts.UID {
		return syscall.EPERM
	}
	if gid, ok := in.GetGID(); ok && gid != f.opts.GID {
		return syscall.EPERM
	}
	return 0
}

// freeName returns the key of a new entry called name in d: EINVAL if name
// is no key's canonical name, EEXIST if a file or directory has it.
func (d *dirNode) freeName(op, name string) (string, syscall.Errno) {
	key, coll, err := d.childKey(name)
	if err != nil || coll {
		return "", syscall.EINVAL
	}
	exists := d.pg.pendingFile(key) != nil || d.pg.dirShown(key+"/")
	err = d.pg.view(func(p *store.Page, head *store.Commit, t *btree.Tree) error {
		_, isFile, err := t.Get(key)
		if err != nil {
			return err
		}
		isDir, err := hasPrefixKey(t, key+"/")
		exists = exists || isFile || isDir
		return err
	})
	if err != nil {
		return "", errno(op, err)
	}
	if exists {
		return "", syscall.EEXIST
	}
	return key, 0
}

// dirMarker is the entry that keeps a directory, with its mode and mtime.
func dirMarker(perm uint32, mtimeNs int64) btree.Entry {
	return btree.Entry{Value: emptyValue, Meta: btree.Meta{Mode: syscall.S_IFDIR | perm&0o7777, MtimeNs: mtimeNs, HasMtime: true}}
}

func (d *dirNode) Mkdir(ctx context.Context, name string, mode uint32, out *fuse.EntryOut) (*gofs.Inode, syscall.Errno) {
	if d.pg.readOnly() {
		return nil, syscall.EROFS
	}
	key, eno := d.freeName("mkdir", name)
	if eno != 0 {
		return nil, eno
	}
	marker := dirMarker(mode, nowNs())
	var err error
	if d.pg.tx == nil {
		err = d.pg.queueMarker(key+"/", marker)
	} else {
		err = d.pg.apply(false, journal.Op{Key: key + "/", Entry: marker})
	}
	if err != nil {
		return nil, errno("mkdir", err)
	}
	ch := d.newDir(ctx, key+"/")
	return ch, ch.Operations().(*dirNode).attr(key+"/", &out.Attr)
}

// keepParent returns the op that keeps directory prefix in existence once
// the keys in gone are removed from it, or nil: POSIX directories outlive
// their last file.
func keepParent(t *btree.Tree, prefix string, gone ...string) ([]journal.Op, error) {
	if prefix == "" || !strings.HasSuffix(prefix, "/") {
		return nil, nil
	}
	it := t.Prefix(prefix)
	for it.Next() {
		k := it.Entry().Key
		if k == prefix {
			return nil, nil // has a marker
		}
		kept := true
		for _, g := range gone {
			if k == g || strings.HasPrefix(k, g+"/") {
				kept = false
			}
		}
		if kept {
			return nil, it.Err()
		}
	}
	if it.Err() != nil {
		return nil, it.Err()
	}
	return []journal.Op{{Key: prefix, Entry: dirMarker(0o755, nowNs())}}, nil
}

func (d *dirNode) Rmdir(ctx context.Context, name string) syscall.Errno {
	if d.pg.readOnly() {
		return syscall.EROFS
	}
	if err := d.pg.settle(); err != nil {
		return errno("rmdir", err)
	}
	key, coll, err := d.childKey(name)
	if err != nil || coll {
		return syscall.ENOENT
	}
	prefix, _, _ := d.prefix()
	dir := key + "/"
	if d.pg.pendingUnder(dir) != nil {
		return syscall.ENOTEMPTY
	}
	var ops []journal.Op
	err = d.pg.view(func(p *store.Page, head *store.Commit, t *btree.Tree) error {
		it := t.Prefix(dir)
		found := false
		for it.Next() {
			found = true
			if it.Entry().Key != dir {
				return syscall.ENOTEMPTY
			}
			ops = append(ops, journal.Op{Key: dir, Delete: true})
		}
		if it.Err() != nil {
			return it.Err()
		}
		if !found {
			if _, isFile, _ := t.Get(key); isFile {
				return syscall.ENOTDIR
			}
			return syscall.ENOENT
		}
		keep, err := keepParent(t, prefix, dir)
		ops = append(ops, keep...)
		return err
	})
	if err != nil {
		return errno("rmdir", err)
	}
	removed := d.removing(name, dir)
	if err := d.pg.apply(false, ops...); err != nil {
		return errno("rmdir", err)
	}
	removed(true)
	return 0
}

// removing takes the attributes of the directory child name (key prefix
// dir) before rmdir or a rename over it removes it, and returns what marks
// it removed once the removal has landed (see dirNode.removed) and releases
// its inode number. As on ext4, a directory rmdir removed shows size 0, one
// a rename replaced keeps its size.
func (d *dirNode) removing(name, dir string) (removed func(rmdir bool)) {
	var n *dirNode
	var last fuse.Attr
	if ch := d.GetChild(name); ch != nil {
		if c, ok := ch.Operations().(*dirNode); ok && c.attr(dir, &last) == 0 {
			n = c
		}
	}
	return func(rmdir bool) {
		if n != nil {
			last.Nlink = 0
			if rmdir {
				last.Size, last.Blocks = 0, 0
			}
			n.removed.Store(&last)
		}
		d.pg.fs.inos.release(d.pg.id('d', dir))
	}
}

// Unlink removes a file. On the live page, when the file's directory keeps
// other entries or its marker, the delete is queued and the file hidden
// until it lands (see queueDelete); otherwise, with a marker to add so that
// the directory stays, it waits for its commit.
func (d *dirNode) Unlink(ctx context.Context, name string) syscall.Errno {
	if d.pg.readOnly() {
		return syscall.EROFS
	}
	key, _, err := d.childKey(name)
	if err != nil {
		return syscall.ENOENT
	}
	prefix, _, _ := d.prefix()
	var unlinked *fileNode
	if ch := d.GetChild(name); ch != nil {
		if f, ok := ch.Operations().(*fileNode); ok {
			f.setUnlinked(true)
			unlinked = f
		}
	}
	eno := d.unlink(key, prefix)
	switch {
	case eno == 0:
		d.pg.fs.inos.release(d.pg.id('f', key))
	case unlinked != nil:
		unlinked.setUnlinked(false)
	}
	return eno
}

// unlink deletes the file at key in the directory at prefix.
func (d *dirNode) unlink(key, prefix string) syscall.Errno {
	pending := d.pg.pendingFile(key) != nil // before the tree; see listDir
	var keep []journal.Op
	err := d.pg.view(func(p *store.Page, head *store.Commit, t *btree.Tree) error {
		_, inTree, err := t.Get(key)
		if err != nil {
			return err
		}
		if !inTree && !pending {
			return syscall.ENOENT
		}
		keep, err = keepParent(t, prefix, key)
		return err
	})
	if err != nil {
		return errno("unlink", err)
	}
	d.pg.dropPending(key)
	if d.pg.tx == nil && len(keep) == 0 {
		// A pending file's close may still be queued: the delete goes
		// after it even if the tree does not have the key yet.
		return errno("unlink", d.pg.queueDelete(key))
	}
	ops := append([]journal.Op{{Key: key, Delete: true}}, keep...)
	return errno("unlink", d.pg.apply(false, ops...))
}

func (d *dirNode) Create(ctx context.Context, name string, flags uint32, mode uint32, out *fuse.EntryOut) (*gofs.Inode, gofs.FileHandle, uint32, syscall.Errno) {
	if d.pg.readOnly() {
		return nil, nil, 0, syscall.EROFS
	}
	key, coll, err := d.childKey(name)
	if err != nil || coll {
		return nil, nil, 0, syscall.EINVAL
	}
	isDir := false
	err = d.pg.view(func(p *store.Page, head *store.Commit, t *btree.Tree) error {
		var err error
		isDir, err = hasPrefixKey(t, key+"/")
		return err
	})
	if err != nil {
		return nil, nil, 0, errno("create", err)
	}
	if isDir {
		return nil, nil, 0, syscall.EISDIR
	}
	ch := d.newFile(ctx, key, syscall.S_IFREG)
	f := ch.Operations().(*fileNode)
	h, errno := f.create(key, syscall.S_IFREG|mode&0o7777)
	if errno != 0 {
		return nil, nil, 0, errno
	}
	if errno := f.fillAttrAt(key, &out.Attr); errno != 0 {
		return nil, nil, 0, errno
	}
	return ch, h, 0, 0
}

func (d *dirNode) Symlink(ctx context.Context, target, name string, out *fuse.EntryOut) (*gofs.Inode, syscall.Errno) {
	if d.pg.readOnly() {
		return nil, syscall.EROFS
	}
	key, eno := d.freeName("symlink", name)
	if eno != 0 {
		return nil, eno
	}
	e := btree.Entry{Value: emptyValue, Meta: btree.Meta{Size: uint64(len(target)), Mode: syscall.S_IFLNK | 0o777, MtimeNs: nowNs(), HasMtime: true, Symlink: target}}
	if err := d.pg.apply(false, journal.Op{Key: key, Entry: e}); err != nil {
		return nil, errno("symlink", err)
	}
	ch := d.newFile(ctx, key, syscall.S_IFLNK)
	return ch, ch.Operations().(*fileNode).fillAttrAt(key, &out.Attr)
}

// Link refuses hard links: an entry is one key.
func (d *dirNode) Link(ctx context.Context, target gofs.InodeEmbedder, name string, out *fuse.EntryOut) (*gofs.Inode, syscall.Errno) {
	return nil, syscall.EPERM
}

// Mknod refuses device nodes, fifos and sockets.
func (d *dirNode) Mknod(ctx context.Context, name string, mode uint32, dev uint32, out *fuse.EntryOut) (*gofs.Inode, syscall.Errno) {
	return nil, syscall.EPERM
}
