package fs

import (
	"log/slog"
	"maps"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	gofs "github.com/hanwen/go-fuse/v2/fs"

	"github.com/ledgerfs/ledgerfs/cas"
	"github.com/ledgerfs/ledgerfs/internal/btree"
	"github.com/ledgerfs/ledgerfs/journal"
	"github.com/ledgerfs/ledgerfs/store"
)

// pageRef is the filesystem's state of one view of a page: its role (v,
// see view), its names (a rename changes them; the live page holds them),
// what it has queued and how many files are open. The page's db is
// acquired from the repository for each operation and held by open files.
type pageRef struct {
	fs *FS
	// owner is the live page a view belongs to, the live page itself for
	// its own view: it holds the names.
	owner *pageRef
	v     view // the role: live, snapshot or transaction
	// tag sets the inode ids of a snapshot's or transaction's nodes apart.
	tag string

	// keys is held shared by what finds a node's key from its place and
	// records a change at it (a close's commit, a setattr, an unlink, a
	// create), and exclusively by a rename from before it commits what it
	// moves until it has recorded the move in moves: a change at a key the
	// rename moves lands before it, at the old key, and is moved with it,
	// or after it at the new key. Taken before fileNode.mu.
	keys  sync.RWMutex
	moves movedNodes
	// behind counts the catch-ups with changes the mount did not make
	// (catchUp); a lookup that one raced answers uncached (dirNode.Lookup).
	behind atomic.Uint64

	mu   sync.Mutex
	txns map[string]*pageRef // the live page's open transactions, by name
	logs logCache            // the live page's .ledger/log
	// versions indexes the live page's versions of every key
	// (.ledger/versions).
	versions versionIndex
	ledger   string
	name     string
	ov       overlay // what is queued, shown as committed
	// atimesSaving is set while access times are being kept in the
	// background (see noteAtime).
	atimesSaving bool
	// intents are the files whose fsynced changes wait, logged, for their
	// commit, which intentTimer runs (see intent.go).
	intents     map[*fileNode]struct{}
	intentTimer *time.Timer
	// deferred are the files closed with every change in intents, whose
	// commit the intents timer makes (see fileNode.deferClose).
	deferred map[*fileNode]struct{}
	// copying are the files whose commit from a copy is under way, each
	// with its copy, which names the intent it commits through (see
	// pageRef.crowded).
	copying map[*fileNode]*contentCopy
	// unflushed are the files whose last flush committed nothing (a
	// close by another process than the opener, or an emptying whose
	// writes come after it): their release commits them, and Close does
	// when the kernel dropped the release at the unmount.
	unflushed map[*fileNode]struct{}
	// cond, on mu, is broadcast when q.ending reaches 0 and when a file is
	// closed or leaves q.files (see idleWithin).
	endCond *sync.Cond
	opens   int // files with content loaded (open for writing, or queued)
	// pins counts the values read-only handles of the page's views read
	// (see pins.go); the live page's only.
	pins map[cas.ObjectIdentifier]int
	// subdirs caches directories' counts of subdirectories (see
	// dirNode.subdirs), taken at generation subdirsAt of dirGen: only
	// mkdir, rmdir, rename and transactions change them, and each
	// counts a generation once its change shows.
	// linkNodes are the nodes of files with hard links the kernel holds,
	// by link key.
	linkNodes map[string]*fileNode
	subdirs   map[string]uint32
	subdirsAt uint64
	dirGen    atomic.Uint64
}

// dirsChanged says that directories may have come or gone: the counts of
// subdirectories taken before are stale.
func (pg *pageRef) dirsChanged() { pg.dirGen.Add(1) }

// dirShownLocked says, as the directory at child shows made (delta 1) or
// removed (-1) by a queued mkdir or rmdir, that the count of its parent
// moves by delta and its own is none (made empty) or goes; the other
// counts stay. stress-ng --dir counted each new directory again when
// READDIRPLUS listed it: 36,000 counts in 8 s. A mkdir beside
// readers of a large directory recounted it, and every subdirectory's
// count, at each change. Counts under way are stale (the generation
// moves): they read before the change showed. Called with pg.mu held, in
// the same hold as the change is shown.
func (pg *pageRef) dirShownLocked(parent, child string, delta int) {
	gen := pg.dirGen.Add(1)
	if pg.subdirs == nil || pg.subdirsAt != gen-1 {
		return // stale already
	}
	if n, ok := pg.subdirs[parent]; ok && int(n)+delta >= 0 {
		pg.subdirs[parent] = uint32(int(n) + delta)
	} else {
		delete(pg.subdirs, parent)
	}
	if delta > 0 {
		pg.subdirs[child] = 0 // made empty: READDIRPLUS lists it next
	} else {
		delete(pg.subdirs, child)
	}
	pg.subdirsAt = gen
}

