package cloudsync

import (
	"cmp"
	"context"
	"encoding/hex"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"sync"
	"time"

	"golang.org/x/sync/errgroup"

	"github.com/ledgerfs/ledgerfs/cas"
	"github.com/ledgerfs/ledgerfs/internal/btree"
	"github.com/ledgerfs/ledgerfs/internal/gc"
	"github.com/ledgerfs/ledgerfs/internal/remote"
	"github.com/ledgerfs/ledgerfs/store"
)

// stateNextSeq is the repository's sync state row of the number of its
// device's next batch.
const stateNextSeq = "next_seq"

// Push uploads, page by page, the pieces not yet in the store (status
// local) in packs, then the page's unsynced commits in one batch of the
// device's log; once the batch is in the store the pieces become synced
// and the commits' unsynced rows go. A push cut short is finished by the
// next: a batch found already written by this device is taken as done.
func (s *Syncer) Push(ctx context.Context, st *Stats) error {
	if err := s.pushNames(ctx, st); err != nil {
		return err
	}
	pages, err := s.toPush()
	if err != nil {
		return err
	}
	for i, lp := range pages {
		ok, err := s.repo.HasPage(lp[0], lp[1])
		if err == nil && ok { // else deleted since it changed
			err = s.pushPage(ctx, lp[0], lp[1], st)
		}
		if err != nil {
			for _, lp := range pages[i:] {
				s.Changed(lp[0], lp[1]) // the next round pushes them
			}
			return fmt.Errorf("cloudsync: push %s/%s: %w", lp[0], lp[1], err)
		}
	}
	s.pushedAll = true
	return s.announce(ctx)
}

// stateAnnounced is the repository's sync state row of the number of the
// last batch the change feed announces.
const stateAnnounced = "announced"

// announce adds an entry to the change feed for the device's last batch if
// the feed does not tell of it yet: one entry per round that pushed, after
// the batches, so a reader that sees it finds them. A round cut short
// before announcing is announced by the next (and a reader's periodic full
// scan finds its batches meanwhile).
func (s *Syncer) announce(ctx context.Context) error {
	next, err := s.nextSeq()
	if err != nil || next == 0 {
		return err
	}
	v, ok, err := s.repo.SyncState(stateAnnounced)
	if err != nil {
		return err
	}
	last := strconv.FormatUint(next-1, 10)
	if ok && string(v) == last {
		return nil
	}
	if err := s.be.Put(ctx, feedName(s.now(), s.device, next-1), nil); err != nil {
		return fmt.Errorf("cloudsync: announce batch %d: %w", next-1, err)
	}
	return s.repo.SetSyncState(map[string][]byte{stateAnnounced: []byte(last)})
}

// passed records that this device's batch number seq is in the store,
// with the rest of state: the next is seq+1, and the records of what it
// went to write at seq go.
func (s *Syncer) passed(seq uint64, state map[string][]byte) error {
	if state == nil {
		state = map[string][]byte{}
	}
	state[stateNextSeq] = []byte(strconv.FormatUint(seq+1, 10))
	if err := s.repo.ScanSyncState(writtenPrefix(seq), func(key string, _ []byte) error {
		state[key] = nil
		return nil
	}); err != nil {
		return err
	}
	return s.repo.SetSyncState(state)
}

// raise makes the store's layout at least version before this device
// writes what needs it: its first batch (remote.VersionIncarnations), or a
// repack (remote.VersionRepack). A device that reads an older layout would
// land batches by name alone, and its pages would part from the others';
// or read pieces from packs a repack deleted.
func (s *Syncer) raise(ctx context.Context, version int) error {
	if s.raised.Load() >= int64(version) {
		return nil
	}
	if err := remote.Raise(ctx, s.be, version); err != nil {
		return fmt.Errorf("cloudsync: raise the layout of %s: %w", s.be.Location(), err)
	}
	s.raised.Store(int64(version))
	return nil
}

func (s *Syncer) nextSeq() (uint64, error) {
	v, ok, err := s.repo.SyncState(stateNextSeq)
	if err != nil || !ok {
		return 0, err
	}
	return strconv.ParseUint(string(v), 10, 64)
}

