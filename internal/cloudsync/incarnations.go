package cloudsync

import (
	"context"
	"fmt"
	"iter"
	"slices"
	"time"

	"github.com/ledgerfs/ledgerfs/cas"
	"github.com/ledgerfs/ledgerfs/store"
)

// A page's incarnations (store.Incarnation) say which page a batch or a
// change of names is of, wherever that page is named here: the batches and
// changes that carry them are landed and applied by them, and the rules of
// names.go, which guess a page from its name and the times of renames,
// serve only those of a store written before (layout 3 and earlier) and
// the batches of a page not here yet.

// incarnationsOf parses the incarnations a batch or change carries.
func incarnationsOf(ss []string) ([]store.Incarnation, error) {
	if len(ss) == 0 {
		return nil, nil
	}
	return store.ParseIncarnations(ss)
}

// holderOf returns the page here that holds one of ids. Pages here that
// hold several of them are made one first (joined): the device that sent
// them together had made them one.
func (s *Syncer) holderOf(ctx context.Context, ids []store.Incarnation, st *Stats) (l, p string, ok bool, err error) {
	var holders [][2]string
	for _, id := range ids {
		hl, hp, found, err := s.repo.FindIncarnation(id)
		if err != nil {
			return "", "", false, err
		}
		if found && !slices.Contains(holders, [2]string{hl, hp}) {
			holders = append(holders, [2]string{hl, hp})
		}
	}
	switch len(holders) {
	case 0:
		return "", "", false, nil
	case 1:
		return holders[0][0], holders[0][1], true, nil
	}
	into, err := s.joinPages(ctx, holders, st)
	if err != nil {
		return "", "", false, err
	}
	return into[0], into[1], true, nil
}

// joinPages makes pages, incarnations of one page, one: the page named
// latest (the greater name if two were named at once) takes the others'
// commits and incarnations, and they go. Every device that joins them
// picks the same name: the one the latest rename of any of them gave.
func (s *Syncer) joinPages(ctx context.Context, pages [][2]string, st *Stats) ([2]string, error) {
	var into [2]string
	var union store.Naming
	for i, pg := range pages {
		n, _, err := s.repo.PageNaming(pg[0], pg[1])
		if err != nil {
			return into, err
		}
		if i == 0 || laterNaming(n.At, pg, union.At, into) {
			into = pg
		}
		union = union.Union(n)
	}
	for _, pg := range pages {
		if pg == into {
			continue
		}
		if err := s.mergeInto(ctx, pg[0], pg[1], into[0], into[1], st); err != nil {
			return into, fmt.Errorf("join %s into %s: %w", pageName(pg), pageName(into), err)
		}
		if err := s.namer().DeletePage(pg[0], pg[1]); err != nil {
			return into, err
		}
	}
	if err := s.repo.SetPageNaming(into[0], into[1], union); err != nil {
		return into, err
	}
	s.Changed(into[0], into[1])
	return into, nil
}

func pageName(pg [2]string) string { return pg[0] + "/" + pg[1] }

// adoptNaming gives page l/p here the incarnations ids, named since at if
// that is later than the page's own naming (a page made here for another
// device's takes its identity, and one two devices made under one name
// holds both), then moves it where the latest naming of any of them puts
// it: a change of names noted before the page came, or the name it had
// when it was deleted here. It returns where the page is.
func (s *Syncer) adoptNaming(ctx context.Context, l, p string, ids []store.Incarnation, at store.NamedAt, st *Stats) (string, string, error) {
	n, ok, err := s.repo.PageNaming(l, p)
	if err != nil {
		return l, p, err
	}
	u := n.Union(store.Naming{IDs: ids, At: at})
	best, bestAt := [2]string{l, p}, u.At
	for _, id := range u.IDs {
		named, known, err := s.repo.IncarnationNamed(id)
		if err != nil {
			return l, p, err
		}
		to := [2]string{named.Ledger, named.Page}
		if known && !named.Live && laterNaming(named.At, to, bestAt, best) {
			best, bestAt = to, named.At
		}
	}
	u.At = bestAt
	if best == [2]string{l, p} {
		if ok && len(u.IDs) == len(n.IDs) && u.At == n.At {
			return l, p, nil
		}
		return l, p, s.repo.SetPageNaming(l, p, u)
	}
	to, err := s.moveNamed(ctx, [2]string{l, p}, best, u, st)
	return to[0], to[1], err
}

