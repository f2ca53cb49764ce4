package journal

import (
	"fmt"
	"log/slog"
	"time"

	"github.com/ledgerfs/ledgerfs/cas"
	"github.com/ledgerfs/ledgerfs/internal/btree"
	"github.com/ledgerfs/ledgerfs/store"
)

// Commit turns the journal into a commit and returns the page's new head
// (nil if the journal changed nothing).
//
// An implicit journal is applied on top of the page's current head. An
// explicit one becomes a commit on its base; if the head moved on meanwhile,
// a merge commit joins the two, entry by entry: changes to different entries
// both survive, and where both sides changed an entry the journal's change,
// the later one, wins.
//
// The commit is all-or-nothing: the new tree nodes are written first (as
// transient pieces, garbage until referenced), then one db transaction adds
// the commit rows, replaces the head and drops the implicit journal's
// metadata. What follows (deleting the journal's rows, moving pieces from
// transient to local) is repeated by recovery if a crash interrupts it.
func (j *Journal) Commit() (*store.Commit, error) {
	if j.done {
		return nil, ErrDone
	}
	p := j.p
	if j.ID.Explicit() {
		// A logged fsync of one of the transaction's keys may have come
		// since its changes were recorded: its record must not outlive
		// the transaction's change on replay.
		d := p.Durability()
		for k := range j.ops {
			if d.Has(k) {
				if err := d.Checkpoint(); err != nil {
					return nil, err
				}
				break
			}
		}
	}
	p.Lock()
	defer p.Unlock()
	c, err := j.commitLocked()
	if err == nil {
		j.done = true
		if o := j.e.observing().Commit; o != nil && j.ops != nil {
			o(j.p.Ledger, j.p.Name, j.ID.Explicit(), len(j.ops))
		}
	}
	return c, err
}

func (j *Journal) commitLocked() (*store.Commit, error) {
	p := j.p
	heads, err := p.Heads()
	if err != nil {
		return nil, err
	}
	head := store.Newest(heads)
	base := head
	if j.ID.Explicit() && j.Base != head.ID {
		if base, err = p.Commit(j.Base); err != nil {
			return nil, fmt.Errorf("journal: base of %s: %w", j.ID, err)
		}
	}

	// Apply the journal to its parent's tree.
	tree := p.Tree(base)
	cleared, err := p.JournalCleared(j.ID)
	if err != nil {
		return nil, err
	}
	if cleared {
		tree.Clear()
	}
	var values []cas.ObjectIdentifier
	var local []cas.Digest
	var removed uint64
	observeRemoved := j.e.observing().Removed
	var unseen UnseenFunc
	if !j.ID.Explicit() { // an implicit journal applies to the head
		unseen = j.e.unseenFunc()
	}
	err = j.Ops("", func(op Op) error {
		if !op.IsDelete() && op.Kind != store.OpAtime {
			values = append(values, op.Entry.Value)
			local = append(local, op.Local...)
		}
		checks := unseen != nil && op.Saw != nil
		if op.Kind == store.OpAtime || !checks && observeRemoved == nil {
			return op.ApplyTo(tree)
		}
		old, found, err := tree.Get(op.Key)
		if err != nil {
			return err
		}
		if found && checks && old.Value != *op.Saw && (op.IsDelete() || old.Value != op.Entry.Value) {
			// A version the writer never saw: unseen keeps it.
			if err := unseen(p, head, tree, op.Key, *op.Saw, old); err != nil {
				return err
			}
		}
		if found && (op.IsDelete() || old.Value != op.Entry.Value) {
			removed += old.Meta.Size
		}
		return op.ApplyTo(tree)
	})
	if err != nil {
		return nil, fmt.Errorf("journal: apply %s: %w", j.ID, err)
	}

	root, pw, err := p.WriteTree(tree)
	if err != nil {
		return nil, fmt.Errorf("journal: write tree: %w", err)
	}
	if err := j.e.step("nodes-written"); err != nil {
		return nil, err
	}

	var commits []*store.Commit
	final := head
	if root != base.Root {
		at := j.at
		if at == 0 && j.e != nil && j.e.stamp != nil {
			at = j.e.stamp().UnixNano()
		}
		c, err := store.NewCommit(timestamp(base, at), root, base)
		if err != nil {
			return nil, err
		}
		commits = append(commits, c)
		final = c
		if base.ID != head.ID {
			m, err := merge(p, pw, head, base, c)
			if err != nil {
				return nil, err
			}
			commits = append(commits, m)
			final = m
		}
	}

	// The atomic step: after it the page is at the new state.
	var newHead *store.Commit
	if final != head {
		newHead = final
	}
	if err := p.Land(j.ID, commits, newHead); err != nil {
		return nil, fmt.Errorf("journal: commit %s: %w", j.ID, err)
	}
	if !j.ID.Explicit() {
		p.Durability().Landed(j.ID)
	}
	if landed := j.e.observing().Landed; landed != nil && len(commits) > 0 {
		if err := landed(p, commits, []*store.Commit{base, head}); err != nil {
			slog.Warn("observing landed commits failed", "page", p.Ledger+"/"+p.Name, "err", err)
		}
	}
	if newHead != nil {
		// After the observer: indexing the landed versions diffs the
		// trees before and after, and would decode the replaced nodes again.
		tree.Forget()
	}
	if removed > 0 && observeRemoved != nil {
		observeRemoved(p.Ledger, p.Name, removed)
	}
	if err := j.e.step("committed"); err != nil {
		return nil, err
	}
	if err := j.deleteOwnRows(); err != nil {
		return nil, err
	}
	if err := j.e.step("journal-deleted"); err != nil {
		return nil, err
	}
	if err := markLocal(p, j.e.step, values, pw.New, local); err != nil {
		return nil, err
	}
	if final == head {
		return nil, nil
	}
	return final, nil
}

