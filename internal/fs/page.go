package fs

import (
	"sync"
	"syscall"

	gofs "github.com/hanwen/go-fuse/v2/fs"

	"github.com/ledgerfs/ledgerfs/internal/btree"
	"github.com/ledgerfs/ledgerfs/internal/journal"
	"github.com/ledgerfs/ledgerfs/internal/store"
)

// pageRef is the filesystem's state of one view of a page: its names (a
// rename changes them), the files created but not yet committed, and how
// many files are open. The live page shows the head and commits through the
// implicit journal; a snapshot shows one commit, read-only; a transaction
// shows its own tree and records changes in its explicit journal. The page's
// db is acquired from the repository for each operation and held by open
// files.
type pageRef struct {
	fs *FS
	// live is the page a snapshot or transaction belongs to; nil for the
	// live page itself.
	live *pageRef
	// tag sets the inode ids of a snapshot's or transaction's nodes apart.
	tag  string
	snap *store.Commit // a snapshot: the commit it shows
	tx   *txn          // a transaction

	mu     sync.Mutex
	txns   map[string]*pageRef // the live page's open transactions, by name
	logs   logCache            // the live page's .ledger/log
	ledger string
	name   string
	q      queuedChanges // see queue.go
	// cond, on mu, is broadcast when q.ending reaches 0 and when a file is
	// closed or leaves q.files (see idleWithin).
	endCond *sync.Cond
	opens   int // files with content loaded (open for writing, or queued)
}

func (pg *pageRef) names() (string, string) {
	if pg.live != nil {
		return pg.live.names()
	}
	pg.mu.Lock()
	defer pg.mu.Unlock()
	return pg.ledger, pg.name
}

func (pg *pageRef) acquire() (*store.Page, error) {
	l, n := pg.names()
	return pg.fs.repo.Acquire(l, n)
}

func (pg *pageRef) release(p *store.Page) { pg.fs.repo.Release(p) }

// rootInode returns the live page's root as the kernel knows it, or nil
// if the kernel has not looked the page up. It is found in the tree, not
// recorded at lookup: a lookup of a page the kernel already holds makes a
// node that go-fuse drops for the one it has.
func (pg *pageRef) rootInode() *gofs.Inode {
	l, n := pg.names()
	ledger := pg.fs.root.GetChild(l)
	if ledger == nil {
		return nil
	}
	root := ledger.GetChild(n)
	if root == nil {
		return nil
	}
	if d, ok := root.Operations().(*dirNode); !ok || d.pg != pg {
		return nil
	}
	return root
}

// snapshot returns the read-only view of commit c.
func (pg *pageRef) snapshot(c *store.Commit) *pageRef {
	return &pageRef{fs: pg.fs, live: pg, tag: snapshotView(c), snap: c}
}

// readOnly reports whether the view refuses changes.
func (pg *pageRef) readOnly() bool { return pg.fs.opts.ReadOnly || pg.snap != nil }

// view runs fn with the page, the view's commit (the head, or a snapshot's
// or transaction's base) and its tree.
func (pg *pageRef) view(fn func(p *store.Page, head *store.Commit, t *btree.Tree) error) error {
	if pg.tx != nil {
		return pg.tx.view(fn)
	}
	p, err := pg.acquire()
	if err != nil {
		return err
	}
	defer pg.release(p)
	if pg.snap != nil {
		return fn(p, pg.snap, p.Tree(pg.snap))
	}
	// Queued deletes are read before the head, as pending files are: one
	// that lands in between is then in the head already.
	pg.mu.Lock()
	var gone keyMap[uint64]
	if pg.q.gone.Len() > 0 {
		gone = pg.q.gone.Clone()
	}
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

// shownTime is the time a view shows for the page itself (its root, its
// directories without a marker, .ledger): the head's, or on the live page
// the latest queued change's if later. That is the time the change's commit
// takes (see journal.Committer.Latest), so a batch landing moves no time a
// reader has seen.
func (pg *pageRef) shownTime(p *store.Page, head *store.Commit) int64 {
	if pg.live != nil {
		return head.Timestamp
	}
	return max(head.Timestamp, journal.CommitterFor(p).Latest())
}

// apply commits ops through the page's implicit journal, or records them in
// a transaction's journal.
func (pg *pageRef) apply(sync bool, ops ...journal.Op) error {
	switch {
	case pg.snap != nil:
		return syscall.EROFS
	case pg.tx != nil:
		return pg.tx.apply(ops)
	}
	p, err := pg.acquire()
	if err != nil {
		return err
	}
	defer pg.release(p)
	return journal.CommitterFor(p).Apply(sync, ops...)
}

// busy reports whether the page has open files or transactions.
func (pg *pageRef) busy() bool {
	pg.mu.Lock()
	defer pg.mu.Unlock()
	return pg.busyLocked()
}

func (pg *pageRef) busyLocked() bool {
	return pg.opens > 0 || pg.q.files.Len() > 0 || len(pg.txns) > 0
}

// empty reports whether the page has no entries.
func (pg *pageRef) empty() (bool, error) {
	if pg.busy() {
		return false, nil
	}
	empty := true
	err := pg.view(func(p *store.Page, head *store.Commit, t *btree.Tree) error {
		it := t.Seek("")
		empty = !it.Next()
		return it.Err()
	})
	return empty, err
}