// laterNaming reports whether a naming of to at at wins over one of than
// at thanAt (store.NamedAt.After), the greater name if neither does.
func laterNaming(at store.NamedAt, to [2]string, thanAt store.NamedAt, than [2]string) bool {
	return at.After(thanAt) || at == thanAt && pageName(to) > pageName(than)
}

// namedBy is when change c, of a page, named it.
func namedBy(c store.NameChange) store.NamedAt {
	return store.NamedAt{Time: c.Time.UTC(), Renamed: c.Op == store.NameRenamePage}
}

// moveNamed moves page from here to the name to (into the ledger that
// went elsewhere here since, if it did), joining a page there, and gives
// it naming u and the incarnations of that page. It returns where the page
// is.
func (s *Syncer) moveNamed(ctx context.Context, from, to [2]string, u store.Naming, st *Stats) ([2]string, error) {
	var err error
	if to[0], err = s.ledgerAfter(to[0], to[1], u.At.Time); err != nil {
		return from, err
	}
	if to == from {
		return to, s.repo.SetPageNaming(to[0], to[1], u)
	}
	if err := s.ensureLedger(to[0]); err != nil {
		return from, err
	}
	taken, _, err := s.repo.PageNaming(to[0], to[1])
	if err != nil {
		return from, err
	}
	if err := s.moveOrMerge(ctx, from, to, st); err != nil {
		return from, err
	}
	// Joined, the page was named when the later of the two was.
	return to, s.repo.SetPageNaming(to[0], to[1], u.Union(taken))
}

// nameHeld applies c, a change that names a page to (its create, or a
// rename), to the page here at l/p that holds one of its incarnations,
// unless that page was named later here: of the changes that named the
// incarnations a page holds, the latest wins (the greater name if two came
// at once), on every device, whatever order they arrive in. A name taken
// here by another page joins the two.
func (s *Syncer) nameHeld(ctx context.Context, c store.NameChange, to [2]string, ids []store.Incarnation, l, p string, st *Stats) error {
	n, _, err := s.repo.PageNaming(l, p)
	if err != nil {
		return err
	}
	if to != [2]string{l, p} && !laterNaming(namedBy(c), to, n.At, [2]string{l, p}) {
		_, _, err := s.adoptNaming(ctx, l, p, ids, store.NamedAt{}, st)
		return err
	}
	u := n.Union(store.Naming{IDs: ids, At: namedBy(c)})
	if _, err := s.moveNamed(ctx, [2]string{l, p}, to, u, st); err != nil {
		return err
	}
	if c.Op != store.NameRenamePage {
		return nil
	}
	return s.noteMoved(c)
}

