package cloudsync

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/ledgerfs/ledgerfs/cas"
	"github.com/ledgerfs/ledgerfs/internal/gc"
	"github.com/ledgerfs/ledgerfs/internal/remote"
	"github.com/ledgerfs/ledgerfs/store"
)

// How the bucket is collected (see DESIGN.md, "Collecting the store").
// One device at a time (the lock) pulls everything, marks what the commits
// it holds reach — its own history is pruned by every device's policy
// (PolicyOf's union), so it holds what any device keeps — and finds the
// packs none of it is in. It does not delete those at once: it writes a
// record, collected/MS-DEVICE, naming them, and deletes them at a later
// collection, at least Grace after the record, if they are still
// unreached. Every device reads new records before it pushes, and pieces
// it holds in a recorded pack become local again, to go up in a new pack
// with its next batch: a device that reuses a piece of a recorded pack in a
// new commit (a restore from history, a commit made offline on an old
// head) sends it again. A batch written within Grace of the record is
// pulled by the collection that deletes, so what it reaches is kept.
const (
	collectedDir = "collected/"
	// DefaultGrace is how long a recorded pack stays before a collection
	// deletes it: longer than any device's push takes from reading the
	// records to writing its batch (absorbEvery, twice).
	DefaultGrace = time.Hour
	// MinGrace is the shortest grace that keeps that promise; 0 deletes at
	// once, safe only while no other device pushes.
	MinGrace = 3 * absorbEvery
	// absorbEvery is how often a device reads new records; a push that
	// would write a batch more than twice that after the last read reads
	// them again first.
	absorbEvery = 5 * time.Minute
)

// A collectRecord says what a collection found the store no longer needs.
type collectRecord struct {
	Device string    `json:"device"`
	Time   time.Time `json:"time"`
	// Prev is the record before this one ("" for the first): a device
	// whose last record read is not Prev missed records since deleted.
	Prev string `json:"prev"`
	// Positions are, per device, the last batch of its log the collection
	// had applied; of the commits of those batches only Kept are in the
	// store still. A device that pulls those batches later lands only
	// those (the rest graft).
	Positions map[string]uint64 `json:"positions"`
	Kept      [][]byte          `json:"kept"`
	// Packs no kept commit reaches: deleted by a collection at least the
	// grace after Time, unless reached again by then.
	Packs []string `json:"packs"`
	// Moved, if set, is the batch of the collection's repack: the packs
	// it emptied are among Packs, and a device indexes it before it looks
	// in them for pieces to send again (layout 5).
	Moved string `json:"moved,omitempty"`
	// Checkpoint, if set, names the set of Objects objects under
	// checkpoints/ that hold the state these positions reach (layout 6):
	// what a new device joins from.
	Checkpoint string `json:"checkpoint,omitempty"`
	Objects    int    `json:"objects,omitempty"`
}

func recordName(t time.Time, device string) string {
	return collectedDir + feedTime(t) + "-" + device
}

// CollectOptions steer a collection of the store.
type CollectOptions struct {
	// Grace: see DefaultGrace. 0 deletes unreached packs at once.
	Grace time.Duration
	// DryRun finds what would go and changes nothing in the store.
	DryRun bool
}

// CollectStats say what a collection of the store found and did.
type CollectStats struct {
	Packs, Live, Unknown int   // packs listed; reached (and not repacked); not in any batch read
	Bytes, LiveBytes     int64 // the packs' bytes; the reached ones'
	Recorded             int   // unreached packs, recorded
	Deleted              int   // packs deleted
	DeletedBytes         int64
	// Repacked are the packs whose reached pieces, RepackedBytes of them,
	// took less than repackBelow of their bytes: moved to new packs (see
	// repackBelow), and the packs recorded with the unreached ones.
	Repacked      int
	RepackedBytes int64
	// Small are the packs of Repacked that were repacked for their size:
	// under a smallPackShare of a full pack, and repackSmallAtLeast of
	// them or more.
	Small   int
	Waiting bool // batches wait to apply: nothing deleted
	Kept    int  // commits kept
}

