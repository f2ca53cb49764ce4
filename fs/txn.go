package fs

import (
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"slices"
	"strings"
	"sync"
	"syscall"
	"time"

	gofs "github.com/hanwen/go-fuse/v2/fs"

	"github.com/ledgerfs/ledgerfs/internal/btree"
	"github.com/ledgerfs/ledgerfs/internal/keypath"
	"github.com/ledgerfs/ledgerfs/journal"
	"github.com/ledgerfs/ledgerfs/store"
)

// txn is an open transaction: an explicit journal on a base commit, and the
// tree it makes of the base, kept in memory so that the transaction's view
// reads its own changes while the live page and other transactions do not.
// Its journal rows are Ledger's journals/E… rows, which a restart drops.
type txn struct {
	name string

	mu   sync.Mutex
	p    *store.Page // held while the transaction is open
	j    *journal.Journal
	base *store.Commit
	tree *btree.Tree
	done bool
	// broken is set when the journal and the tree may disagree: the
	// transaction can then only be rolled back.
	broken error
}

// errTxnDone is the error of an operation on a committed or rolled back
// transaction's files.
var errTxnDone = syscall.ESTALE

func (t *txn) view(fn func(p *store.Page, base *store.Commit, t *btree.Tree) error) error {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.done {
		return errTxnDone
	}
	return fn(t.p, t.base, t.tree)
}

// apply records ops in the journal, then in the transaction's tree.
func (t *txn) apply(ops []journal.Op) error {
	t.mu.Lock()
	defer t.mu.Unlock()
	switch {
	case t.done:
		return errTxnDone
	case t.broken != nil:
		return syscall.EIO
	}
	if err := t.j.Apply(ops...); err != nil {
		return err
	}
	for _, op := range ops {
		if err := op.ApplyTo(t.tree); err != nil {
			t.broken = fmt.Errorf("transaction %s: %w", t.name, err)
			return err
		}
	}
	return nil
}

// begin opens a transaction called name on the page's current head.
func (pg *pageRef) begin(name string) (*pageRef, error) {
	pg.mu.Lock()
	_, taken := pg.txns[name]
	pg.mu.Unlock()
	if taken {
		return nil, syscall.EEXIST
	}
	// The base is the head after every close that returned.
	if err := pg.settle(); err != nil {
		return nil, err
	}
	p, err := pg.acquireForChange()
	if err != nil {
		return nil, err
	}
	j, err := pg.fs.opts.Journals.Begin(p, true)
	var base *store.Commit
	if err == nil {
		base, err = p.Commit(j.Base)
	}
	if err != nil {
		pg.release(p)
		return nil, err
	}
	t := &txn{name: name, p: p, j: j, base: base, tree: p.Tree(base)}
	// The journal id keeps the inode ids of a later transaction of the same
	// name apart from those the kernel may still hold.
	ref := &pageRef{fs: pg.fs, owner: pg, v: txnView{t}, tag: txnTag(j.ID)}
	pg.mu.Lock()
	defer pg.mu.Unlock()
	if _, taken := pg.txns[name]; taken {
		pg.release(p)
		return nil, syscall.EEXIST
	}
	if pg.txns == nil {
		pg.txns = map[string]*pageRef{}
	}
	pg.txns[name] = ref
	return ref, nil
}

// txn returns the open transaction called name.
func (pg *pageRef) txn(name string) *pageRef {
	pg.mu.Lock()
	defer pg.mu.Unlock()
	return pg.txns[name]
}

// txnNames lists the open transactions, sorted.
func (pg *pageRef) txnNames() []string {
	pg.mu.Lock()
	defer pg.mu.Unlock()
	return slices.Sorted(maps.Keys(pg.txns))
}

// endTxn commits or rolls back the transaction called name. A commit needs
// every file of the transaction closed (EBUSY otherwise), so that no write
// is left out of it; a failed commit leaves the transaction open.
func (pg *pageRef) endTxn(name string, commit bool) error {
	ref := pg.txn(name)
	if ref == nil {
		return syscall.ENOENT
	}
	if commit && !ref.idleWithin(releaseGrace) {
		return syscall.EBUSY
	}
	// A close that returned before the commit is an earlier change: the
	// transaction's commit must follow it.
	if commit {
		if err := pg.settle(); err != nil {
			return err
		}
	}
	t := ref.v.(txnView).t // the page's transactions are all txn views
	t.mu.Lock()
	if t.done {
		t.mu.Unlock()
		return syscall.ENOENT
	}
	var err error
	var from, to *store.Commit
	var touched func(key string) bool
	switch {
	case commit && t.broken != nil:
		err = t.broken
	case commit:
		// The live page takes the transaction's own changes only: an
		// implicit commit landing between from and to is already live.
		if touched, err = t.j.Keys(); err == nil {
			if from, err = t.p.Head(); err == nil {
				to, err = t.j.Commit()
			}
		}
	default:
		err = t.j.Rollback()
	}
	if err != nil && commit {
		t.mu.Unlock()
		return fmt.Errorf("commit transaction %s: %w", name, err)
	}
	if err != nil {
		slog.Warn("transaction rollback left rows for the next start to drop", "transaction", name, "err", err)
	}
	t.done = true
	t.mu.Unlock()
	pg.mu.Lock()
	delete(pg.txns, name)
	pg.mu.Unlock()
	if to != nil {
		pg.catchUp(t.p, from, to, touched, false)
	}
	pg.release(t.p)
	return nil
}

