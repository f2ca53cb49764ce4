package cloudsync

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"iter"
	"maps"
	"slices"
	"time"

	"github.com/ledgerfs/ledgerfs/cas"
	"github.com/ledgerfs/ledgerfs/internal/btree"
	"github.com/ledgerfs/ledgerfs/internal/remote"
	"github.com/ledgerfs/ledgerfs/store"
)

// Names changes the repository's ledger and page names as another device
// did, without recording the change to push back: store.Unrecorded does;
// a mount's (fs.RemoteNames) also follows the change in what the kernel
// shows, and refuses it with store.ErrBusy while the page is in use.
type Names interface {
	CreateLedger(ledger string) error
	DeleteLedger(ledger string) error
	RenameLedger(from, to string) error
	CreatePage(ledger, page string) error
	DeletePage(ledger, page string) error
	// RenamePage renames page from of ledger to toLedger/to: toLedger is
	// ledger for a rename within it.
	RenamePage(ledger, from, toLedger, to string) error
}

// namer is what changes names here as other devices did.
func (s *Syncer) namer() Names {
	if s.Names != nil {
		return s.Names
	}
	return s.repo.Unrecorded()
}

// stateResend is the repository's sync state row (+ ledger/page) of a page
// whose head a push sends even if synced: a page renamed here, or kept here
// when another device deleted it, which other devices must get whole under
// its name.
const stateResend = "resend/"

func resendKey(ledger, page string) string { return stateResend + ledger + "/" + page }

// resend marks ledger/page for its head to go up with the next push.
func (s *Syncer) resend(ledger, page string) error {
	if err := s.repo.SetSyncState(map[string][]byte{resendKey(ledger, page): {1}}); err != nil {
		return err
	}
	s.Changed(ledger, page)
	return nil
}

// pushNames uploads the name changes recorded here, oldest first, as one
// batch, before any page's: a page renamed and then changed arrives at the
// others renamed before its commits do. The pages renamed here go up whole
// after it, for devices that cannot rename theirs (the new name is taken
// there).
func (s *Syncer) pushNames(ctx context.Context, st *Stats) error {
	for {
		keys, changes, err := s.repo.NameChanges()
		if err != nil || len(changes) == 0 {
			return err
		}
		seq, err := s.nextSeq()
		if err != nil {
			return err
		}
		name, err := s.writeBatch(ctx, &batch{Device: s.device, Seq: seq, Names: changes})
		if errors.Is(err, remote.ErrExists) {
			// A push whose response was lost (names, or a page's)
			// wrote this device's next batch: take it as done.
			if err := s.adoptBatch(ctx, name); err != nil {
				return fmt.Errorf("cloudsync: push names: %w", err)
			}
			if err := s.passed(seq, nil); err != nil {
				return err
			}
			continue
		}
		if err != nil {
			return fmt.Errorf("cloudsync: push names: %w", err)
		}
		st.BatchesUp++
		if err := s.passed(seq, nil); err != nil {
			return err
		}
		if err := s.namesPushed(keys, changes); err != nil {
			return err
		}
	}
}

// namesPushed drops the name changes of keys, in the store now, from those
// to push, and marks the pages they named anew to go up whole.
func (s *Syncer) namesPushed(keys [][]byte, changes []store.NameChange) error {
	for _, c := range changes {
		if err := s.resendRenamed(c); err != nil {
			return err
		}
		if err := s.noteLedgerNamed(c); err != nil {
			return err
		}
		if c.Op == store.NameRenameLedger {
			if err := s.noteArrived(c.To, c.Pages, c.Time); err != nil {
				return err
			}
		}
		if c.Op == store.NameRenamePage || c.Op == store.NameRenameLedger {
			if err := s.noteMoved(c); err != nil {
				return err
			}
		}
	}
	return s.repo.DropNameChanges(keys)
}

func sameChange(a, b store.NameChange) bool {
	return a.Op == b.Op && a.Ledger == b.Ledger && a.Page == b.Page && a.To == b.To && a.ToLedger == b.ToLedger && a.Time.Equal(b.Time)
}

// stateMoved is the repository's sync state row (+ ledger/page, or
// ledger/ for a ledger) of a page or ledger renamed away here, by this
// device or as another did: a JSON list of moved, oldest written first,
// the last 8 (a row of one moved, as written before, is a list of one).
// Another device's batches of the page made before it knew land under
// the new name (landingPage) rather than bring the old one back. A name
// renamed away by two devices keeps both: a batch of its page older than
// the first follows the first, one between them the second.
const stateMoved = "moved/"

// stateMade is the repository's sync state row (+ ledger/page) of the time
// another device made a page, as its change of names said, when the page
// was made here by it (RFC 3339 with nanoseconds); and (+ ledger/) of the
// time a ledger was made, here or by the device whose change made it here
// (noteLedgerNamed).
const stateMade = "made/"

// stateArrived is the repository's sync state row (+ ledger/page) of the
// latest time a page was renamed onto ledger/page, here or as another
// device did (RFC 3339 with nanoseconds); and (+ ledger/) of a ledger
// renamed onto ledger (noteLedgerNamed).
const stateArrived = "arrived/"

// stateSame is the repository's sync state row (+ ledger/page) of a rename
// onto ledger/page made here that another device made too, earlier
// (crossedRename): the page here arrived there when theirs did, as far as
// their later changes of the name go (arrivedAfter).
const stateSame = "same/"

// sameRename is a stateSame row: the time of the rename here, and of the
// other device's same rename before it.
type sameRename struct {
	Ours   time.Time `json:"ours"`
	Theirs time.Time `json:"theirs"`
}

// moved is where a page or ledger went, and when.
type moved struct {
	Ledger string    `json:"ledger"`
	Page   string    `json:"page,omitempty"` // "": a ledger renamed
	Time   time.Time `json:"time"`
	// Carried: the page renamed held commits (a ledger's rename carries
	// its pages). A rename of a page that held none here (made under the
	// name and never written, or whose commits had not arrived) does not
	// say which page of the name elsewhere it was.
	Carried bool `json:"carried,omitempty"`
}

// carries reports whether change c renamed a page that held commits, or a
// ledger.
func carries(c store.NameChange) bool {
	return c.Op == store.NameRenameLedger || len(seenCommits(c)) > 0
}

// seenCommits returns the commits change c says its page held, the empty
// page's first commit aside.
func seenCommits(c store.NameChange) []store.CommitID {
	var seen []store.CommitID
	for _, h := range c.Seen {
		if id, err := store.ParseCommitID(h); err == nil && id != store.FirstCommitID {
			seen = append(seen, id)
		}
	}
	return seen
}

// noteMoved records change c, a rename of a page or a ledger.
func (s *Syncer) noteMoved(c store.NameChange) error {
	if c.Op == store.NameRenameLedger {
		return s.setMoved(c.Ledger, "", moved{Ledger: c.To, Time: c.Time, Carried: true})
	}
	return s.setMoved(c.Ledger, c.Page, moved{Ledger: c.DestLedger(), Page: c.To, Time: c.Time, Carried: carries(c)})
}