// Collect collects the store: see collectedDir. The repository should be
// collected first (gc.CollectPage with every device's policy), so that the
// commits it holds are what the store keeps. It holds the store's lock
// throughout: ErrLocked if another device collects.
func (s *Syncer) Collect(ctx context.Context, o CollectOptions) (CollectStats, error) {
	var cs CollectStats
	if o.Grace != 0 && o.Grace < MinGrace {
		return cs, fmt.Errorf("cloudsync: a grace of %s is shorter than %s, the longest a device's push may take to see a collection's record (0 deletes at once)", o.Grace, MinGrace)
	}
	l, err := s.takeLock(ctx)
	if err != nil {
		return cs, err
	}
	defer func() {
		// A release cut short leaves the lock to expire.
		if err := l.release(context.WithoutCancel(ctx)); err != nil {
			slog.Warn("cloudsync: release the store's lock", "err", err)
		}
	}()
	// Everything pushed so far is applied here, and everything here pushed.
	s.scannedAt, s.absorbedAt = time.Time{}, time.Time{}
	var st Stats
	if err := s.Pull(ctx, &st); err != nil {
		return cs, err
	}
	if err := s.Push(ctx, &st); err != nil {
		return cs, err
	}
	cs.Waiting = st.Waiting > 0

	// The checkpoint of what this device holds, written as the walk goes:
	// only with a record to name it.
	var cw *checkpointWriter
	if !o.DryRun && !cs.Waiting {
		if err := s.raise(ctx, remote.VersionCheckpoints); err != nil {
			return cs, err
		}
		if cw, err = s.newCheckpointWriter(l, s.now().UTC()); err != nil {
			return cs, err
		}
		if err := cw.places(ctx); err != nil {
			return cs, err
		}
	}
	reach, kept, err := s.reachAll(ctx, l, cw)
	if err != nil {
		return cs, err
	}
	cs.Kept = len(kept)
	positions, err := s.positions()
	if err != nil {
		return cs, err
	}

	// The packs, which of them no kept commit reaches, which hold
	// reached pieces in less than repackBelow of their bytes, and which
	// are small.
	var unreached []string
	var sparse, small []sparsePack
	var smallBytes, smallSize int64
	size := map[string]int64{}
	err = s.be.List(ctx, packsDir, "", func(o remote.Object) error {
		cs.Packs++
		cs.Bytes += o.Size
		size[o.Name] = o.Size
		refs, err := s.packIndex(o.Name)
		if err != nil {
			return err
		}
		if len(refs) == 0 {
			// In no batch read: one being pushed, its batch not yet
			// written.
			cs.Unknown++
			cs.LiveBytes += o.Size
			return nil
		}
		live, err := s.reachedIn(o.Name, refs, reach)
		if err != nil {
			return err
		}
		var liveBytes int64
		for _, r := range live {
			liveBytes += r.Len
		}
		switch {
		case len(live) == 0:
			unreached = append(unreached, o.Name)
		case float64(liveBytes) < repackBelow*float64(o.Size):
			sparse = append(sparse, sparsePack{name: o.Name, live: live})
			cs.Repacked++
			cs.RepackedBytes += liveBytes
			cs.LiveBytes += liveBytes
		case o.Size < int64(s.packSize)/smallPackShare:
			small = append(small, sparsePack{name: o.Name, live: live})
			smallBytes += liveBytes
			smallSize += o.Size
		default:
			cs.Live++
			cs.LiveBytes += o.Size
		}
		return nil
	})
	if err != nil {
		return cs, err
	}
	if len(small) >= cmp.Or(s.repackSmall, repackSmallAtLeast) {
		sparse = append(sparse, small...)
		cs.Repacked += len(small)
		cs.Small = len(small)
		cs.RepackedBytes += smallBytes
		cs.LiveBytes += smallBytes
	} else {
		cs.Live += len(small)
		cs.LiveBytes += smallSize
	}
	// Moved in the order the walk first reached them, page by page, which
	// is the order a join fetches them in: a page's pieces end up in one
	// or two packs, not in every pack the repack writes.
	for i := range sparse {
		sparse[i].first = math.MaxUint32
		for _, r := range sparse[i].live {
			if o, ok := reach.Order(cas.Digest(r.Digest)); ok {
				sparse[i].first = min(sparse[i].first, o)
			}
		}
	}
	slices.SortStableFunc(sparse, func(a, b sparsePack) int { return cmp.Compare(a.first, b.first) })
	if cs.Waiting {
		// Commits of batches not applied here may reach what looks
		// unreached, and a record's positions must not go back: no
		// record, nothing deleted or moved.
		cs.Recorded, cs.Live, cs.Repacked, cs.Small, cs.RepackedBytes = len(unreached), cs.Live+cs.Repacked, 0, 0, 0
		return cs, nil
	}
	cs.Recorded = len(unreached)
	var moved string
	if !o.DryRun {
		// What a repack moved is reached elsewhere now: the packs it
		// left go as unreached ones do.
		if moved, err = s.repack(ctx, l, sparse); err != nil {
			return cs, err
		}
		for _, sp := range sparse {
			unreached = append(unreached, sp.name)
		}
	}

	records, err := s.records(ctx, "")
	if err != nil {
		return cs, err
	}
	// What goes now: unreached packs a record named at least the grace ago
	// (all of them, with no grace).
	due := map[string]bool{}
	for _, r := range records {
		if s.now().Sub(r.rec.Time) >= o.Grace {
			for _, p := range r.rec.Packs {
				due[p] = true
			}
		}
	}
	var del []string
	for _, p := range unreached {
		if o.Grace == 0 || due[p] {
			del = append(del, p)
		}
	}
	if o.DryRun {
		for _, sp := range sparse {
			if o.Grace == 0 || due[sp.name] {
				del = append(del, sp.name)
			}
		}
		cs.Deleted = len(del)
		for _, p := range del {
			cs.DeletedBytes += size[p]
		}
		return cs, nil
	}

	prev := ""
	if len(records) > 0 {
		prev = records[len(records)-1].name
	}
	rec := collectRecord{Device: s.device, Time: s.now().UTC(), Prev: prev, Positions: positions, Packs: unreached, Moved: moved}
	if rec.Checkpoint, rec.Objects, err = cw.close(ctx); err != nil {
		return cs, err
	}
	for id := range kept {
		rec.Kept = append(rec.Kept, id[:])
	}
	slices.SortFunc(rec.Kept, func(a, b []byte) int { return strings.Compare(string(a), string(b)) })
	body, err := json.Marshal(rec)
	if err != nil {
		return cs, err
	}
	name := recordName(rec.Time, s.device)
	if err := l.check(ctx); err != nil {
		return cs, err
	}
	if err := s.be.Create(ctx, name, s.seal(name, body)); err != nil {
		return cs, fmt.Errorf("cloudsync: write the collection's record: %w", err)
	}
	// Pieces held here in the packs recorded go up again if reached
	// later, as on every other device.
	if err := s.unsync(ctx, setOf(unreached), false); err != nil {
		return cs, err
	}
	if len(del) > 0 {
		slog.Info("cloudsync: deleting unreached packs", "packs", len(del), "recorded", name)
	}
	s.progress("collect: delete", 0, len(del))
	for i, p := range del {
		if i%64 == 0 {
			if err := l.refresh(ctx); err != nil {
				return cs, err
			}
			if err := l.check(ctx); err != nil {
				return cs, err
			}
			s.progress("collect: delete", i, len(del))
		}
		if err := s.be.Delete(ctx, p); err != nil {
			return cs, err
		}
		cs.Deleted++
		cs.DeletedBytes += size[p]
	}
	s.progress("collect: delete", len(del), len(del))
	forget := make([]string, 0, 2*len(del))
	for _, p := range del {
		forget = append(forget, statePack+p, stateNextPack+p)
		s.packs.Remove(p)
		s.nexts.Remove(p)
	}
	if err := s.repo.DeleteSyncState(forget); err != nil {
		return cs, err
	}
	// This device read its own record; the records before it that are past
	// the grace go (a device that missed them checks its pieces against
	// the packs: absorb).
	if err := s.repo.SetSyncState(map[string][]byte{stateCollected: []byte(name)}); err != nil {
		return cs, err
	}
	s.kept = keptOf(rec)
	live := map[string]bool{rec.Checkpoint: true}
	for _, r := range records {
		if s.now().Sub(r.rec.Time) >= o.Grace {
			if err := s.be.Delete(ctx, r.name); err != nil {
				return cs, err
			}
		} else {
			live[r.rec.Checkpoint] = true
		}
	}
	// The checkpoints of the records gone, and of collections cut short.
	return cs, s.dropCheckpoints(ctx, l, live)
}