func (s *Syncer) pushPage(ctx context.Context, ledger, page string, st *Stats) error {
	_, resend, err := s.repo.SyncState(resendKey(ledger, page))
	if err != nil {
		return err
	}
	// An evicted page has nothing to push (everything of it was synced):
	// opening it would bring it back.
	if ev, err := s.repo.Evicted(ledger, page); err != nil || ev && !resend {
		return err
	}
	p, err := s.repo.Acquire(ledger, page)
	if err != nil {
		return err
	}
	defer s.repo.Release(p)
	for {
		// Pieces of packs a collection recorded go up again: read the
		// records, if due, before choosing what goes up.
		if err := s.absorb(ctx, false); err != nil {
			return err
		}
		read := s.absorbedAt
		// The batches applied here, read before the commits that build
		// on them.
		applied, err := s.positions()
		if err != nil {
			return err
		}
		delete(applied, s.device)
		ids, pieces, err := unsynced(p)
		if err != nil {
			return err
		}
		if len(ids) == 0 && len(pieces) == 0 && !resend {
			return nil
		}
		commits := make([]*store.Commit, len(ids))
		for i, id := range ids {
			if commits[i], err = p.Commit(id); err != nil {
				return err
			}
		}
		var whole []pieceRef
		if resend {
			if commits, whole, err = s.wholePage(p, commits); err != nil {
				return err
			}
		}
		slices.SortFunc(commits, store.ParentsFirst)
		pieces, err = walkOrder(p, commits, pieces)
		if err != nil {
			return err
		}
		refs, err := s.uploadPieces(ctx, p, pieces, st)
		if err != nil {
			return err
		}
		// Where this device's pieces are, for a page that comes back here
		// after a delete or rename (its commits building on these).
		if err := s.keepIndex(refs); err != nil {
			return err
		}
		refs = append(refs, whole...)
		seq, err := s.nextSeq()
		if err != nil {
			return err
		}
		if s.now().Sub(read) > 2*absorbEvery {
			// The upload took long: a collection may have recorded
			// packs this batch reaches since the records were read.
			s.absorbedAt = time.Time{}
			continue
		}
		pb, err := s.pageBatchOf(p, commits)
		if err != nil {
			return err
		}
		pb.Pieces = refs
		name, err := s.writeBatch(ctx, &batch{Device: s.device, Seq: seq, Pages: []pageBatch{pb}, Applied: applied})
		if errors.Is(err, remote.ErrExists) {
			// Written by a push cut short before it recorded it (this
			// page's, another's, or names), or by another copy of this
			// repository.
			if err := s.adoptBatch(ctx, name); err != nil {
				return err
			}
			if err := s.passed(seq, nil); err != nil {
				return err
			}
			continue // what that batch did not hold goes in the next
		}
		if err != nil {
			return err
		}
		st.BatchesUp++
		st.CommitsUp += len(ids)
		var state map[string][]byte
		if resend {
			state = map[string][]byte{resendKey(ledger, page): nil}
		}
		if err := s.passed(seq, state); err != nil {
			return err
		}
		meta := map[string][]byte{"pushed": []byte(strconv.FormatUint(seq, 10)),
			"pushed_at": []byte(time.Now().UTC().Format(time.RFC3339))}
		if err := addBatchHead(meta, p, s.device, seq, applied, pb); err != nil {
			return err
		}
		if err := p.MarkSynced(pieces, ids, meta); err != nil {
			return err
		}
		return s.pruneBatchHeads(p)
	}
}

// pageBatchOf returns what a batch holds of page p with commits (parents
// first), but where its pieces are: its name, incarnations, this device's
// policy, its own polynomial if it has one, and who made each commit this
// device did not.
func (s *Syncer) pageBatchOf(p *store.Page, commits []*store.Commit) (pageBatch, error) {
	keep, _, err := gc.PolicyOf(s.repo, p.Ledger, p.Name)
	if err != nil {
		return pageBatch{}, err
	}
	naming, err := s.repo.EnsurePageNaming(p.Ledger, p.Name)
	if err != nil {
		return pageBatch{}, err
	}
	pb := pageBatch{Ledger: p.Ledger, Page: p.Name, Keep: keep.String(), Incarnations: store.IncarnationStrings(naming.IDs)}
	if pol := p.Polynomial(); pol != s.pol {
		pb.Polynomial = pol.String()
	}
	for _, c := range commits {
		pb.Commits = append(pb.Commits, c.Bytes)
		if by, ok, err := p.SyncMetadata(deviceKey(c.ID)); err != nil {
			return pageBatch{}, err
		} else if ok && string(by) != s.device {
			if pb.Makers == nil {
				pb.Makers = map[string]string{}
			}
			pb.Makers[c.ID.String()] = string(by)
		}
	}
	return pb, nil
}

