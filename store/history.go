package store

import (
	"encoding/binary"
	"encoding/hex"
	"fmt"
	"maps"
	"slices"

	"github.com/dgraph-io/badger/v4"

	"github.com/ledgerfs/ledgerfs/cas"
)

// A deleted page's history: the synced commits of a page deleted here, and
// which device made each, kept under its incarnations when the repository
// syncs. A change another device made to the page meanwhile brings it back
// (a change beats a delete), and builds on those commits: landed on them,
// not grafted onto nothing, it leaves a merge the history that tells who
// wrote each version, which names a conflict file after its writer. Only
// commits in the remote are kept: their pieces can be fetched again.
//
// Row prefixHistory + incarnation hex: for each commit, oldest first, a
// uvarint length and its bytes, then a uvarint length and its maker ("":
// this device).
const prefixHistory = "history/"

// maxKeptHistory bounds the commits a deleted page keeps, its newest: a
// landing reaches past them by grafting, as before.
const maxKeptHistory = 10000

func historyKey(id Incarnation) []byte { return []byte(prefixHistory + id.String()) }

// MadeByKey is the page's sync_metadata row that says which device made a
// commit fetched from the remote; a commit without one was made here.
func MadeByKey(id CommitID) string { return "device/" + hex.EncodeToString(id[:]) }

// A Made is a commit of a deleted page's history and the device that made
// it ("": this one).
type Made struct {
	Commit *Commit
	By     string
}

// syncedHistory returns the page's synced commits and who made them.
func (p *Page) syncedHistory() ([]Made, error) {
	var all []Made
	err := p.Commits(func(c *Commit) error {
		if _, unsynced, err := getRow(p.view, unsyncedCommitKey(c.ID)); err != nil || unsynced {
			return err
		}
		by, _, err := p.SyncMetadata(MadeByKey(c.ID))
		if err != nil {
			return err
		}
		all = append(all, Made{Commit: c, By: string(by)})
		return nil
	})
	return all, err
}

// encodeHistory encodes ms for a history row, oldest first: at most
// maxKeptHistory, the newest.
func encodeHistory(ms []Made) []byte {
	slices.SortFunc(ms, func(a, b Made) int { return ParentsFirst(a.Commit, b.Commit) })
	if len(ms) > maxKeptHistory {
		ms = ms[len(ms)-maxKeptHistory:]
	}
	var b []byte
	for _, m := range ms {
		b = binary.AppendUvarint(b, uint64(len(m.Commit.Bytes)))
		b = append(b, m.Commit.Bytes...)
		b = binary.AppendUvarint(b, uint64(len(m.By)))
		b = append(b, m.By...)
	}
	return b
}

func decodeHistory(b []byte, into map[CommitID]Made) error {
	next := func() ([]byte, error) {
		n, k := binary.Uvarint(b)
		if k <= 0 || uint64(len(b)-k) < n {
			return nil, fmt.Errorf("history row: truncated")
		}
		v := b[k : k+int(n)]
		b = b[k+int(n):]
		return v, nil
	}
	for len(b) > 0 {
		cb, err := next()
		if err != nil {
			return err
		}
		by, err := next()
		if err != nil {
			return err
		}
		id := CommitID(cas.Hash(cb))
		c, err := DecodeCommit(id, slices.Clone(cb))
		if err != nil {
			return fmt.Errorf("history row: %w", err)
		}
		into[id] = Made{Commit: c, By: string(by)}
	}
	return nil
}

// keepHistory reads the synced history of ledger/page, about to be
// deleted, when the repository syncs; nil otherwise.
func (r *Repository) keepHistory(ledger, page string) ([]Made, error) {
	if ok, err := r.Syncs(); err != nil || !ok {
		return nil, err
	}
	if ev, err := r.Evicted(ledger, page); err != nil || ev {
		return nil, err // its history is in the remote, not here
	}
	p, err := r.Acquire(ledger, page)
	if err != nil {
		return nil, err
	}
	defer r.Release(p)
	h, err := p.syncedHistory()
	if err != nil {
		return nil, fmt.Errorf("keep the history of %s/%s: %w", ledger, page, err)
	}
	return h, nil
}

// addHistory adds ms to the history kept of incarnations ids, each commit
// once. It does not replace what is kept: a page of one of them deleted
// here before kept its own history, which tells who wrote the versions a
// page they were joined into since holds (the simulation's seed 991 of
// -sim.pages named a conflict file after the device that merged its
// version, not the one that wrote it).
func addHistory(txn *badger.Txn, ids []Incarnation, ms []Made) error {
	if len(ms) == 0 {
		return nil
	}
	for _, id := range ids {
		all := map[CommitID]Made{}
		_, _, err := getDecoded(txn, historyKey(id), func(b []byte) (struct{}, error) {
			return struct{}{}, decodeHistory(b, all)
		})
		if err != nil {
			return err
		}
		for _, m := range ms {
			if _, ok := all[m.Commit.ID]; !ok {
				all[m.Commit.ID] = m
			}
		}
		if err := txn.Set(historyKey(id), encodeHistory(slices.Collect(maps.Values(all)))); err != nil {
			return err
		}
	}
	return nil
}

// DeletedHistory returns the commits kept of the deleted pages of
// incarnations ids, by id.
func (r *Repository) DeletedHistory(ids []Incarnation) (map[CommitID]Made, error) {
	out := map[CommitID]Made{}
	err := r.db.View(func(txn *badger.Txn) error {
		for _, id := range ids {
			_, _, err := getDecoded(txn, historyKey(id), func(b []byte) (struct{}, error) {
				return struct{}{}, decodeHistory(b, out)
			})
			if err != nil {
				return err
			}
		}
		return nil
	})
	return out, err
}

// AddDeletedHistory adds ms to the history kept of the deleted page of
// incarnations ids: commits another device made to it, which a landing here
// skipped (the device deleted the page later) and a change that brings
// the page back may build on.
func (r *Repository) AddDeletedHistory(ids []Incarnation, ms []Made) error {
	return r.db.Update(func(txn *badger.Txn) error { return addHistory(txn, ids, ms) })
}

// DropDeletedHistory removes the history kept of incarnations ids: their
// page came back holding it.
func (r *Repository) DropDeletedHistory(ids []Incarnation) error {
	return r.db.Update(func(txn *badger.Txn) error {
		for _, id := range ids {
			if err := txn.Delete(historyKey(id)); err != nil {
				return err
			}
		}
		return nil
	})
}
