package cloudsync

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"sync"

	"github.com/ledgerfs/ledgerfs/cas"
	"github.com/ledgerfs/ledgerfs/internal/remote"
)

// Repacking. A collection frees a pack only when nothing reached is in it;
// a pack of which a few pieces stay reached would stay whole for ever. So
// a collection also copies the reached pieces of packs in which they take
// less than repackBelow of the bytes, and of small packs (smallPackShare),
// into new packs, in the order its walk reached them, as stored (a piece is
// sealed under its digest, not its pack), and writes a batch of its log
// saying where they went (batch.Moved). Every device that reads it reads
// them from the new packs from then on (its index skips what any batch
// says of the old packs), and the old packs, unreached where the
// collection looks for reached pieces now, go as unreached packs go:
// recorded, and deleted a grace later.
const (
	// repackBelow is the share of a pack's bytes under which its reached
	// pieces are moved.
	repackBelow = 0.25
	// repackGap is the largest run of unreached bytes a repack reads
	// through rather than asking for the next reached piece apart.
	repackGap = 64 << 10
	// repackRun bounds what one read of a repack asks for.
	repackRun = 8 << 20
	// smallPackShare and repackSmallAtLeast: a pack under 1/smallPackShare
	// of a full pack is small, and a collection that finds
	// repackSmallAtLeast small packs or more moves their reached pieces
	// too. A push of a few changes makes a small pack, so a store's
	// history is thousands of them, and a new device's join, which
	// fetches what they hold, a request each; a join after the repack
	// reads a few full packs. Fewer are left, not to rewrite a store's
	// last small pack at every collection.
	smallPackShare     = 8
	repackSmallAtLeast = 16
	// stateRepacked (+ pack name) marks a pack whose reached pieces a
	// repack moved: batches' pieces in it are not indexed.
	stateRepacked = "repacked/"
)

// A sparsePack is a pack to repack: its reached pieces (live, in pack
// order) take less than repackBelow of its bytes, or it is small.
type sparsePack struct {
	name string
	live []pieceRef
	// first is where the collection's walk first reached a tree node
	// or index piece of live (gc.Reach.Order).
	first uint32
}

// isRepacked reports whether a repack moved the reached pieces of pack.
func (s *Syncer) isRepacked(pack string) (bool, error) {
	_, ok, err := s.repo.SyncState(stateRepacked + pack)
	return ok, err
}

// noteRepacked marks the packs that moved emptied.
func (s *Syncer) noteRepacked(moved []*movedPieces) error {
	kv := map[string][]byte{}
	for _, m := range moved {
		for _, p := range m.From {
			kv[stateRepacked+p] = []byte{1}
		}
	}
	if len(kv) == 0 {
		return nil
	}
	return s.repo.SetSyncState(kv)
}

// indexRepack records where a repack moved its pieces, as a pull that reads
// its batch does.
func (s *Syncer) indexRepack(m *movedPieces) error {
	if err := s.noteRepacked([]*movedPieces{m}); err != nil {
		return err
	}
	return s.keepIndex(m.Pieces)
}

// repack copies the reached pieces of sparse into new packs and writes
// the batch that says where they are, under the store's lock l. It returns
// the batch's name ("" if nothing was moved).
func (s *Syncer) repack(ctx context.Context, l *lock, sparse []sparsePack) (string, error) {
	if len(sparse) == 0 {
		return "", nil
	}
	if err := s.raise(ctx, remote.VersionRepack); err != nil {
		return "", err
	}
	// Tree nodes and index pieces fill packs of their own, as a push's
	// do (walkOrder): they are all a lazy join fetches.
	var trees, values Stats // one each: a writer guards its own
	w := repackWriters{trees: s.newPackWriter(ctx, &trees), values: s.newPackWriter(ctx, &values)}
	var bytes int64
	from := make([]string, 0, len(sparse))
	reads := s.readLive(ctx, sparse)
	defer reads.stop()
	for i, sp := range sparse {
		s.progress("collect: repack", i, len(sparse))
		if err := l.refresh(ctx); err != nil {
			w.wait()
			return "", err
		}
		pieces, err := reads.next()
		if err != nil {
			w.wait()
			return "", err
		}
		for _, p := range pieces {
			to := w.values
			if p.d.IsTreeNode() || p.d.IsIndex() {
				to = w.trees
			}
			to.add(p.d, func(b []byte) []byte { return append(b, p.sealed...) })
		}
		if w.trees.failed() || w.values.failed() {
			break // close says why
		}
		from = append(from, sp.name)
		for _, r := range sp.live {
			bytes += r.Len
		}
	}
	refs, err := w.trees.close()
	more, verr := w.values.close()
	if err = cmp.Or(err, verr); err != nil {
		return "", fmt.Errorf("cloudsync: repack: %w", err)
	}
	refs = append(refs, more...)
	s.progress("collect: repack", len(sparse), len(sparse))
	m := &movedPieces{From: from, Pieces: refs}
	if err := l.check(ctx); err != nil {
		return "", err
	}
	for {
		seq, err := s.nextSeq()
		if err != nil {
			return "", err
		}
		name, err := s.writeBatch(ctx, &batch{Device: s.device, Seq: seq, Moved: m})
		if errors.Is(err, remote.ErrExists) {
			// Written by a push cut short before it recorded it.
			if err := s.adoptBatch(ctx, name); err != nil {
				return "", err
			}
			if err := s.passed(seq, nil); err != nil {
				return "", err
			}
			continue
		}
		if err != nil {
			return "", err
		}
		if err := s.passed(seq, nil); err != nil {
			return "", err
		}
		slog.Info("cloudsync: repacked", "packs", len(from), "pieces", len(refs), "bytes", bytes)
		return name, s.indexRepack(m)
	}
}

