package store

import (
	"errors"
	"fmt"
	"time"

	"github.com/dgraph-io/badger/v4"
)

// Rows of the repository db for collection: the retention policies, as
// text (package retention reads them), and when each page was last
// collected.
const (
	prefixRetention = "retention/"
	keyRetention    = "repository/retention"
	prefixCollected = "collected/"
	// prefixCompressed rows hold the db version up to which a page's
	// pieces were offered to compression (Page.CompressNew).
	prefixCompressed = "compressed/"
	// prefixScrubbed rows hold when every piece of a page was last hashed
	// against its digest (Page.Scrub).
	prefixScrubbed = "scrubbed/"
)

// retentionKey is the row of a policy's scope: the repository (ledger
// empty), a ledger (page empty) or a page. Ledger and page names hold no
// '/', so the scopes never collide.
func retentionKey(ledger, page string) []byte {
	if ledger == "" {
		return []byte(keyRetention)
	}
	return []byte(prefixRetention + ledger + "/" + page)
}

func collectedKey(ledger string, id PageID) []byte {
	return append([]byte(prefixCollected+ledger), id[:]...)
}

func compressedKey(ledger string, id PageID) []byte {
	return append([]byte(prefixCompressed+ledger), id[:]...)
}

func scrubbedKey(ledger string, id PageID) []byte {
	return append([]byte(prefixScrubbed+ledger), id[:]...)
}

// Scope names where a policy was set.
type Scope int

const (
	ScopeNone Scope = iota // no policy set: the default applies
	ScopeRepository
	ScopeLedger
	ScopePage
)

func (s Scope) String() string {
	return [...]string{"default", "repository", "ledger", "page"}[s]
}

// Retention returns the policy text that applies to a page (or a ledger,
// page empty, or the repository, both empty): the most specific one set,
// and where it was set; ScopeNone with no text when none is.
func (r *Repository) Retention(ledger, page string) (string, Scope, error) {
	type try struct {
		key   []byte
		scope Scope
	}
	var tries []try
	if page != "" {
		tries = append(tries, try{retentionKey(ledger, page), ScopePage})
	}
	if ledger != "" {
		tries = append(tries, try{retentionKey(ledger, ""), ScopeLedger})
	}
	tries = append(tries, try{retentionKey("", ""), ScopeRepository})
	var text string
	scope := ScopeNone
	err := r.db.View(func(txn *badger.Txn) error {
		for _, t := range tries {
			it, err := txn.Get(t.key)
			if errors.Is(err, badger.ErrKeyNotFound) {
				continue
			}
			if err != nil {
				return err
			}
			v, err := it.ValueCopy(nil)
			text, scope = string(v), t.scope
			return err
		}
		return nil
	})
	if err != nil {
		return "", ScopeNone, fmt.Errorf("store: read retention: %w", err)
	}
	return text, scope, nil
}

// SetRetention sets the policy text of a scope (see Retention), or removes
// it when text is empty: the next wider scope's then applies.
func (r *Repository) SetRetention(ledger, page, text string) error {
	if err := r.CheckScope(ledger, page); err != nil {
		return err
	}
	key := retentionKey(ledger, page)
	return r.db.Update(func(txn *badger.Txn) error {
		if text == "" {
			return txn.Delete(key)
		}
		return txn.Set(key, []byte(text))
	})
}

// Collected returns when the page was last collected; zero if never.
func (r *Repository) Collected(ledger, page string) (time.Time, error) {
	return r.timeRow(collectedKey(ledger, PageIDFor(page)))
}

// SetCollected records that the page was collected at t.
func (r *Repository) SetCollected(ledger, page string, t time.Time) error {
	return r.setUint64Row(collectedKey(ledger, PageIDFor(page)), uint64(t.UnixNano()))
}

// Scrubbed returns when every piece of the page was last hashed against
// its digest; zero if never.
func (r *Repository) Scrubbed(ledger, page string) (time.Time, error) {
	return r.timeRow(scrubbedKey(ledger, PageIDFor(page)))
}

// timeRow reads a repository row holding a time (Unix ns); zero if none.
func (r *Repository) timeRow(key []byte) (time.Time, error) {
	ns, found, err := r.uint64Row(key)
	if !found || err != nil {
		return time.Time{}, err
	}
	return time.Unix(0, int64(ns)), nil
}

// SetScrubbed records that every piece of the page was hashed at t.
func (r *Repository) SetScrubbed(ledger, page string, t time.Time) error {
	return r.setUint64Row(scrubbedKey(ledger, PageIDFor(page)), uint64(t.UnixNano()))
}

// CompressedUpTo returns the db version up to which the page's pieces were
// offered to compression; 0 if never.
func (r *Repository) CompressedUpTo(ledger, page string) (uint64, error) {
	v, _, err := r.uint64Row(compressedKey(ledger, PageIDFor(page)))
	return v, err
}

// SetCompressedUpTo records CompressNew's next version for the page.
func (r *Repository) SetCompressedUpTo(ledger, page string, v uint64) error {
	return r.setUint64Row(compressedKey(ledger, PageIDFor(page)), v)
}

// uint64Row reads a repository row holding an integer, if it exists.
func (r *Repository) uint64Row(key []byte) (v uint64, found bool, err error) {
	err = r.db.View(func(txn *badger.Txn) error {
		it, err := txn.Get(key)
		if errors.Is(err, badger.ErrKeyNotFound) {
			return nil
		}
		if err != nil {
			return err
		}
		found = true
		return it.Value(func(b []byte) error {
			v, err = DecodeUint64(b)
			return err
		})
	})
	return v, found, err
}

func (r *Repository) setUint64Row(key []byte, v uint64) error {
	return r.db.Update(func(txn *badger.Txn) error { return txn.Set(key, EncodeUint64(v)) })
}

// movePageRows moves the rows that name a page (its policy, its
// collection time) to another name, or drops them when toPage is empty.
// Called in the transaction that renames or deletes the page.
func movePageRows(txn *badger.Txn, ledger, page, toLedger, toPage string) error {
	if err := moveLocalRows(txn, ledger, page, toLedger, toPage); err != nil {
		return err
	}
	from := [][]byte{retentionKey(ledger, page), collectedKey(ledger, PageIDFor(page)), compressedKey(ledger, PageIDFor(page)), evictedKey(ledger, PageIDFor(page)), scrubbedKey(ledger, PageIDFor(page)), polynomialKey(ledger, PageIDFor(page))}
	if toPage == "" {
		for _, k := range from {
			if err := txn.Delete(k); err != nil {
				return err
			}
		}
		return nil
	}
	to := [][]byte{retentionKey(toLedger, toPage), collectedKey(toLedger, PageIDFor(toPage)), compressedKey(toLedger, PageIDFor(toPage)), evictedKey(toLedger, PageIDFor(toPage)), scrubbedKey(toLedger, PageIDFor(toPage)), polynomialKey(toLedger, PageIDFor(toPage))}
	for i := range from {
		if err := moveRow(txn, from[i], to[i]); err != nil {
			return err
		}
	}
	return nil
}

// moveRow moves a row to another key, if it exists.
func moveRow(txn *badger.Txn, from, to []byte) error {
	it, err := txn.Get(from)
	if errors.Is(err, badger.ErrKeyNotFound) {
		return nil
	}
	if err != nil {
		return err
	}
	v, err := it.ValueCopy(nil)
	if err != nil {
		return err
	}
	if err := txn.Delete(from); err != nil {
		return err
	}
	return txn.Set(to, v)
}
