package store

import (
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/dgraph-io/badger/v4"
)

// A NameOp is a kind of change of the repository's names.
type NameOp string

// The changes of names a repository that syncs records for its remote.
const (
	NameCreateLedger NameOp = "create-ledger"
	NameDeleteLedger NameOp = "delete-ledger"
	NameRenameLedger NameOp = "rename-ledger"
	NameCreatePage   NameOp = "create-page"
	NameDeletePage   NameOp = "delete-page"
	NameRenamePage   NameOp = "rename-page"
)

// A NameChange is a ledger or page created, deleted or renamed on this
// device, kept until the remote has it: pages are named alike on every
// device, and what a device does to a name the others do too.
type NameChange struct {
	Op     NameOp `json:"op"`
	Ledger string `json:"ledger"`
	Page   string `json:"page,omitempty"`
	// To is a rename's new name (of the ledger, or the page).
	To string `json:"to,omitempty"`
	// ToLedger is, for a page moved to another ledger, that ledger;
	// empty for a rename within the page's ledger (see DestLedger).
	ToLedger string `json:"to_ledger,omitempty"`
	// Seen are, for a page deleted or renamed, the newest commits of its
	// history that were synced when it went (hex ids): a device whose
	// head is one of them or older has nothing the deleting device did
	// not see, and may let the page go; one with newer commits keeps
	// them, as a change beats a delete.
	Seen []string `json:"seen,omitempty"`
	// Incarnations are, for a page created, renamed or deleted, the
	// incarnations of the page (Incarnation's String): the page it names
	// wherever it is named on the device applying it. None in a change
	// recorded before layout 4.
	Incarnations []string `json:"inc,omitempty"`
	// Pages are, for a ledger renamed, the pages it held then: they came
	// under the new name with the rename, whenever they were named (a
	// device that applies an older rename of the new name later keeps
	// them). Informational: none in a change recorded before it came, and
	// a device applying the rename finds the pages it moves itself.
	Pages []string  `json:"pages,omitempty"`
	Time  time.Time `json:"time"`
}

// SeenCommits parses c.Seen.
func (c NameChange) SeenCommits() ([]CommitID, error) {
	out := make([]CommitID, 0, len(c.Seen))
	for _, h := range c.Seen {
		id, err := ParseCommitID(h)
		if err != nil {
			return nil, fmt.Errorf("name change %s of %s/%s: seen %w", c.Op, c.Ledger, c.Page, err)
		}
		out = append(out, id)
	}
	return out, nil
}

// DestLedger is the ledger a renamed page is in after the change.
func (c NameChange) DestLedger() string {
	if c.ToLedger != "" {
		return c.ToLedger
	}
	return c.Ledger
}

// prefixNames holds the name changes not yet in the remote, by a key that
// orders them: 8 bytes of nanoseconds since 1970, big-endian, made
// increasing under Repository.namesMu.
const prefixNames = prefixSync + "names/"

// NameChanges returns the name changes not yet in the remote, oldest first,
// with the key each has for DropNameChanges.
func (r *Repository) NameChanges() (keys [][]byte, changes []NameChange, err error) {
	err = r.db.View(func(txn *badger.Txn) error {
		it := txn.NewIterator(badger.IteratorOptions{Prefix: []byte(prefixNames), PrefetchValues: true})
		defer it.Close()
		for it.Rewind(); it.Valid(); it.Next() {
			var c NameChange
			if err := it.Item().Value(func(v []byte) error { return json.Unmarshal(v, &c) }); err != nil {
				return fmt.Errorf("name change %x: %w", it.Item().Key(), err)
			}
			keys, changes = append(keys, it.Item().KeyCopy(nil)), append(changes, c)
		}
		return nil
	})
	if err != nil {
		return nil, nil, fmt.Errorf("store: name changes: %w", err)
	}
	return keys, changes, nil
}

// DropNameChanges deletes the name changes of keys: the remote has them.
func (r *Repository) DropNameChanges(keys [][]byte) error {
	return r.db.Update(func(txn *badger.Txn) error {
		for _, k := range keys {
			if err := txn.Delete(k); err != nil {
				return err
			}
		}
		return nil
	})
}