// reachedIn returns the pieces of refs, pack's, that reach marks: those
// a repack moved are reached in their new packs instead.
func (s *Syncer) reachedIn(pack string, refs []pieceRef, reach *gc.Reach) ([]pieceRef, error) {
	moved, err := s.isRepacked(pack)
	if err != nil {
		return nil, err
	}
	var live []pieceRef
	for _, r := range refs {
		d := cas.Digest(r.Digest)
		if !reach.Has(d) {
			continue
		}
		if moved {
			if at, ok, err := s.pieceAt(d); err != nil {
				return nil, err
			} else if ok && at.Pack != pack {
				continue
			}
		}
		live = append(live, r)
	}
	return live, nil
}

func setOf(names []string) map[string]bool {
	m := make(map[string]bool, len(names))
	for _, n := range names {
		m[n] = true
	}
	return m
}

// reachAll marks what every commit of every page here reaches, fetching
// the tree nodes and index pieces not held (an evicted page comes back),
// and adds each page to the checkpoint cw, if not nil.
func (s *Syncer) reachAll(ctx context.Context, l *lock, cw *checkpointWriter) (*gc.Reach, map[store.CommitID]bool, error) {
	pages, err := s.pages()
	if err != nil {
		return nil, nil, err
	}
	// The filter is sized for every piece whose place in the store is
	// known here.
	n := 0
	if err := s.repo.ScanSyncState(store.SyncPieceKey(""), func(string, []byte) error { n++; return nil }); err != nil {
		return nil, nil, err
	}
	reach := gc.NewReach(n)
	kept := map[store.CommitID]bool{}
	for i, lp := range pages {
		s.progress("collect: mark", i, len(pages))
		if err := l.refresh(ctx); err != nil {
			return nil, nil, err
		}
		evicted, err := s.repo.Evicted(lp[0], lp[1])
		if err != nil {
			return nil, nil, err
		}
		err = func() error {
			// An evicted page comes back to be walked, its tree
			// fetched, and goes again.
			p, err := s.repo.Acquire(lp[0], lp[1])
			if err != nil {
				return err
			}
			defer s.repo.Release(p)
			// Walked in the order a join walks them, which is the
			// order a repack packs what they reach in.
			var commits []*store.Commit
			err = p.CommitIDs(nil, func(id store.CommitID) error {
				c, err := p.Commit(id)
				commits = append(commits, c)
				kept[id] = true
				return err
			})
			if err != nil {
				return err
			}
			if commits, err = joinOrder(p, commits); err != nil {
				return err
			}
			for _, c := range commits {
				if err := reach.Commit(p, c); err != nil {
					return err
				}
			}
			if cw == nil {
				return nil
			}
			return cw.page(ctx, p)
		}()
		if err == nil && evicted {
			s.Settle() // the nodes fetched are stored before it goes
			if _, eerr := s.repo.Evict(lp[0], lp[1]); eerr != nil {
				slog.Info("cloudsync: a page brought back to collect the store stays", "page", lp[0]+"/"+lp[1], "err", eerr)
			}
		}
		if err != nil {
			return nil, nil, fmt.Errorf("cloudsync: mark %s/%s: %w", lp[0], lp[1], err)
		}
	}
	s.progress("collect: mark", len(pages), len(pages))
	return reach, kept, nil
}

