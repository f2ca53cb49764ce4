package cloudsync

import (
	"context"
	"encoding/hex"
	"errors"
	"fmt"
	"slices"
	"strconv"

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
			if err := s.repo.SetSyncState(map[string][]byte{stateNextSeq: []byte(strconv.FormatUint(seq+1, 10))}); err != nil {
				return err
			}
			continue
		}
		if err != nil {
			return fmt.Errorf("cloudsync: push names: %w", err)
		}
		st.BatchesUp++
		if err := s.repo.SetSyncState(map[string][]byte{stateNextSeq: []byte(strconv.FormatUint(seq+1, 10))}); err != nil {
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
	}
	return s.repo.DropNameChanges(keys)
}

func sameChange(a, b store.NameChange) bool {
	return a.Op == b.Op && a.Ledger == b.Ledger && a.Page == b.Page && a.To == b.To && a.ToLedger == b.ToLedger && a.Time.Equal(b.Time)
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

// errWait stops a device's batches where one cannot apply yet: a page in
// use, or a delete that names commits not here yet. The next pull tries
// again.
var errWait = errors.New("waits")

// applyNames makes the name changes of another device's batch here. Each is
// idempotent (a batch may be applied again after a crash). A page deleted
// there goes here only if it has nothing the other device did not see; else
// it stays, as a change beats a delete, and goes up whole to come back
// there. A rename whose new name is taken here (made here while apart)
// lets the old name go as a delete would; the renamed page's head arrives
// under the new name and merges with this one.
func (s *Syncer) applyNames(names []store.NameChange, graft bool) error {
	for _, c := range names {
		if err := s.applyName(c, graft); err != nil {
			return fmt.Errorf("%s %s/%s: %w", c.Op, c.Ledger, c.Page, err)
		}
	}
	return nil
}

func (s *Syncer) applyName(c store.NameChange, graft bool) error {
	r, n := s.repo, s.namer()
	switch c.Op {
	case store.NameCreateLedger:
		return s.ensureLedger(c.Ledger)
	case store.NameCreatePage:
		return s.ensurePage(c.Ledger, c.Page)
	case store.NameDeleteLedger:
		if ok, err := r.HasLedger(c.Ledger); err != nil || !ok {
			return err
		}
		if pages, err := r.Pages(c.Ledger); err != nil || len(pages) > 0 {
			return err // pages kept here, or made here: the ledger stays
		}
		return n.DeleteLedger(c.Ledger)
	case store.NameRenameLedger:
		if ok, err := r.HasLedger(c.Ledger); err != nil || !ok {
			return err
		}
		if ok, err := r.HasLedger(c.To); err != nil || ok {
			return err // taken here: both stay; the pages arrive under c.To
		}
		return n.RenameLedger(c.Ledger, c.To)
	case store.NameDeletePage:
		return s.letGo(c, graft)
	case store.NameRenamePage:
		// A page moved to another ledger is renamed into it, with its
		// history, as within one.
		dest := c.DestLedger()
		if ok, err := r.HasPage(c.Ledger, c.Page); err != nil || !ok {
			return err
		}
		if ok, err := r.HasPage(dest, c.To); err != nil {
			return err
		} else if ok {
			return s.letGo(c, graft)
		}
		if err := s.ensureLedger(dest); err != nil {
			return err
		}
		if err := n.RenamePage(c.Ledger, c.Page, dest, c.To); err != nil {
			return err
		}
		// Commits made here that the other device never saw went with
		// the page: a push marked for the old name would find it gone
		// and leave them unpushed.
		s.Changed(dest, c.To)
		return nil
	}
	return fmt.Errorf("a change of names of unknown kind %q", c.Op)
}

// letGo deletes page c.Page, deleted or renamed away on another device,
// unless this device has commits that device had not seen: then the page
// stays and goes up whole.
func (s *Syncer) letGo(c store.NameChange, graft bool) error {
	if ok, err := s.repo.HasPage(c.Ledger, c.Page); err != nil || !ok {
		return err
	}
	seen, err := s.seenThere(c, graft)
	if err != nil {
		return err
	}
	if !seen {
		return s.resend(c.Ledger, c.Page)
	}
	return s.namer().DeletePage(c.Ledger, c.Page)
}

// seenThere reports whether every head of page c.Page here is one of the
// commits c says were synced when the other device let it go, or older. A
// named commit not here yet may be newer than this device's head: the
// change waits for it, unless graft (no batch read brings it), when it is
// taken as unseen.
func (s *Syncer) seenThere(c store.NameChange, graft bool) (bool, error) {
	p, err := s.repo.Acquire(c.Ledger, c.Page)
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
	for _, h := range c.Seen {
		b, err := hex.DecodeString(h)
		if err != nil || len(b) != len(store.CommitID{}) {
			return false, fmt.Errorf("commit id %q", h)
		}
		cm, err := g.commit(store.CommitID(b))
		if err != nil {
			return false, err
		}
		if cm == nil {
			if graft {
				continue
			}
			return false, errWait
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
