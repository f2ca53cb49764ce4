package journal

import (
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"slices"

	"github.com/ledgerfs/ledgerfs/cas"
	"github.com/ledgerfs/ledgerfs/internal/btree"
	"github.com/ledgerfs/ledgerfs/store"
)

// Recover brings a page opened after a crash to a consistent state, as Ledger
// does on start: explicit journals (transactions that never committed) are
// deleted, implicit journals are committed in the order they began, leftover
// rows of journals that did commit are deleted, reachable pieces still
// marked transient become local and unreachable transient pieces are
// deleted. It is the store's OnOpen hook.
func (e *Engine) Recover(p *store.Page) error {
	if err := p.DropJournals(true); err != nil {
		return fmt.Errorf("recover: drop explicit journals: %w", err)
	}
	// A commit cut short after its atomic step leaves pieces under the head
	// transient. They become local before any journal commits on top of
	// them: a new local node above a transient one would hide it from the
	// collection at the end, which would delete it.
	if _, err := e.settleReachable(p); err != nil {
		return fmt.Errorf("recover: %w", err)
	}
	implicit, err := p.ImplicitJournals()
	if err != nil {
		return fmt.Errorf("recover: %w", err)
	}
	if err := writeQueued(p, implicit); err != nil {
		return fmt.Errorf("recover: %w", err)
	}
	// Implicit journal ids sort in the order the journals began. Each
	// commits with the time it began, which is when its first change was
	// accepted: a view of the page as of any time after a close returned
	// shows that close's file, as it would have without the crash.
	for _, id := range slices.Sorted(maps.Keys(implicit)) {
		j := &Journal{p: p, e: e, ID: id, Base: implicit[id], at: began(id)}
		c, err := j.Commit()
		if err != nil {
			return fmt.Errorf("recover: commit implicit journal %s: %w", id, err)
		}
		slog.Info("committed implicit journal left by a crash", "page", p.Ledger+"/"+p.Name, "journal", id, "commit", c != nil)
	}
	// Rows of implicit journals without metadata belong to journals that
	// committed before the crash stopped their clean-up.
	if err := p.DropJournals(false); err != nil {
		return fmt.Errorf("recover: %w", err)
	}
	// What an fsync made durable through the sync log, on top.
	if err := e.replayLog(p); err != nil {
		return fmt.Errorf("recover: %w", err)
	}
	if err := e.collectTransient(p); err != nil {
		return fmt.Errorf("recover: %w", err)
	}
	return nil
}

// writeQueued writes into each implicit journal that did not land the
// rows of its changes the sync log recorded in their place
// (store.Durability.Queue), so that the journal commits them with the
// rest, at its time. A record of a landed journal's change needs nothing;
// the replay finds the head holding it.
func writeQueued(p *store.Page, implicit map[store.JournalID]store.CommitID) error {
	rows := map[store.JournalID][]store.JournalEntry{}
	written := map[store.JournalID]map[string]bool{} // the rows each journal has
	for _, q := range p.Durability().QueuedFound() {
		if _, ok := implicit[q.Journal]; !ok {
			continue
		}
		has, ok := written[q.Journal]
		if !ok {
			has = map[string]bool{}
			err := p.JournalEntries(q.Journal, "", func(key string, _ []byte) error {
				has[key] = true
				return nil
			})
			if err != nil {
				return err
			}
			written[q.Journal] = has
		}
		if has[q.Key] {
			continue // a later change's row (Journal.mayQueue)
		}
		row := q.Row
		if row == nil {
			row = EncodeOp(Op{Key: q.Key, Kind: store.OpDelete})
		}
		rows[q.Journal] = append(rows[q.Journal], store.JournalEntry{Key: q.Key, Value: row})
	}
	for id, es := range rows {
		if err := p.PutJournalEntries(id, es); err != nil {
			return fmt.Errorf("write the rows of journal %s the sync log held: %w", id, err)
		}
		slog.Info("wrote changes the sync log held into their journal", "page", p.Ledger+"/"+p.Name, "journal", id, "changes", len(es))
	}
	return nil
}

// collectTransient settles pieces left transient by a crash: those a head
// reaches become local, the others are deleted.
func (e *Engine) collectTransient(p *store.Page) error {
	found, err := e.settleReachable(p)
	if err != nil || !found {
		return err
	}
	return collectGarbage(p)
}

// settleReachable marks the transient pieces that the commits of the last
// landing reach as local. It reports whether the page has transient pieces
// at all.
func (e *Engine) settleReachable(p *store.Page) (bool, error) {
	if found, err := p.HasTransient(); err != nil || !found {
		return false, err
	}
	heads, err := p.Heads()
	if err != nil {
		return false, err
	}
	w := newTransientWalk(p, e.step)
	// Walk each head's tree down to the first local pieces: below a local
	// piece everything is local.
	var walkNode func(id cas.ObjectIdentifier) error
	walkNode = func(id cas.ObjectIdentifier) error {
		if id.Digest.IsInline() {
			return nil
		}
		if t, err := p.IsTransient(id.Digest); err != nil || !t {
			return err
		}
		children, values, err := p.Nodes().Refs(id)
		if err != nil {
			return err
		}
		for _, v := range values {
			if err := w.object(v); err != nil {
				return err
			}
		}
		for _, c := range children {
			if err := walkNode(c); err != nil {
				return err
			}
		}
		return w.object(id)
	}
	roots, err := landedLast(p, heads)
	if err != nil {
		return false, err
	}
	for _, c := range roots {
		if c.Root != btree.EmptyRoot {
			if err := walkNode(c.Root); err != nil {
				return false, fmt.Errorf("walk commit %s: %w", c.ID, err)
			}
		}
	}
	if err := w.flush(); err != nil {
		return false, err
	}
	if w.marked > 0 {
		slog.Info("settled transient pieces", "page", p.Ledger+"/"+p.Name, "local", w.marked)
	}
	return true, nil
}

// collectGarbage deletes the pieces still transient.
func collectGarbage(p *store.Page) error {
	_, err := p.DeleteTransient()
	return err
}

// landedLast returns the commits whose new pieces a crash may have left
// transient: every recovery settles all the others, so they are those the
// last landing made (see store.Page.Land): the heads, and for a merge head
// its parents too. A transaction committed after the head moved lands its
// own commit, on its old base, with the merge: the merge's tree does not
// reach the nodes only that commit has, and history reads them.
func landedLast(p *store.Page, heads []*store.Commit) ([]*store.Commit, error) {
	out := slices.Clone(heads)
	for _, h := range heads {
		if len(h.Parents) < 2 {
			continue
		}
		for _, id := range h.Parents {
			c, err := p.Commit(id)
			if errors.Is(err, store.ErrNotFound) {
				continue // pruned by a collection, after its landing ended
			}
			if err != nil {
				return nil, fmt.Errorf("parent %s of merge %s: %w", id, h.ID, err)
			}
			out = append(out, c)
		}
	}
	return out, nil
}