// timestamp is at, or now if at is 0, but never before the parent: time
// views rely on commit times growing along history.
func timestamp(parent *store.Commit, at int64) int64 {
	if at == 0 {
		at = time.Now().UnixNano()
	}
	return max(at, parent.Timestamp+1)
}

// merge makes the merge commit of head and c, whose common ancestor is base:
// head's tree with base→c's changes applied.
func merge(p *store.Page, pw *store.PieceWriter, head, base, c *store.Commit) (*store.Commit, error) {
	tree := p.Tree(head)
	err := p.Nodes().Diff(base.Root, c.Root, func(ch btree.Change) error {
		if ch.After == nil {
			_, err := tree.Delete(ch.Key)
			return err
		}
		return tree.Put(*ch.After)
	})
	if err != nil {
		return nil, fmt.Errorf("journal: merge: %w", err)
	}
	root, _, err := tree.Write(pw)
	if err == nil {
		err = pw.Flush()
	}
	if err != nil {
		return nil, fmt.Errorf("journal: merge: %w", err)
	}
	return store.NewCommit(0, root, head, c)
}

// markLocal moves the pieces of the committed values and the new tree nodes
// from transient to local, children before parents, so that a local piece
// never has a transient one below it: recovery relies on that. The walk
// does not descend into the pieces in local, known to be local already.
func markLocal(p *store.Page, step func(string) error, values []cas.ObjectIdentifier, nodes []cas.Digest, local []cas.Digest) error {
	w := newTransientWalk(p, step)
	if len(local) > 0 {
		w.local = make(map[cas.Digest]bool, len(local))
		for _, d := range local {
			w.local[d] = true
		}
	}
	for _, v := range values {
		if err := w.object(v); err != nil {
			return fmt.Errorf("journal: walk value %s: %w", v, err)
		}
	}
	for _, d := range nodes {
		if err := w.post(d); err != nil {
			return err
		}
	}
	return w.flush()
}

// statusBatch is how many pieces a walk marks local in one db transaction.
const statusBatch = 1000

// transientWalk marks the transient pieces under objects local, children
// before parents, a batch at a time as it finds them: a 4 GiB value has
// 260,000 chunks, and collecting them all first held ~70 MiB at its commit.
// It does not descend below a piece that is not transient: everything under
// a local piece is local.
type transientWalk struct {
	p      *store.Page
	step   func(string) error  // Engine.step
	local  map[cas.Digest]bool // known local: not looked up
	batch  []cas.Digest
	marked int
	// walked holds index pieces the walk has been into, up to
	// maxWalked: a subtree met again is not walked again. A run of zeros
	// is the same chain of index pieces over every 4 KiB chunk, each of
	// whose pieces the walk looked up in the db again, a million times a
	// GiB.
	walked map[cas.Digest]bool
	status *store.TransientLookup // the pieces' statuses
}

const maxWalked = 1 << 14

func newTransientWalk(p *store.Page, step func(string) error) *transientWalk {
	return &transientWalk{p: p, step: step, status: p.NewTransientLookup()}
}

func (w *transientWalk) object(id cas.ObjectIdentifier) error {
	return cas.Walk(w.p, id, w.pre, w.post)
}

// pre descends into transient pieces. A piece referenced twice in one batch
// is marked twice, which is harmless; once its batch is written, it is
// local and skipped, unless the statuses come from a scan taken before
// (store.TransientLookup): then it is marked again, as harmlessly.
func (w *transientWalk) pre(d cas.Digest) (bool, error) {
	if d.IsInline() || w.local[d] || w.walked[d] {
		return false, nil
	}
	transient, err := w.status.IsTransient(d)
	if transient && d.IsIndex() && len(w.walked) < maxWalked {
		if w.walked == nil {
			w.walked = map[cas.Digest]bool{}
		}
		w.walked[d] = true
	}
	return transient, err
}

func (w *transientWalk) post(d cas.Digest) error {
	w.batch = append(w.batch, d)
	if len(w.batch) >= statusBatch {
		return w.flush()
	}
	return nil
}

// flush marks the batch local.
func (w *transientWalk) flush() error {
	if len(w.batch) == 0 {
		return nil
	}
	if err := w.p.SetStatus(store.Local, w.batch); err != nil {
		return err
	}
	w.marked += len(w.batch)
	w.batch = w.batch[:0]
	return w.step("status-batch")
}