// positions are the last batch applied of each device's log, this one's
// included.
func (s *Syncer) positions() (map[string]uint64, error) {
	out := map[string]uint64{}
	err := s.repo.ScanSyncState(statePos, func(k string, v []byte) error {
		seq, err := strconv.ParseUint(string(v), 10, 64)
		out[strings.TrimPrefix(k, statePos)] = seq
		return err
	})
	if err != nil {
		return nil, err
	}
	if next, err := s.nextSeq(); err != nil {
		return nil, err
	} else if next > 0 {
		out[s.device] = next - 1
	}
	return out, nil
}

// A namedRecord is a record read, with its object's name.
type namedRecord struct {
	name string
	rec  collectRecord
}

// records reads the store's collection records after the name after ("" for
// all), oldest first.
func (s *Syncer) records(ctx context.Context, after string) ([]namedRecord, error) {
	var names []string
	err := s.be.List(ctx, collectedDir, after, func(o remote.Object) error {
		names = append(names, o.Name)
		return nil
	})
	if err != nil {
		return nil, err
	}
	var out []namedRecord
	for _, n := range names {
		body, err := s.get(ctx, n)
		if errors.Is(err, remote.ErrNotFound) {
			continue // deleted by a collection meanwhile
		}
		if err != nil {
			return nil, err
		}
		var r collectRecord
		if err := json.Unmarshal(body, &r); err != nil {
			return nil, fmt.Errorf("cloudsync: collection record %s: %w", n, err)
		}
		out = append(out, namedRecord{n, r})
	}
	return out, nil
}

