package cloudsync

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/restic/chunker"

	"github.com/ledgerfs/ledgerfs/cas"
	"github.com/ledgerfs/ledgerfs/internal/btree"
	"github.com/ledgerfs/ledgerfs/internal/gc"
	"github.com/ledgerfs/ledgerfs/internal/remote"
	"github.com/ledgerfs/ledgerfs/store"
)

// Rows of the repository's sync state that Pull keeps.
const (
	statePos = "pos/" // + device: the number of its last batch applied
	// + device: of its batches read, the greatest applied position of each
	// other device's log (JSON; see pruneBatchHeads).
	stateAcked = "acked/"
	statePack  = "pack/" // + pack name: the pieces the batches read put in it (packIndex)
	// + pack name: the pack the first batch that put pieces in it put its
	// next pieces in (nextPack): a read in order goes on there.
	stateNextPack = "nextpack/"
)

// errMissingParent stops a batch whose commits build on commits of another
// device's batch not applied yet.
var errMissingParent = errors.New("a parent commit is not here yet")

// Pull reads the batches other devices added to their logs since the last
// pull, fetches their commits and the pieces those reach, and merges each
// page's new head with the local one. Batches are applied in each
// device's order; one whose commits build on another device's commits
// waits until those are applied.
func (s *Syncer) Pull(ctx context.Context, st *Stats) error {
	err := s.pull(ctx, st, false)
	if errors.Is(err, remote.ErrNotFound) {
		// A collection deleted packs since the records were last read
		// (one with no grace deletes at once): read them, and the
		// batches whose commits they say are gone land without those.
		err = s.pull(ctx, st, true)
	}
	return err
}

func (s *Syncer) pull(ctx context.Context, st *Stats, absorb bool) (err error) {
	if err := s.absorb(ctx, absorb); err != nil {
		return err
	}
	if !s.joined.Load() && s.kept != nil && s.kept.checkpoint != "" && s.kept.device != s.device {
		fresh, err := s.newDevice()
		if err != nil {
			return err
		}
		if fresh {
			if err := s.join(ctx, st); err != nil {
				return err
			}
		}
		s.joined.Store(true)
	}
	// A pull cut short leaves batches it listed unread or unapplied: the
	// next lists them again as this one did. Taken as listed, a full
	// scan's batches of a device quiet since came in no feed window until
	// the next full scan, and a repack among them went unread: a piece
	// it moved was looked for in the pack it emptied, deleted since (the
	// simulation's seed 1051 of -sim.collect=keep-last=2 -sim.join).
	scanned, looked := s.scannedAt, s.lookedAt
	defer func() {
		if err != nil {
			s.scannedAt, s.lookedAt = scanned, looked
		}
	}()
	names, err := s.newBatches(ctx, false)
	if err != nil {
		return err
	}
	var devices []string
	queues := map[string][]*batch{}
	last := map[string]uint64{} // per device, the number of its last batch read
	index := map[cas.Digest]pieceRef{}
	// readAll reads the batches names lists past those read, and reports
	// whether it read any.
	readAll := func(names map[string][]string) (bool, error) {
		var read [][]pieceRef // the pieces of each batch read, in its order
		var moved []*movedPieces
		acks := map[string][]byte{}
		for _, dev := range slices.Sorted(maps.Keys(names)) {
			if !slices.Contains(devices, dev) {
				devices = append(devices, dev)
			}
			ahead, err := s.appliedAhead(dev)
			if err != nil {
				return false, err
			}
			for _, name := range names[dev] {
				_, seq, ok := parseBatchName(name)
				if _, was := last[dev]; ok && was && seq <= last[dev] {
					continue
				}
				if ok && ahead[seq] {
					last[dev] = seq
					continue // applied past one held back (see heldBack)
				}
				b, err := s.readBatch(ctx, name)
				if errors.Is(err, remote.ErrNotFound) {
					break // announced, not listable yet: the next pull reads it
				}
				if err != nil {
					return false, err
				}
				queues[dev] = append(queues[dev], b)
				last[dev] = b.Seq
				if err := s.ack(acks, dev, b.Applied); err != nil {
					return false, err
				}
				for _, pb := range b.Pages {
					read = append(read, pb.Pieces)
				}
				if b.Moved != nil {
					moved = append(moved, b.Moved)
				}
			}
		}
		// What each device's batches had applied, for pruneBatchHeads.
		if err := s.repo.SetSyncState(acks); err != nil {
			return false, err
		}
		// Pieces a repack moved are where it put them, whatever batch
		// read before or after named their old packs.
		if err := s.noteRepacked(moved); err != nil {
			return false, err
		}
		for _, m := range moved {
			read = append(read, m.Pieces)
		}
		// Each piece is where the last batch read says, unless a repack
		// emptied that pack. Then it is where the last place in a pack
		// not emptied says (a repack may have moved what another moved,
		// their batches read in either order); else where the row kept
		// of it says (a repack whose batch came through a record); else
		// in the emptied pack, which stays for the collection's grace
		// (a piece the repack did not move: no kept commit reached it).
		emptied := map[cas.Digest]pieceRef{}
		err := s.places(read, func(r pieceRef, gone bool) error {
			d := cas.Digest(r.Digest)
			if !gone {
				index[d] = r
				delete(emptied, d)
			} else if _, ok := index[d]; !ok {
				emptied[d] = r
			}
			return nil
		})
		if err != nil {
			return false, err
		}
		for d, r := range emptied {
			if _, kept, err := s.pieceAt(d); err != nil {
				return false, err
			} else if !kept {
				index[d] = r
			}
		}
		// In the devices' order: a read that fails ends the pull, and
		// which batches were read before it must not be up to a map's
		// order.
		slices.Sort(devices)
		return len(read) > 0, s.keepIndex(read...)
	}
	if _, err := readAll(names); err != nil {
		return err
	}
	f := &fetcher{s: s, index: index, st: st}
	// graft: no batch could apply, the rest wait on commits no batch read
	// brings (a page deleted or renamed here, a history pruned there):
	// they apply without them, their history starting where it can.
	graft := false
	for {
		progress, waiting, busy := false, 0, false
		for _, dev := range devices {
			var held heldBack
			for i := 0; i < len(queues[dev]); {
				b := queues[dev][i]
				if held.holds(b) {
					if len(b.Names) > 0 {
						break // names apply in their order
					}
					i++
					continue
				}
				err := s.applyBatch(ctx, f, b, queues[dev][i+1:], graft, st)
				if errors.Is(err, errMissingParent) {
					waiting++
					break
				}
				if errors.Is(err, store.ErrBusy) {
					// The next pull tries again; the device's batches
					// of other pages go on meanwhile.
					busy = true
					held.add(b)
					i++
					continue
				}
				if err != nil {
					return err
				}
				queues[dev] = slices.Delete(queues[dev], i, i+1)
				if err := s.applied(dev, b.Seq, i == 0, queues[dev], last[dev]); err != nil {
					return err
				}
				progress = true
			}
		}
		switch {
		case waiting == 0 || busy && !progress:
			// What waits on a busy page may wait on a batch that waits
			// too: the next pull tries again.
			for _, q := range queues {
				st.Waiting += len(q)
			}
			return nil
		case progress:
			graft, f.coming = false, nil
		case graft && f.coming != nil:
			// Nothing grafted without what waiting batches bring: the
			// rest graft without it.
			f.coming = nil
		case !graft:
			// The commits waited for may be in batches written but
			// not announced (their device lost the feed's answer, or
			// went offline before it announced them): a full scan of
			// the logs finds them, and they apply before anything
			// grafts (the simulation's seed 1953).
			names, err := s.newBatches(ctx, true)
			if err != nil {
				return err
			}
			found, err := readAll(names)
			if err != nil {
				return err
			}
			if graft = !found; graft {
				// A batch whose parents another waiting batch brings
				// grafts last: grafted, it would land them later as a
				// branch of its own, and a change they undo would
				// come back (the simulation's seed 115,
				// -sim.ledgers).
				f.coming = comingCommits(queues)
			}
		default:
			return fmt.Errorf("cloudsync: %d devices' batches build on commits no log holds", waiting)
		}
	}
}

