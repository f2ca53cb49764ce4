package fs

import (
	"syscall"

	gofs "github.com/hanwen/go-fuse/v2/fs"

	"github.com/ledgerfs/ledgerfs/internal/btree"
	"github.com/ledgerfs/ledgerfs/journal"
	"github.com/ledgerfs/ledgerfs/store"
)

// queueRename renames a regular file as a queued change, as a close is:
// the write-to-a-temporary-then-rename of rsync, editors and package
// managers then costs no commit of its own, where waiting for the close's
// commit and then its own took 2 ms a file, and a file moved to another
// directory of the page no more. It applies to the plain case only, and
// reports whether it did: no hard links, no directory at either name, the
// live page. Called with the page's keys held exclusively.
func (d *dirNode) queueRename(moved *gofs.Inode, name, src string, nd *dirNode, newName, dst string, noReplace bool, parent string) (syscall.Errno, bool) {
	if !d.pg.v.queues() || moved == nil {
		return 0, false
	}
	newParent := parent
	if nd != d {
		var err error
		if newParent, _, err = nd.prefix(); err != nil {
			return errno("rename", err), true
		}
	}
	f, ok := moved.Operations().(*fileNode)
	if !ok || f.StableAttr().Mode&syscall.S_IFMT != syscall.S_IFREG || f.linked.Load() != nil {
		return 0, false
	}
	pg := d.pg
	if pg.dirShown(src+"/") || pg.dirShown(dst+"/") {
		return 0, false
	}
	replaced := pg.pendingFile(dst)
	var se btree.Entry
	var srcInTree, plain bool
	err := pg.view(func(p *store.Page, head *store.Commit, t *btree.Tree) error {
		var err error
		if se, srcInTree, err = t.Get(src); err != nil {
			return err
		}
		de, dstInTree, err := t.Get(dst)
		if err != nil {
			return err
		}
		srcDir, err := hasPrefixKey(t, src+"/")
		if err != nil {
			return err
		}
		dstDir, err := hasPrefixKey(t, dst+"/")
		if err != nil {
			return err
		}
		taken := dstInTree || replaced != nil
		plain = !srcDir && !dstDir && !(taken && noReplace) &&
			!(srcInTree && se.Meta.Link != "") && !(dstInTree && de.Meta.Link != "")
		return nil
	})
	if err != nil {
		return errno("rename", err), true
	}
	pending := pg.pendingFile(src) == f
	if !plain || !(pending || srcInTree) {
		return 0, false
	}
	// What is written to the file goes first, at its old name.
	if eno := f.commitHeld(commitQueue); eno != 0 {
		return eno, true
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	e := se
	if pg.pendingFile(src) == f {
		switch {
		case f.committed > 0:
			// Its close is queued, not landed: the entry it will put.
			m := f.meta
			m.Size = uint64(f.latestSize)
			e = btree.Entry{Value: f.latest, Meta: m}
		case f.moved != nil:
			// Its rename is queued, not landed: the entry it will put.
			e = *f.moved
		default:
			// Created and never committed (open, nothing written): no
			// value yet; the rename goes through the head.
			return 0, false
		}
	}
	e.Key = dst
	// Shown at its new name until the move lands, with its content
	// loaded (a pending file shows through it).
	if eno := f.beginChange(); eno != 0 {
		return eno, true
	}
	if ch := nd.GetChild(newName); ch != nil {
		if g, ok := ch.Operations().(*fileNode); ok && g != f {
			g.setUnlinked(true)
		}
	}
	// First, for the move to carry them: both directories' times change.
	pg.touch(parent)
	if newParent != parent {
		pg.touch(newParent)
	}
	ops := []journal.Op{{Key: src, Kind: store.OpRenameDelete}, {Key: dst, Entry: e}}
	if err := f.queueMove(src, dst, ops); err != nil {
		f.endChange()
		return errno("rename", err), true
	}
	f.moved = &e
	pg.moves.add(moved, d.EmbeddedInode(), name, nd.EmbeddedInode(), newName)
	pg.forgetAtimes(src)
	pg.forgetAtimes(dst)
	pg.fs.inos.move(pg.id('f', src), pg.id('f', dst), false)
	return 0, true
}
