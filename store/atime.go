package store

import "fmt"

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
	ns, found, err := r.uint64Row(atimeKey(ledger, PageIDFor(page), key))
	return int64(ns), found, err
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
		if err := wb.Set(atimeKey(ledger, id, key), EncodeUint64(uint64(ns))); err != nil {
			return fmt.Errorf("store: keep access times: %w", err)
		}
	}
	if err := wb.Flush(); err != nil {
		return fmt.Errorf("store: keep access times: %w", err)
	}
	return nil
}