// stateAhead is the repository's sync state row (+ device "/" batch
// number, 20 digits) of a batch applied while one before it in its
// device's log was held back: the position stays before the one held, and
// the next pull skips these.
const stateAhead = "ahead/"

func aheadKey(dev string, seq uint64) string { return fmt.Sprintf("%s%s/%020d", stateAhead, dev, seq) }

// A heldBack is what a device's batches held back in a pull name (a
// change of names of a page in use here refuses with store.ErrBusy): its
// later batches of those pages and ledgers wait with them, and its later
// changes of names wait too; its batches of other pages apply.
type heldBack struct {
	pages   map[[2]string]bool
	ledgers map[string]bool
}

func (h *heldBack) holds(b *batch) bool {
	if len(b.Names) > 0 {
		return len(h.pages) > 0 || len(h.ledgers) > 0
	}
	return slices.ContainsFunc(b.Pages, func(pb pageBatch) bool {
		return h.ledgers[pb.Ledger] || h.pages[[2]string{pb.Ledger, pb.Page}]
	})
}

func (h *heldBack) add(b *batch) {
	if h.pages == nil {
		h.pages, h.ledgers = map[[2]string]bool{}, map[string]bool{}
	}
	for _, pb := range b.Pages {
		h.pages[[2]string{pb.Ledger, pb.Page}] = true
	}
	for _, c := range b.Names {
		switch c.Op {
		case store.NameCreateLedger, store.NameDeleteLedger, store.NameRenameLedger:
			h.ledgers[c.Ledger], h.ledgers[c.To] = true, true
		default:
			h.pages[[2]string{c.Ledger, c.Page}] = true
			h.pages[[2]string{c.DestLedger(), c.To}] = true
		}
	}
}

// applied records that dev's batch seq applied: first, the first of the
// queue of those not applied yet (rest), it moves dev's position up to
// the batch before the first of rest (or last, the last read, with none
// left), dropping the rows of batches applied ahead up to there; else the
// batch is recorded as applied ahead.
func (s *Syncer) applied(dev string, seq uint64, first bool, rest []*batch, last uint64) error {
	if !first {
		return s.repo.SetSyncState(map[string][]byte{aheadKey(dev, seq): {1}})
	}
	pos := last
	if len(rest) > 0 {
		pos = rest[0].Seq - 1
	}
	state := map[string][]byte{statePos + dev: []byte(strconv.FormatUint(pos, 10))}
	if pos > seq {
		ahead, err := s.appliedAhead(dev)
		if err != nil {
			return err
		}
		for n := range ahead {
			if n <= pos {
				state[aheadKey(dev, n)] = nil
			}
		}
	}
	return s.repo.SetSyncState(state)
}

