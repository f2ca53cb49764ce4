package store

import (
	"encoding/binary"
	"errors"
	"fmt"

	"github.com/dgraph-io/badger/v4"
)

// prefixAtime rows of the repository db hold the access times reads gave
// a page's files on this device: atime/{ledger}{page id}{key} → 8-byte
// little-endian Unix ns. No commit holds them: a read changes nothing to
// keep in history or to sync. Whoever shows one shows it over the entry's
// only while the entry was not changed after it (see fs).
const prefixAtime = "atime/"

func atimeKey(ledger string, id PageID, key string) []byte {
	return append(append([]byte(prefixAtime+ledger), id[:]...), key...)
}

// LocalAtime returns the access time a read on this device gave the file
// at key of ledger/page, if any.
func (r *Repository) LocalAtime(ledger, page, key string) (int64, bool, error) {
	var ns int64
	found := false
	err := r.db.View(func(txn *badger.Txn) error {
		it, err := txn.Get(atimeKey(ledger, PageIDFor(page), key))
		if errors.Is(err, badger.ErrKeyNotFound) {
			return nil
		}
		if err != nil {
			return err
		}
		return it.Value(func(v []byte) error {
			if len(v) != 8 {
				return fmt.Errorf("store: access time of %q: %d bytes", key, len(v))
			}
			ns, found = int64(binary.LittleEndian.Uint64(v)), true
			return nil
		})
	})
	return ns, found, err
}

// SetLocalAtimes records the access times reads gave files of ledger/page
// (key → Unix ns), in as many db transactions as they need.
func (r *Repository) SetLocalAtimes(ledger, page string, at map[string]int64) error {
	if len(at) == 0 {
		return nil
	}
	id := PageIDFor(page)
	wb := r.db.NewWriteBatch()
	defer wb.Cancel()
	for key, ns := range at {
		if err := wb.Set(atimeKey(ledger, id, key), binary.LittleEndian.AppendUint64(nil, uint64(ns))); err != nil {
			return fmt.Errorf("store: keep access times: %w", err)
		}
	}
	if err := wb.Flush(); err != nil {
		return fmt.Errorf("store: keep access times: %w", err)
	}
	return nil
}
