package store

import (
	"fmt"

	"github.com/dgraph-io/badger/v4"

	"github.com/ledgerfs/ledgerfs/cas"
)

// StatusFaults are the disagreements between a page's objects and their
// status rows: every object has exactly one status row, and every status
// row names an object.
type StatusFaults struct {
	// Missing are objects with no status row.
	Missing []cas.Digest
	// Orphans are status rows of objects that are not stored.
	Orphans [][]byte
	// Doubled are objects with more than one status row: the rows that
	// are not the most advanced status (synced, then local).
	Doubled [][]byte
}

// Count is the number of faults.
func (f *StatusFaults) Count() int { return len(f.Missing) + len(f.Orphans) + len(f.Doubled) }

// CheckStatus reads every object's key and every status row.
func (p *Page) CheckStatus() (*StatusFaults, error) {
	f := &StatusFaults{}
	statuses := map[cas.Digest][]PieceStatus{}
	err := p.view(func(txn *badger.Txn) error {
		for _, s := range []PieceStatus{Synced, Local, Transient} {
			prefix := []byte(StatusPrefix(s))
			it := txn.NewIterator(badger.IteratorOptions{Prefix: prefix})
			for it.Rewind(); it.Valid(); it.Next() {
				d := cas.Digest(it.Item().KeyCopy(nil)[len(prefix):])
				statuses[d] = append(statuses[d], s)
			}
			it.Close()
		}
		it := txn.NewIterator(badger.IteratorOptions{Prefix: []byte(PrefixObjects)})
		defer it.Close()
		for it.Rewind(); it.Valid(); it.Next() {
			d := cas.Digest(it.Item().KeyCopy(nil)[len(PrefixObjects):])
			ss, ok := statuses[d]
			switch {
			case !ok:
				f.Missing = append(f.Missing, d)
			case len(ss) > 1:
				for _, s := range ss[1:] { // ss[0] is the most advanced
					f.Doubled = append(f.Doubled, statusKey(s, d))
				}
			}
			delete(statuses, d)
		}
		return nil
	})
	for d, ss := range statuses {
		for _, s := range ss {
			f.Orphans = append(f.Orphans, statusKey(s, d))
		}
	}
	return f, err
}

// RepairStatus fixes the faults f found, losing nothing: orphan and doubled
// rows are deleted, and an object with no status becomes local, kept as a
// commit's piece is (if no commit uses it, collecting garbage removes it).
func (p *Page) RepairStatus(f *StatusFaults) error {
	if err := p.SetStatus(Local, f.Missing); err != nil {
		return err
	}
	rows := append(append([][]byte(nil), f.Orphans...), f.Doubled...)
	if err := batched(p.db, len(rows), func(txn *badger.Txn, i int) error { return txn.Delete(rows[i]) }); err != nil {
		return fmt.Errorf("store: repair status rows: %w", err)
	}
	return nil
}