// nameByID applies c, a page's create or rename that carries its
// incarnations, to the page here that holds one of them, or, if none
// does, notes it for when it comes: a rename of a page deleted here, or not
// here yet, makes nothing; a create makes the page, or joins the page made
// under its name here, unless the page was deleted here since.
func (s *Syncer) nameByID(ctx context.Context, c store.NameChange, ids []store.Incarnation, after iter.Seq[store.NameChange], st *Stats) error {
	to := [2]string{c.Ledger, c.Page}
	if c.Op == store.NameRenamePage {
		to = [2]string{c.DestLedger(), c.To}
	}
	if l, p, ok, err := s.holderOf(ctx, ids, st); err != nil {
		return err
	} else if ok {
		return s.nameHeld(ctx, c, to, ids, l, p, st)
	}
	if c.Op == store.NameCreatePage {
		// Its device's later changes of the page, read with this one:
		// a page it renamed away or deleted is not made under the old
		// name, where it would join a page made there since (the
		// simulation's seed 118, -sim.pages).
		gone := false
		var away time.Time // when its device first renamed it away
		for lc := range after {
			if shares(lc.Incarnations, c.Incarnations) {
				switch lc.Op {
				case store.NameDeletePage:
					gone = true
				case store.NameRenamePage:
					if away.IsZero() {
						away = lc.Time
					}
					for _, id := range ids {
						if err := s.repo.NoteIncarnationNamed(id, lc.DestLedger(), lc.To, namedBy(lc)); err != nil {
							return err
						}
					}
				}
			}
		}
		if gone {
			if !away.IsZero() {
				return s.joinRenamedAway(ctx, c, ids, away, st)
			}
			return nil
		}
	}
	// A rename noted before the page's create came wins over it.
	deleted, at := false, namedBy(c)
	for _, id := range ids {
		named, known, err := s.repo.IncarnationNamed(id)
		if err != nil {
			return err
		}
		deleted = deleted || known && named.Deleted
		if known && laterNaming(named.At, [2]string{named.Ledger, named.Page}, at, to) {
			to, at = [2]string{named.Ledger, named.Page}, named.At
		}
		if err := s.repo.NoteIncarnationNamed(id, to[0], to[1], at); err != nil {
			return err
		}
	}
	if c.Op == store.NameRenamePage {
		return s.noteMoved(c)
	}
	if deleted {
		return nil
	}
	var err error
	if to[0], err = s.ledgerAfter(to[0], to[1], at.Time); err != nil {
		return err
	}
	if ok, err := s.repo.HasPage(to[0], to[1]); err != nil {
		return err
	} else if ok {
		// Made under one name on two devices: one page.
		_, _, err := s.adoptNaming(ctx, to[0], to[1], ids, at, st)
		return err
	}
	if err := s.ensurePage(to[0], to[1]); err != nil {
		return err
	}
	// Until its commits land, when the page was made says whether a
	// rename of its ledger made before then took it (madeAfter).
	t, err := c.Time.MarshalText()
	if err != nil {
		return err
	}
	if err := s.repo.SetSyncState(map[string][]byte{stateMade + to[0] + "/" + to[1]: t}); err != nil {
		return err
	}
	_, _, err = s.adoptNaming(ctx, to[0], to[1], ids, at, st)
	return err
}

// joinRenamedAway joins the incarnations ids of c, a page's create whose
// device renamed the page away at time away and then deleted it, to the
// page here under c's name if that page was named so no later than away:
// pages of one name on two devices are one page, and the device that
// renamed it took the other device's under its new name (renamedAway).
// The page then moves where that rename put it, and the rename and the
// delete that follow c apply to it. Skipped, the page stayed here under
// the old name while the renaming device kept it under the new one, once
// a write here outlived both deletes (the simulation's seed 815,
// -sim.pages).
func (s *Syncer) joinRenamedAway(ctx context.Context, c store.NameChange, ids []store.Incarnation, away time.Time, st *Stats) error {
	n, ok, err := s.repo.PageNaming(c.Ledger, c.Page)
	if err != nil || !ok || n.At.Time.After(away) {
		return err
	}
	_, _, err = s.adoptNaming(ctx, c.Ledger, c.Page, ids, namedBy(c), st)
	return err
}

// deleteByID applies c, a page's delete that carries its incarnations, to
// the page here that holds one of them, whatever its name here (letGo). If
// none does, a page under its name is another: the delete waits for the
// page's batches if it saw commits (awaitPage), unless the page was deleted
// here too, and is then noted, so that the page's batches that come after
// it make it only with changes it did not see (goneAgain).
func (s *Syncer) deleteByID(ctx context.Context, device string, c store.NameChange, ids []store.Incarnation, graft bool, st *Stats) error {
	if l, p, ok, err := s.holderOf(ctx, ids, st); err != nil {
		return err
	} else if ok {
		c.Ledger, c.Page = l, p
		return s.letGo(ctx, device, c, graft, st)
	}
	deleted := false
	for _, id := range ids {
		named, known, err := s.repo.IncarnationNamed(id)
		if err != nil {
			return err
		}
		deleted = deleted || known && named.Deleted
	}
	if !deleted {
		if err := awaitPage(c, graft); err != nil {
			return err
		}
	}
	seen, err := c.SeenCommits()
	if err != nil {
		return err
	}
	return s.repo.NoteIncarnationsDeleted(ids, c.Ledger, c.Page, seen)
}

