package fs

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"syscall"

	gofs "github.com/hanwen/go-fuse/v2/fs"
	"github.com/hanwen/go-fuse/v2/fuse"

	"github.com/ledgerfs/ledgerfs/internal/btree"
	"github.com/ledgerfs/ledgerfs/journal"
	"github.com/ledgerfs/ledgerfs/store"
)

// Hard links. A file with more than one name lives in one entry at a link
// key (btree.LinkPrefix, hidden from listings), holding its content and
// metadata with the count of its names (Meta.Nlink); each name is an entry
// with an empty value whose Meta.Link is that key. The file's node works on
// the link key: a write, chmod or xattr through any name changes the one
// entry, in one commit, and every name shows it. A file gets its link key at
// its first link(2) and keeps it while it has names, also when one is left.

// newLinkKey makes the key of a file's entry once it has hard links.
func newLinkKey() string {
	var b [8]byte
	rand.Read(b[:])
	return btree.LinkPrefix + hex.EncodeToString(b[:])
}

// linkName is the entry of a name of the file at link key g, of type mode.
func linkName(key, g string, mode uint32) btree.Entry {
	return btree.Entry{Key: key, Value: emptyValue, Meta: btree.Meta{Mode: mode & syscall.S_IFMT, Link: g}}
}

// setLinked gives the node its file's link key, and makes it the node a
// transaction's change of that key reaches (pageRef.catchUp), unless the
// kernel holds another: a lookup's new node of a file the kernel knows by
// another name is dropped for the one it knows (go-fuse finds it by its
// number).
func (f *fileNode) setLinked(g string) {
	f.linked.Store(&g)
	pg := f.pg
	pg.mu.Lock()
	defer pg.mu.Unlock()
	if pg.linkNodes == nil {
		pg.linkNodes = map[string]*fileNode{}
	}
	if _, held := pg.linkNodes[g]; !held {
		pg.linkNodes[g] = f
	}
}

// linkNode returns the node the kernel holds of the file at link key g.
func (pg *pageRef) linkNode(g string) *fileNode {
	pg.mu.Lock()
	defer pg.mu.Unlock()
	return pg.linkNodes[g]
}

// linkChangedBehind takes a transaction's change of the file at link key g
// to the node of the file, if the kernel holds one: it stays the file its
// names show, with what the transaction left, or is gone with them.
func (pg *pageRef) linkChangedBehind(ch btree.Change, ts int64) {
	f := pg.linkNode(ch.Key)
	if f == nil {
		return
	}
	f.mu.Lock()
	if ch.After == nil {
		f.unlinked = true
	} else {
		f.takeMeta(ch.After.Meta, ts)
	}
	f.mu.Unlock()
	f.EmbeddedInode().NotifyContent(0, 0)
}

// linkKey returns the node's link key, if it has one.
func (f *fileNode) linkKey() (string, bool) {
	if g := f.linked.Load(); g != nil {
		return *g, true
	}
	return "", false
}