// appliedAhead returns the numbers of dev's batches applied ahead of its
// position.
func (s *Syncer) appliedAhead(dev string) (map[uint64]bool, error) {
	out := map[uint64]bool{}
	err := s.repo.ScanSyncState(stateAhead+dev+"/", func(k string, _ []byte) error {
		seq, err := strconv.ParseUint(k[strings.LastIndexByte(k, '/')+1:], 10, 64)
		if err != nil {
			return fmt.Errorf("cloudsync: a batch applied ahead, %q: %w", k, err)
		}
		out[seq] = true
		return nil
	})
	return out, err
}

// How a pull finds new batches. It lists the change feed from a little
// before its last look (feedSlack covers devices' clocks that differ and
// announcements in flight), one request for the whole store when nothing
// changed; every fullScanEvery, and first, it lists every device's log
// instead, which finds batches whose announcement was lost or whose
// device's clock is off by more than feedSlack.
const (
	feedSlack     = time.Minute
	fullScanEvery = 5 * time.Minute
)

// newBatches names, per other device, the batches after the last one
// applied, in order; full lists every device's log, as a scan every
// fullScanEvery does.
func (s *Syncer) newBatches(ctx context.Context, full bool) (map[string][]string, error) {
	now := s.now()
	out := map[string][]string{}
	if full || s.scannedAt.IsZero() || now.Sub(s.scannedAt) >= fullScanEvery {
		var devices []string
		if err := s.be.List(ctx, devicesDir, "", func(o remote.Object) error {
			if d := strings.TrimPrefix(o.Name, devicesDir); d != s.device {
				devices = append(devices, d)
			}
			return nil
		}); err != nil {
			return nil, err
		}
		for _, dev := range devices {
			after := ""
			if pos, ok, err := s.position(dev); err != nil {
				return nil, err
			} else if ok {
				after = batchName(dev, pos)
			}
			if err := s.be.List(ctx, logsDir+dev+"/", after, func(o remote.Object) error {
				out[dev] = append(out[dev], o.Name)
				return nil
			}); err != nil {
				return nil, err
			}
		}
		s.scannedAt, s.lookedAt = now, now
		return out, nil
	}
	last := map[string]uint64{}
	if err := s.be.List(ctx, feedDir, feedDir+feedTime(s.lookedAt.Add(-feedSlack)), func(o remote.Object) error {
		if dev, seq, ok := parseFeedName(o.Name); ok && dev != s.device && seq >= last[dev] {
			last[dev] = seq
		}
		return nil
	}); err != nil {
		return nil, err
	}
	s.lookedAt = now
	for dev, seq := range last {
		from := uint64(0)
		if pos, ok, err := s.position(dev); err != nil {
			return nil, err
		} else if ok {
			from = pos + 1
		}
		for n := from; n <= seq; n++ {
			out[dev] = append(out[dev], batchName(dev, n))
		}
	}
	return out, nil
}

// position is the number of the last batch of dev's log applied here.
func (s *Syncer) position(dev string) (uint64, bool, error) {
	v, ok, err := s.repo.SyncState(statePos + dev)
	if err != nil || !ok {
		return 0, false, err
	}
	seq, err := strconv.ParseUint(string(v), 10, 64)
	if err != nil {
		return 0, false, fmt.Errorf("cloudsync: position in %s's log: %w", dev, err)
	}
	return seq, true, nil
}

// keepIndex records where the pieces of the batches read (or written) are,
// for commits of later pulls that reach them: each batch's pieces, in its
// order, the batches in theirs (a piece in two batches is where the later
// says).
func (s *Syncer) keepIndex(batches ...[]pieceRef) error {
	kv := map[string][]byte{}
	packs := map[string][]pieceRef{}
	var linked []string // packs given a next pack
	err := s.places(batches, func(r pieceRef, gone bool) error {
		if gone {
			return nil // its reached pieces are in the packs a repack made
		}
		b, err := json.Marshal(r)
		if err != nil {
			return err
		}
		kv[store.SyncPieceKey(cas.Digest(r.Digest))] = b
		packs[r.Pack] = append(packs[r.Pack], r)
		return nil
	})
	if err != nil {
		return err
	}
	for _, refs := range batches {
		// A batch's pieces are in the order a pull walks them, a
		// value's in its order: the pack after a pack holds what a
		// read in order wants next.
		for i := 1; i < len(refs); i++ {
			from, to := refs[i-1].Pack, refs[i].Pack
			if from == to {
				continue
			}
			key := stateNextPack + from
			if _, ok := kv[key]; ok {
				continue
			}
			if _, ok, err := s.repo.SyncState(key); err != nil {
				return err
			} else if !ok {
				kv[key] = []byte(to)
				linked = append(linked, from)
			}
		}
	}
	for name, rs := range packs {
		old, err := s.packIndex(name)
		if err != nil {
			return err
		}
		merged := mergeRefs(old, rs)
		if len(merged) == len(old) {
			continue
		}
		b, err := json.Marshal(merged)
		if err != nil {
			return err
		}
		kv[statePack+name] = b
		s.packs.Remove(name)
	}
	if err := s.repo.SetSyncState(kv); err != nil {
		return err
	}
	for _, p := range linked {
		s.nexts.Remove(p) // a stream read "none" for it before
	}
	return nil
}

// places calls fn with each piece of batches, in order, and whether its
// pack is one a repack emptied.
func (s *Syncer) places(batches [][]pieceRef, fn func(r pieceRef, emptied bool) error) error {
	repacked := map[string]bool{}
	for _, refs := range batches {
		for _, r := range refs {
			gone, ok := repacked[r.Pack]
			if !ok {
				var err error
				if gone, err = s.isRepacked(r.Pack); err != nil {
					return err
				}
				repacked[r.Pack] = gone
			}
			if err := fn(r, gone); err != nil {
				return err
			}
		}
	}
	return nil
}