// wholePage adds to commits the page's head, if it is not among them, and
// returns where every synced piece of the page is (as far as this device
// knows): the batch of a page sent whole, which a device that lacks the
// page's history can land.
func (s *Syncer) wholePage(p *store.Page, commits []*store.Commit) ([]*store.Commit, []pieceRef, error) {
	head, err := p.Head()
	if err != nil {
		return nil, nil, err
	}
	if head.ID != store.FirstCommitID && !slices.ContainsFunc(commits, func(c *store.Commit) bool { return c.ID == head.ID }) {
		commits = append(commits, head)
	}
	var refs []pieceRef
	err = p.Pieces(store.Synced, func(d cas.Digest) error {
		r, ok, err := s.pieceAt(d)
		if ok {
			refs = append(refs, r)
		}
		return err
	})
	return commits, refs, err
}

// unsynced lists the page's unsynced commits and local pieces, with its
// lock held: a commit landing meanwhile (in a mount) would otherwise be
// seen without the pieces it marks local after its rows.
func unsynced(p *store.Page) (ids []store.CommitID, pieces []cas.Digest, err error) {
	p.Lock()
	defer p.Unlock()
	err = p.UnsyncedCommits(func(id store.CommitID) error {
		ids = append(ids, id)
		return nil
	})
	if err == nil {
		err = p.Pieces(store.Local, func(d cas.Digest) error {
			pieces = append(pieces, d)
			return nil
		})
	}
	return ids, pieces, err
}

// adoptBatch takes the batch at name, found written when this device went
// to write its next batch there, as this device's own: a push whose
// response was lost, or that was cut short before it recorded it, wrote
// it, and the push that finds it may be of another kind (names, another
// page). Its name changes leave those to push; its pages' commits and
// pieces are marked synced. A batch holding what this repository never
// made was written by another copy of the repository: an error.
func (s *Syncer) adoptBatch(ctx context.Context, name string) error {
	body, err := s.get(ctx, name)
	if err != nil {
		return err
	}
	b, err := decodeBatch(name, body)
	if err != nil {
		return err
	}
	// One this device went to write: what it holds that is no longer
	// here (a page deleted or made anew since) is no sign of a copy.
	_, ours, err := s.repo.SyncState(writtenKey(b.Seq, body))
	if err != nil {
		return err
	}
	if len(b.Names) > 0 {
		keys, changes, err := s.repo.NameChanges()
		if err != nil {
			return err
		}
		n := 0
		for n < len(b.Names) && n < len(changes) && sameChange(b.Names[n], changes[n]) {
			n++
		}
		if n < len(b.Names) && !ours {
			return errCopied(name)
		}
		if err := s.namesPushed(keys[:n], changes[:n]); err != nil {
			return err
		}
	}
	if b.Moved != nil {
		// A repack's batch, whose response was lost.
		if !ours {
			return errCopied(name)
		}
		if err := s.indexRepack(b.Moved); err != nil {
			return err
		}
	}
	for _, pb := range b.Pages {
		if err := s.seenLost(pb); err != nil {
			return err
		}
		if ok, err := s.repo.HasPage(pb.Ledger, pb.Page); err != nil {
			return err
		} else if !ok {
			continue // renamed or deleted here since: nothing to mark
		}
		p, err := s.repo.Acquire(pb.Ledger, pb.Page)
		if err != nil {
			return err
		}
		err = takeOwnPage(p, pb, name, ours)
		if err == nil {
			// Its head is this device's last batch head of the page, as
			// if the push had seen its answer: the base of the next
			// merge with a batch that builds on it, once pruned.
			meta := map[string][]byte{}
			if err = addBatchHead(meta, p, s.device, b.Seq, b.Applied, pb); err == nil && len(meta) > 0 {
				if err = p.MarkSynced(nil, nil, meta); err == nil {
					err = s.pruneBatchHeads(p)
				}
			}
		}
		s.repo.Release(p)
		if err != nil {
			return err
		}
	}
	return nil
}