// setMoved records that page ledger/page (or, with page "", the ledger)
// went to m.
func (s *Syncer) setMoved(ledger, page string, m moved) error {
	key := stateMoved + ledger + "/" + page
	old, _, err := s.repo.SyncState(key)
	if err != nil {
		return err
	}
	ms, err := decodeMoved(old)
	if err != nil {
		return fmt.Errorf("cloudsync: where %s/%s went: %w", ledger, page, err)
	}
	ms = append(slices.DeleteFunc(ms, func(o moved) bool { return o == m }), m)
	ms = ms[max(0, len(ms)-movesKept):]
	v, err := json.Marshal(ms)
	if err != nil {
		return err
	}
	rows := map[string][]byte{key: v}
	if m.Page != "" {
		// When the new name last got a page is kept apart too
		// (arrivedAfter): one Get, not a scan of every move.
		key := stateArrived + m.Ledger + "/" + m.Page
		at, ok, err := s.timeState(key)
		if err != nil {
			return err
		}
		if !ok || m.Time.After(at) {
			if rows[key], err = m.Time.MarshalText(); err != nil {
				return err
			}
		}
	}
	return s.repo.SetSyncState(rows)
}

// timeState reads a sync state row holding a time (stateArrived,
// stateMade).
func (s *Syncer) timeState(key string) (time.Time, bool, error) {
	var t time.Time
	v, ok, err := s.repo.SyncState(key)
	if err != nil || !ok {
		return t, false, err
	}
	if err := t.UnmarshalText(v); err != nil {
		return t, false, fmt.Errorf("cloudsync: sync state %s: %w", key, err)
	}
	return t, true, nil
}

// movedFrom returns where ledger/page went, and when, if it was renamed
// away here: the name changes not pushed yet first (the latest), then
// those recorded.
func (s *Syncer) movedFrom(ledger, page string) (moved, bool, error) {
	ms, err := s.movesFrom(ledger, page)
	if err != nil || len(ms) == 0 {
		return moved{}, false, err
	}
	return ms[0], true, nil
}

// movesFrom returns where ledger/page went, if it was renamed away here:
// by the latest of the name changes not pushed yet, then as recorded (a
// rename pushed, or another device's applied since, which a rename
// here not pushed yet would hide).
func (s *Syncer) movesFrom(ledger, page string) ([]moved, error) {
	_, changes, err := s.repo.NameChanges()
	if err != nil {
		return nil, err
	}
	var out []moved
	for _, c := range slices.Backward(changes) {
		var m *moved
		switch {
		case c.Op == store.NameRenamePage && c.Ledger == ledger && c.Page == page:
			m = &moved{Ledger: c.DestLedger(), Page: c.To, Time: c.Time, Carried: carries(c)}
		case c.Op == store.NameRenameLedger && c.Ledger == ledger:
			m = &moved{Ledger: c.To, Page: page, Time: c.Time, Carried: true}
		}
		if m != nil {
			out = append(out, *m)
			break
		}
	}
	for _, k := range []string{ledger + "/" + page, ledger + "/"} {
		v, ok, err := s.repo.SyncState(stateMoved + k)
		if err != nil {
			return nil, err
		}
		if !ok {
			continue
		}
		recorded, err := decodeMoved(v)
		if err != nil {
			return nil, fmt.Errorf("cloudsync: where %s went: %w", k, err)
		}
		// The latest recorded first: where the name's page went last.
		for _, m := range slices.Backward(recorded) {
			if m.Page == "" {
				m.Page = page // the ledger was renamed
			}
			if !slices.Contains(out, m) {
				out = append(out, m)
			}
		}
		break
	}
	return out, nil
}

// movesKept is how many renames away from one name the sync state keeps.
const movesKept = 8

// decodeMoved decodes a stateMoved row: the renames away from its name,
// oldest first (a row of one rename, as written before, is one).
func decodeMoved(v []byte) ([]moved, error) {
	if len(v) == 0 {
		return nil, nil
	}
	var ms []moved
	if v[0] == '[' {
		err := json.Unmarshal(v, &ms)
		return ms, err
	}
	var m moved
	err := json.Unmarshal(v, &m)
	return []moved{m}, err
}

// renamedAway returns the page ledger/page became here, if it is not here
// and was renamed away (followed through up to 8 renames) after time at:
// a page made under the old name at or before at is the page renamed —
// pages of one name on two devices are one page — and one made later is
// a page of its own. Of two ways a name went (movesFrom), the first that
// reaches a page here is taken: a rename here may lead to a page deleted
// since, when another device's rename of the name, applied after, leads
// to the page that holds its history (the simulation's seed 64). If no way
// reaches a page here, the page is where the first led: deleted here
// since, it is made again there, as the devices that kept it, holding
// changes the delete had not seen, keep it under that name (seed 24).
func (s *Syncer) renamedAway(ledger, page string, at time.Time) (string, string, bool, error) {
	if ok, err := s.repo.HasPage(ledger, page); err != nil || ok {
		return "", "", false, err
	}
	l, p, _, err := s.wentTo(ledger, page, at, 0)
	return l, p, l != "", err
}

// ledgerRenamedAway reports whether ledger is not here and was renamed
// away here at or after time at.
func (s *Syncer) ledgerRenamedAway(ledger string, at time.Time) (bool, error) {
	if ok, err := s.repo.HasLedger(ledger); err != nil || ok {
		return false, err
	}
	ms, err := s.movesFrom(ledger, "")
	if err != nil {
		return false, err
	}
	for _, m := range ms {
		if m.Page == "" && !at.After(m.Time) {
			return true, nil
		}
	}
	return false, nil
}

// ledgerWentTo returns the ledger that ledger, not here, became by its
// renames here at or after time at (followed through up to 8 renames): the
// first here, else where they end.
func (s *Syncer) ledgerWentTo(ledger string, at time.Time) (string, bool, error) {
	to := ""
	for range 8 {
		if ok, err := s.repo.HasLedger(ledger); err != nil || ok {
			return to, to != "", err
		}
		ms, err := s.movesFrom(ledger, "")
		if err != nil {
			return "", false, err
		}
		i := slices.IndexFunc(ms, func(m moved) bool { return m.Page == "" && !at.After(m.Time) })
		if i < 0 {
			break
		}
		ledger, at, to = ms[i].Ledger, laterOf(at, ms[i].Time), ms[i].Ledger
	}
	return to, to != "", nil
}

// wentTo follows the renames of ledger/page here after time at (see
// renamedAway) to a page here (here true), or else to where the first way
// ends; "" if none was renamed after at.
func (s *Syncer) wentTo(ledger, page string, at time.Time, depth int) (l, p string, here bool, err error) {
	if depth == 8 {
		return "", "", false, nil
	}
	ms, err := s.movesFrom(ledger, page)
	if err != nil {
		return "", "", false, err
	}
	for _, m := range ms {
		if at.After(m.Time) {
			continue
		}
		ok, err := s.repo.HasPage(m.Ledger, m.Page)
		if err != nil || ok {
			return m.Ledger, m.Page, ok, err
		}
		// The page came under the new name at m.Time: a move of that
		// name from before then was of another page (the
		// simulation's seed 80, -sim.ledgers).
		tl, tp, ok, err := s.wentTo(m.Ledger, m.Page, laterOf(at, m.Time), depth+1)
		switch {
		case err != nil || ok:
			return tl, tp, ok, err
		case l != "":
		case tl != "":
			l, p = tl, tp
		default:
			l, p = m.Ledger, m.Page
		}
	}
	return l, p, false, nil
}

// laterOf returns the later of a and b.
func laterOf(a, b time.Time) time.Time {
	if a.After(b) {
		return a
	}
	return b
}