// stateCollected is the repository's sync state row of the last collection
// record read.
const stateCollected = "collected"

// absorb reads the collection records written since it last did, if due
// (absorbEvery) or forced: the newest one's kept commits steer the pulls
// of old batches (s.kept), and every piece a page here holds as synced in
// a pack a record names becomes local, to go up again with the page's next
// push. A device that missed records (deleted since) checks where each of
// its synced pieces is against the packs the store holds.
func (s *Syncer) absorb(ctx context.Context, force bool) error {
	now := s.now()
	if !force && !s.absorbedAt.IsZero() && now.Sub(s.absorbedAt) < absorbEvery {
		return nil
	}
	last, _, err := s.repo.SyncState(stateCollected)
	if err != nil {
		return err
	}
	// A syncer new to the store's records reads them all: the newest
	// one's kept commits steer its pulls, read before or not.
	from := string(last)
	if s.kept == nil {
		from = ""
	}
	recs, err := s.records(ctx, from)
	if err != nil {
		return err
	}
	if len(recs) > 0 {
		newest := recs[len(recs)-1]
		s.kept = keptOf(newest.rec)
	}
	recs = slices.DeleteFunc(recs, func(r namedRecord) bool { return r.name <= string(last) })
	if len(recs) == 0 {
		s.absorbedAt = now
		return nil
	}
	gone := map[string]bool{}
	for _, r := range recs {
		if r.rec.Moved != "" {
			if err := s.absorbRepack(ctx, r.rec.Moved); err != nil {
				return err
			}
		}
		for _, p := range r.rec.Packs {
			gone[p] = true
		}
	}
	missed := recs[0].rec.Prev != string(last)
	if err := s.unsync(ctx, gone, missed); err != nil {
		return err
	}
	if err := s.repo.SetSyncState(map[string][]byte{stateCollected: []byte(recs[len(recs)-1].name)}); err != nil {
		return err
	}
	s.absorbedAt = now
	return nil
}

