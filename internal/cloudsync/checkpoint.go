package cloudsync

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"slices"
	"strings"
	"time"

	"github.com/ledgerfs/ledgerfs/internal/gc"
	"github.com/ledgerfs/ledgerfs/internal/remote"
	"github.com/ledgerfs/ledgerfs/store"
)

// Checkpoints (see DESIGN.md, "Checkpoints"). A device that joins reads
// the state the store holds, not its history: every collection writes, with
// its record, the pages the collecting device holds — each page's commits
// the collection keeps, who made them, its incarnations, its devices'
// retention policies and batch heads — where every piece it knows of is,
// and its ledgers and the naming of every incarnation it knows. Its
// record's positions say which batches of each log that state covers. A
// device that has never pulled nor pushed and holds no ledger lands the
// newest record's checkpoint as a batch of the collecting device's, takes
// those positions as its own, and reads the logs only past them: a store
// of long history joins in about the time its content takes.
const checkpointsDir = "checkpoints/"

// checkpointObjectSize is about the most a checkpoint object holds: the
// collecting device writes its pages as it walks them, and a joiner reads
// them in that order, neither holding the whole checkpoint in memory.
const checkpointObjectSize = 4 << 20

// checkpointName is the n'th object of the checkpoint set (MS-DEVICE, as a
// record's name).
func checkpointName(set string, n int) string {
	return fmt.Sprintf("%s%s/%08x", checkpointsDir, set, n)
}

// A checkpoint is one object of a collection's checkpoint: pieces' places,
// then pages, and in the first object the ledgers, naming and state rows
// the collecting device knew.
type checkpoint[P any] struct {
	Pages []P `json:"pages"`
	// Names are where every incarnation the device knew was last named,
	// held by a page there or not (renamed away, deleted): a joiner places
	// later batches and changes of names by them, as the device did.
	Names []namedIncarnation `json:"names,omitempty"`
	// Ledgers are the device's ledgers (an empty one is in no page's
	// name).
	Ledgers []string `json:"ledgers,omitempty"`
	// State are the device's sync state rows that place batches and
	// pieces (checkpointState), which a joiner takes where it has none.
	State map[string][]byte `json:"state,omitempty"`
	// Pieces are where every piece the device knows of is (its
	// sync/piece/ rows), reached by the pages' commits or not: a later
	// batch may build on a piece an older batch sent, which no commit
	// kept reaches (a version written again, a restore), and names no
	// place for it. Before any page.
	Pieces []pieceRef `json:"pieces,omitempty"`
}

// A namedIncarnation is store.Named of one incarnation, as a checkpoint
// carries it.
type namedIncarnation struct {
	ID      string           `json:"id"`
	Ledger  string           `json:"ledger"`
	Page    string           `json:"page"`
	Time    time.Time        `json:"time"`
	Renamed bool             `json:"renamed,omitempty"`
	Deleted bool             `json:"deleted,omitempty"`
	Seen    []store.CommitID `json:"seen,omitempty"`
}

// checkpointState are the prefixes of the sync state rows a checkpoint
// carries: the renames and makes of names that place a batch of a page no
// page holds (names.go), and the packs repacks emptied, whose pieces a
// later batch names in vain.
var checkpointState = []string{stateMoved, stateMade, stateArrived, stateRepacked, stateNextPack}

// A deviceHead is a page's batch head row of one device (store.BatchHead),
// as a checkpoint carries it.
type deviceHead struct {
	Device string `json:"device"`
	store.BatchHead
}

// A checkpointWriter writes a collection's checkpoint, a page at a time.
type checkpointWriter struct {
	s   *Syncer
	l   *lock
	set string
	// pieces and pages are what the object being filled holds, pages
	// as JSON; size about its bytes.
	pieces []pieceRef
	pages  []json.RawMessage
	size   int
	n      int // objects written
	first  checkpoint[json.RawMessage]
}