// packIndex returns the pieces the batches read say pack name holds, in
// order.
func (s *Syncer) packIndex(name string) ([]pieceRef, error) {
	if rs, ok := s.packs.Get(name); ok {
		return rs, nil
	}
	v, found, err := s.repo.SyncState(statePack + name)
	if err != nil || !found {
		return nil, err
	}
	var rs []pieceRef
	if err := json.Unmarshal(v, &rs); err != nil {
		return nil, fmt.Errorf("cloudsync: the pieces of pack %s: %w", name, err)
	}
	s.packs.Add(name, rs)
	return rs, nil
}

// mergeRefs returns the pieces of old and add, one each, in pack order.
func mergeRefs(old, add []pieceRef) []pieceRef {
	out := slices.Clone(old)
	for _, r := range add {
		i, found := refAt(out, r.Off)
		if !found {
			out = slices.Insert(out, i, r)
		}
	}
	return out
}

// pieceAt returns where piece d is in the store, as the batches read and
// written here said.
func (s *Syncer) pieceAt(d cas.Digest) (pieceRef, bool, error) {
	var r pieceRef
	v, found, err := s.repo.SyncState(store.SyncPieceKey(d))
	if err != nil || !found {
		return r, false, err
	}
	if err := json.Unmarshal(v, &r); err != nil {
		return r, false, fmt.Errorf("cloudsync: where piece %s is: %w", d, err)
	}
	return r, true, nil
}

// applyBatch makes b's changes of names, and lands what it holds of each
// page; later are the batches of its device's log after b read in this
// pull.
func (s *Syncer) applyBatch(ctx context.Context, f *fetcher, b *batch, later []*batch, graft bool, st *Stats) error {
	// The commits a name change saw that a collection removed from the
	// store never come: as with a graft, it goes on without them.
	if err := s.applyNames(ctx, b.Device, b.Names, later, graft || s.kept.covers(b.Device, b.Seq), st); err != nil {
		if errors.Is(err, errMissingParent) || errors.Is(err, store.ErrBusy) {
			return err
		}
		return fmt.Errorf("cloudsync: batch %s: %w", batchName(b.Device, b.Seq), err)
	}
	for _, pb := range b.Pages {
		if err := s.applyPage(ctx, f, b, pb, later, graft, st); err != nil {
			if errors.Is(err, errMissingParent) || errors.Is(err, store.ErrBusy) {
				return err
			}
			return fmt.Errorf("cloudsync: batch %s of %s/%s: %w", batchName(b.Device, b.Seq), pb.Ledger, pb.Page, err)
		}
	}
	return nil
}

func (s *Syncer) applyPage(ctx context.Context, f *fetcher, b *batch, pb pageBatch, later []*batch, graft bool, st *Stats) error {
	ids, err := incarnationsOf(pb.Incarnations)
	if err != nil {
		return err
	}
	// What deletes here of its page saw, read before the batch's page
	// holds its incarnations.
	deletes, err := s.deletedHere(ids)
	if err != nil {
		return err
	}
	pl, err := s.placeBatch(ctx, pb, ids, later, graft, st)
	if err != nil {
		return err
	}
	if pl.skip {
		return s.keepSkipped(b.Device, pb, ids)
	}
	pb.Ledger, pb.Page = pl.at[0], pl.at[1]
	if err := s.landBatch(ctx, f, b, pb, ids, graft, st); err != nil || len(deletes) == 0 {
		return err
	}
	_, err = s.goneAgain(pb.Ledger, pb.Page, ids, deletes)
	return err
}