// keptCommits is what the newest collection record says of old batches.
type keptCommits struct {
	positions map[string]uint64
	ids       map[store.CommitID]bool
	// device wrote the record; checkpoint and objects name its
	// checkpoint, if it wrote one.
	device     string
	checkpoint string
	objects    int
}

// keptOf is what record r says of old batches.
func keptOf(r collectRecord) *keptCommits {
	k := &keptCommits{positions: r.Positions, ids: make(map[store.CommitID]bool, len(r.Kept)),
		device: r.Device, checkpoint: r.Checkpoint, objects: r.Objects}
	for _, id := range r.Kept {
		k.ids[store.CommitID(id)] = true
	}
	return k
}

// covers reports whether batch seq of device's log was applied by the
// collection that wrote the record.
func (k *keptCommits) covers(device string, seq uint64) bool {
	if k == nil {
		return false
	}
	pos, ok := k.positions[device]
	return ok && seq <= pos
}

// gone reports whether commit id, of batch seq of device's log, is no
// longer in the store.
func (k *keptCommits) gone(device string, seq uint64, id store.CommitID) bool {
	return k.covers(device, seq) && !k.ids[id]
}

// unsync makes local again the synced pieces of this repository's pages
// that are in the packs gone names, or, if missed, in any pack the store no
// longer holds; and forgets where those pieces were. What the packs held
// stays known (sync/pack/), so that a collection still finds them
// unreached.
func (s *Syncer) unsync(ctx context.Context, gone map[string]bool, missed bool) error {
	if missed {
		held := map[string]bool{}
		if err := s.be.List(ctx, packsDir, "", func(o remote.Object) error { held[o.Name] = true; return nil }); err != nil {
			return err
		}
		if err := s.repo.ScanSyncState(statePack, func(k string, _ []byte) error {
			if p := strings.TrimPrefix(k, statePack); !held[p] {
				gone[p] = true
			}
			return nil
		}); err != nil {
			return err
		}
	}
	if len(gone) == 0 {
		return nil
	}
	digests := map[cas.Digest]bool{}
	var forget []string
	for p := range gone {
		forget = append(forget, stateNextPack+p)
		refs, err := s.packIndex(p)
		if err != nil {
			return err
		}
		for _, r := range refs {
			d := cas.Digest(r.Digest)
			if at, ok, err := s.pieceAt(d); err != nil {
				return err
			} else if ok && at.Pack == p {
				digests[d] = true
			}
		}
	}
	// Where a piece no page here holds is stays known: a batch written
	// before its device read the record may still reach it there, and
	// the pack stays until a collection that pulled that batch finds it
	// unreached (the simulation's seed 696 of every flag). A piece held
	// goes up again, to its new place.
	forgotten := map[cas.Digest]bool{}
	pages, err := s.pages()
	if err != nil {
		return err
	}
	for _, lp := range pages {
		if ev, err := s.repo.Evicted(lp[0], lp[1]); err != nil || ev {
			if err != nil {
				return err
			}
			continue // holds nothing
		}
		p, err := s.repo.Acquire(lp[0], lp[1])
		if err != nil {
			return err
		}
		var again []cas.Digest
		err = p.Pieces(store.Synced, func(d cas.Digest) error {
			if digests[d] {
				again = append(again, d)
				if !forgotten[d] {
					forgotten[d] = true
					forget = append(forget, store.SyncPieceKey(d))
				}
			}
			return nil
		})
		if err == nil && len(again) > 0 {
			err = p.SetStatus(store.Local, again)
		}
		s.repo.Release(p)
		if err != nil {
			return fmt.Errorf("cloudsync: %s/%s: pieces of collected packs: %w", lp[0], lp[1], err)
		}
		if len(again) > 0 {
			slog.Info("cloudsync: pieces of collected packs go up again", "page", lp[0]+"/"+lp[1], "pieces", len(again))
			s.Changed(lp[0], lp[1])
		}
	}
	return s.repo.DeleteSyncState(forget)
}