// newCheckpointWriter starts the checkpoint of a collection beginning at.
func (s *Syncer) newCheckpointWriter(l *lock, at time.Time) (*checkpointWriter, error) {
	w := &checkpointWriter{s: s, l: l, set: feedTime(at) + "-" + s.device}
	ledgers, err := s.repo.Ledgers()
	if err != nil {
		return nil, err
	}
	w.first.Ledgers = ledgers
	err = s.repo.Incarnations(func(id store.Incarnation, n store.Named) error {
		w.first.Names = append(w.first.Names, namedIncarnation{ID: id.String(), Ledger: n.Ledger, Page: n.Page,
			Time: n.At.Time, Renamed: n.At.Renamed, Deleted: n.Deleted, Seen: n.Seen})
		return nil
	})
	if err != nil {
		return nil, err
	}
	w.first.State = map[string][]byte{}
	for _, prefix := range checkpointState {
		if err := s.repo.ScanSyncState(prefix, func(k string, v []byte) error {
			w.first.State[k] = v
			return nil
		}); err != nil {
			return nil, err
		}
	}
	return w, nil
}

// places adds where every piece known here is to the checkpoint.
func (w *checkpointWriter) places(ctx context.Context) error {
	var batch []pieceRef
	add := func() error {
		for _, r := range batch {
			if w.size > checkpointObjectSize {
				if err := w.flush(ctx); err != nil {
					return err
				}
			}
			w.pieces = append(w.pieces, r)
			w.size += 2*len(r.Digest) + len(r.Pack) + 40
		}
		batch = batch[:0]
		return nil
	}
	// Read in runs, written outside the scan's transaction.
	after := ""
	for {
		err := w.s.repo.ScanSyncStateAfter(store.SyncPieceKey(""), after, func(k string, v []byte) error {
			if len(batch) == 4096 {
				return errStopScan
			}
			var r pieceRef
			if err := json.Unmarshal(v, &r); err != nil {
				return fmt.Errorf("cloudsync: where a piece is, %s: %w", k, err)
			}
			batch = append(batch, r)
			after = k
			return nil
		})
		if err != nil && !errors.Is(err, errStopScan) {
			return err
		}
		done := err == nil
		if err := add(); err != nil || done {
			return err
		}
	}
}

// page adds page p, held, to the checkpoint: its commits that went up
// (one not pushed yet goes in the device's next batch, past the
// positions), its head last. The collection keeps every commit held here.
func (w *checkpointWriter) page(ctx context.Context, p *store.Page) error {
	s := w.s
	// With the page's lock held, as a push lists what it sends: a commit
	// of a mount's journal landing between the two reads would be taken
	// for one that went up, its pieces still here alone.
	pending := map[store.CommitID]bool{}
	var commits []*store.Commit
	p.Lock()
	err := p.UnsyncedCommits(func(id store.CommitID) error { pending[id] = true; return nil })
	if err == nil {
		err = p.CommitIDs(nil, func(id store.CommitID) error {
			if pending[id] {
				return nil
			}
			c, err := p.Commit(id)
			commits = append(commits, c)
			return err
		})
	}
	p.Unlock()
	if err != nil {
		return err
	}
	if commits, err = joinOrder(p, commits); err != nil {
		return err
	}
	pb, err := s.pageBatchOf(p, commits)
	if err != nil {
		return err
	}
	if err := p.ScanSyncMetadata(gc.KeepPrefix, func(k string, v []byte) error {
		if pb.Keeps == nil {
			pb.Keeps = map[string]string{}
		}
		pb.Keeps[strings.TrimPrefix(k, gc.KeepPrefix)] = string(v)
		return nil
	}); err != nil {
		return err
	}
	if err := p.BatchHeads(func(dev string, h store.BatchHead) error {
		pb.Heads = append(pb.Heads, deviceHead{Device: dev, BatchHead: h})
		return nil
	}); err != nil {
		return err
	}
	b, err := json.Marshal(pb)
	if err != nil {
		return err
	}
	if w.size+len(b) > checkpointObjectSize && len(w.pages) > 0 {
		if err := w.flush(ctx); err != nil {
			return err
		}
	}
	w.pages = append(w.pages, b)
	w.size += len(b)
	return nil
}

// joinOrder sorts commits of p in the order a join lands and walks them:
// parents first, the head last.
func joinOrder(p *store.Page, commits []*store.Commit) ([]*store.Commit, error) {
	slices.SortFunc(commits, store.ParentsFirst)
	head, err := p.Head()
	if err != nil {
		return nil, err
	}
	if i := slices.IndexFunc(commits, func(c *store.Commit) bool { return c.ID == head.ID }); i >= 0 {
		commits = append(slices.Delete(commits, i, i+1), head)
	}
	return commits, nil
}