// seenLost adds the newest commit of pb, a page's part of this device's
// batch whose response was lost, to the commits that a delete or rename
// of the page made since and not pushed yet says were synced: they were,
// and this device had them. Else the others would keep the page for
// changes its deleter made itself, and bring it back. The page is followed
// through its renames since, by name and by incarnation: a delete after
// them named it otherwise (the simulation's seed 950 of -sim.pages, whose
// versions the deleting device had replaced came back in a page it had
// moved three times).
func (s *Syncer) seenLost(pb pageBatch) error {
	id, ok := pb.newest()
	if !ok {
		return nil
	}
	c, err := store.DecodeCommit(id, pb.Commits[len(pb.Commits)-1])
	if err != nil {
		return err
	}
	keys, changes, err := s.repo.NameChanges()
	if err != nil {
		return err
	}
	h := hex.EncodeToString(id[:])
	at := [2]string{pb.Ledger, pb.Page}
	for i, nc := range changes {
		if nc.Op != store.NameDeletePage && nc.Op != store.NameRenamePage || nc.Time.Before(time.Unix(0, c.Timestamp)) {
			continue
		}
		if at != [2]string{nc.Ledger, nc.Page} && !shares(nc.Incarnations, pb.Incarnations) {
			continue
		}
		if nc.Op == store.NameRenamePage {
			at = [2]string{nc.DestLedger(), nc.To}
		}
		if slices.Contains(nc.Seen, h) {
			continue
		}
		nc.Seen = append(nc.Seen, h)
		if err := s.repo.SetNameChange(keys[i], nc); err != nil {
			return err
		}
	}
	return nil
}

// takeOwnPage marks synced what pb, a page's part of this device's batch at
// name, holds: its commits must be commits of the page, unless the batch
// is one this device recorded writing (ours).
func takeOwnPage(p *store.Page, pb pageBatch, name string, ours bool) error {
	var ids []store.CommitID
	var pieces []cas.Digest
	for _, cb := range pb.Commits {
		id := store.CommitID(cas.Hash(cb))
		if ok, err := p.HasCommit(id); err != nil {
			return err
		} else if !ok {
			if ours {
				continue // the page here is another made under its name since
			}
			return errCopied(name)
		}
		ids = append(ids, id)
	}
	for _, r := range pb.Pieces {
		pieces = append(pieces, cas.Digest(r.Digest))
	}
	return p.MarkSynced(pieces, ids, nil)
}

func errCopied(name string) error {
	return fmt.Errorf("batch %s, this device's next, holds what this repository never made: another copy of this repository pushes as the same device; give one of them a new device id", name)
}

// uploadPieces packs the pieces and uploads the packs, returning where
// each piece is. Up to packsInFlight packs upload at once while the next
// is filled: reading the pieces and sending them overlap.
func (s *Syncer) uploadPieces(ctx context.Context, p *store.Page, pieces []cas.Digest, st *Stats) ([]pieceRef, error) {
	w := s.newPackWriter(ctx, st)
	phase := "push " + p.Ledger + "/" + p.Name
	for i, d := range pieces {
		if i%256 == 0 {
			s.progress(phase, i, len(pieces))
		}
		if w.failed() {
			break // an upload failed: close says why
		}
		data, err := p.Get(d, nil)
		if err != nil {
			w.g.Wait() // the packs filled so far: the next push sends them again
			return nil, fmt.Errorf("piece %s: %w", d, err)
		}
		w.add(d, func(buf []byte) []byte { return s.sealPiece(buf, d, data) })
	}
	refs, err := w.close()
	if err != nil {
		return nil, err
	}
	s.progress(phase, len(pieces), len(pieces))
	return refs, nil
}

// A packWriter fills packs of about the syncer's pack size with pieces and
// uploads each once full, up to packsInFlight at once.
type packWriter struct {
	s     *Syncer
	g     *errgroup.Group
	gctx  context.Context
	mu    sync.Mutex // guards st
	st    *Stats
	buf   []byte
	refs  []pieceRef
	start int // refs[start:] are in buf
}