// SetNameChange replaces the name change at key, not yet in the remote,
// with c.
func (r *Repository) SetNameChange(key []byte, c NameChange) error {
	b, err := json.Marshal(c)
	if err != nil {
		return err
	}
	return r.db.Update(func(txn *badger.Txn) error { return txn.Set(key, b) })
}

// nameChange returns c to record with a change of names if rec and the
// repository syncs, else nil. For a page's delete or rename it notes the
// commits the page's history had synced.
func (r *Repository) nameChange(rec bool, c NameChange) (*NameChange, error) {
	if !rec {
		return nil, nil
	}
	if ok, err := r.Syncs(); err != nil || !ok {
		return nil, err
	}
	if c.Op == NameDeletePage || c.Op == NameRenamePage {
		n, err := r.EnsurePageNaming(c.Ledger, c.Page)
		if err != nil {
			return nil, err
		}
		c.Incarnations = IncarnationStrings(n.IDs)
		p, err := r.Acquire(c.Ledger, c.Page)
		if err != nil {
			return nil, err
		}
		seen, err := p.syncedFrontier()
		r.Release(p)
		if err != nil {
			return nil, err
		}
		for _, id := range seen {
			c.Seen = append(c.Seen, hex.EncodeToString(id[:]))
		}
	}
	c.Time = time.Now().UTC()
	if r.opts.Now != nil {
		c.Time = r.opts.Now().UTC()
	}
	return &c, nil
}

// recordName writes c, if not nil, in txn.
func (r *Repository) recordName(txn *badger.Txn, c *NameChange) error {
	if c == nil {
		return nil
	}
	b, err := json.Marshal(c)
	if err != nil {
		return err
	}
	r.namesMu.Lock()
	ns := max(c.Time.UnixNano(), r.namesLast+1)
	r.namesLast = ns
	r.namesMu.Unlock()
	key := binary.BigEndian.AppendUint64([]byte(prefixNames), uint64(ns))
	return txn.Set(key, b)
}

// syncedFrontier returns the newest synced commits of the page's history:
// walking back from its heads through commits with unsynced rows, the
// first without.
func (p *Page) syncedFrontier() ([]CommitID, error) {
	heads, err := p.Heads()
	if err != nil {
		return nil, err
	}
	var out []CommitID
	seen := map[CommitID]bool{}
	stack := make([]CommitID, 0, len(heads))
	for _, h := range heads {
		stack = append(stack, h.ID)
	}
	for len(stack) > 0 {
		id := stack[len(stack)-1]
		stack = stack[:len(stack)-1]
		if seen[id] {
			continue
		}
		seen[id] = true
		unsynced := false
		if id != FirstCommitID {
			_, found, err := getRow(p.view, unsyncedCommitKey(id))
			if err != nil {
				return nil, err
			}
			unsynced = found
		}
		if !unsynced {
			out = append(out, id)
			continue
		}
		c, err := p.Commit(id)
		if errors.Is(err, ErrNotFound) {
			continue // pruned
		}
		if err != nil {
			return nil, err
		}
		stack = append(stack, c.Parents...)
	}
	return out, nil
}

// Unrecorded changes names as the repository's methods of the same names
// do, without recording the change for the remote: sync applies with it
// what came from the remote.
type Unrecorded struct{ r *Repository }

// Unrecorded returns the repository's changes of names that go unrecorded.
func (r *Repository) Unrecorded() Unrecorded { return Unrecorded{r} }

func (u Unrecorded) CreateLedger(ledger string) error   { return u.r.createLedger(ledger, false) }
func (u Unrecorded) DeleteLedger(ledger string) error   { return u.r.deleteLedger(ledger, false) }
func (u Unrecorded) RenameLedger(from, to string) error { return u.r.renameLedger(from, to, false) }
func (u Unrecorded) CreatePage(ledger, page string) error {
	return u.r.createPage(ledger, page, false)
}
func (u Unrecorded) DeletePage(ledger, page string) error {
	return u.r.deletePage(ledger, page, false)
}
func (u Unrecorded) RenamePage(ledger, from, toLedger, to string) error {
	return u.r.movePage(ledger, from, toLedger, to, false)
}