// landBatch lands pb, of a page here, in it: b's part of that page.
func (s *Syncer) landBatch(ctx context.Context, f *fetcher, b *batch, pb pageBatch, ids []store.Incarnation, graft bool, st *Stats) error {
	device, seq := b.Device, b.Seq
	p, err := s.repo.Acquire(pb.Ledger, pb.Page)
	if err != nil {
		return err
	}
	if want, change, err := s.chunkAs(p, pb); err != nil || change {
		s.repo.Release(p)
		if err != nil {
			return err
		}
		// Set with the page held alone; rare: a page's first batch.
		if err := s.repo.SetPagePolynomial(pb.Ledger, pb.Page, want); err != nil {
			return err
		}
		if p, err = s.repo.Acquire(pb.Ledger, pb.Page); err != nil {
			return err
		}
	}
	defer s.repo.Release(p)
	var fresh []*store.Commit // not held here, parents first
	inBatch := map[store.CommitID]bool{}
	// The history kept of the page, if it was deleted here: what the
	// batch builds on that the page lacks lands from it, oldest first,
	// before the batch's commits.
	var kept *keptHistory
	for _, cb := range pb.Commits {
		id := store.CommitID(cas.Hash(cb))
		c, err := store.DecodeCommit(id, cb)
		if err != nil {
			return err
		}
		inBatch[id] = true
		if s.kept.gone(device, seq, id) {
			continue // collected from the store: its children graft
		}
		if ok, err := p.HasCommit(id); err != nil {
			return err
		} else if ok {
			continue
		}
		for _, parent := range c.Parents {
			if inBatch[parent] {
				continue
			}
			ok, err := p.HasCommit(parent)
			if err != nil {
				return err
			}
			if !ok && kept == nil {
				if kept, err = s.deletedHistory(ids); err != nil {
					return err
				}
			}
			if !ok && kept.reach(p, parent) {
				continue
			}
			if !ok && (!graft || f.coming[parent]) {
				return errMissingParent
			}
		}
		fresh = append(fresh, c)
	}
	if len(fresh) == 0 {
		meta := map[string][]byte{}
		if err := s.addLanded(meta, p, b, pb); err != nil || len(meta) == 0 {
			return err
		}
		if err := p.MarkSynced(nil, nil, meta); err != nil {
			return err
		}
		return s.pruneBatchHeads(p)
	}
	old, makers := kept.commits()
	if makers, err = s.batchMakers(pb, makers); err != nil {
		return err
	}
	fetched, err := f.fetch(ctx, p, slices.Concat(old, fresh))
	if len(old) > 0 && (errors.Is(err, errPieceUnknown) || errors.Is(err, remote.ErrNotFound)) {
		// The kept history's pieces are gone from the store (collected):
		// the batch lands as it would without it.
		slog.Warn("cloudsync: the history kept of a deleted page cannot be fetched; landing without it",
			"ledger", pb.Ledger, "page", pb.Page, "err", err)
		if err := s.repo.DropDeletedHistory(ids); err != nil {
			return err
		}
		return s.landBatch(ctx, f, b, pb, ids, graft, st)
	}
	if err != nil {
		return err
	}
	st.CommitsDown += len(fresh)
	ln, err := s.lineageOf(p, b, pb, fresh[len(fresh)-1])
	if err != nil {
		return err
	}
	if err := s.arrive(p, slices.Concat(old, fresh), device, makers, ln, fetched, st); err != nil {
		return err
	}
	if len(old) > 0 {
		if err := s.repo.DropDeletedHistory(ids); err != nil {
			return err
		}
	}
	meta := map[string][]byte{"pulled_at": []byte(time.Now().UTC().Format(time.RFC3339))}
	if err := s.addLanded(meta, p, b, pb); err != nil {
		return err
	}
	if pb.Keep != "" {
		meta[gc.KeepPrefix+device] = []byte(pb.Keep)
	}
	if err := p.MarkSynced(nil, nil, meta); err != nil {
		return err
	}
	if err := s.pruneBatchHeads(p); err != nil {
		return err
	}
	return s.keepLocal(p)
}

// arrive lands fresh, commits the page lacks (parents first) whose pieces
// it holds (fetched, new, transient until then), on its head: a pull's,
// made by device (or, for those in makers, the device it names: "", this
// one), or, with device "", commits of a page merged into it
// (mergeAway), whose device rows it holds and which go up from here as
// its own. A head the landing merged goes up. Ln, if not nil, is what the
// page knows of fresh beyond their parents.
func (s *Syncer) arrive(p *store.Page, fresh []*store.Commit, device string, makers map[store.CommitID]string, ln *lineage, fetched []cas.Digest, st *Stats) error {
	own := device == ""
	if !own {
		// Who made each commit is known before the commits land: a
		// local write committing right after them asks (Unseen).
		made := map[string][]byte{}
		for _, c := range fresh {
			if by := makerOf(makers, c.ID, device); by != "" { // "": this device
				made[deviceKey(c.ID)] = []byte(by)
			}
		}
		if err := p.MarkSynced(nil, nil, made); err != nil {
			return err
		}
	}
	remoteHead := fresh[len(fresh)-1]
	// The page's lock keeps commits of a mount's journals from landing
	// between the reading of the head and its move.
	p.Lock()
	from, err := p.Head()
	var mergeNew []cas.Digest
	if err == nil {
		mergeNew, err = s.land(p, fresh, remoteHead, ln, device, st)
	}
	var to *store.Commit
	if err == nil {
		to, err = p.Head()
	}
	p.Unlock()
	if err != nil {
		return err
	}
	if to.ID != from.ID {
		s.landed(p.Ledger, p.Name, from, to)
	}
	status := store.Synced
	if own {
		status = store.Local
	}
	if err := p.SetStatus(status, fetched); err != nil {
		return err
	}
	if len(mergeNew) > 0 {
		if err := p.SetStatus(store.Local, mergeNew); err != nil {
			return err
		}
	}
	if own || to.ID != from.ID && to.ID != remoteHead.ID {
		s.Changed(p.Ledger, p.Name) // a merge, or commits taken, to push
	}
	return nil
}

// keepLocal fetches what the page keeps local (store.Page.SetLocal) and
// a lazy pull left in the remote.
func (s *Syncer) keepLocal(p *store.Page) error {
	kept, err := p.LocalPrefixes()
	if err != nil || len(kept) == 0 {
		return err
	}
	for _, k := range kept {
		if _, _, err := p.MakeLocal(k); err != nil {
			return fmt.Errorf("fetch what %s/%s keeps local: %w", p.Ledger, p.Name, err)
		}
	}
	return nil
}

// errPieceUnknown reports a piece no batch read says where to find.
var errPieceUnknown = errors.New("in no batch read")

// deviceKey is the page's sync_metadata row that says which device made
// a commit fetched from the store.
func deviceKey(id store.CommitID) string { return store.MadeByKey(id) }

// ensurePage creates the ledger and page of a batch if this device does
// not have them: pages of one name on two devices are one page.
func (s *Syncer) ensurePage(ledger, page string) error {
	if err := s.ensureLedger(ledger); err != nil {
		return err
	}
	if ok, err := s.repo.HasPage(ledger, page); err != nil || ok {
		return err
	}
	if err := s.namer().CreatePage(ledger, page); err != nil && !errors.Is(err, store.ErrExists) {
		return err
	}
	return nil
}