// ledgerAfter returns the ledger that page, named into ledger at time at, is
// in now: where the renames of that ledger made at or after at took it,
// whether or not a ledger of the old name was made here again since (a
// page named into it before the rename went with the rename). A page a
// rename took came under its name with the last rename (stateArrived): a
// rename of that name made before then, which another device's change
// brings later, does not take it (the simulation's seed 120, -sim.pages
// -sim.ledgers -sim.join -sim.collect=keep-last=2).
func (s *Syncer) ledgerAfter(ledger, page string, at time.Time) (string, error) {
	from := ledger
	for range 8 {
		ms, err := s.movesFrom(ledger, "")
		if err != nil {
			return "", err
		}
		var first *moved
		for i, m := range ms {
			if m.Page == "" && !at.After(m.Time) && (first == nil || m.Time.Before(first.Time)) {
				first = &ms[i]
			}
		}
		if first == nil {
			break
		}
		ledger, at = first.Ledger, laterOf(at, first.Time)
	}
	if ledger == from {
		return ledger, nil
	}
	return ledger, s.noteArrived(ledger, []string{page}, at)
}

// deletedLater reports whether later, the batches of a device's log after
// one of a page of incarnations ids, delete that page.
func deletedLater(ids []store.Incarnation, later []*batch) bool {
	if len(ids) == 0 {
		return false
	}
	want := map[string]bool{}
	for _, id := range ids {
		want[id.String()] = true
	}
	for _, b := range later {
		for _, c := range b.Names {
			if c.Op != store.NameDeletePage {
				continue
			}
			for _, id := range c.Incarnations {
				if want[id] {
					return true
				}
			}
		}
	}
	return false
}

// deletedHere returns what the deletes here of incarnations ids saw, of
// those deleted having seen something.
func (s *Syncer) deletedHere(ids []store.Incarnation) ([][]store.CommitID, error) {
	var out [][]store.CommitID
	for _, id := range ids {
		named, ok, err := s.repo.IncarnationNamed(id)
		if err != nil {
			return nil, err
		}
		if ok && len(named.Seen) > 0 {
			out = append(out, named.Seen)
		}
	}
	return out, nil
}

// goneAgain deletes page l/p, where a batch of incarnations ids just
// landed, if a delete here of one of them saw everything it holds
// (deletes: what each saw, from deletedHere): a device that took another's
// changes for new, before that device's own delete reached it, sent them
// back (the simulation's seed 122, -sim.ledgers). It reports whether it
// did.
func (s *Syncer) goneAgain(l, p string, ids []store.Incarnation, deletes [][]store.CommitID) (bool, error) {
	for _, seen := range deletes {
		if ok, err := s.headsSeen(l, p, seen, true); err != nil || !ok {
			if err != nil {
				return false, err
			}
			continue
		}
		if err := s.namer().DeletePage(l, p); err != nil {
			return false, err
		}
		return true, s.repo.NoteIncarnationsDeleted(ids, l, p, seen)
	}
	return false, nil
}

// deleteSeen deletes page c.Page as change c, which saw everything it
// holds, did, and records what c saw for the page's incarnations
// (goneAgain).
func (s *Syncer) deleteSeen(c store.NameChange) error {
	n, _, err := s.repo.PageNaming(c.Ledger, c.Page)
	if err != nil {
		return err
	}
	if err := s.namer().DeletePage(c.Ledger, c.Page); err != nil {
		return err
	}
	seen, err := c.SeenCommits()
	if err != nil {
		return err
	}
	return s.repo.NoteIncarnationsDeleted(n.IDs, c.Ledger, c.Page, seen)
}

// namesAfter iterates over names, then the changes of names in later.
func namesAfter(names []store.NameChange, later []*batch) iter.Seq[store.NameChange] {
	return func(yield func(store.NameChange) bool) {
		for _, c := range names {
			if !yield(c) {
				return
			}
		}
		for _, b := range later {
			for _, c := range b.Names {
				if !yield(c) {
					return
				}
			}
		}
	}
}

// shares reports whether incarnation lists a and b share one.
func shares(a, b []string) bool {
	for _, x := range a {
		if slices.Contains(b, x) {
			return true
		}
	}
	return false
}

// A placement is where a batch of a page lands (at), or that it lands
// nowhere (skip).
type placement struct {
	at   [2]string
	skip bool
}

