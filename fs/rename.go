package fs

import (
	"context"
	"strings"
	"syscall"

	gofs "github.com/hanwen/go-fuse/v2/fs"

	"github.com/ledgerfs/ledgerfs/internal/btree"
	"github.com/ledgerfs/ledgerfs/journal"
	"github.com/ledgerfs/ledgerfs/store"
)

const (
	renameNoReplace = 1
	renameExchange  = 2
)

// Rename moves a file or a directory within a page as one commit, replacing
// the target as POSIX says (the editors' save pattern). Across pages it is
// EXDEV, so that mv falls back to copy and delete.
func (d *dirNode) Rename(ctx context.Context, name string, newParent gofs.InodeEmbedder, newName string, flags uint32) syscall.Errno {
	if d.pg.readOnly() {
		return syscall.EROFS
	}
	nd, ok := newParent.(*dirNode)
	if !ok || nd.pg != d.pg {
		return syscall.EXDEV
	}
	if flags&renameExchange != 0 || flags&^uint32(renameNoReplace) != 0 {
		return syscall.EINVAL
	}
	src, scoll, err := d.childKey(name)
	if err != nil {
		return nameErrno(err, syscall.ENOENT)
	}
	dst, dcoll, err := nd.childKey(newName)
	if err != nil || dcoll {
		return nameErrno(err, syscall.EINVAL)
	}
	if src == dst {
		return 0
	}
	srcParent, _, err := d.prefix()
	if err != nil {
		return errno("rename", err)
	}
	// No change lands at a key being moved until the move is recorded (see
	// pageRef.keys): a close racing the rename is moved with the file or
	// commits at its new key.
	d.pg.keys.Lock()
	defer d.pg.keys.Unlock()
	moved := d.GetChild(name)
	if !scoll {
		// A queued rename moves a regular file between names no
		// directory holds: every directory keeps its count of
		// subdirectories (see dirNode.subdirs), which a recount after
		// each rename made cost a step per name of the directory.
		if eno, done := d.queueRename(moved, name, src, nd, newName, dst, flags&renameNoReplace != 0, srcParent); done {
			return eno
		}
	}
	if eno := d.commitMoving(moved, src); eno != 0 {
		return eno
	}
	dstParent, _, err := nd.prefix()
	if err != nil {
		return errno("rename", err)
	}
	r := renaming{src: src, dst: dst, srcParent: srcParent, dstParent: dstParent, whole: !scoll, noReplace: flags&renameNoReplace != 0}
	if err := d.pg.view(func(p *store.Page, head *store.Commit, t *btree.Tree) error { return r.plan(t) }); err != nil {
		return errno("rename", err)
	}
	if r.same {
		return 0
	}
	if r.srcIsDir {
		// A file's move leaves every count of subdirectories as it was
		// (keepParent keeps the directory it leaves).
		defer d.pg.dirsChanged()
	}
	// Both directories' mtime and ctime change.
	for _, dir := range []string{srcParent, dstParent} {
		if r.ops, err = d.pg.withTouch(dir, r.ops); err != nil {
			return errno("rename", err)
		}
	}
	return d.applyRename(&r, moved, name, nd, newName)
}

// commitMoving commits what is written to the files a rename of src moves
// (the node moved, the files pending under it), so that the rename moves
// their content, and waits for the commits queued before (see
// commitThenSettle).
func (d *dirNode) commitMoving(moved *gofs.Inode, src string) syscall.Errno {
	var files []*fileNode
	if moved != nil {
		if f, ok := moved.Operations().(*fileNode); ok {
			files = append(files, f)
		}
	}
	for _, f := range d.pg.pendingUnder(src + "/") {
		files = append(files, f)
	}
	return d.pg.commitThenSettle("rename", files...)
}

// renaming is one rename: its keys, and what plan found it to be.
type renaming struct {
	src, dst             string
	srcParent, dstParent string
	whole                bool // src names a directory too, not only a file's collision name
	noReplace            bool // RENAME_NOREPLACE
	ops                  []journal.Op
	srcIsDir, dstIsDir   bool
	// With hard links: the file the source name points at, and the one
	// the target name did, which loses a name (dstLeft: the names it has
	// left).
	srcLink, dstLink string
	dstLeft          uint32
	same             bool // two names of one file: POSIX does nothing
}