// landingPage is the page a batch of another device's commits of
// ledger/page lands in: that page if it is here; else, if it was renamed
// away here, the page it became (renamedAway), when the batch builds on
// something or its first commit is no later than the rename: the other
// device made them before it knew, and renames its page as this one did.
// A batch that builds on what that page does not hold yet waits for it
// (errMissingParent), unless graft. Else the old name, made anew.
func (s *Syncer) landingPage(pb pageBatch, graft bool) (string, string, error) {
	here, err := s.repo.HasPage(pb.Ledger, pb.Page)
	if err != nil {
		return "", "", err
	}
	var ms []moved
	if here {
		if ms, err = s.movesFrom(pb.Ledger, pb.Page); err != nil || len(ms) == 0 {
			return pb.Ledger, pb.Page, err // the common case: nothing to decode
		}
	}
	first, builds, err := buildsOn(pb)
	if err != nil || first == nil {
		return pb.Ledger, pb.Page, err
	}
	at := time.Unix(0, first.Timestamp)
	if len(builds) > 0 {
		at = time.Time{} // what it builds on decides
	}
	if here {
		// The page here came under the name after the name's page
		// was renamed away (by another device, whose rename arrived
		// first): a batch of that older page follows it, as on the
		// devices where the name had no page since (the
		// simulation's seed 79, -sim.pages).
		if ok, err := s.supplanted(pb.Ledger, pb.Page, ms, at, builds); err != nil || !ok {
			return pb.Ledger, pb.Page, err
		}
		l, p, _, err := s.wentTo(pb.Ledger, pb.Page, at, 0)
		if err != nil || l == "" {
			return pb.Ledger, pb.Page, err
		}
		return s.landAt(l, p, builds, graft)
	}
	l, p, ok, err := s.renamedAway(pb.Ledger, pb.Page, at)
	if err != nil || !ok {
		return pb.Ledger, pb.Page, err
	}
	if len(builds) == 0 {
		if arrived, err := s.ofArrived(pb.Ledger, pb.Page, at, first, l, p); err != nil || arrived {
			return pb.Ledger, pb.Page, err
		}
	}
	return s.landAt(l, p, builds, graft)
}

// ofArrived reports whether a batch of ledger/page that begins with
// commit first, at time at, which would follow the name's rename away to
// l/p, is of a page renamed onto the name after that rename instead (by
// another device, whose page did not land here): the page at l/p is not
// here or does not hold its first commit. Its device sent the page, renamed, whole (the
// simulation's seed 65, -sim.ledgers).
func (s *Syncer) ofArrived(ledger, page string, at time.Time, first *store.Commit, l, p string) (bool, error) {
	ms, err := s.movesFrom(ledger, page)
	if err != nil {
		return false, err
	}
	m, ok := firstMoveFrom(ms, at)
	if !ok {
		return false, nil
	}
	if arrived, err := s.arrivedAfter(ledger, page, m.Time); err != nil || !arrived {
		return false, err
	}
	if ok, err := s.repo.HasPage(l, p); err != nil || !ok {
		return err == nil, err
	}
	held, err := s.holdsAll(l, p, []store.CommitID{first.ID})
	return !held, err
}

// firstMoveFrom returns the first of moves ms (as movesFrom orders them)
// made at or after time at.
func firstMoveFrom(ms []moved, at time.Time) (moved, bool) {
	i := slices.IndexFunc(ms, func(m moved) bool { return !at.After(m.Time) })
	if i < 0 {
		return moved{}, false
	}
	return ms[i], true
}

// supplanted reports whether page ledger/page here is not the page of a
// batch of its name, moves ms being where the name's page went here: the
// page was made under the name after a rename the batch is older than (its
// first commit at or before it, at). A batch that builds on commits (at
// zero) is of the page that holds them: of the page the rename took
// away, only if that holds them and this one does not; else it lands
// here, waiting for them if they have not come.
func (s *Syncer) supplanted(ledger, page string, ms []moved, at time.Time, builds []store.CommitID) (bool, error) {
	if len(builds) > 0 {
		if holds, err := s.holdsAll(ledger, page, builds); err != nil || holds {
			return false, err
		}
		l, p, ok, err := s.wentTo(ledger, page, at, 0)
		if err != nil || !ok {
			return false, err
		}
		if holds, err := s.holdsAll(l, p, builds); err != nil || !holds {
			return false, err
		}
	}
	// A page renamed onto the name since is not taken for a later
	// one: its own batches, sent after that rename, hold commits older
	// than the rename away (the simulation's seed 13, -sim.ledgers).
	m, ok := firstMoveFrom(ms, at)
	if !ok {
		return false, nil
	}
	if arrived, err := s.arrivedAfter(ledger, page, m.Time); err != nil || arrived {
		return false, err
	}
	return s.madeAfter(ledger, page, m.Time)
}

// landAt returns page l/p for a batch to land in, unless it does not hold
// what the batch builds on: then the batch waits for it
// (errMissingParent), unless graft.
func (s *Syncer) landAt(l, p string, builds []store.CommitID, graft bool) (string, string, error) {
	if holds, err := s.holdsAll(l, p, builds); err != nil {
		return "", "", err
	} else if !holds && !graft {
		// What it builds on comes in another device's batch, which
		// lands there too: it waits for it.
		return "", "", errMissingParent
	}
	return l, p, nil
}

// goneBefore looks, for a batch of a page here, at the changes of names in
// later, the batches of its device's log after it: if that device renamed
// or deleted its page of the name before the page here came under it
// (cameAfter), the page here is another, made or moved under the name since, and the batch is
// not of it: it follows the rename (to: where), or goes with the delete
// (gone), as on the devices that applied the change before this page
// came. Landing it here merged the other device's old page into this one,
// which then went with the rename (the simulation's seed 118, -sim.pages).
func (s *Syncer) goneBefore(pb pageBatch, later []*batch) (to *[2]string, gone bool, err error) {
	if ok, err := s.repo.HasPage(pb.Ledger, pb.Page); err != nil || !ok {
		return nil, false, err
	}
	for _, b := range later {
		for _, c := range b.Names {
			if c.Ledger != pb.Ledger || c.Page != pb.Page || c.Op != store.NameRenamePage && c.Op != store.NameDeletePage {
				continue
			}
			if after, err := s.cameAfter(pb.Ledger, pb.Page, c.Time); err != nil || !after {
				return nil, false, err
			}
			if c.Op == store.NameDeletePage {
				return nil, true, nil
			}
			// Recorded now, not only when the rename applies: a
			// rename of the new name from before this one, in a
			// batch between, must find that the page there came
			// later (the simulation's seed 97, -sim.pages).
			if err := s.noteMoved(c); err != nil {
				return nil, false, err
			}
			return &[2]string{c.DestLedger(), c.To}, false, nil
		}
	}
	return nil, false, nil
}

// cameAfter reports whether page ledger/page here is not the page a change
// of another device's at time at names: it was made under the name after
// at (madeAfter), or renamed onto it after at, here or as another device
// did (arrivedAfter). Taking a page renamed onto the name for the one
// renamed away from it sent a page that had crossed another's renames
// after it (the simulation's seed 32, -sim.pages).
func (s *Syncer) cameAfter(ledger, page string, at time.Time) (bool, error) {
	// A page a rename of its ledger took here after at (the rename's
	// change not pushed yet, or as recorded: applied, pushed, or landing
	// after it, ledgerAfter) came under its name then, whenever it was
	// named.
	if ok, err := s.ledgerBrought(ledger, page, at); err != nil || ok {
		return ok, err
	}
	// A page's naming says when it came under its name, if a change of
	// names made here or applied here did (not a batch alone).
	if n, ok, err := s.repo.PageNaming(ledger, page); err != nil {
		return false, err
	} else if ok && !n.At.Time.IsZero() {
		return n.At.Time.After(at), nil
	}
	if ok, err := s.arrivedAfter(ledger, page, at); err != nil || ok {
		return ok, err
	}
	return s.madeAfter(ledger, page, at)
}