// flush writes the object being filled.
func (w *checkpointWriter) flush(ctx context.Context) error {
	cp := checkpoint[json.RawMessage]{Pages: w.pages, Pieces: w.pieces}
	if w.n == 0 {
		cp.Names, cp.Ledgers, cp.State = w.first.Names, w.first.Ledgers, w.first.State
	}
	body, err := json.Marshal(cp)
	if err != nil {
		return err
	}
	name := checkpointName(w.set, w.n)
	if err := w.l.check(ctx); err != nil {
		return err
	}
	if err := w.s.be.Create(ctx, name, w.s.seal(name, body)); err != nil {
		return fmt.Errorf("cloudsync: write the checkpoint: %w", err)
	}
	w.n++
	w.pages, w.pieces, w.size = w.pages[:0], w.pieces[:0], 0
	return nil
}

// close writes what is left, and returns the set's name and its number of
// objects, for the record.
func (w *checkpointWriter) close(ctx context.Context) (string, int, error) {
	if len(w.pages) > 0 || len(w.pieces) > 0 || w.n == 0 {
		if err := w.flush(ctx); err != nil {
			return "", 0, err
		}
	}
	return w.set, w.n, nil
}

// dropCheckpoints deletes the checkpoint objects of sets no record in live
// names: those of records deleted, and of collections cut short before
// their record. It runs under the store's lock, so no set is being written
// but the caller's, which live names.
func (s *Syncer) dropCheckpoints(ctx context.Context, l *lock, live map[string]bool) error {
	var drop []string
	err := s.be.List(ctx, checkpointsDir, "", func(o remote.Object) error {
		set, _, _ := strings.Cut(strings.TrimPrefix(o.Name, checkpointsDir), "/")
		if !live[set] {
			drop = append(drop, o.Name)
		}
		return nil
	})
	if err != nil {
		return err
	}
	for i, name := range drop {
		if i%64 == 0 {
			if err := l.check(ctx); err != nil {
				return err
			}
		}
		if err := s.be.Delete(ctx, name); err != nil && !errors.Is(err, remote.ErrNotFound) {
			return err
		}
	}
	return nil
}

// newDevice reports whether this device has never pulled a batch nor
// pushed one, and holds no ledger: it joins from a checkpoint. A device
// that has is not new, whatever happened since: the checkpoint would skip
// batches it never applied, whose changes of names its pages would miss.
// Nor is a repository that wrote before it reached the store: its pages
// and changes of names meet every batch as they were made, the way
// devices that worked apart meet (the simulation's -sim.ledgers found
// pages of its own that a checkpoint's naming moved, and lost a version).
func (s *Syncer) newDevice() (bool, error) {
	if _, joined, err := s.repo.SyncState(stateJoined); err != nil || joined {
		return false, err
	}
	if _, joining, err := s.repo.SyncState(stateJoining); err != nil || joining {
		return joining, err // a join cut short: its ledgers are here
	}
	next, err := s.nextSeq()
	if err != nil || next > 0 {
		return false, err
	}
	if ledgers, err := s.repo.Ledgers(); err != nil || len(ledgers) > 0 {
		return false, err
	}
	found := false
	err = s.repo.ScanSyncState(statePos, func(string, []byte) error {
		found = true
		return errStopScan
	})
	if errors.Is(err, errStopScan) {
		err = nil
	}
	return !found, err
}

var errStopScan = errors.New("stop")

// stateJoined is the repository's sync state row of the checkpoint this
// device joined from: it is not new since, even with no position (a
// checkpoint of a store whose logs held nothing). stateJoining is that of
// a join under way: one cut short joins again, though the ledgers it made
// are here.
const (
	stateJoined  = "joined"
	stateJoining = "joining"
)