// absorbRepack indexes the repack of batch name, which a collection's
// record names, before the record's packs are looked for pieces held here
// that must go up again: what it moved is found at its new place, and
// only what it did not move (a piece this device reuses that no kept
// commit reached) goes up.
func (s *Syncer) absorbRepack(ctx context.Context, name string) error {
	b, err := s.readBatch(ctx, name)
	if err != nil {
		return fmt.Errorf("cloudsync: the repack a collection's record names: %w", err)
	}
	if b.Moved == nil {
		return fmt.Errorf("cloudsync: batch %s, which a collection's record names, moved nothing", name)
	}
	return s.indexRepack(b.Moved)
}

// repackWriters are the packs a repack fills: one run of packs for tree
// nodes and index pieces, one for the chunks of values.
type repackWriters struct{ trees, values *packWriter }

// wait waits for the uploads of both, after a failure.
func (w repackWriters) wait() {
	w.trees.g.Wait()
	w.values.g.Wait()
}

// A livePiece is a piece a repack read, as stored and checked.
type livePiece struct {
	d      cas.Digest
	sealed []byte
}

// liveReads reads the reached pieces of packs ahead of the repack that
// copies them, up to repackReads packs read and not yet copied (a store's
// history is thousands of small packs, a request each): next returns each
// pack's in turn.
type liveReads struct {
	cancel context.CancelFunc
	slots  chan struct{} // a read ahead holds one until next takes it
	wg     sync.WaitGroup
	out    []chan liveRead
	i      int
}

type liveRead struct {
	pieces []livePiece
	err    error
	slot   bool // the read held a slot
}

// repackReads bounds the packs a repack reads ahead.
const repackReads = 8

// readLive starts reading the reached pieces of sparse, in order; stop
// ends the reads.
func (s *Syncer) readLive(ctx context.Context, sparse []sparsePack) *liveReads {
	ctx, cancel := context.WithCancel(ctx)
	// One at a time in the simulation, whose runs must follow from
	// their seeds (see inFlight).
	r := &liveReads{cancel: cancel, slots: make(chan struct{}, cmp.Or(s.inFlight, repackReads)), out: make([]chan liveRead, len(sparse))}
	for i := range r.out {
		r.out[i] = make(chan liveRead, 1) // a read never waits for next
	}
	r.wg.Go(func() {
		for i, sp := range sparse {
			select {
			case r.slots <- struct{}{}:
			case <-ctx.Done():
				r.out[i] <- liveRead{err: ctx.Err()}
				continue
			}
			r.wg.Go(func() {
				pieces, err := s.live(ctx, sp)
				r.out[i] <- liveRead{pieces: pieces, err: err, slot: true}
			})
		}
	})
	return r
}

// next returns the reached pieces of the next pack.
func (r *liveReads) next() ([]livePiece, error) {
	got := <-r.out[r.i]
	r.i++
	if got.slot {
		<-r.slots
	}
	return got.pieces, got.err
}

// stop cancels the reads not done and waits for them.
func (r *liveReads) stop() {
	r.cancel()
	r.wg.Wait()
}

// live reads the reached pieces of sp, checked, in runs of pieces near
// each other.
func (s *Syncer) live(ctx context.Context, sp sparsePack) ([]livePiece, error) {
	var out []livePiece
	live := sp.live
	for len(live) > 0 {
		n := 1
		end := live[0].Off + live[0].Len
		for n < len(live) && live[n].Off-end <= repackGap && live[n].Off+live[n].Len-live[0].Off <= repackRun {
			end = live[n].Off + live[n].Len
			n++
		}
		run, err := s.be.GetRange(ctx, sp.name, live[0].Off, end-live[0].Off)
		if err != nil {
			return nil, fmt.Errorf("cloudsync: repack %s: %w", sp.name, err)
		}
		for _, r := range live[:n] {
			if r.Off+r.Len-live[0].Off > int64(len(run)) {
				return nil, fmt.Errorf("cloudsync: repack %s: piece %s past the %d bytes read", sp.name, cas.Digest(r.Digest), len(run))
			}
			sealed := run[r.Off-live[0].Off : r.Off-live[0].Off+r.Len]
			d := cas.Digest(r.Digest)
			// Checked before it is copied: a damaged piece is not
			// spread to a new pack, and the old stays.
			if _, err := s.openPiece(d, sp.name, slices.Clone(sealed), true); err != nil {
				return nil, fmt.Errorf("cloudsync: repack: %w", err)
			}
			out = append(out, livePiece{d: d, sealed: sealed})
		}
		live = live[n:]
	}
	return out, nil
}