// arrivedAfter reports whether a page was renamed onto ledger/page after
// time at: by a change not pushed yet, or one recorded (stateMoved).
func (s *Syncer) arrivedAfter(ledger, page string, at time.Time) (bool, error) {
	_, changes, err := s.repo.NameChanges()
	if err != nil {
		return false, err
	}
	same, err := s.sameRename(ledger, page)
	if err != nil {
		return false, err
	}
	for _, c := range changes {
		if c.Op == store.NameRenamePage && c.DestLedger() == ledger && c.To == page && same(c.Time).After(at) {
			return true, nil
		}
	}
	if last, ok, err := s.timeState(stateArrived + ledger + "/" + page); err != nil || ok && same(last).After(at) {
		return err == nil, err
	}
	// Moves recorded before the arrived/ rows were.
	errFound := errors.New("found")
	err = s.repo.ScanSyncState(stateMoved, func(_ string, v []byte) error {
		ms, _ := decodeMoved(v)
		for _, m := range ms {
			if m.Ledger == ledger && m.Page == page && m.Time.After(at) {
				return errFound
			}
		}
		return nil
	})
	if errors.Is(err, errFound) {
		return true, nil
	}
	return false, err
}

// sameRename returns, for a time a page was renamed onto ledger/page here,
// the time it arrived there as far as other devices' changes go: that of
// another device's same rename before it (stateSame), else itself.
func (s *Syncer) sameRename(ledger, page string) (func(time.Time) time.Time, error) {
	v, ok, err := s.repo.SyncState(stateSame + ledger + "/" + page)
	if err != nil || !ok {
		return func(t time.Time) time.Time { return t }, err
	}
	var r sameRename
	if err := json.Unmarshal(v, &r); err != nil {
		return nil, fmt.Errorf("cloudsync: sync state %s%s/%s: %w", stateSame, ledger, page, err)
	}
	return func(t time.Time) time.Time {
		if t.Equal(r.Ours) {
			return r.Theirs
		}
		return t
	}, nil
}

// madeAfter reports whether page ledger/page here began after time at:
// every first commit of its history (a page made on two devices under one
// name has two) is later. Such a page was made under the name after
// another device renamed the page it had away, and is not the page
// renamed (landingPage decides so on that device). A history pruned here
// does not tell: the page is taken as the one renamed.
func (s *Syncer) madeAfter(ledger, page string, at time.Time) (bool, error) {
	p, err := s.repo.Acquire(ledger, page)
	if err != nil {
		return false, err
	}
	defer s.repo.Release(p)
	head, err := p.Head()
	if err != nil {
		return false, err
	}
	if head.ID == store.FirstCommitID {
		return s.emptyMadeAfter(ledger, page, at)
	}
	g := &graph{p: p}
	seen := map[store.CommitID]bool{head.ID: true}
	for stack := []*store.Commit{head}; len(stack) > 0; {
		c := stack[len(stack)-1]
		stack = stack[:len(stack)-1]
		for _, id := range c.Parents {
			switch {
			case id == store.FirstCommitID:
				if !time.Unix(0, c.Timestamp).After(at) {
					return false, nil
				}
			case !seen[id]:
				seen[id] = true
				parent, err := g.commit(id)
				if err != nil || parent == nil {
					return false, err // pruned here: its start is not known
				}
				stack = append(stack, parent)
			}
		}
	}
	return true, nil
}

// noteLedgerNamed records when change c made a ledger (stateMade) or
// renamed one onto a name (stateArrived), here or as the device whose
// change it is did: made anew after a rename or delete took the name, the
// last time is the one kept.
func (s *Syncer) noteLedgerNamed(c store.NameChange) error {
	var key string
	switch c.Op {
	case store.NameCreateLedger:
		key = stateMade + c.Ledger + "/"
	case store.NameRenameLedger:
		key = stateArrived + c.To + "/"
	default:
		return nil
	}
	t, err := c.Time.MarshalText()
	if err != nil {
		return err
	}
	return s.repo.SetSyncState(map[string][]byte{key: t})
}

// noteLedgerMade notes c, a create of a ledger here, if it is later than
// the create noted: ledgerCameAfter asks for the latest.
func (s *Syncer) noteLedgerMade(c store.NameChange) error {
	if t, ok, err := s.timeState(stateMade + c.Ledger + "/"); err != nil || ok && !c.Time.After(t) {
		return err
	}
	return s.noteLedgerNamed(c)
}

// ledgerCameAfter reports whether ledger came under its name here after
// time at, made or renamed onto it, by a change not pushed yet or as
// recorded (noteLedgerNamed).
func (s *Syncer) ledgerCameAfter(ledger string, at time.Time) (bool, error) {
	_, changes, err := s.repo.NameChanges()
	if err != nil {
		return false, err
	}
	for _, c := range slices.Backward(changes) {
		if c.Op == store.NameRenameLedger && c.To == ledger || c.Op == store.NameCreateLedger && c.Ledger == ledger {
			return c.Time.After(at), nil
		}
	}
	for _, k := range []string{stateArrived + ledger + "/", stateMade + ledger + "/"} {
		if t, ok, err := s.timeState(k); err != nil || ok && t.After(at) {
			return err == nil, err
		}
	}
	return false, nil
}

// emptyMadeAfter reports whether page ledger/page, which holds no commit
// yet, was made here by another device's create after time at, as
// recorded (stateMade). Such a page, whose commits had not landed, was
// taken for the page a rename of its ledger made earlier moved, and moved
// empty, while its commits then landed under the old name (the
// simulation's seed 89, -sim.ledgers). Any other is taken as the page
// renamed: a create not pushed yet may be of a page deleted here since
// (seed 42, -sim.pages, 15 steps).
func (s *Syncer) emptyMadeAfter(ledger, page string, at time.Time) (bool, error) {
	made, ok, err := s.timeState(stateMade + ledger + "/" + page)
	return ok && made.After(at), err
}

// buildsOn returns a batch's first commit and the commits its commits
// build on that it does not hold, the first commit aside.
func buildsOn(pb pageBatch) (*store.Commit, []store.CommitID, error) {
	in := map[store.CommitID]bool{}
	var first *store.Commit
	var out []store.CommitID
	for _, cb := range pb.Commits {
		id := store.CommitID(cas.Hash(cb))
		c, err := store.DecodeCommit(id, cb)
		if err != nil {
			return nil, nil, err
		}
		if first == nil {
			first = c
		}
		in[id] = true
		for _, parent := range c.Parents {
			if !in[parent] && parent != store.FirstCommitID && !slices.Contains(out, parent) {
				out = append(out, parent)
			}
		}
	}
	return first, out, nil
}

