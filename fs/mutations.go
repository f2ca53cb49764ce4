package fs

import (
	"context"
	"syscall"

	gofs "github.com/hanwen/go-fuse/v2/fs"
	"github.com/hanwen/go-fuse/v2/fuse"

	"github.com/ledgerfs/ledgerfs/internal/btree"
	"github.com/ledgerfs/ledgerfs/journal"
	"github.com/ledgerfs/ledgerfs/store"
)

// freeName returns the key of a new entry called name in d: EINVAL if name
// is no key's canonical name, EEXIST if a file or directory has it.
func (d *dirNode) freeName(op, name string) (string, syscall.Errno) {
	key, coll, err := d.childKey(name)
	if err != nil || coll {
		return "", nameErrno(err, syscall.EINVAL)
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

func (d *dirNode) Mkdir(ctx context.Context, name string, mode uint32, out *fuse.EntryOut) (*gofs.Inode, syscall.Errno) {
	if d.pg.readOnly() {
		return nil, syscall.EROFS
	}
	d.pg.keys.RLock() // the key stays where it is until the entry is made
	defer d.pg.keys.RUnlock()
	key, eno := d.freeName("mkdir", name)
	if eno != 0 {
		return nil, eno
	}
	prefix, _, err := d.prefix()
	if err != nil {
		return nil, errno("mkdir", err)
	}
	parent, eno := d.parentMeta()
	if eno != 0 {
		return nil, eno
	}
	marker := dirMarker(created(ctx, syscall.S_IFDIR|mode&0o7777, parent, d.pg.fs))
	d.touch() // first, for the new marker's commit to carry (see pageRef.touch)
	if d.pg.v.queues() {
		err = d.pg.queueMkdir(prefix, key+"/", marker)
	} else {
		err = d.pg.apply(false, journal.Op{Key: key + "/", Kind: store.OpMarker, Entry: marker})
		d.pg.dirsChanged()
	}
	if err != nil {
		return nil, errno("mkdir", err)
	}
	ch := d.newDir(ctx, key+"/")
	return ch, ch.Operations().(*dirNode).attr(key+"/", &out.Attr)
}

// touch gives d mtime and ctime now: an entry was added or removed.
func (d *dirNode) touch() {
	if prefix, _, err := d.prefix(); err == nil {
		d.pg.touch(prefix)
	}
}

// parentMeta returns the metadata of d, for what is created in it.
func (d *dirNode) parentMeta() (btree.Meta, syscall.Errno) {
	prefix, _, err := d.prefix()
	if err != nil {
		return btree.Meta{}, errno("create", err)
	}
	m, _, err := d.meta(prefix)
	return m, errno("create", err)
}

// Rmdir removes an empty directory. On the live page, when the parent
// keeps its marker or other entries, the removal is queued as an unlink's
// is, and the directory shows gone until it lands: what fills a directory
// (pending files, queued markers below it) and what empties it (queued
// deletes, which the view hides) all show, so it need not wait for the
// page's queued commits, and rm -r, make clean and stress-ng --dir remove
// one directory after another without a commit each.
func (d *dirNode) Rmdir(ctx context.Context, name string) syscall.Errno {
	if d.pg.readOnly() {
		return syscall.EROFS
	}
	d.pg.keys.RLock() // nothing moves into the directory meanwhile
	defer d.pg.keys.RUnlock()
	key, coll, err := d.childKey(name)
	if err != nil || coll {
		return nameErrno(err, syscall.ENOENT)
	}
	prefix, _, err := d.prefix()
	if err != nil {
		return errno("rmdir", err)
	}
	dir := key + "/"
	// What is queued is read before the tree; see listDir.
	if d.pg.pendingUnder(dir) != nil {
		return syscall.ENOTEMPTY
	}
	queued := false // the directory's own marker
	for _, k := range d.pg.queuedMarkersUnder(dir) {
		if k != dir {
			return syscall.ENOTEMPTY
		}
		queued = true
	}
	kept := d.pg.keepsItself(prefix)
	var keep []journal.Op
	err = d.pg.view(func(p *store.Page, head *store.Commit, t *btree.Tree) error {
		it := t.Prefix(dir)
		found := queued
		for it.Next() {
			if it.Entry().Key != dir {
				return syscall.ENOTEMPTY
			}
			found = true
		}
		if it.Err() != nil {
			return it.Err()
		}
		if !found {
			if _, isFile, err := t.Get(key); err != nil {
				return err
			} else if isFile {
				return syscall.ENOTDIR
			}
			return syscall.ENOENT
		}
		if kept {
			return nil
		}
		var err error
		keep, err = keepParent(t, prefix, dir)
		return err
	})
	if err != nil {
		return errno("rmdir", err)
	}
	removed := d.removing(name, dir)
	if d.pg.v.queues() && len(keep) == 0 {
		d.pg.touch(prefix) // first, for the removal to carry it
		if err := d.pg.queueRemoveDir(prefix, dir); err != nil {
			return errno("rmdir", err)
		}
		removed(true)
		return 0
	}
	ops, err := d.pg.withTouch(prefix, append([]journal.Op{{Key: dir, Kind: store.OpDelete}}, keep...))
	if err != nil {
		return errno("rmdir", err)
	}
	err = d.pg.apply(false, ops...)
	d.pg.dirsChanged()
	if err != nil {
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
		return nameErrno(err, syscall.ENOENT)
	}
	prefix, _, err := d.prefix()
	if err != nil {
		return errno("unlink", err)
	}
	eno, linked := d.unlinkShared(name, key, prefix)
	if linked {
		// A name of a file with hard links: the file's count of names
		// changes too, with the page's keys held exclusively.
		return d.unlinkName(name, key, prefix)
	}
	return eno
}

// unlinkShared is Unlink of a file without hard links, with the page's
// keys held shared; it reports a name of a file with links, which it
// leaves for unlinkName.
func (d *dirNode) unlinkShared(name, key, prefix string) (syscall.Errno, bool) {
	d.pg.keys.RLock()
	defer d.pg.keys.RUnlock()
	var unlinked *fileNode
	live := false
	if ch := d.GetChild(name); ch != nil {
		if f, ok := ch.Operations().(*fileNode); ok {
			live = f.markUnlinked()
			unlinked = f
		}
	}
	eno, linked := d.unlink(key, prefix, live)
	switch {
	case eno == 0 && !linked:
		d.pg.fs.inos.release(d.pg.id('f', key))
	case unlinked != nil:
		unlinked.setUnlinked(false)
	}
	return eno, linked
}

// unlink deletes the file at key in the directory at prefix, unless it is
// a name of a file with hard links, which it reports. live: the name's
// node is a file created here and not yet unlinked, which the caller has
// marked unlinked. Its name is pending until its first commit lands, but
// the mark lets what ends a writer (a release, the intents timer's end of
// a close left to it) drop that name before it is looked for here: the
// file is there all the same.
func (d *dirNode) unlink(key, prefix string, live bool) (eno syscall.Errno, linked bool) {
	pending := d.pg.pendingFile(key) != nil // before the tree; see listDir
	kept := d.pg.keepsItself(prefix)
	var keep []journal.Op
	inTree := false
	err := d.pg.view(func(p *store.Page, head *store.Commit, t *btree.Tree) error {
		e, in, err := t.Get(key)
		if err != nil {
			return err
		}
		inTree = in
		if !inTree && !pending && !live {
			return syscall.ENOENT
		}
		if linked = inTree && e.Meta.Link != ""; linked || kept {
			return nil
		}
		keep, err = keepParent(t, prefix, key)
		return err
	})
	if err != nil || linked {
		return errno("unlink", err), linked
	}
	if !inTree && !pending {
		// live: the name was only the pending one of a file never
		// committed, which its last writer's end dropped after the mark.
		// There is nothing to delete, and so no delete to fail and
		// leave the kernel a name that is gone.
		d.pg.touch(prefix)
		return 0, false
	}
	d.pg.dropPending(key)
	if d.pg.v.queues() && len(keep) == 0 {
		// A pending file's close may still be queued: the delete goes
		// after it even if the tree does not have the key yet. The touch
		// goes first, for the delete to carry it.
		d.pg.touch(prefix)
		return errno("unlink", d.pg.queueDelete(key)), false
	}
	ops, err := d.pg.withTouch(prefix, append([]journal.Op{{Key: key, Kind: store.OpDelete}}, keep...))
	if err != nil {
		return errno("unlink", err), false
	}
	return errno("unlink", d.pg.apply(false, ops...)), false
}

func (d *dirNode) Create(ctx context.Context, name string, flags uint32, mode uint32, out *fuse.EntryOut) (*gofs.Inode, gofs.FileHandle, uint32, syscall.Errno) {
	if d.pg.readOnly() {
		return nil, nil, 0, syscall.EROFS
	}
	d.pg.letCollectionIn()
	d.pg.yieldHistory(0, false)
	d.pg.keys.RLock() // the key stays where it is until the entry is made
	defer d.pg.keys.RUnlock()
	key, coll, err := d.childKey(name)
	if err != nil || coll {
		return nil, nil, 0, nameErrno(err, syscall.EINVAL)
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
	parent, eno := d.parentMeta()
	if eno != 0 {
		return nil, nil, 0, eno
	}
	ch := d.newFile(ctx, key, syscall.S_IFREG)
	f := ch.Operations().(*fileNode)
	h, eno := f.create(ctx, key, created(ctx, syscall.S_IFREG|mode&0o7777, parent, d.pg.fs))
	if eno != 0 {
		return nil, nil, 0, eno
	}
	d.touch()
	if eno := f.fillAttrAt(key, &out.Attr); eno != 0 {
		return nil, nil, 0, eno
	}
	return ch, h, 0, 0
}

func (d *dirNode) Symlink(ctx context.Context, target, name string, out *fuse.EntryOut) (*gofs.Inode, syscall.Errno) {
	if d.pg.readOnly() {
		return nil, syscall.EROFS
	}
	d.pg.keys.RLock() // the key stays where it is until the entry is made
	defer d.pg.keys.RUnlock()
	key, eno := d.freeName("symlink", name)
	if eno != 0 {
		return nil, eno
	}
	parent, eno := d.parentMeta()
	if eno != 0 {
		return nil, eno
	}
	m := created(ctx, syscall.S_IFLNK|0o777, parent, d.pg.fs)
	m.Size, m.Symlink = uint64(len(target)), target
	return d.makeEntry(ctx, "symlink", key, m, out)
}

// makeEntry commits a new entry with no content (a symbolic link, a fifo, a
// socket or a device node) at key and returns its node.
func (d *dirNode) makeEntry(ctx context.Context, op, key string, m btree.Meta, out *fuse.EntryOut) (*gofs.Inode, syscall.Errno) {
	ops := []journal.Op{{Key: key, Entry: btree.Entry{Value: emptyValue, Meta: m}}}
	prefix, _, err := d.prefix()
	if err == nil {
		ops, err = d.pg.withTouch(prefix, ops)
	}
	if err != nil {
		return nil, errno(op, err)
	}
	if err := d.pg.apply(false, ops...); err != nil {
		return nil, errno(op, err)
	}
	ch := d.newFile(ctx, key, m.Mode)
	return ch, ch.Operations().(*fileNode).fillAttrAt(key, &out.Attr)
}

// Mknod makes a fifo, a socket or a device node: an entry with its mode and
// device number and no content. The kernel serves their opens itself.
func (d *dirNode) Mknod(ctx context.Context, name string, mode uint32, dev uint32, out *fuse.EntryOut) (*gofs.Inode, syscall.Errno) {
	if d.pg.readOnly() {
		return nil, syscall.EROFS
	}
	d.pg.keys.RLock() // the key stays where it is until the entry is made
	defer d.pg.keys.RUnlock()
	switch mode & syscall.S_IFMT {
	case syscall.S_IFIFO, syscall.S_IFSOCK, syscall.S_IFCHR, syscall.S_IFBLK:
	case syscall.S_IFREG, 0:
		// mknod(2) makes an empty regular file too.
		mode = syscall.S_IFREG | mode&0o7777
	default:
		return nil, syscall.EINVAL
	}
	key, eno := d.freeName("mknod", name)
	if eno != 0 {
		return nil, eno
	}
	parent, eno := d.parentMeta()
	if eno != 0 {
		return nil, eno
	}
	m := created(ctx, mode, parent, d.pg.fs)
	if t := mode & syscall.S_IFMT; t == syscall.S_IFCHR || t == syscall.S_IFBLK {
		m.Rdev = dev
	}
	return d.makeEntry(ctx, "mknod", key, m, out)
}