// chunkAs reports whether page p, of pb, must change its chunker
// polynomial to want to chunk as the other devices do. A page is chunked
// with its own polynomial, which its batches name, while only the device
// that made it before joining the store has written it; once a device
// writes it with the store's (a batch naming none), it is the store's on
// every device. So a page that holds no commit yet takes what pb names,
// and any page takes the store's from a batch naming none: every device
// ends on the same, whatever order the batches come in. Values written
// before keep their pieces (see store.Repository.SetPagePolynomial).
func (s *Syncer) chunkAs(p *store.Page, pb pageBatch) (want chunker.Pol, change bool, err error) {
	want = s.pol
	if pb.Polynomial != "" {
		u, err := strconv.ParseUint(pb.Polynomial, 0, 64)
		if err != nil {
			return 0, false, fmt.Errorf("chunker polynomial %q: %w", pb.Polynomial, err)
		}
		want = chunker.Pol(u)
	}
	pol := p.Polynomial()
	if pol == want {
		return want, false, nil // the common case: no head read
	}
	head, err := p.Head()
	if err != nil {
		return 0, false, err
	}
	// Of two own polynomials (two devices made the page before joining)
	// the greater wins, so that those devices agree too.
	better := want == s.pol || pol != s.pol && want > pol
	return want, head.ID == store.FirstCommitID || better, nil
}

// ensureLedger creates ledger if this device does not have it.
func (s *Syncer) ensureLedger(ledger string) error {
	if ok, err := s.repo.HasLedger(ledger); err != nil || ok {
		return err
	}
	if err := s.namer().CreateLedger(ledger); err != nil && !errors.Is(err, store.ErrExists) {
		return err
	}
	return nil
}

// land makes the remote head part of the page: its commits' rows, and the
// page's head moved to it (fast-forward) or to the merge of it and the
// local head. It returns the pieces a merge wrote. Device made fresh, or,
// if "", they are a merged page's, taken as this device's (arrive). Ln,
// if not nil, is what the page knows of them beyond their parents.
func (s *Syncer) land(p *store.Page, fresh []*store.Commit, remote *store.Commit, ln *lineage, device string, st *Stats) ([]cas.Digest, error) {
	local, err := p.Head()
	if err != nil {
		return nil, err
	}
	byID := map[store.CommitID]*store.Commit{}
	for _, c := range fresh {
		byID[c.ID] = c
	}
	g := &graph{p: p, extra: byID}
	adopt := p.Adopt
	if device == "" {
		adopt = p.Take
	}
	if ln != nil {
		g.known = ln.known
	}
	switch {
	case local.ID == remote.ID, ln != nil && ln.behind:
		return nil, adopt(fresh, nil, nil)
	}
	if ok, err := g.isAncestor(remote, local); err != nil {
		return nil, err
	} else if ok {
		return nil, adopt(fresh, nil, nil)
	}
	if ok, err := g.isAncestor(local, remote); err != nil {
		return nil, err
	} else if ok {
		return nil, adopt(fresh, nil, remote)
	}
	// Who made each commit, fresh ones too: arrive wrote their rows.
	madeBy := func(c *store.Commit) (string, error) { return s.madeBy(p, c) }
	base, real, virtual, err := virtualBase(p, g, local, remote, madeBy, 0)
	if err != nil {
		return nil, err
	}
	localDevice, err := madeBy(local)
	if err != nil {
		return nil, err
	}
	remoteDevice, err := madeBy(remote)
	if err != nil {
		return nil, err
	}
	m, written, conflicts, err := merge(p, g, base, real, side{local, localDevice}, side{remote, remoteDevice}, madeBy)
	if err != nil {
		return nil, err
	}
	st.Merges++
	st.Conflicts += conflicts
	// The virtual base's tree nodes are written too, and the merge's
	// tree may reuse some: they leave the transient state with its own.
	return append(written, virtual...), adopt(fresh, m, m)
}

// maxVirtualDepth bounds the recursion of virtualBase; past it the common
// ancestor of highest generation serves, as before there were virtual
// bases.
const maxVirtualDepth = 8

// virtualBase returns the base of a merge of a and b: their best common
// ancestor, or, when they have several (heads whose histories crossed
// merges), the merge of those, made as git's recursive merge makes it and
// never landed, with the pieces it wrote. Taking one of several bases
// made the versions of the others look new: a file only one device ever
// wrote got an empty conflict file, and a deleted file came back.
//
// With a virtual base it also returns the common ancestors it merged: a
// merge on it checks its sides against them (merge).
func virtualBase(p *store.Page, g *graph, a, b *store.Commit, madeBy func(*store.Commit) (string, error), depth int) (*store.Commit, []*store.Commit, []cas.Digest, error) {
	bases, err := g.mergeBases(a, b)
	if err != nil {
		return nil, nil, nil, err
	}
	switch {
	case len(bases) == 1:
		return bases[0], nil, nil, nil // the common ancestor of highest generation
	case depth >= maxVirtualDepth:
		c, err := g.mergeBase(a, b)
		return c, nil, nil, err
	}
	var written []cas.Digest
	v := bases[0]
	for _, l := range bases[1:] {
		vb, real, w, err := virtualBase(p, g, v, l, madeBy, depth+1)
		if err != nil {
			return nil, nil, nil, err
		}
		written = append(written, w...)
		dv, err := madeBy(v)
		if err != nil {
			return nil, nil, nil, err
		}
		dl, err := madeBy(l)
		if err != nil {
			return nil, nil, nil, err
		}
		m, w, _, err := merge(p, g, vb, real, side{v, dv}, side{l, dl}, madeBy)
		if err != nil {
			return nil, nil, nil, err
		}
		written = append(written, w...)
		if g.extra == nil {
			g.extra = map[store.CommitID]*store.Commit{}
		}
		g.extra[m.ID] = m // the walks of later merges reach it
		v = m
	}
	return v, bases, written, nil
}