// placeBatch returns where batch pb, of a page of incarnations ids, lands
// here: in the page that holds one of them, wherever it is named; if none
// does, as the rules of names.go place a batch by its name (later: the
// batches of its device's log after it), then where the latest naming of
// its incarnations known here puts it.
func (s *Syncer) placeBatch(ctx context.Context, pb pageBatch, ids []store.Incarnation, later []*batch, graft bool, st *Stats) (placement, error) {
	var pl placement
	if len(ids) > 0 {
		l, p, held, err := s.holderOf(ctx, ids, st)
		if err != nil {
			return pl, err
		}
		if held {
			l, p, err = s.adoptNaming(ctx, l, p, ids, store.NamedAt{}, st)
			pl.at = [2]string{l, p}
			return pl, err
		}
		if deletedLater(ids, later) {
			// Its device deleted the page after it sent this, having
			// seen it: no page here holds it, and none comes of it.
			pl.skip = true
			return pl, nil
		}
	}
	if to, gone, err := s.goneBefore(pb, later); err != nil || gone {
		pl.skip = gone
		return pl, err
	} else if to != nil {
		pb.Ledger, pb.Page = to[0], to[1]
	}
	l, p, err := s.landingPage(pb, graft)
	if err != nil {
		return pl, err
	}
	if err := s.ensurePage(l, p); err != nil {
		return pl, err
	}
	// Named by the changes of names, not by a batch: its name is the
	// sender's, which a rename this device has not applied yet may give.
	l, p, err = s.adoptNaming(ctx, l, p, ids, store.NamedAt{}, st)
	pl.at = [2]string{l, p}
	return pl, err
}

// A keptHistory is the history kept of a page deleted here
// (store.DeletedHistory) that a batch of it builds on, and the part of it
// the batch's landing takes.
type keptHistory struct {
	all   map[store.CommitID]store.Made
	taken map[store.CommitID]bool
}

// deletedHistory returns the history kept of the page of incarnations ids,
// if it was deleted here.
func (s *Syncer) deletedHistory(ids []store.Incarnation) (*keptHistory, error) {
	if len(ids) == 0 {
		return &keptHistory{}, nil
	}
	all, err := s.repo.DeletedHistory(ids)
	return &keptHistory{all: all, taken: map[store.CommitID]bool{}}, err
}

// reach reports whether the history holds id, taking it and its
// ancestors that p lacks.
func (k *keptHistory) reach(p *store.Page, id store.CommitID) bool {
	if _, ok := k.all[id]; !ok {
		return false
	}
	for stack := []store.CommitID{id}; len(stack) > 0; {
		id := stack[len(stack)-1]
		stack = stack[:len(stack)-1]
		m, ok := k.all[id]
		if !ok || k.taken[id] {
			continue
		}
		if held, err := p.HasCommit(id); err != nil || held {
			continue // an error here comes back when the batch lands
		}
		k.taken[id] = true
		stack = append(stack, m.Commit.Parents...)
	}
	return true
}

// commits returns the commits taken, oldest first, and who made them.
func (k *keptHistory) commits() ([]*store.Commit, map[store.CommitID]string) {
	if k == nil || len(k.taken) == 0 {
		return nil, nil
	}
	out := make([]*store.Commit, 0, len(k.taken))
	makers := make(map[store.CommitID]string, len(k.taken))
	for id := range k.taken {
		m := k.all[id]
		out = append(out, m.Commit)
		makers[id] = m.By
	}
	slices.SortFunc(out, store.ParentsFirst)
	return out, makers
}

// keepSkipped adds the commits of batch pb, made by device, which lands
// nowhere here (its page was deleted), to the history kept of its page: a
// change made elsewhere that brings the page back may build on them.
func (s *Syncer) keepSkipped(device string, pb pageBatch, ids []store.Incarnation) error {
	if len(ids) == 0 {
		return nil
	}
	makers, err := s.batchMakers(pb, nil)
	if err != nil {
		return err
	}
	var ms []store.Made
	for _, cb := range pb.Commits {
		id := store.CommitID(cas.Hash(cb))
		c, err := store.DecodeCommit(id, cb)
		if err != nil {
			return err
		}
		ms = append(ms, store.Made{Commit: c, By: makerOf(makers, id, device)})
	}
	return s.repo.AddDeletedHistory(ids, ms)
}

// makerOf is the device that made commit id of a batch from device:
// the one makers names (batchMakers; "": this one), else device.
func makerOf(makers map[store.CommitID]string, id store.CommitID, device string) string {
	if by, ok := makers[id]; ok {
		return by
	}
	return device
}