// holdsAll reports whether page ledger/page holds every commit of ids.
func (s *Syncer) holdsAll(ledger, page string, ids []store.CommitID) (bool, error) {
	if len(ids) == 0 {
		return true, nil
	}
	if ok, err := s.repo.HasPage(ledger, page); err != nil || !ok {
		return false, err
	}
	p, err := s.repo.Acquire(ledger, page)
	if err != nil {
		return false, err
	}
	defer s.repo.Release(p)
	for _, id := range ids {
		if ok, err := p.HasCommit(id); err != nil || !ok {
			return false, err
		}
	}
	return true, nil
}

// resendRenamed marks the pages a rename named anew to go up whole.
func (s *Syncer) resendRenamed(c store.NameChange) error {
	switch c.Op {
	case store.NameRenamePage:
		if ok, err := s.repo.HasPage(c.DestLedger(), c.To); err != nil || !ok {
			return err
		}
		return s.resend(c.DestLedger(), c.To)
	case store.NameRenameLedger:
		pages, err := s.repo.Pages(c.To)
		if err != nil {
			return nil // renamed again, or deleted, since
		}
		for _, p := range pages {
			if err := s.resend(c.To, p); err != nil {
				return err
			}
		}
	}
	return nil
}

// applyNames makes the name changes of another device's batch here. Each is
// idempotent (a batch may be applied again after a crash). A page deleted
// there goes here only if it has nothing the other device did not see; else
// it stays, as a change beats a delete, and goes up whole to come back
// there. A rename whose new name is taken here (a page made here while
// apart, or the renamed page, arrived first) merges the page into the one
// there (mergeAway); a ledger's, its pages into that ledger (mergeLedger).
func (s *Syncer) applyNames(ctx context.Context, device string, names []store.NameChange, later []*batch, graft bool, st *Stats) error {
	for i, c := range names {
		if err := s.applyName(ctx, device, c, namesAfter(names[i+1:], later), graft, st); err != nil {
			return fmt.Errorf("%s %s/%s: %w", c.Op, c.Ledger, c.Page, err)
		}
	}
	return nil
}

func (s *Syncer) applyName(ctx context.Context, device string, c store.NameChange, after iter.Seq[store.NameChange], graft bool, st *Stats) (err error) {
	r, n := s.repo, s.namer()
	switch c.Op {
	case store.NameCreateLedger:
		if gone, err := s.ledgerRenamedAway(c.Ledger, c.Time); err != nil || gone {
			return err // made before it was renamed here: it is that ledger
		}
		if ok, err := r.HasLedger(c.Ledger); err != nil {
			return err
		} else if ok {
			// Made again there, after another device's rename of the
			// name that has not come yet, perhaps: the rename takes
			// the pages and leaves the ledger, as where it came first
			// (the simulation's seed 487 of every flag).
			return s.noteLedgerMade(c)
		}
		if err := s.ensureLedger(c.Ledger); err != nil {
			return err
		}
		return s.noteLedgerNamed(c)
	case store.NameCreatePage:
		if ids, err := incarnationsOf(c.Incarnations); err != nil || len(ids) > 0 {
			if err != nil {
				return err
			}
			return s.nameByID(ctx, c, ids, after, st)
		}
		if _, _, ok, err := s.renamedAway(c.Ledger, c.Page, c.Time); err != nil || ok {
			return err // made before it was renamed here: it is that page
		}
		if ok, err := r.HasPage(c.Ledger, c.Page); err != nil || ok {
			return err
		}
		if err := s.ensurePage(c.Ledger, c.Page); err != nil {
			return err
		}
		// Until its commits land, when the page was made says whether
		// a rename of its name or ledger made before then took it
		// (madeAfter).
		t, err := c.Time.MarshalText()
		if err != nil {
			return err
		}
		return s.repo.SetSyncState(map[string][]byte{stateMade + c.Ledger + "/" + c.Page: t})
	case store.NameDeleteLedger:
		if ok, err := r.HasLedger(c.Ledger); err != nil || !ok {
			return err
		}
		if pages, err := r.Pages(c.Ledger); err != nil || len(pages) > 0 {
			return err // pages kept here, or made here: the ledger stays
		}
		return n.DeleteLedger(c.Ledger)
	case store.NameRenameLedger:
		if ok, err := r.HasLedger(c.Ledger); err != nil {
			return err
		} else if ok {
			if err := s.renameLedger(ctx, c, st); err != nil {
				return err
			}
		}
		// Its pages' batches, if they come after, land where it went.
		return s.noteMoved(c)
	case store.NameDeletePage:
		if ids, err := incarnationsOf(c.Incarnations); err != nil || len(ids) > 0 {
			if err != nil {
				return err
			}
			return s.deleteByID(ctx, device, c, ids, graft, st)
		}
		return s.letGo(ctx, device, c, graft, st)
	case store.NameRenamePage:
		if ids, err := incarnationsOf(c.Incarnations); err != nil || len(ids) > 0 {
			if err != nil {
				return err
			}
			return s.nameByID(ctx, c, ids, after, st)
		}
		// A page moved to another ledger is renamed into it, with its
		// history, as within one.
		dest := c.DestLedger()
		if ok, err := r.HasPage(c.Ledger, c.Page); err != nil {
			return err
		} else if !ok {
			if crossed, err := s.crossedRename(ctx, c, st); err != nil || crossed {
				return err
			}
			if err := awaitPage(c, graft); err != nil {
				return err
			}
			// Its batches, if they come after, land where it went.
			return s.noteMoved(c)
		}
		if later, err := s.cameAfter(c.Ledger, c.Page, c.Time); err != nil {
			return err
		} else if later {
			// A page of its own, made or moved under the name since;
			// batches of the page renamed follow the rename
			// (landingPage).
			return s.noteMoved(c)
		}
		// Commits here of a page begun under the name after the
		// rename, landed in this page before the rename arrived,
		// stay under the name after it, as on the devices that
		// applied the rename first (the simulation's seed 58).
		late, err := s.lateCommits(c.Ledger, c.Page, c.Time)
		if err != nil {
			return err
		}
		defer func() {
			if err == nil && len(late) > 0 {
				err = s.keepLate(ctx, c, late, st)
			}
		}()
		// A new name this device renamed away after c named, on the
		// devices that knew of c, the page c made: that went with the
		// rename, and so does this one (the simulation's seed 89).
		into := c
		if l, p, ok, err := s.renamedAway(dest, c.To, c.Time); err != nil {
			return err
		} else if ok {
			into.ToLedger, into.To = l, p
			dest = l
		}
		if ok, err := r.HasPage(dest, into.To); err != nil {
			return err
		} else if ok {
			if err := s.mergeAway(ctx, into, graft, st); err != nil {
				return err
			}
			return s.noteMoved(c)
		}
		if err := s.ensureLedger(dest); err != nil {
			return err
		}
		if err := n.RenamePage(c.Ledger, c.Page, dest, into.To); err != nil {
			return err
		}
		if err := s.noteMoved(c); err != nil {
			return err
		}
		// Commits made here that the other device never saw went with
		// the page: a push marked for the old name would find it gone
		// and leave them unpushed.
		s.Changed(dest, into.To)
		return nil
	}
	return fmt.Errorf("a change of names of unknown kind %q", c.Op)
}