// plan reads the head t and makes the rename's ops, or says why it cannot
// be done: the errnos rename(2) gives.
func (r *renaming) plan(t *btree.Tree) error {
	src, dst := r.src, r.dst
	se, srcFile, err := t.Get(src)
	if err != nil {
		return err
	}
	srcDir, err := hasPrefixKey(t, src+"/")
	if err != nil {
		return err
	}
	de, dstFile, err := t.Get(dst)
	if err != nil {
		return err
	}
	dstDir, err := hasPrefixKey(t, dst+"/")
	if err != nil {
		return err
	}
	switch {
	case srcDir && r.whole:
		if err := r.planDir(t, dstFile, dstDir); err != nil {
			return err
		}
	case srcFile:
		if dstDir {
			return syscall.EISDIR
		}
		if dstFile && r.noReplace {
			return syscall.EEXIST
		}
		r.srcLink, r.dstLink = se.Meta.Link, de.Meta.Link
		if dstFile && r.dstLink != "" {
			if r.dstLink == r.srcLink {
				r.same = true
				return nil
			}
			more, left, err := dropName(t, r.dstLink)
			if err != nil {
				return err
			}
			r.ops, r.dstLeft = append(r.ops, more...), left
		}
		r.ops = append(r.ops, journal.Op{Key: src, Kind: store.OpRenameDelete}, journal.Op{Key: dst, Entry: se})
	default:
		return syscall.ENOENT
	}
	gone := src
	if r.srcIsDir {
		gone = src + "/"
	}
	keep, err := keepParent(t, r.srcParent, gone)
	// The moved entry may land in the directory it leaves.
	if len(keep) > 0 && !strings.HasPrefix(dst, r.srcParent) {
		r.ops = append(r.ops, keep...)
	}
	return err
}

// planDir plans the move of directory src: every key under it, over an
// empty directory dst if there is one.
func (r *renaming) planDir(t *btree.Tree, dstFile, dstDir bool) error {
	src, dst := r.src, r.dst
	r.srcIsDir = true
	if dstFile {
		return syscall.ENOTDIR
	}
	if strings.HasPrefix(dst+"/", src+"/") {
		return syscall.EINVAL // into itself
	}
	if dstDir {
		if r.noReplace {
			return syscall.EEXIST
		}
		r.dstIsDir = true
		it := t.Prefix(dst + "/")
		for it.Next() {
			if it.Entry().Key != dst+"/" {
				return syscall.ENOTEMPTY
			}
			r.ops = append(r.ops, journal.Op{Key: dst + "/", Kind: store.OpRenameDelete})
		}
		if it.Err() != nil {
			return it.Err()
		}
	}
	it := t.Prefix(src + "/")
	for it.Next() {
		e := it.Entry()
		nk := dst + "/" + e.Key[len(src)+1:]
		r.ops = append(r.ops, journal.Op{Key: e.Key, Kind: store.OpRenameDelete}, journal.Op{Key: nk, Entry: e})
	}
	return it.Err()
}

// applyRename commits the planned rename and brings the nodes and inode
// numbers along: a file it replaced no longer commits itself back nor shows
// what its key holds (one with names left loses this one), an empty
// directory it replaced is removed, and the moved node's key is the new one
// until go-fuse has moved it.
func (d *dirNode) applyRename(r *renaming, moved *gofs.Inode, name string, nd *dirNode, newName string) syscall.Errno {
	var replaced *fileNode
	if ch := nd.GetChild(newName); ch != nil {
		if f, ok := ch.Operations().(*fileNode); ok && r.dstLeft == 0 {
			f.setUnlinked(true)
			replaced = f
		}
	}
	removedDir := func(bool) {}
	if r.dstIsDir {
		removedDir = nd.removing(newName, r.dst+"/")
	}
	if err := d.pg.apply(false, r.ops...); err != nil {
		if replaced != nil {
			replaced.setUnlinked(false)
		}
		return errno("rename", err)
	}
	removedDir(false)
	if r.dstLink != "" {
		d.pg.nameDropped(r.dstLink, r.dstLeft)
	}
	if moved != nil {
		d.pg.moves.add(moved, d.EmbeddedInode(), name, nd.EmbeddedInode(), newName)
	}
	d.pg.forgetAtimes(r.src)
	d.pg.forgetAtimes(r.dst)
	inos := &d.pg.fs.inos
	switch {
	case r.srcIsDir:
		inos.move(d.pg.id('d', r.src+"/"), d.pg.id('d', r.dst+"/"), true)
		inos.move(d.pg.id('f', r.src+"/"), d.pg.id('f', r.dst+"/"), true)
	case r.srcLink != "":
		// The moved node's number is its file's; the replaced file's
		// stays with it until the kernel forgets it.
		inos.release(d.pg.id('f', r.dst))
	default:
		inos.move(d.pg.id('f', r.src), d.pg.id('f', r.dst), false)
	}
	return 0
}
