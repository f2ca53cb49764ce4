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
	defer d.pg.dirsChanged()
	// Commit what is written to the files being moved, so that the rename
	// moves their content.
	moved := d.GetChild(name)
	if moved != nil {
		if f, ok := moved.Operations().(*fileNode); ok {
			if eno := f.commitHeld(commitWait); eno != 0 {
				return eno
			}
		}
	}
	for _, f := range d.pg.pendingUnder(src + "/") {
		if eno := f.commitHeld(commitWait); eno != 0 {
			return eno
		}
	}
	// After those commits: a close that returned before the rename, or
	// that these commits waited for, has queued its commit by now.
	if err := d.pg.settle(); err != nil {
		return errno("rename", err)
	}

	dstParent, _, err := nd.prefix()
	if err != nil {
		return errno("rename", err)
	}
	var ops []journal.Op
	srcIsDir, dstIsDir := false, false
	// With hard links: the file the source name points at, and the one
	// the target name did, which loses a name.
	var srcLink, dstLink string
	dstLeft, same := false, false
	err = d.pg.view(func(p *store.Page, head *store.Commit, t *btree.Tree) error {
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
		case srcDir && !scoll:
			srcIsDir = true
			if dstFile {
				return syscall.ENOTDIR
			}
			if strings.HasPrefix(dst+"/", src+"/") {
				return syscall.EINVAL // into itself
			}
			if dstDir {
				if flags&renameNoReplace != 0 {
					return syscall.EEXIST
				}
				dstIsDir = true
				it := t.Prefix(dst + "/")
				for it.Next() {
					if it.Entry().Key != dst+"/" {
						return syscall.ENOTEMPTY
					}
					ops = append(ops, journal.Op{Key: dst + "/", Delete: true})
				}
				if it.Err() != nil {
					return it.Err()
				}
			}
			it := t.Prefix(src + "/")
			for it.Next() {
				e := it.Entry()
				nk := dst + "/" + e.Key[len(src)+1:]
				ops = append(ops, journal.Op{Key: e.Key, Delete: true}, journal.Op{Key: nk, Entry: e})
			}
			if it.Err() != nil {
				return it.Err()
			}
		case srcFile:
			if dstDir {
				return syscall.EISDIR
			}
			if dstFile && flags&renameNoReplace != 0 {
				return syscall.EEXIST
			}
			srcLink, dstLink = se.Meta.Link, de.Meta.Link
			if dstFile && dstLink != "" {
				if dstLink == srcLink {
					same = true // two names of one file: POSIX does nothing
					return nil
				}
				more, left, err := dropName(t, dstLink)
				if err != nil {
					return err
				}
				ops, dstLeft = append(ops, more...), left
			}
			ops = append(ops, journal.Op{Key: src, Delete: true}, journal.Op{Key: dst, Entry: se})
		default:
			return syscall.ENOENT
		}
		gone := src
		if srcIsDir {
			gone = src + "/"
		}
		keep, err := keepParent(t, srcParent, gone)
		// The moved entry may land in the directory it leaves.
		if len(keep) > 0 && !strings.HasPrefix(dst, srcParent) {
			ops = append(ops, keep...)
		}
		return err
	})
	// Both directories' mtime and ctime change.
	for _, dir := range []string{srcParent, dstParent} {
		if err == nil {
			ops, err = d.pg.withTouch(dir, ops)
		}
	}
	if err != nil {
		return errno("rename", err)
	}
	if same {
		return 0
	}
	// A file replaced by the rename must not commit itself back, nor show
	// what its key holds once the rename lands; one with names left loses
	// this one.
	var replaced, renamed *fileNode
	if ch := nd.GetChild(newName); ch != nil {
		if f, ok := ch.Operations().(*fileNode); ok && !dstLeft {
			f.setUnlinked(true)
			replaced = f
		} else if ok {
			renamed = f
		}
	}
	// So is an empty directory it replaces.
	removedDir := func(bool) {}
	if dstIsDir {
		removedDir = nd.removing(newName, dst+"/")
	}
	if err := d.pg.apply(false, ops...); err != nil {
		if replaced != nil {
			replaced.setUnlinked(false)
		}
		return errno("rename", err)
	}
	removedDir(false)
	if renamed != nil {
		renamed.mu.Lock()
		renamed.meta.Nlink = max(1, renamed.meta.Nlink) - 1
		renamed.mu.Unlock()
	}
	if moved != nil {
		d.pg.moves.add(moved, d.EmbeddedInode(), name, nd.EmbeddedInode(), newName)
	}
	d.pg.forgetAtimes(src)
	d.pg.forgetAtimes(dst)
	inos := &d.pg.fs.inos
	if srcIsDir {
		inos.move(d.pg.id('d', src+"/"), d.pg.id('d', dst+"/"), true)
		inos.move(d.pg.id('f', src+"/"), d.pg.id('f', dst+"/"), true)
	} else if srcLink != "" {
		// The moved node's number is its file's; the replaced file's
		// stays with it until the kernel forgets it.
		inos.release(d.pg.id('f', dst))
	} else {
		inos.move(d.pg.id('f', src), d.pg.id('f', dst), false)
	}
	if dstLink != "" && !dstLeft {
		inos.release(d.pg.id('f', dstLink))
	}
	return 0
}