// Link gives a file of the page another name. The file's entry moves to a
// link key at its first link, its names pointing at it; one commit does
// it. Across pages (or views) it is EXDEV; a directory, EPERM.
func (d *dirNode) Link(ctx context.Context, target gofs.InodeEmbedder, name string, out *fuse.EntryOut) (*gofs.Inode, syscall.Errno) {
	if d.pg.readOnly() {
		return nil, syscall.EROFS
	}
	f, ok := target.(*fileNode)
	if !ok {
		if _, dir := target.(*dirNode); dir {
			return nil, syscall.EPERM
		}
		return nil, syscall.EXDEV
	}
	if f.pg != d.pg || f.fixed {
		return nil, syscall.EXDEV
	}
	key, coll, err := d.childKey(name)
	if err != nil || coll {
		return nil, nameErrno(err, syscall.EEXIST)
	}
	prefix, _, err := d.prefix()
	if err != nil {
		return nil, errno("link", err)
	}
	// As a rename: no change computes a key while the file's entry moves.
	d.pg.keys.Lock()
	defer d.pg.keys.Unlock()
	if eno := d.pg.commitThenSettle("link", f); eno != 0 {
		return nil, eno
	}
	if d.pg.pendingFile(key) != nil {
		return nil, syscall.EEXIST
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	src, ok := f.key()
	if !ok || f.unlinked {
		return nil, syscall.ENOENT
	}
	var ops []journal.Op
	var g string
	var ge btree.Entry
	var ts int64
	err = d.pg.view(func(p *store.Page, head *store.Commit, t *btree.Tree) error {
		if _, taken, err := t.Get(key); err != nil || taken {
			return orErr(err, syscall.EEXIST)
		}
		if dir, err := hasPrefixKey(t, key+"/"); err != nil || dir {
			return orErr(err, syscall.EEXIST)
		}
		e, found, err := t.Get(src)
		if err != nil || !found {
			return orErr(err, syscall.ENOENT)
		}
		g, ge = src, e
		if !btree.IsLinkKey(src) {
			g = newLinkKey()
			ge.Key, ge.Meta.Nlink = g, 1
			ops = append(ops, journal.Op{Key: src, Entry: linkName(src, g, e.Meta.FileMode())})
		}
		ge.Meta.Nlink++
		ge.Meta.CtimeNs, ge.Meta.HasCtime = nowNs(), true
		if !ge.Meta.HasMtime {
			ts = d.pg.shownTime(p, head)
		}
		ops = append(ops, journal.Op{Key: g, Entry: ge}, journal.Op{Key: key, Entry: linkName(key, g, ge.Meta.FileMode())})
		return nil
	})
	if err == nil {
		ops, err = d.pg.withTouch(prefix, ops)
	}
	if err == nil {
		err = d.pg.apply(false, ops...)
	}
	if err != nil {
		return nil, errno("link", err)
	}
	if g != src {
		f.pg.fs.inos.move(f.pg.id('f', src), f.pg.id('f', g), false)
		f.setLinked(g)
		if f.placed == src {
			f.placed = g
		}
	}
	if f.c == nil {
		f.meta, f.metaTs = ge.Meta, ts
	} else {
		f.meta.Nlink, f.meta.CtimeNs, f.meta.HasCtime = ge.Meta.Nlink, ge.Meta.CtimeNs, true
	}
	fileAttr(d.pg.fs, &out.Attr, f.StableAttr().Ino, ge.Meta, ts)
	return f.EmbeddedInode(), 0
}

// orErr is err, or otherwise if err is nil.
func orErr(err error, otherwise error) error {
	if err != nil {
		return err
	}
	return otherwise
}

// dropName returns the ops that take one name from the file at link key g
// (the name's own delete is the caller's), and how many names the file has
// left. The last name takes the file's entry with it.
func dropName(t *btree.Tree, g string) ([]journal.Op, uint32, error) {
	ge, found, err := t.Get(g)
	if err != nil || !found {
		return nil, 0, err
	}
	if ge.Meta.Nlink <= 1 {
		return []journal.Op{{Key: g, Kind: store.OpRenameDelete}}, 0, nil
	}
	ge.Meta.Nlink--
	ge.Meta.CtimeNs, ge.Meta.HasCtime = nowNs(), true
	return []journal.Op{{Key: g, Entry: ge}}, ge.Meta.Nlink, nil
}

// nameDropped brings the node of the file at link key g, if the kernel
// holds one, to the nlink names a removal left it; with none left, the
// file lives on only for its descriptors and its inode number is free.
func (pg *pageRef) nameDropped(g string, nlink uint32) {
	if nlink == 0 {
		pg.fs.inos.release(pg.id('f', g))
	}
	f := pg.linkNode(g)
	if f == nil {
		return
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if nlink == 0 {
		f.unlinked = true
	} else {
		f.meta.Nlink = nlink
	}
}

// unlinkName removes a name of a file with hard links: the name's entry
// goes and the file's count of names drops, in one commit, with the page's
// keys held as by a rename.
func (d *dirNode) unlinkName(name, key, prefix string) syscall.Errno {
	d.pg.keys.Lock()
	defer d.pg.keys.Unlock()
	if eno := d.pg.commitThenSettle("unlink"); eno != 0 {
		return eno
	}
	var ops []journal.Op
	var left uint32
	var g string
	err := d.pg.view(func(p *store.Page, head *store.Commit, t *btree.Tree) error {
		e, found, err := t.Get(key)
		if err != nil || !found {
			return orErr(err, syscall.ENOENT)
		}
		g = e.Meta.Link
		ops = []journal.Op{{Key: key, Kind: store.OpRenameDelete}}
		if g != "" {
			var more []journal.Op
			if more, left, err = dropName(t, g); err != nil {
				return err
			}
			ops = append(ops, more...)
		}
		keep, err := keepParent(t, prefix, key)
		ops = append(ops, keep...)
		return err
	})
	if err == nil {
		ops, err = d.pg.withTouch(prefix, ops)
	}
	if err == nil {
		err = d.pg.apply(false, ops...)
	}
	if err != nil {
		return errno("unlink", err)
	}
	if g != "" {
		d.pg.nameDropped(g, left)
		return 0
	}
	// No longer a name of a linked file when its turn came: a file of its
	// own, unlinked as Unlink does.
	if ch := d.GetChild(name); ch != nil {
		if f, ok := ch.Operations().(*fileNode); ok {
			f.setUnlinked(true)
		}
	}
	d.pg.fs.inos.release(d.pg.id('f', key))
	return 0
}