// catchUp brings the live page up to date with a commit that reached it
// behind the kernel's back, a transaction's: for every entry changed
// between from and to, the node the kernel holds and the kernel's caches
// take the change. A file whose content or type changed, or that was
// deleted, is replaced as a rename over it would replace it: descriptors
// open on it keep what they had (with no link), the next lookup makes a
// new inode of the new entry. A file whose metadata alone changed keeps its
// inode and takes the new mode and times. Directories the commit removed
// are removed as rmdir removes them. Only keys touched reports are taken:
// other changes between from and to landed through the live page. With
// keepWriters, a file open for writing keeps its node and content: its
// next commit, a later change, lands over the commit's (a merge of another
// device's changes). The caller holds no lock a FUSE operation of the page
// could wait for.
func (pg *pageRef) catchUp(p *store.Page, from, to *store.Commit, touched func(key string) bool, keepWriters bool) {
	pg.behind.Add(1)
	pg.dirsChanged()
	root := pg.rootInode()
	if root == nil {
		return // the kernel has not looked the page up
	}
	type dirSeen struct {
		parent, node *gofs.Inode
		name         string
	}
	var dirs []dirSeen // parents before their children
	seen := map[*gofs.Inode]bool{}
	ts := pg.shownTime(p, to)
	err := p.Nodes().Diff(from.Root, to.Root, func(ch btree.Change) error {
		if !touched(ch.Key) {
			return nil
		}
		if btree.IsLinkKey(ch.Key) {
			pg.linkChangedBehind(ch, ts) // the file of names, not a name
			return nil
		}
		comps := keypath.Path(ch.Key, false)
		n := root
		for _, name := range comps[:len(comps)-1] {
			child := n.GetChild(name)
			if child == nil {
				n.NotifyEntry(name) // a cached negative entry
				return nil
			}
			if !seen[child] {
				seen[child] = true
				child.NotifyContent(0, 0)
				if _, ok := child.Operations().(*dirNode); ok {
					dirs = append(dirs, dirSeen{n, child, name})
				} else {
					n.NotifyEntry(name) // a file that is now a directory
					return nil
				}
			}
			n = child
		}
		if strings.HasSuffix(ch.Key, "/") {
			return nil // a directory's marker: the directory was notified
		}
		// The file may show under its plain or its collision name.
		for _, name := range []string{comps[len(comps)-1], keypath.Path(ch.Key, true)[len(comps)-1]} {
			child := n.GetChild(name)
			if child == nil {
				n.NotifyEntry(name)
				continue
			}
			f, ok := child.Operations().(*fileNode)
			if !ok || f.pg.pendingFile(ch.Key) == f || keepWriters && f.isWritten() {
				// A directory (handled by its own keys), or a file whose
				// queued close lands after this commit and wins.
				n.NotifyEntry(name)
				continue
			}
			if f.changedBehind(ch, ts) {
				dropChild(n, name, child)
				continue
			}
			child.NotifyContent(0, 0)
			n.NotifyEntry(name)
		}
		return nil
	})
	if err != nil {
		slog.Warn("updating the live page after a transaction", "err", err)
	}
	// Directories that lost all their keys, innermost first.
	t := p.Tree(to)
	for _, d := range slices.Backward(dirs) {
		dn := d.node.Operations().(*dirNode)
		prefix, _, perr := dn.prefix()
		if perr != nil || !strings.HasSuffix(prefix, "/") || pg.dirShown(prefix) {
			continue
		}
		if still, err := hasPrefixKey(t, prefix); err != nil || still {
			continue
		}
		parent, ok := d.parent.Operations().(*dirNode)
		if !ok {
			continue
		}
		parent.removing(d.name, prefix)(true)
		dropChild(d.parent, d.name, d.node)
	}
}

// dropChild takes child, at name, out of parent and out of the kernel's
// cache: a change the node did not make removed or replaced it. With no
// FUSE operation on either node under way (see the package's notes).
func dropChild(parent *gofs.Inode, name string, child *gofs.Inode) {
	parent.RmChild(name)
	if parent.NotifyDelete(name, child) != 0 {
		parent.NotifyEntry(name)
	}
}

// rollbackAll rolls back every open transaction, at unmount.
func (pg *pageRef) rollbackAll() {
	for _, name := range pg.txnNames() {
		if err := pg.endTxn(name, false); err != nil && !errors.Is(err, syscall.ENOENT) {
			slog.Warn("rollback at unmount", "transaction", name, "err", err)
		}
	}
}

// releaseGrace is how long a commit waits for the transaction's files to be
// released: the kernel sends RELEASE after close has returned, so a commit
// right after the last close can find its file still open.
const releaseGrace = time.Second

// idleWithin reports whether the view has no open files, waiting up to d
// for releases on their way.
func (pg *pageRef) idleWithin(d time.Duration) bool {
	pg.mu.Lock()
	defer pg.mu.Unlock()
	if !pg.busyLocked() {
		return true
	}
	expired := false
	t := time.AfterFunc(d, func() {
		pg.mu.Lock()
		expired = true
		pg.cond().Broadcast()
		pg.mu.Unlock()
	})
	defer t.Stop()
	for pg.busyLocked() {
		if expired {
			return false
		}
		pg.cond().Wait()
	}
	return true
}
