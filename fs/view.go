package fs

import (
	"syscall"

	"github.com/ledgerfs/ledgerfs/internal/btree"
	"github.com/ledgerfs/ledgerfs/journal"
	"github.com/ledgerfs/ledgerfs/store"
)

// A view is the role of a page directory: the live page (liveView), one
// commit, read-only (snapshotView), or an open transaction (txnView). The
// roles differ in what the directory reads, how a change is made and
// whether it may wait in a queue; what they share (names, open files,
// queued changes) is pageRef's.
type view interface {
	// read runs fn with the page, the commit the view shows (the head, a
	// snapshot's commit or a transaction's base) and the tree as the view
	// shows it.
	read(pg *pageRef, fn func(p *store.Page, head *store.Commit, t *btree.Tree) error) error
	// apply makes the changes: committed through the page's implicit
	// journal, or recorded in the transaction's journal.
	apply(pg *pageRef, sync bool, ops []journal.Op) error
	// queues reports whether a change may be queued for the page's
	// committer and shown until it lands, rather than applied before the
	// operation returns.
	queues() bool
	// readOnly reports whether the view refuses every change.
	readOnly() bool
	// showsHistory reports whether the view's root has .ledger.
	showsHistory() bool
	// timeOf is the time the view shows for the page itself (its root, its
	// directories without a marker, .ledger).
	timeOf(pg *pageRef, p *store.Page, head *store.Commit) int64
}

// liveView is the page as it is: the head, with what is queued.
type liveView struct{}

func (liveView) read(pg *pageRef, fn func(p *store.Page, head *store.Commit, t *btree.Tree) error) error {
	p, err := pg.acquire()
	if err != nil {
		return err
	}
	defer pg.release(p)
	// Queued deletes are read before the head, as pending files are: one
	// that lands in between is then in the head already.
	pg.mu.Lock()
	gone := pg.ov.goneNow()
	pg.mu.Unlock()
	head, err := p.Head()
	if err != nil {
		return err
	}
	t := p.Tree(head)
	if gone.Len() > 0 {
		t = t.Hiding(func(key string) bool {
			_, ok := gone.Get(key)
			return ok
		})
	}
	return fn(p, head, t)
}

func (liveView) apply(pg *pageRef, sync bool, ops []journal.Op) error {
	if len(ops) == 0 {
		// A wait for what is queued: the touches waiting are part of it,
		// and go first, so the wait stays one (see journal.Committer.Apply).
		if err := pg.sendTouches(); err != nil {
			return err
		}
	}
	p, err := pg.acquire()
	if err != nil {
		return err
	}
	defer pg.release(p)
	if len(ops) > 0 {
		// The touches waiting ride with the change.
		pg.mu.Lock()
		touches, touched := pg.takeTouches(ops, len(pg.ov.touched))
		pg.mu.Unlock()
		defer touched()
		ops = append(touches, ops...)
	}
	return pg.fs.opts.Journals.CommitterFor(p).Apply(sync, ops...)
}

func (liveView) queues() bool       { return true }
func (liveView) readOnly() bool     { return false }
func (liveView) showsHistory() bool { return true }

// timeOf is the head's time, or the latest queued change's if later. That
// is the time the change's commit takes (see journal.Committer.Latest), so
// a batch landing moves no time a reader has seen.
func (liveView) timeOf(pg *pageRef, p *store.Page, head *store.Commit) int64 {
	return max(head.Timestamp, pg.fs.opts.Journals.CommitterFor(p).Latest())
}

// snapshotView is one commit of the page, read-only.
type snapshotView struct{ c *store.Commit }

func (v snapshotView) read(pg *pageRef, fn func(p *store.Page, head *store.Commit, t *btree.Tree) error) error {
	p, err := pg.acquire()
	if err != nil {
		return err
	}
	defer pg.release(p)
	return fn(p, v.c, p.Tree(v.c))
}

func (snapshotView) apply(*pageRef, bool, []journal.Op) error { return syscall.EROFS }
func (snapshotView) queues() bool                             { return false }
func (snapshotView) readOnly() bool                           { return true }
func (snapshotView) showsHistory() bool                       { return false }
func (snapshotView) timeOf(_ *pageRef, _ *store.Page, head *store.Commit) int64 {
	return head.Timestamp
}

// txnView is an open transaction: its base with its own changes, which it
// records in its explicit journal as they are made.
type txnView struct{ t *txn }

func (v txnView) read(_ *pageRef, fn func(p *store.Page, head *store.Commit, t *btree.Tree) error) error {
	return v.t.view(fn)
}

func (v txnView) apply(_ *pageRef, _ bool, ops []journal.Op) error { return v.t.apply(ops) }
func (txnView) queues() bool                                       { return false }
func (txnView) readOnly() bool                                     { return false }
func (txnView) showsHistory() bool                                 { return false }
func (txnView) timeOf(_ *pageRef, _ *store.Page, head *store.Commit) int64 {
	return head.Timestamp
}