// names returns the ledger and page names, which a rename changes.
func (pg *pageRef) names() (string, string) {
	o := pg.owner
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.ledger, o.name
}

func (pg *pageRef) acquire() (*store.Page, error) {
	l, n := pg.names()
	return pg.fs.repo.Acquire(l, n)
}

// acquireForChange is acquire for a change: a page opened read-only for
// want of space is opened for changes again once there is room, after the
// users on their way out, waited for up to reopenWait, have left.
func (pg *pageRef) acquireForChange() (*store.Page, error) {
	l, n := pg.names()
	return pg.fs.repo.AcquireForChange(l, n, reopenWait)
}

// reopenWait bounds how long a change waits for a page read-only for want
// of space to be left by its users, once there is room again.
const reopenWait = time.Second

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
	return &pageRef{fs: pg.fs, owner: pg, v: snapshotView{c}, tag: snapshotTag(c)}
}

// readOnly reports whether the view refuses changes.
func (pg *pageRef) readOnly() bool { return pg.fs.opts.ReadOnly || pg.v.readOnly() }

// view runs fn with the page, the view's commit (the head, or a snapshot's
// or transaction's base) and its tree.
func (pg *pageRef) view(fn func(p *store.Page, head *store.Commit, t *btree.Tree) error) error {
	return pg.v.read(pg, fn)
}

// shownTime is the time a view shows for the page itself (its root, its
// directories without a marker, .ledger).
func (pg *pageRef) shownTime(p *store.Page, head *store.Commit) int64 {
	return pg.v.timeOf(pg, p, head)
}

// apply commits ops through the page's implicit journal, or records them in
// a transaction's journal.
func (pg *pageRef) apply(sync bool, ops ...journal.Op) error { return pg.v.apply(pg, sync, ops) }

// busy reports whether the page has open files or transactions.
func (pg *pageRef) busy() bool {
	pg.mu.Lock()
	defer pg.mu.Unlock()
	return pg.busyLocked()
}

func (pg *pageRef) busyLocked() bool {
	return pg.opens > 0 || pg.ov.files.Len() > 0 || len(pg.txns) > 0
}

// idleBy waits until no file of the page is open for writing or waits for
// its commit to land, or until deadline, and reports whether the page is
// then not busy. An open transaction is not waited for: it ends when its
// owner says.
func (pg *pageRef) idleBy(deadline time.Time) bool {
	wake := time.AfterFunc(time.Until(deadline), func() {
		pg.mu.Lock()
		defer pg.mu.Unlock()
		pg.cond().Broadcast()
	})
	defer wake.Stop()
	pg.mu.Lock()
	defer pg.mu.Unlock()
	for pg.busyLocked() && len(pg.txns) == 0 && time.Now().Before(deadline) {
		pg.cond().Wait()
	}
	return !pg.busyLocked()
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

// noteUnflushed records f as left uncommitted by a flush. Called with f.mu
// held.
func (pg *pageRef) noteUnflushed(f *fileNode) {
	pg.mu.Lock()
	defer pg.mu.Unlock()
	if pg.unflushed == nil {
		pg.unflushed = map[*fileNode]struct{}{}
	}
	pg.unflushed[f] = struct{}{}
}

// forgetUnflushed drops f, released by its last writer. Called with f.mu
// held.
func (pg *pageRef) forgetUnflushed(f *fileNode) {
	pg.mu.Lock()
	defer pg.mu.Unlock()
	delete(pg.unflushed, f)
}

// commitUnflushed commits the files a flush left uncommitted whose release
// never came: at an unmount the kernel drops the releases it has not sent,
// and ": > f" just before it would be lost. Every descriptor is closed by
// then, so what they hold is the files' content.
func (pg *pageRef) commitUnflushed() {
	pg.mu.Lock()
	files := slices.Collect(maps.Keys(pg.unflushed))
	pg.unflushed = nil
	pg.mu.Unlock()
	for _, f := range files {
		if eno := f.commit(commitQueue); eno != 0 {
			l, n := pg.names()
			slog.Error("a change closed before the unmount was not committed", "page", l+"/"+n, "errno", eno)
		}
	}
}