// batchMakers adds to makers (of arrive) the makers pb names; the commits
// it says this device made get no row.
func (s *Syncer) batchMakers(pb pageBatch, makers map[store.CommitID]string) (map[store.CommitID]string, error) {
	for h, by := range pb.Makers {
		id, err := store.ParseCommitID(h)
		if err != nil {
			return nil, fmt.Errorf("batch of %s/%s: maker of %w", pb.Ledger, pb.Page, err)
		}
		if by == s.device {
			by = ""
		}
		if makers == nil {
			makers = map[store.CommitID]string{}
		}
		makers[id] = by
	}
	return makers, nil
}

// madeBy is the device that made commit c: the one whose log it came
// from, or this one.
func (s *Syncer) madeBy(p *store.Page, c *store.Commit) (string, error) {
	v, ok, err := p.SyncMetadata(deviceKey(c.ID))
	if err != nil || !ok {
		return s.device, err
	}
	return string(v), nil
}

// A fetcher stores the pieces a commit reaches that the page lacks, from
// the packs the index names, or from another page of this repository;
// it keeps the last few packs read.
type fetcher struct {
	s *Syncer
	// from, if not nil, is the page the pieces are copied from, where
	// it holds them (a page merged into another, mergeAway).
	from   *store.Page
	index  map[cas.Digest]pieceRef
	ranges []fetchedRange // the last read, least recently used first
	p      *store.Page
	pw     *store.PieceWriter
	st     *Stats
	// walked holds the pieces of p this pull fetched or walked below:
	// transient until it lands, and complete.
	walked map[cas.Digest]bool
	// nodes are the tree nodes node fetched, for values.
	nodes []cas.ObjectIdentifier
	// coming, while a pull first grafts, holds the commits of the
	// batches read and waiting: a batch that builds on one of them waits
	// for it still, and grafts only if no batch can apply otherwise.
	coming map[store.CommitID]bool
}

// maxPacks bounds the packs (or ranges) a fetcher keeps, the least
// recently used dropped first: 4 of 8 MiB.
const maxPacks = 4

// piece stores d, fetched and verified, unless the page holds it; it
// reports whether it was fetched. An index piece or tree node is flushed
// at once, for the walk to read it.
func (f *fetcher) piece(ctx context.Context, d cas.Digest) (bool, error) {
	if d.IsInline() {
		return false, nil
	}
	if ok, err := f.complete(d); err != nil || ok {
		return false, err
	}
	f.walked[d] = true
	if f.from != nil {
		return f.copied(d)
	}
	r, ok := f.index[d]
	if !ok {
		var err error
		if r, ok, err = f.s.pieceAt(d); err != nil {
			return false, err
		}
		if !ok {
			return false, fmt.Errorf("piece %s: %w", d, errPieceUnknown)
		}
	}
	sealed, err := f.bytesOf(ctx, d, r)
	if err != nil {
		return false, err
	}
	data, err := f.s.openPiece(d, r.Pack, sealed, false) // the pack is kept for other pieces
	if err != nil {
		return false, err
	}
	if err := f.pw.Put(d, data); err != nil {
		return false, err
	}
	f.st.PiecesDown++
	if f.st.PiecesDown%256 == 0 {
		f.s.progress("pull "+f.p.Ledger+"/"+f.p.Name, f.st.PiecesDown, 0)
	}
	if d.IsIndex() || d.IsTreeNode() {
		return true, f.pw.Flush()
	}
	return true, nil
}

// copied stores piece d from page f.from: what a lazy page left in the
// store stays there for a read to fetch, as a lazy pull leaves it.
func (f *fetcher) copied(d cas.Digest) (bool, error) {
	if f.s.lazy && !d.IsIndex() && !d.IsTreeNode() {
		if ok, err := f.from.Has(d); err != nil || !ok {
			return false, err
		}
	}
	data, err := f.from.Get(d, nil)
	if err != nil {
		return false, err
	}
	if err := f.pw.Put(d, data); err != nil {
		return false, err
	}
	if d.IsIndex() || d.IsTreeNode() {
		return true, f.pw.Flush()
	}
	return true, nil
}

// fetch stores in p the pieces that fresh, commits p lacks, reach and p
// lacks, and returns them: new, transient until the commits land.
func (f *fetcher) fetch(ctx context.Context, p *store.Page, fresh []*store.Commit) ([]cas.Digest, error) {
	pw := p.NewPieceWriter()
	pw.Track = true
	f.p, f.pw, f.walked, f.nodes = p, pw, map[cas.Digest]bool{}, nil
	// The nodes of every commit, then their values: the order a push
	// packs them in (walkOrder), so that each pack is read once.
	for _, c := range fresh {
		if err := f.node(ctx, c.Root); err != nil {
			pw.Discard()
			return nil, fmt.Errorf("fetch commit %s: %w", c.ID, err)
		}
	}
	if err := f.values(ctx); err != nil {
		pw.Discard()
		return nil, fmt.Errorf("fetch the values of %d commits: %w", len(fresh), err)
	}
	if err := pw.Flush(); err != nil {
		return nil, err
	}
	return pw.New, nil
}

