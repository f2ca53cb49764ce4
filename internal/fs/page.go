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

	mu      sync.Mutex
	txns    map[string]*pageRef // the live page's open transactions, by name
	logs    logCache            // the live page's .ledger/log
	ledger  string
	name    string
	pending keyMap[*fileNode] // created and not yet committed, or with a commit queued, by key
	// inflight counts the commits queued at close that have not landed;
	// ending, the landed ones whose node has yet to drop its content.
	inflight, ending int
	// cond, on mu, is broadcast when ending reaches 0 and when a file is
	// closed or leaves pending (see idleWithin).
	endCond *sync.Cond
	// markers are directory markers (mode and mtime) changed by a setattr
	// whose commit is queued, by key.
	markers keyMap[queuedMarker]
	// gone holds the keys whose deletion is queued, with the change's
	// number. A view keeps a clone of it (see keyMap.Clone): a copy of the
	// whole set per unlink was a third of what rm -rf of a large directory
	// allocated.
	gone keyMap[uint64]
	// queuedSeq numbers queued changes, so that a change landing does not
	// clear what a later change of the same key shows.
	queuedSeq uint64
	opens     int
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
	if pg.gone.Len() > 0 {
		gone = pg.gone.Clone()
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

// queueDelete queues the deletion of key in the live page's implicit
// journal; until it lands, views of the page hide the key. A sequential rm
// then shares commits as a stream of closes does, rather than waiting for
// one commit per file.
func (pg *pageRef) queueDelete(key string) error {
	return pg.queueShown(journal.Op{Key: key, Delete: true}, func(seq uint64) {
		pg.gone.Set(key, seq)
	}, func(seq uint64) {
		if s, ok := pg.gone.Get(key); ok && s == seq {
			pg.gone.Delete(key)
		}
	})
}

// queueShown queues op, which shows until it lands: show records it and
// landed drops it, both called with pg.mu held and the change's number.
func (pg *pageRef) queueShown(op journal.Op, show, landed func(seq uint64)) error {
	pg.mu.Lock()
	pg.queuedSeq++
	seq := pg.queuedSeq
	show(seq)
	pg.mu.Unlock()
	done := func(error) {
		pg.mu.Lock()
		defer pg.mu.Unlock()
		landed(seq)
	}
	err := pg.queue(done, op)
	if err != nil {
		done(err)
	}
	return err
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

// queue records ops in the live page's implicit journal and commits them in
// the background, calling done after; see journal.Committer.Queue. The
// commit counts in pg.inflight until done has run, so settle waits for it.
func (pg *pageRef) queue(done func(error), ops ...journal.Op) error {
	return pg.queueWith(nil, done, ops...)
}

// queueWith is queue with the journal rows landing through w's commit,
// with the last pieces of the value they refer to.
func (pg *pageRef) queueWith(w *store.ValueWriter, done func(error), ops ...journal.Op) error {
	var commit journal.CommitFunc
	if w != nil {
		commit = w.CommitJournal
	}
	p, err := pg.acquire()
	if err != nil {
		return err
	}
	defer pg.release(p)
	pg.mu.Lock()
	pg.inflight++
	pg.mu.Unlock()
	landed := func() {
		pg.mu.Lock()
		pg.inflight--
		pg.mu.Unlock()
	}
	err = journal.CommitterFor(p).QueueWith(commit, func(err error) {
		done(err)
		landed()
	}, ops...)
	if err != nil {
		landed()
	}
	return err
}

// settle waits until the live page's queued commits have landed. A close
// returns before its commit; operations that read the head to decide what
// to change (unlink, rename, rmdir), and views of history, settle first so
// that they see every close that returned before them. Mkdir, symlink and
// a directory's setattr need not: they read names, which pending files and
// queued markers cover, and directory markers, which a close never changes.
func (pg *pageRef) settle() error {
	if pg.live != nil {
		return nil // a snapshot never changes; a transaction commits at once
	}
	pg.mu.Lock()
	idle := pg.inflight == 0 && pg.ending == 0
	pg.mu.Unlock()
	if idle {
		return nil
	}
	p, err := pg.acquire()
	if err != nil {
		return err
	}
	err = journal.CommitterFor(p).Wait()
	pg.release(p)
	pg.mu.Lock()
	for pg.ending > 0 {
		pg.cond().Wait()
	}
	pg.mu.Unlock()
	return err
}

// ended records that a landed node has dropped its content.
func (pg *pageRef) ended() {
	pg.mu.Lock()
	defer pg.mu.Unlock()
	if pg.ending--; pg.ending == 0 {
		pg.cond().Broadcast()
	}
}

// cond returns the page's condition variable, made on first use. Called
// with pg.mu held.
func (pg *pageRef) cond() *sync.Cond {
	if pg.endCond == nil {
		pg.endCond = sync.NewCond(&pg.mu)
	}
	return pg.endCond
}

// busy reports whether the page has open files or transactions.
func (pg *pageRef) busy() bool {
	pg.mu.Lock()
	defer pg.mu.Unlock()
	return pg.busyLocked()
}

func (pg *pageRef) busyLocked() bool {
	return pg.opens > 0 || pg.pending.Len() > 0 || len(pg.txns) > 0
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

func (pg *pageRef) pendingFile(key string) *fileNode {
	pg.mu.Lock()
	defer pg.mu.Unlock()
	f, _ := pg.pending.Get(key)
	return f
}

// unpendLocked drops f from pending at key if f is the node pending there
// (a later create may have taken the key). Called with pg.mu held.
func (pg *pageRef) unpendLocked(key string, f *fileNode) {
	if p, _ := pg.pending.Get(key); p == f {
		pg.pending.Delete(key)
		pg.cond().Broadcast()
	}
}

// dirShown reports whether the directory at prefix exists by what is
// queued: a pending file or a queued marker in it. Every lookup and name
// check asks, so it stops at the first and collects nothing.
func (pg *pageRef) dirShown(prefix string) bool {
	pg.mu.Lock()
	defer pg.mu.Unlock()
	return !pg.markers.Under(prefix, func(string, queuedMarker) bool { return false }) ||
		!pg.pending.Under(prefix, func(string, *fileNode) bool { return false })
}

// pendingUnder lists pending keys starting with prefix.
func (pg *pageRef) pendingUnder(prefix string) map[string]*fileNode {
	pg.mu.Lock()
	defer pg.mu.Unlock()
	var out map[string]*fileNode
	pg.pending.Under(prefix, func(k string, f *fileNode) bool {
		if out == nil {
			out = map[string]*fileNode{}
		}
		out[k] = f
		return true
	})
	return out
}
