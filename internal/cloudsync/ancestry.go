package cloudsync

import (
	"errors"
	"maps"
	"slices"

	"github.com/ledgerfs/ledgerfs/store"
)

// What a device knows of a remote head's ancestry that the commits it
// holds cannot show. A collection prunes the store's history by every
// device's policy, so a device that was away across one lands a newer
// head whose parents it never gets (a graft), and a device's own policy
// prunes the commits another device's next batch builds on. A walk from
// that head then ends before it meets this device's commits, and a merge
// without a base took every entry the two sides hold apart for a conflict
// (a version replaced long ago came back as a conflict file).
//
// Two facts restore the base. A device's head of a page only moves
// forward, so the head of each batch a device wrote of a page is an
// ancestor of the heads of its later batches of that page. And a batch
// says up to which batch of every device's log its writer had applied
// (batch's Applied), so the head of any batch up to there that it held of
// the page is an ancestor of its head too. A page keeps, per device, the
// head of the last batch of it that landed here or went up from here
// (store.BatchHead), and gc keeps those commits.

// addBatchHead adds to meta the rows that record pb, of device's batch
// seq, which had applied the batches applied says, as that device's last
// batch of the page, if page p holds its head: none if it does not (a
// collection pruned it) or pb holds no commit.
func addBatchHead(meta map[string][]byte, p *store.Page, device string, seq uint64, applied map[string]uint64, pb pageBatch) error {
	id, ok := pb.newest()
	if !ok {
		return nil
	}
	if held, err := p.HasCommit(id); err != nil || !held {
		return err
	}
	rows, err := store.BatchHeadRow(device, store.BatchHead{Seq: seq, Head: id, Inc: pb.Incarnations, Applied: applied})
	maps.Copy(meta, rows)
	return err
}

// addLanded adds to meta the rows that record b's part pb of page p as
// landed: its batch head (addBatchHead), or, for a checkpoint, the rows it
// carries (the collecting device's heads were its truth, not a batch's).
func (s *Syncer) addLanded(meta map[string][]byte, p *store.Page, b *batch, pb pageBatch) error {
	if b.checkpoint {
		return s.checkpointRows(meta, p, pb)
	}
	return addBatchHead(meta, p, b.Device, b.Seq, b.Applied, pb)
}

// A lineage is what a landing batch's page knows of the batch's commits
// beyond their parents (knownEdges).
type lineage struct {
	// known are ancestors of commits, beyond their parents (graph's).
	known map[store.CommitID][]*store.Commit
	// behind: the batch's newest commit is gone from the store, and a
	// collection had applied the batch, so what it kept of it is history
	// of heads that later batches bring: it lands without moving the
	// page's head (merged as a head, an old commit whose base was pruned
	// made conflict files of versions long replaced).
	behind bool
}

// lineageOf returns what page p knows of head, the newest commit landing
// of pb, b's part of the page (knownEdges).
func (s *Syncer) lineageOf(p *store.Page, b *batch, pb pageBatch, head *store.Commit) (*lineage, error) {
	newest, ok := pb.newest()
	if !ok || b.checkpoint {
		// A checkpoint's head is no batch's: no row covers it, nor it a
		// row (its rows land with it).
		return nil, nil
	}
	g := &graph{p: p}
	if err := knownEdges(g, b.Device, b.Seq, b.Applied, pb, head, head.ID == newest); err != nil {
		return nil, err
	}
	return &lineage{known: g.known, behind: s.kept.gone(b.Device, b.Seq, newest)}, nil
}

// A devHead is one device's batch head (the row's, or a landing batch's).
type devHead struct {
	dev string
	store.BatchHead
}

// covers reports whether a's writer had applied b when it wrote a, both
// of the same page (an incarnation in common): then b's head is an
// ancestor of a's. A device's head of a page only moves forward, and a
// batch's applied positions say which of the others' it builds on (a
// device's log starts at 0: no position, none applied).
func covers(a, b devHead) bool {
	if !slices.ContainsFunc(a.Inc, func(i string) bool { return slices.Contains(b.Inc, i) }) {
		return false
	}
	if a.dev == b.dev {
		return b.Seq <= a.Seq
	}
	n, ok := a.Applied[b.dev]
	return ok && b.Seq <= n
}

// knownEdges records in g what the page's batch heads (store.BatchHead) say
// of head, the newest commit of pb, device's batch seq, which had applied
// the batches applied says: each batch head here it covers is its
// ancestor, and it is an ancestor of each batch head here that covers it
// (a batch that lands after a later one of another device's, which
// brought it here, with the commits between pruned: a device joining
// after a collection). Unless isHead, head is not pb's newest commit (a
// collection pruned that from the store, and kept an older one): then only
// the second holds, every commit of a batch being an ancestor of its
// newest.
func knownEdges(g *graph, device string, seq uint64, applied map[string]uint64, pb pageBatch, head *store.Commit, isHead bool) error {
	in := devHead{device, store.BatchHead{Seq: seq, Head: head.ID, Inc: pb.Incarnations, Applied: applied}}
	return g.p.BatchHeads(func(dev string, h store.BatchHead) error {
		row := devHead{dev, h}
		older := isHead && covers(in, row)
		if !older && !covers(row, in) {
			return nil
		}
		c, err := g.p.Commit(h.Head)
		if errors.Is(err, store.ErrNotFound) {
			return nil // pruned here (before gc kept these)
		} else if err != nil {
			return err
		}
		if older {
			g.know(head, []*store.Commit{c})
		} else {
			g.know(c, []*store.Commit{head})
		}
		return nil
	})
}