// letGo deletes page c.Page, deleted on device, unless this device has
// commits that device had not seen. Then the delete lands as a change of
// that device's, made on what it had seen, merged with this device's
// (deleteOver): what was changed here meanwhile stays, the rest goes, as a
// folder deleted on one device while files in it change on another. The
// page stays, and goes up whole, even if nothing is left in it: the
// batches this device pushed before hold its changes, and they make the
// page again wherever they land after the delete.
func (s *Syncer) letGo(ctx context.Context, device string, c store.NameChange, graft bool, st *Stats) error {
	if ok, err := s.repo.HasPage(c.Ledger, c.Page); err != nil {
		return err
	} else if !ok {
		return awaitPage(c, graft)
	}
	seen, err := s.seenThere(c, graft)
	if err != nil {
		return err
	}
	if seen {
		return s.deleteSeen(c)
	}
	if err := s.deleteOver(ctx, device, c, st); err != nil {
		return err
	}
	return s.resend(c.Ledger, c.Page)
}

// deleteOver lands in page c.Page the delete c of device: a commit of an
// empty tree on the commits c saw (made alike on every device that lands
// it), merged with the page's head. A delete that saw more than a commit's
// two parents, or commits not here (a graft's), lands nothing: the page
// stays whole.
func (s *Syncer) deleteOver(ctx context.Context, device string, c store.NameChange, st *Stats) error {
	p, err := s.repo.Acquire(c.Ledger, c.Page)
	if err != nil {
		return err
	}
	defer s.repo.Release(p)
	g := &graph{p: p}
	parents := []*store.Commit{store.FirstCommit()}
	if ids := seenCommits(c); len(ids) > 0 {
		parents = parents[:0]
		for _, id := range ids {
			cm, err := g.commit(id)
			if err == nil && cm == nil {
				// Made after the device's last push of the page, and
				// deleted before the next: what it pushed last is an
				// ancestor, seen too (the simulation's seed 434 of
				// every flag).
				cm, err = lastPushed(p, device, c.Incarnations)
			}
			if err != nil || cm == nil {
				return err
			}
			if !slices.ContainsFunc(parents, func(o *store.Commit) bool { return o.ID == cm.ID }) {
				parents = append(parents, cm)
			}
		}
	}
	if len(parents) > 2 {
		return nil
	}
	del, err := store.NewCommit(c.Time.UnixNano(), btree.EmptyRoot, parents...)
	if err != nil {
		return err
	}
	// Landed before, if a restart came between it and the resend.
	if ok, err := p.HasCommit(del.ID); err != nil || ok {
		return err
	}
	if err := p.MarkSynced(nil, nil, map[string][]byte{deviceKey(del.ID): []byte(device)}); err != nil {
		return err
	}
	if err := s.arrive(p, []*store.Commit{del}, "", nil, nil, nil, st); err != nil {
		return fmt.Errorf("land the delete: %w", err)
	}
	return nil
}

// lastPushed returns the head of device's last batch of page p, of one of
// incarnations, if p holds it: an ancestor of every head of the page the
// device had since, as a device's head only moves forward.
func lastPushed(p *store.Page, device string, incarnations []string) (*store.Commit, error) {
	var last store.BatchHead
	found := false
	err := p.BatchHeadRows(func(dev, inc string, h store.BatchHead) error {
		if dev != device || !slices.Contains(incarnations, inc) || found && h.Seq <= last.Seq {
			return nil
		}
		held, err := p.HasCommit(h.Head)
		if held {
			last, found = h, true
		}
		return err
	})
	if err != nil || !found {
		return nil, err
	}
	return p.Commit(last.Head)
}

// crossedRename settles c, a rename of a page this device renamed too
// while apart (or took another device's rename of), and reports whether it
// was one (the page renamed here holds the commits c saw, or is the page c
// renamed by landedRenamed): of the two new names, a rename that carried
// commits wins over one that carried none, else the later rename's, the
// greater name if both came at once, so every device picks the same. If
// this device's lost, its page moves to the winner's name (merging into a
// page of that name here); if it won, a page made here under the loser's
// name by its batches merges into it; either way the losing name is
// recorded as moved to the winning one, so batches made under it land
// there.
func (s *Syncer) crossedRename(ctx context.Context, c store.NameChange, st *Stats) (bool, error) {
	m, ok, err := s.movedFrom(c.Ledger, c.Page)
	if err != nil || !ok {
		return false, err
	}
	ours, theirs := [2]string{m.Ledger, m.Page}, [2]string{c.DestLedger(), c.To}
	if ours == theirs {
		// The same rename. If theirs came first, the page came to the
		// name when it did on their devices: a change they made of
		// the name after that is of this page (the simulation's seed
		// 18, -sim.pages).
		if !c.Time.Before(m.Time) {
			return true, nil
		}
		v, err := json.Marshal(sameRename{Ours: m.Time, Theirs: c.Time})
		if err != nil {
			return true, err
		}
		return true, s.repo.SetSyncState(map[string][]byte{stateSame + ours[0] + "/" + ours[1]: v})
	}
	if has, err := s.repo.HasPage(ours[0], ours[1]); err != nil || !has {
		return false, err // renamed on or deleted since
	}
	// The same page: it holds the commits the other device's page had
	// synced when renamed (a page made under the old name since is not),
	// or they landed here under its new name first (landedRenamed). A
	// rename of a page that had synced nothing says no commits: the page
	// here is it if it was under the old name then.
	seen := seenCommits(c)
	if len(seen) == 0 && !m.Carried {
		return false, nil
	}
	same := len(seen) > 0
	if same {
		if same, err = s.holdsAll(ours[0], ours[1], seen); err != nil {
			return false, err
		}
	}
	landed := false // their page's commits are here under its new name
	if !same {
		if same, landed, err = s.landedRenamed(c, ours, theirs, seen); err != nil || !same {
			return false, err
		}
	}
	// A rename that carried commits wins over one of a page that held
	// nothing yet: the devices that renamed it first apply it as a
	// rename of another page, or of none, and keep their name. Of two
	// that carried, the later.
	if m.Carried && (len(seen) == 0 || c.Time.Before(m.Time) || c.Time.Equal(m.Time) && theirs[0]+"/"+theirs[1] < ours[0]+"/"+ours[1]) {
		if landed {
			if err := s.moveOrMerge(ctx, theirs, ours, st); err != nil {
				return true, err
			}
		}
		return true, s.setMoved(theirs[0], theirs[1], moved{Ledger: ours[0], Page: ours[1], Time: s.now(), Carried: true})
	}
	// Their name renamed away here after their rename (its page or its
	// ledger): the page goes where that went, as on the devices that
	// took their rename first (the simulation's seed 64, -sim.ledgers).
	if l, p, ok, err := s.renamedAway(theirs[0], theirs[1], c.Time); err != nil {
		return true, err
	} else if ok {
		theirs = [2]string{l, p}
	}
	if err := s.ensureLedger(theirs[0]); err != nil {
		return true, err
	}
	if err := s.moveOrMerge(ctx, ours, theirs, st); err != nil {
		return true, err
	}
	if err := s.setMoved(ours[0], ours[1], moved{Ledger: theirs[0], Page: theirs[1], Time: s.now(), Carried: true}); err != nil {
		return true, err
	}
	return true, s.noteMoved(c)
}

// landedRenamed reports whether the page change c renamed to theirs is
// the page this device renamed from the same name to ours, when ours does
// not hold the commits c saw: they landed here under the new name (its
// batches came before c, which waited for a parent commit), or c saw none.
// Then the two are one page if ours was under the old name when c renamed
// it, neither made nor renamed onto it after (the simulation's seed 18,
// -sim.pages). landed: a page is here under theirs.
func (s *Syncer) landedRenamed(c store.NameChange, ours, theirs [2]string, seen []store.CommitID) (same, landed bool, err error) {
	if landed, err = s.repo.HasPage(theirs[0], theirs[1]); err != nil {
		return false, false, err
	}
	if len(seen) > 0 {
		if ok, err := s.holdsAll(theirs[0], theirs[1], seen); err != nil || !ok {
			return false, false, err
		}
	} else if !landed {
		return false, false, nil
	}
	if later, err := s.arrivedAfter(c.Ledger, c.Page, c.Time); err != nil || later {
		return false, false, err
	}
	later, err := s.madeAfter(ours[0], ours[1], c.Time)
	return !later, landed, err
}