// join lands the checkpoint of the newest record (s.kept), and takes its
// positions as this device's: its pull then reads only the batches after
// them. Cut short, it lands again from the start: what landed is held.
func (s *Syncer) join(ctx context.Context, st *Stats) error {
	k := s.kept
	if err := s.repo.SetSyncState(map[string][]byte{stateJoining: []byte(k.checkpoint)}); err != nil {
		return err
	}
	b := &batch{Device: k.device, Seq: k.positions[k.device], checkpoint: true}
	for n := range k.objects {
		name := checkpointName(k.checkpoint, n)
		body, err := s.get(ctx, name)
		if err != nil {
			return fmt.Errorf("cloudsync: read the checkpoint %s: %w", name, err)
		}
		var cp checkpoint[pageBatch]
		if err := json.Unmarshal(body, &cp); err != nil {
			return fmt.Errorf("cloudsync: checkpoint %s: %w", name, err)
		}
		if n == 0 {
			if err := s.takeNames(cp); err != nil {
				return err
			}
		}
		// Each piece alone: the places come in the order of their
		// digests, which says nothing of which pack a read goes on to
		// (the state's nextpack/ rows do). The collection's repack, after
		// its checkpoint, moved pieces out of packs they name: absorb
		// indexed where they went, and keepIndex skips those packs.
		read := make([][]pieceRef, len(cp.Pieces))
		for i := range cp.Pieces {
			read[i] = cp.Pieces[i : i+1]
		}
		if err := s.keepIndex(read...); err != nil {
			return err
		}
		f := &fetcher{s: s, st: st}
		for i, pb := range cp.Pages {
			s.progress("join", i, len(cp.Pages))
			if err := s.applyPage(ctx, f, b, pb, nil, true, st); err != nil {
				return fmt.Errorf("cloudsync: checkpoint %s of %s/%s: %w", name, pb.Ledger, pb.Page, err)
			}
		}
	}
	state := map[string][]byte{stateJoined: []byte(k.checkpoint), stateJoining: nil}
	for dev, pos := range k.positions {
		if dev != s.device {
			state[statePos+dev] = fmt.Appendf(nil, "%d", pos)
		}
	}
	slog.Info("cloudsync: joined the store from a checkpoint", "checkpoint", k.checkpoint, "commits", st.CommitsDown)
	return s.repo.SetSyncState(state)
}

// takeNames takes the ledgers, naming and state rows of a checkpoint's
// first object where this device knows none.
func (s *Syncer) takeNames(cp checkpoint[pageBatch]) error {
	for _, l := range cp.Ledgers {
		if err := s.ensureLedger(l); err != nil {
			return err
		}
	}
	for _, n := range cp.Names {
		id, err := store.ParseIncarnation(n.ID)
		if err != nil {
			return err
		}
		if err := s.repo.NoteIncarnationNamed(id, n.Ledger, n.Page, store.NamedAt{Time: n.Time, Renamed: n.Renamed}); err != nil {
			return err
		}
		if n.Deleted {
			if err := s.repo.NoteIncarnationsDeleted([]store.Incarnation{id}, n.Ledger, n.Page, n.Seen); err != nil {
				return err
			}
		}
	}
	state := map[string][]byte{}
	for k, v := range cp.State {
		if !slices.ContainsFunc(checkpointState, func(p string) bool { return strings.HasPrefix(k, p) }) {
			return fmt.Errorf("cloudsync: a checkpoint's state row %q", k)
		}
		if _, ok, err := s.repo.SyncState(k); err != nil {
			return err
		} else if !ok {
			state[k] = v
		}
	}
	if len(state) == 0 {
		return nil
	}
	return s.repo.SetSyncState(state)
}

// checkpointRows adds to meta the rows a page's checkpoint carries: its
// devices' retention policies and batch heads (those whose head the page
// holds).
func (s *Syncer) checkpointRows(meta map[string][]byte, p *store.Page, pb pageBatch) error {
	for dev, keep := range pb.Keeps {
		if dev != s.device {
			meta[gc.KeepPrefix+dev] = []byte(keep)
		}
	}
	for _, h := range pb.Heads {
		if held, err := p.HasCommit(h.Head); err != nil {
			return err
		} else if !held {
			continue
		}
		rows, err := store.BatchHeadRow(h.Device, h.BatchHead)
		if err != nil {
			return err
		}
		maps.Copy(meta, rows)
	}
	return nil
}