func (s *Syncer) newPackWriter(ctx context.Context, st *Stats) *packWriter {
	g, gctx := errgroup.WithContext(ctx)
	g.SetLimit(cmp.Or(s.inFlight, packsInFlight))
	return &packWriter{s: s, g: g, gctx: gctx, st: st}
}

// add puts piece d in the pack being filled: seal appends its bytes as
// stored (sealed, for an encrypted store) to what it is given.
func (w *packWriter) add(d cas.Digest, seal func([]byte) []byte) {
	off := len(w.buf)
	w.buf = seal(w.buf)
	w.refs = append(w.refs, pieceRef{Digest: []byte(d), Off: int64(off), Len: int64(len(w.buf) - off)})
	w.st.PiecesUp++
	if len(w.buf) >= w.s.packSize {
		w.flush()
	}
}

// failed reports whether an upload failed: close returns why.
func (w *packWriter) failed() bool { return w.gctx.Err() != nil }

func (w *packWriter) flush() {
	if len(w.buf) == 0 {
		return
	}
	body, mine := w.buf, w.refs[w.start:]
	name := w.s.packName(mine)
	for i := range mine {
		mine[i].Pack = name
	}
	w.g.Go(func() error {
		if err := w.s.be.Put(w.gctx, name, body); err != nil {
			return err
		}
		w.mu.Lock()
		w.st.PacksUp++
		w.st.BytesUp += int64(len(body))
		w.mu.Unlock()
		return nil
	})
	w.buf, w.start = make([]byte, 0, w.s.packSize+w.s.packSize/8), len(w.refs)
}

// close uploads the last pack and waits for every upload: where each
// piece added is.
func (w *packWriter) close() ([]pieceRef, error) {
	w.flush()
	if err := w.g.Wait(); err != nil {
		return nil, err
	}
	return w.refs, nil
}

// packsInFlight bounds the packs uploading at once (memory: that many
// times the pack size, and one filling).
const packsInFlight = 3

// walkOrder returns pieces in the order a device that pulls the commits
// needs them, as the fetcher walks: first the tree nodes of every commit
// from its root, commits parents first and each tree's parents before its
// children (a node's own pieces: a large node is an index over chunks),
// then the values of those nodes in the same order, then the pieces no
// commit reaches. Packed in this order, a pull reads each pack once, where
// packing in key order scattered a value's chunks over every pack (a pull
// of 1 GiB fetched a pack per chunk); and the tree nodes of a push lie
// back to back, which is all a lazy pull fetches: one range read for a
// push of many commits, where nodes packed before each commit's values
// cost one a commit.
func walkOrder(p *store.Page, commits []*store.Commit, pieces []cas.Digest) ([]cas.Digest, error) {
	want := make(map[cas.Digest]bool, len(pieces))
	for _, d := range pieces {
		want[d] = true
	}
	out := make([]cas.Digest, 0, len(pieces))
	// take emits d if it is to go up; a piece that is not has every piece
	// below it in the store already.
	take := func(d cas.Digest) (bool, error) {
		if !want[d] {
			return false, nil
		}
		delete(want, d)
		out = append(out, d)
		return true, nil
	}
	var nodes []cas.ObjectIdentifier
	var node func(id cas.ObjectIdentifier) error
	node = func(id cas.ObjectIdentifier) error {
		if id == btree.EmptyRoot || id.Digest.IsInline() || !want[id.Digest] {
			return nil
		}
		if err := cas.Walk(p, id, take, nil); err != nil {
			return err
		}
		nodes = append(nodes, id)
		children, _, err := p.Nodes().Refs(id)
		if err != nil {
			return err
		}
		for _, c := range children {
			if err := node(c); err != nil {
				return err
			}
		}
		return nil
	}
	for _, c := range commits {
		if err := node(c.Root); err != nil {
			return nil, fmt.Errorf("walk commit %s: %w", c.ID, err)
		}
	}
	for _, id := range nodes {
		_, values, err := p.Nodes().Refs(id)
		if err != nil {
			return nil, fmt.Errorf("walk node %s: %w", id.Digest, err)
		}
		for _, v := range values {
			if err := cas.Walk(p, v, take, nil); err != nil {
				return nil, fmt.Errorf("walk node %s: %w", id.Digest, err)
			}
		}
	}
	for _, d := range pieces {
		if want[d] {
			out = append(out, d)
		}
	}
	return out, nil
}