// mergeAway merges page c.Page, renamed by another device onto a name
// this one has a page under, into that page, and deletes it: every device
// then holds one page of both sides' commits, as the others land the old
// name's batches in the page it became (landingPage). A page that holds
// nothing the other device had not seen just goes: its commits are the
// renamed page's, which arrive under the new name.
func (s *Syncer) mergeAway(ctx context.Context, c store.NameChange, graft bool, st *Stats) error {
	seen, err := s.seenThere(c, graft)
	if err != nil {
		return err
	}
	if !seen {
		if err := s.mergeInto(ctx, c.Ledger, c.Page, c.DestLedger(), c.To, st); err != nil {
			return fmt.Errorf("merge into %s/%s: %w", c.DestLedger(), c.To, err)
		}
	}
	return s.namer().DeletePage(c.Ledger, c.Page)
}

// renameLedger renames ledger c.Ledger as another device did: whole, if
// its new name is free here and every page in it was there before the
// rename; else page by page (mergeLedger). Commits made here that the
// other device never saw go with the pages, as with a page's rename.
func (s *Syncer) renameLedger(ctx context.Context, c store.NameChange, st *Stats) error {
	pages, err := s.repo.Pages(c.Ledger)
	if err != nil {
		return err
	}
	// A page made or moved into the ledger after the rename is one of
	// its own, as the renaming device takes it (cameAfter): it stays,
	// and so does the ledger.
	var before []string
	for _, p := range pages {
		if later, err := s.cameAfter(c.Ledger, p, c.Time); err != nil {
			return err
		} else if !later {
			before = append(before, p)
		}
	}
	later := len(before) < len(pages)
	if !later {
		// A ledger made here after the rename (or by the device whose
		// change made it here) is one of its own too, empty or not:
		// the renaming device makes it anew when that change lands
		// there (the simulation's seed 5, -sim.pages -sim.ledgers
		// -sim.join -sim.collect=keep-last=2).
		if later, err = s.ledgerCameAfter(c.Ledger, c.Time); err != nil {
			return err
		}
	}
	// A new name this device renamed away after c named, on the devices
	// that knew of c, the ledger c made: that went with the rename, and
	// so does this one (the simulation's seed 9, -sim.ledgers).
	if to, ok, err := s.ledgerWentTo(c.To, c.Time); err != nil {
		return err
	} else if ok {
		c.To = to
	}
	if taken, err := s.repo.HasLedger(c.To); err != nil {
		return err
	} else if taken || later {
		return s.mergeLedger(ctx, c, before, later, st)
	}
	if err := s.namer().RenameLedger(c.Ledger, c.To); err != nil {
		return err
	}
	for _, p := range pages {
		s.Changed(c.To, p)
	}
	if err := s.noteArrived(c.To, pages, c.Time); err != nil {
		return err
	}
	return s.noteLedgerNamed(c)
}

// ledgerBrought reports whether a rename of its ledger brought page
// ledger/page under its name after time at: one made here and not pushed
// yet that moved it, or as recorded (stateArrived).
func (s *Syncer) ledgerBrought(ledger, page string, at time.Time) (bool, error) {
	_, changes, err := s.repo.NameChanges()
	if err != nil {
		return false, err
	}
	for _, c := range changes {
		if c.Op == store.NameRenameLedger && c.To == ledger && slices.Contains(c.Pages, page) && c.Time.After(at) {
			return true, nil
		}
	}
	last, ok, err := s.timeState(stateArrived + ledger + "/" + page)
	return ok && last.After(at), err
}

// noteArrived records that pages came into ledger at time at, with a rename
// of their ledger (stateArrived): a rename of that name made before at,
// which another device's change brings later, does not take them
// (cameAfter).
func (s *Syncer) noteArrived(ledger string, pages []string, at time.Time) error {
	t, err := at.MarshalText()
	if err != nil {
		return err
	}
	rows := map[string][]byte{}
	for _, p := range pages {
		key := stateArrived + ledger + "/" + p
		if last, ok, err := s.timeState(key); err != nil {
			return err
		} else if !ok || at.After(last) {
			rows[key] = t
		}
	}
	return s.repo.SetSyncState(rows)
}

// mergeLedger moves pages, of ledger c.Ledger, renamed by another device
// onto a name this one has a ledger under (made here while apart) or
// holding pages that came after the rename, into ledger c.To: a page
// whose name is free there is renamed into it, one whose name is taken
// merges into the page there (mergeInto), as the renaming device lands
// this one's batches of both ledgers' pages in its renamed ledger. The old
// ledger goes, unless it keeps pages that came later. Again after a busy
// page, it moves what the first did not.
func (s *Syncer) mergeLedger(ctx context.Context, c store.NameChange, pages []string, keep bool, st *Stats) error {
	if err := s.ensureLedger(c.To); err != nil {
		return err
	}
	for _, p := range pages {
		if err := s.moveOrMerge(ctx, [2]string{c.Ledger, p}, [2]string{c.To, p}, st); err != nil {
			return err
		}
	}
	if err := s.noteArrived(c.To, pages, c.Time); err != nil {
		return err
	}
	if keep {
		return nil
	}
	return s.namer().DeleteLedger(c.Ledger)
}

// moveOrMerge renames page from (ledger, page) to to, as another device's
// change of names makes it here, or, if to is taken, merges it into the
// page there (mergeInto) and deletes it. What this device had not pushed
// goes up under the new name.
func (s *Syncer) moveOrMerge(ctx context.Context, from, to [2]string, st *Stats) error {
	n := s.namer()
	if taken, err := s.repo.HasPage(to[0], to[1]); err != nil {
		return err
	} else if !taken {
		if err := n.RenamePage(from[0], from[1], to[0], to[1]); err != nil {
			return err
		}
	} else if err := s.mergeInto(ctx, from[0], from[1], to[0], to[1], st); err != nil {
		return fmt.Errorf("merge %s/%s into %s/%s: %w", from[0], from[1], to[0], to[1], err)
	} else if err := n.DeletePage(from[0], from[1]); err != nil {
		return err
	}
	s.Changed(to[0], to[1])
	return nil
}

// mergeInto lands the commits of page fromLedger/fromPage that page
// ledger/page lacks in it, with the pieces they reach and their device
// rows (a conflict file is named after the device that wrote its
// version), merged with its head, to go up from here as its own.
// Again after a crash or a busy page, it takes what the first did not.
func (s *Syncer) mergeInto(ctx context.Context, fromLedger, fromPage, ledger, page string, st *Stats) error {
	src, err := s.repo.Acquire(fromLedger, fromPage)
	if err != nil {
		return err
	}
	defer s.repo.Release(src)
	dst, err := s.repo.Acquire(ledger, page)
	if err != nil {
		return err
	}
	defer s.repo.Release(dst)
	var fresh []*store.Commit
	if err := src.Commits(func(c *store.Commit) error {
		ok, err := dst.HasCommit(c.ID)
		if err == nil && !ok {
			fresh = append(fresh, c)
		}
		return err
	}); err != nil {
		return err
	}
	if len(fresh) > 0 {
		if err := s.copyCommits(ctx, src, dst, fresh, st); err != nil {
			return err
		}
	}
	return copyBatchHeads(src, dst)
}

