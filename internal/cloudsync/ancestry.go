package cloudsync

import (
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"math"
	"slices"
	"strings"

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

// maxBatchHeads bounds the older batch heads a page keeps of one device and
// incarnation: a device gone for good holds no more commits back from the
// retention policy than that.
const maxBatchHeads = 8

// pruneBatchHeads drops the batch heads of page p that no batch to come can
// build on. A device's batch builds on each other device's batch heads up
// to its applied position (covers), the last of them its merge base; and
// a device's later batches have applied at least what its last batch read
// here had (acked). So a row of device X's is needed while some device
// other than X and this one may still send a batch that had applied it
// and not X's next row's batch. Of a device none of whose batches was
// read here nothing is known, and nothing is kept for it: with no other
// device known, only X's last row stays, as before there were several
// (keeping older ones for a device that may never come kept versions the
// retention policy lets go in the store too).
// Keeping only each device's last row, a device whose own later batch
// replaced the row that another device's batch built on, and whose policy
// had pruned the commits between, merged that batch without a base: every
// file both sides held apart became a conflict (the simulation's seed 117
// of -sim.pages -sim.ledgers -sim.collect=keep-last=2).
func (s *Syncer) pruneBatchHeads(p *store.Page) error {
	type group struct{ dev, inc string }
	seqs := map[group][]uint64{}
	err := p.BatchHeadRows(func(dev, inc string, h store.BatchHead) error {
		g := group{dev, inc}
		seqs[g] = append(seqs[g], h.Seq)
		return nil
	})
	if err != nil {
		return err
	}
	crowded := false
	for _, ss := range seqs {
		crowded = crowded || len(ss) > 1
	}
	if !crowded {
		return nil
	}
	acked, err := s.acked()
	if err != nil {
		return err
	}
	pos, err := s.positions()
	if err != nil {
		return err
	}
	devices := slices.Concat(slices.Collect(maps.Keys(pos)), slices.Collect(maps.Keys(acked)))
	// past is, per device X, the batch of X's that every device which may
	// build on X's rows had applied.
	past := func(x string) uint64 {
		least := uint64(math.MaxUint64) // with none known, none builds on them
		for _, d := range devices {
			if d != x && d != s.device {
				least = min(least, acked[d][x])
			}
		}
		return least
	}
	drop := map[group]map[uint64]bool{}
	for g, ss := range seqs {
		slices.Sort(ss)
		ss = slices.Compact(ss)
		l := past(g.dev)
		for i := 0; i+1 < len(ss); i++ {
			if ss[i+1] <= l || i+1 < len(ss)-maxBatchHeads {
				if drop[g] == nil {
					drop[g] = map[uint64]bool{}
				}
				drop[g][ss[i]] = true
			}
		}
	}
	if len(drop) == 0 {
		return nil
	}
	return p.DropBatchHeads(func(dev, inc string, h store.BatchHead) bool {
		return drop[group{dev, inc}][h.Seq]
	})
}

// acked returns, per device whose batches were read here, the greatest
// applied position of each other device's log its batches said.
func (s *Syncer) acked() (map[string]map[string]uint64, error) {
	out := map[string]map[string]uint64{}
	err := s.repo.ScanSyncState(stateAcked, func(k string, v []byte) error {
		var m map[string]uint64
		if err := json.Unmarshal(v, &m); err != nil {
			return fmt.Errorf("cloudsync: row %s: %w", k, err)
		}
		out[strings.TrimPrefix(k, stateAcked)] = m
		return nil
	})
	return out, err
}

// ack adds to state the row that records what a batch of dev's read had
// applied (acked), if it moves any position up. State may hold the row
// already, from batches read before.
func (s *Syncer) ack(state map[string][]byte, dev string, applied map[string]uint64) error {
	if len(applied) == 0 {
		return nil
	}
	var m map[string]uint64
	v, ok := state[stateAcked+dev]
	if !ok {
		var err error
		if v, ok, err = s.repo.SyncState(stateAcked + dev); err != nil {
			return err
		}
	}
	if ok {
		if err := json.Unmarshal(v, &m); err != nil {
			return fmt.Errorf("cloudsync: row %s: %w", stateAcked+dev, err)
		}
	}
	if m == nil {
		m = map[string]uint64{}
	}
	moved := false
	for d, n := range applied {
		if n > m[d] {
			m[d], moved = n, true
		}
	}
	if !moved {
		return nil
	}
	v, err := json.Marshal(m)
	state[stateAcked+dev] = v
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
// newest. Each batch head here is likewise an ancestor of each that
// covers it.
func knownEdges(g *graph, device string, seq uint64, applied map[string]uint64, pb pageBatch, head *store.Commit, isHead bool) error {
	in := devHead{device, store.BatchHead{Seq: seq, Head: head.ID, Inc: pb.Incarnations, Applied: applied}}
	type held struct {
		devHead
		c *store.Commit
	}
	var rows []held
	err := g.p.BatchHeads(func(dev string, h store.BatchHead) error {
		c, err := g.p.Commit(h.Head)
		if errors.Is(err, store.ErrNotFound) {
			return nil // pruned here (before gc kept these)
		} else if err != nil {
			return err
		}
		rows = append(rows, held{devHead{dev, h}, c})
		return nil
	})
	if err != nil {
		return err
	}
	for i, r := range rows {
		if isHead && covers(in, r.devHead) {
			g.know(head, []*store.Commit{r.c})
		} else if covers(r.devHead, in) {
			g.know(r.c, []*store.Commit{head})
		}
		// The rows say the same of each other: the walks that find a
		// virtual base's bases start from rows' heads too, and with the
		// commits between pruned, two rows' heads merged with no base
		// (the simulation's seed 301 of -sim.collect=keep-last=2).
		for j, o := range rows {
			if i != j && r.c.ID != o.c.ID && covers(r.devHead, o.devHead) {
				g.know(r.c, []*store.Commit{o.c})
			}
		}
	}
	return nil
}