// A fetchedRange is bytes of a pack a pull read: the whole pack (off 0),
// or in a lazy pull a run of tree nodes and index pieces.
type fetchedRange struct {
	pack string
	off  int64
	data []byte
}

// bytesOf returns what pack r.Pack holds of piece d, from a range read
// already or a new one: the whole pack, or, in a lazy pull, the run of tree
// nodes and index pieces that starts at d, back to back in the pack and up
// to fetchAhead bytes (a push packs its nodes together, walkOrder): so a
// lazy pull reads the trees, not the values packed after them.
func (f *fetcher) bytesOf(ctx context.Context, d cas.Digest, r pieceRef) ([]byte, error) {
	for i, g := range f.ranges {
		if g.pack == r.Pack && g.off <= r.Off && r.Off+r.Len <= g.off+int64(len(g.data)) {
			// Last used last: a run of tree nodes serves the whole walk.
			f.ranges = append(slices.Delete(f.ranges, i, i+1), g)
			return g.data[r.Off-g.off : r.Off-g.off+r.Len], nil
		}
	}
	g := fetchedRange{pack: r.Pack}
	var err error
	if f.s.lazy {
		refs := []pieceRef{r}
		if idx, err := f.s.packIndex(r.Pack); err != nil {
			return nil, err
		} else if i, found := refAt(idx, r.Off); found {
			end := r.Off + r.Len
			for _, n := range idx[i+1:] {
				nd := cas.Digest(n.Digest)
				if n.Off != end || !nd.IsTreeNode() && !nd.IsIndex() || end+n.Len-r.Off > fetchAhead {
					break
				}
				end += n.Len
			}
			refs[0].Len = end - r.Off
		}
		g.off = r.Off
		g.data, err = f.s.be.GetRange(ctx, r.Pack, r.Off, refs[0].Len)
	} else {
		g.data, err = f.s.be.Get(ctx, r.Pack)
	}
	if err != nil {
		return nil, err
	}
	f.st.BytesDown += int64(len(g.data))
	if len(f.ranges) >= maxPacks {
		f.ranges = f.ranges[1:]
	}
	f.ranges = append(f.ranges, g)
	if r.Off < g.off || r.Len < 0 || r.Off+r.Len > g.off+int64(len(g.data)) {
		return nil, fmt.Errorf("piece %s: %d bytes at %d of pack %s, which holds %d bytes from %d", d, r.Len, r.Off, r.Pack, len(g.data), g.off)
	}
	return g.data[r.Off-g.off : r.Off-g.off+r.Len], nil
}

// complete reports whether the page holds d with every piece below it: a
// piece held and not transient. A transient one may be what a pull that
// failed midway fetched before the pieces below it; it is fetched again
// (the writer skips what is held) and walked.
func (f *fetcher) complete(d cas.Digest) (bool, error) {
	if f.walked[d] {
		return true, nil
	}
	if ok, err := f.p.Has(d); err != nil || !ok {
		return false, err
	}
	t, err := f.p.IsTransient(d)
	return !t, err
}

// value fetches the pieces of a value the page lacks.
func (f *fetcher) value(ctx context.Context, id cas.ObjectIdentifier) error {
	return cas.Walk(f.p, id, func(d cas.Digest) (bool, error) {
		return f.piece(ctx, d)
	}, nil)
}

// node fetches a tree node and the nodes below it, where the page lacks
// them, and lists each it fetched in f.nodes, parents first: a node held
// has all the nodes below it (children are stored before the commit that
// reaches them lands). Their values come after, in values.
func (f *fetcher) node(ctx context.Context, id cas.ObjectIdentifier) error {
	if id == btree.EmptyRoot || id.Digest.IsInline() {
		return nil
	}
	if ok, err := f.complete(id.Digest); err != nil || ok {
		return err
	}
	// The node's own pieces (a large node is an index over chunks), in
	// the db for Refs to read.
	if err := f.value(ctx, id); err != nil {
		return err
	}
	if err := f.pw.Flush(); err != nil {
		return err
	}
	f.nodes = append(f.nodes, id)
	children, _, err := f.p.Nodes().Refs(id)
	if err != nil {
		return err
	}
	for _, c := range children {
		if err := f.node(ctx, c); err != nil {
			return err
		}
	}
	return nil
}

// values fetches the values of the nodes node fetched, in its order, which
// is the order a push packs them in (walkOrder): unless the syncer is lazy,
// and they are fetched when read.
func (f *fetcher) values(ctx context.Context) error {
	nodes := f.nodes
	f.nodes = nil
	if f.s.lazy && f.from == nil {
		return nil // a page merged in gives what it holds (copied)
	}
	for _, id := range nodes {
		_, values, err := f.p.Nodes().Refs(id)
		if err != nil {
			return err
		}
		for _, v := range values {
			if err := f.value(ctx, v); err != nil {
				return err
			}
		}
	}
	return nil
}

// comingCommits returns the commits of the batches in queues.
func comingCommits(queues map[string][]*batch) map[store.CommitID]bool {
	out := map[store.CommitID]bool{}
	for _, q := range queues {
		for _, b := range q {
			for _, pb := range b.Pages {
				for _, cb := range pb.Commits {
					out[store.CommitID(cas.Hash(cb))] = true
				}
			}
		}
	}
	return out
}
