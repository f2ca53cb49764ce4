package journal

import (
	"fmt"
	"log/slog"

	"github.com/ledgerfs/ledgerfs/internal/btree"
	"github.com/ledgerfs/ledgerfs/store"
)

// replayLog commits, in one implicit journal, what the page's sync log
// holds and its head does not (store.Durability.Replay rebuilds it).
func (e *Engine) replayLog(p *store.Page) error {
	var t *btree.Tree
	holds := func(r store.Replayed) (bool, error) {
		if t == nil {
			head, err := p.Head()
			if err != nil {
				return false, err
			}
			t = p.Tree(head)
		}
		cur, found, err := t.Get(r.Key)
		if err != nil {
			return false, err
		}
		if r.Delete {
			return !found, nil
		}
		want, err := replayedOp(r)
		if err != nil {
			return false, err
		}
		return found && cur.Value == want.Entry.Value && sameMeta(cur.Meta, want.Entry.Meta), nil
	}
	commit := func(rs []store.Replayed) error {
		ops := make([]Op, len(rs))
		for i, r := range rs {
			if r.Delete {
				ops[i] = Op{Key: r.Key, Kind: store.OpDelete}
				continue
			}
			op, err := replayedOp(r)
			if err != nil {
				return err
			}
			if op.Entry.Value.Digest != r.Result {
				return fmt.Errorf("replay sync log: %q: record names value %s and puts %s", r.Key, r.Result, op.Entry.Value)
			}
			ops[i] = op
		}
		j, err := e.Begin(p, false)
		if err != nil {
			return err
		}
		if err := j.Apply(ops...); err != nil {
			return err
		}
		if _, err := j.Commit(); err != nil {
			return err
		}
		slog.Info("replayed changes the sync log held and the db had lost", "page", p.Ledger+"/"+p.Name, "changes", len(ops))
		return nil
	}
	return p.Durability().Replay(holds, commit)
}

// replayedOp is the put a replayed record ends with; an intent's row names
// the value it was built on, and puts the one the replay rebuilt.
func replayedOp(r store.Replayed) (Op, error) {
	op, err := DecodeOp(r.Key, r.Row)
	if err == nil && r.Intent {
		op.Entry.Value.Digest = r.Result
	}
	return op, err
}

// sameMeta compares metadata but for the access time, which a later read
// may have moved.
func sameMeta(a, b btree.Meta) bool {
	a.AtimeNs, a.HasAtime, b.AtimeNs, b.HasAtime = 0, false, 0, false
	return a == b
}