// copyBatchHeads gives dst the batch heads src records whose commits dst
// holds. The later batches of src's incarnations land in dst now, and
// with history pruned only those rows show what they build on
// (knownEdges): without them a device's delete, made where the page was
// src, merged with no base in dst and the deleted file came back (the
// simulation's seed 892 of every flag).
func copyBatchHeads(src, dst *store.Page) error {
	rows := map[string][]byte{}
	err := src.BatchHeads(func(dev string, h store.BatchHead) error {
		if held, err := dst.HasCommit(h.Head); err != nil || !held {
			return err
		}
		r, err := store.BatchHeadRow(dev, h)
		maps.Copy(rows, r)
		return err
	})
	if err != nil || len(rows) == 0 {
		return err
	}
	return dst.MarkSynced(nil, nil, rows)
}

// copyCommits lands commits fresh of page src, sorted parents first, in
// page dst with their device rows and the pieces they reach, merged with
// its head.
func (s *Syncer) copyCommits(ctx context.Context, src, dst *store.Page, fresh []*store.Commit, st *Stats) error {
	slices.SortFunc(fresh, store.ParentsFirst)
	made := map[string][]byte{}
	for _, c := range fresh {
		v, ok, err := src.SyncMetadata(deviceKey(c.ID))
		if err != nil {
			return err
		}
		if ok {
			made[deviceKey(c.ID)] = v
		}
	}
	if err := dst.MarkSynced(nil, nil, made); err != nil {
		return err
	}
	f := &fetcher{s: s, from: src, st: st}
	fetched, err := f.fetch(ctx, dst, fresh)
	if err != nil {
		return err
	}
	return s.arrive(dst, fresh, "", nil, nil, fetched, st)
}

// lateCommits returns the commits of page ledger/page whose whole history
// began after time at: a page made under the name after another device
// renamed the name's page away, landed in this one before the rename
// arrived. A history pruned here does not tell, and counts as earlier.
func (s *Syncer) lateCommits(ledger, page string, at time.Time) ([]*store.Commit, error) {
	p, err := s.repo.Acquire(ledger, page)
	if err != nil {
		return nil, err
	}
	defer s.repo.Release(p)
	var all []*store.Commit
	if err := p.Commits(func(c *store.Commit) error {
		all = append(all, c)
		return nil
	}); err != nil {
		return nil, err
	}
	// A parent's generation is below its children's.
	slices.SortFunc(all, store.ParentsFirst)
	early := make(map[store.CommitID]bool, len(all))
	held := make(map[store.CommitID]bool, len(all))
	var late []*store.Commit
	for _, c := range all {
		held[c.ID] = true
		for _, id := range c.Parents {
			switch {
			case id == store.FirstCommitID:
				early[c.ID] = early[c.ID] || !time.Unix(0, c.Timestamp).After(at)
			case !held[id] || early[id]:
				early[c.ID] = true
			}
		}
		if !early[c.ID] {
			late = append(late, c)
		}
	}
	if len(late) == len(all) {
		return nil, nil // the whole page came later: cameAfter keeps it
	}
	return late, nil
}

// keepLate makes page c.Page again after rename c took it away, holding
// the commits late of a page begun under the name after the rename,
// copied from the page the rename took them to: one landing per head of
// theirs, as their batches land on devices that got the rename first.
func (s *Syncer) keepLate(ctx context.Context, c store.NameChange, late []*store.Commit, st *Stats) error {
	l, p, ok, err := s.renamedAway(c.Ledger, c.Page, c.Time)
	if err != nil || !ok {
		return err
	}
	if err := s.ensurePage(c.Ledger, c.Page); err != nil {
		return err
	}
	src, err := s.repo.Acquire(l, p)
	if err != nil {
		return err
	}
	defer s.repo.Release(src)
	dst, err := s.repo.Acquire(c.Ledger, c.Page)
	if err != nil {
		return err
	}
	defer s.repo.Release(dst)
	byID := map[store.CommitID]*store.Commit{}
	parent := map[store.CommitID]bool{}
	for _, cm := range late {
		byID[cm.ID] = cm
		for _, id := range cm.Parents {
			parent[id] = true
		}
	}
	for _, head := range late {
		if parent[head.ID] {
			continue
		}
		// The head and its ancestors (all late: a late commit's
		// parents are) that dst lacks.
		var fresh []*store.Commit
		seen := map[store.CommitID]bool{head.ID: true}
		for stack := []*store.Commit{head}; len(stack) > 0; {
			cm := stack[len(stack)-1]
			stack = stack[:len(stack)-1]
			if ok, err := dst.HasCommit(cm.ID); err != nil {
				return err
			} else if ok {
				continue
			}
			fresh = append(fresh, cm)
			for _, id := range cm.Parents {
				if pc := byID[id]; pc != nil && !seen[id] {
					seen[id] = true
					stack = append(stack, pc)
				}
			}
		}
		if err := s.copyCommits(ctx, src, dst, fresh, st); err != nil {
			return fmt.Errorf("keep %s/%s begun after its rename: %w", c.Ledger, c.Page, err)
		}
	}
	return nil
}

// awaitPage stops change c of a page not here that names commits it saw,
// until the batches that make the page here apply (errMissingParent) or
// none can (graft): a delete or rename applied before the page arrives
// would leave the page, when it comes, under its old name here alone.
func awaitPage(c store.NameChange, graft bool) error {
	if len(c.Seen) > 0 && !graft {
		return errMissingParent
	}
	return nil
}

// seenThere reports whether every head of page c.Page here is one of the
// commits c says were synced when the other device let it go, or older. A
// named commit not here yet may be newer than this device's head: the
// change waits for it, unless graft (no batch read brings it), when it is
// taken as unseen.
func (s *Syncer) seenThere(c store.NameChange, graft bool) (bool, error) {
	seen, err := c.SeenCommits()
	if err != nil {
		return false, err
	}
	return s.headsSeen(c.Ledger, c.Page, seen, graft)
}

// headsSeen reports whether every head of page ledger/page is one of
// commits seen or older (seenThere).
func (s *Syncer) headsSeen(ledger, page string, seen []store.CommitID, graft bool) (bool, error) {
	p, err := s.repo.Acquire(ledger, page)
	if err != nil {
		return false, err
	}
	defer s.repo.Release(p)
	heads, err := p.Heads()
	if err != nil {
		return false, err
	}
	g := &graph{p: p}
	var there []*store.Commit
	for _, id := range seen {
		cm, err := g.commit(id)
		if err != nil {
			return false, err
		}
		if cm == nil {
			if graft {
				continue
			}
			return false, errMissingParent // as a batch waits for its parents
		}
		there = append(there, cm)
	}
	for _, h := range heads {
		if h.ID == store.FirstCommitID {
			continue // the page holds nothing here to lose
		}
		covered := slices.ContainsFunc(there, func(t *store.Commit) bool { return t.ID == h.ID })
		for _, t := range there {
			if covered {
				break
			}
			if covered, err = g.isAncestor(h, t); err != nil {
				return false, err
			}
		}
		if !covered {
			return false, nil
		}
	}
	return true, nil
}
