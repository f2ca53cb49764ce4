package store

import (
	"encoding/hex"
	"errors"
	"fmt"
	"math"
	"slices"
	"strings"

	"github.com/dgraph-io/badger/v4"

	"github.com/ledgerfs/ledgerfs/cas"
)

// A Fetcher brings the pieces a page does not hold from the remote store
// that holds them (a synced page's values are fetched when first read, not
// when pulled). Fetch returns piece d of p, verified, after storing it as
// synced (a read-only page: without); for a read in order, which goes on
// to read ahead bytes from d on (0: not in order; ReadOn: without end), it
// may store the pieces after d, up to those, that the same request
// brought. Pending returns
// piece d of p if a fetch brought it and has not stored it yet: a read
// takes it from there before it asks the page db, whose reads wait while
// fetched pieces are committed (a Badger read transaction waits for the
// commits under way), so a read in order would stall on each of its own
// fetches' stores. A Fetcher must be safe for concurrent use, and bound its
// wait for the remote.
type Fetcher interface {
	Fetch(p *Page, d cas.Digest, ahead int64) ([]byte, error)
	Pending(p *Page, d cas.Digest, ahead int64) ([]byte, bool)
}

// ReadOn is the ahead of a read in order that goes on past the value it
// starts in, through those stored after it (MakeLocal).
const ReadOn = math.MaxInt64

// ErrRemoteOnly reports a piece that is in the remote store only, which
// could not be fetched (no remote connected, the remote unreachable, the
// object damaged).
var ErrRemoteOnly = errors.New("store: piece is in the remote store only and could not be fetched")

// SetFetcher makes f fetch the pieces pages lack (nil: none).
func (r *Repository) SetFetcher(f Fetcher) {
	if f == nil {
		r.fetcher.Store(nil)
		return
	}
	r.fetcher.Store(&f)
}

// DropFetcher stops f fetching for the repository, unless another
// fetcher took its place.
func (r *Repository) DropFetcher(f Fetcher) {
	if cur := r.fetcher.Load(); cur != nil && *cur == f {
		r.fetcher.CompareAndSwap(cur, nil)
	}
}

// SyncPieceKey is the sync state key (see SyncState) under which the sync
// machinery keeps where the remote store holds piece d.
func SyncPieceKey(d cas.Digest) string { return "piece/" + hex.EncodeToString([]byte(d)) }

// Located reports whether the remote store holds piece d, as far as the
// batches read and written here say: a piece reachable and not held is
// then not missing, only not fetched yet.
func (r *Repository) Located(d cas.Digest) (bool, error) {
	_, ok, err := r.SyncState(SyncPieceKey(d))
	return ok, err
}

// Located reports whether the remote store holds piece d of the page
// (Repository.Located).
func (p *Page) Located(d cas.Digest) (bool, error) { return p.repo.Located(d) }

// fetch fetches d, which the page does not hold, through the fetcher.
func (p *Page) fetch(d cas.Digest, buf []byte, ahead int64) ([]byte, error) {
	f := p.repo.fetcher.Load()
	if f == nil {
		if ok, err := p.repo.Located(d); err != nil || !ok {
			return nil, fmt.Errorf("piece %s: %w", d, cas.ErrNotFound)
		}
		return nil, fmt.Errorf("piece %s: %w (no remote connected)", d, ErrRemoteOnly)
	}
	data, err := (*f).Fetch(p, d, ahead)
	if err != nil {
		if errors.Is(err, cas.ErrNotFound) {
			return nil, err
		}
		// The cause as text: a network error's errno must not reach
		// a reader as its own.
		return nil, fmt.Errorf("piece %s: %w: %v", d, ErrRemoteOnly, err)
	}
	return p.fetched(data, buf, ahead > 0), nil
}

// pending returns d appended to buf[:0] if a fetch under way brought it
// and has not stored it yet (Fetcher.Pending).
func (p *Page) pending(d cas.Digest, buf []byte, ahead int64) ([]byte, bool) {
	f := p.repo.fetcher.Load()
	if f == nil {
		return nil, false
	}
	data, ok := (*f).Pending(p, d, ahead)
	if !ok {
		return nil, false
	}
	return p.fetched(data, buf, ahead > 0), true
}

// fetched counts a read of data, which a fetcher returned, and copies it
// into buf: the fetcher keeps its own.
func (p *Page) fetched(data, buf []byte, stream bool) []byte {
	p.repo.trim.AddValueRead(len(data), stream)
	return append(buf[:0], data...)
}

// PutFetched stores pieces fetched from the remote store, marked synced,
// in one transaction per batch; a piece held already is left as it is. A
// read-only page keeps nothing.
func (p *Page) PutFetched(ds []cas.Digest, data [][]byte) error {
	if err := p.check(); err != nil {
		return err
	}
	if !p.Writable() {
		return nil // read anew next time
	}
	err := batched(p.db, len(ds), func(txn *badger.Txn, i int) error {
		key := objectKey(ds[i])
		switch _, err := txn.Get(key); {
		case err == nil:
			return nil
		case !errors.Is(err, badger.ErrKeyNotFound):
			return err
		}
		if err := txn.Set(key, data[i]); err != nil {
			return err
		}
		return txn.Set(statusKey(Synced, ds[i]), nil)
	})
	if err != nil {
		return fmt.Errorf("store: keep fetched pieces: %w", err)
	}
	return nil
}

// prefixLocal rows of the repository db name the key prefixes of a page
// that are kept local: local/{ledger}{page id}/{prefix} → empty.
const prefixLocal = "local/"

func localPrefix(ledger string, id PageID) []byte {
	return append([]byte(prefixLocal+ledger), id[:]...)
}

// LocalPrefixes returns what of the page is kept local, in order: key
// prefixes of directories (ending in '/'), keys of files, or "" for the
// whole page.
func (p *Page) LocalPrefixes() ([]string, error) {
	base := localPrefix(p.Ledger, p.ID)
	var out []string
	err := p.repo.db.View(func(txn *badger.Txn) error {
		it := txn.NewIterator(badger.IteratorOptions{Prefix: base})
		defer it.Close()
		for it.Rewind(); it.Valid(); it.Next() {
			out = append(out, string(it.Item().Key()[len(base):]))
		}
		return nil
	})
	return out, err
}

// SetLocal keeps the entries under key prefix local (on), or lets them be
// fetched when read again (off; what is held stays until evicted).
func (p *Page) SetLocal(prefix string, on bool) error {
	key := append(localPrefix(p.Ledger, p.ID), prefix...)
	return p.repo.db.Update(func(txn *badger.Txn) error {
		if on {
			return txn.Set(key, nil)
		}
		return txn.Delete(key)
	})
}

// MakeLocal fetches every piece the values of the head's entries under
// what (as LocalPrefixes gives it: a directory's key prefix, a file's key,
// "" for all) reach that the page does not hold, and returns how many
// pieces and bytes it fetched. Pieces in order come in ranged reads of
// their packs (GetStreaming).
func (p *Page) MakeLocal(what string) (pieces int, bytes int64, err error) {
	prefix, exact := what, what != "" && !strings.HasSuffix(what, "/")
	head, err := p.Head()
	if err != nil {
		return 0, 0, err
	}
	it := p.Tree(head).Seek(prefix)
	for it.Next() {
		e := it.Entry()
		if !strings.HasPrefix(e.Key, prefix) || exact && e.Key != prefix {
			break
		}
		err := cas.Walk(p, e.Value, func(d cas.Digest) (bool, error) {
			if d.IsInline() {
				return false, nil
			}
			held, err := p.Has(d)
			if err != nil || held {
				return held && d.IsIndex(), err
			}
			data, err := p.GetStreaming(d, nil, ReadOn)
			if err == nil {
				// Into the db, whether or not the fetcher keeps it
				// elsewhere (a cache may drop it).
				err = p.PutFetched([]cas.Digest{d}, [][]byte{data})
			}
			if err != nil {
				return false, fmt.Errorf("%s: %w", e.Key, err)
			}
			pieces++
			bytes += int64(len(data))
			return d.IsIndex(), nil
		}, nil)
		if err != nil {
			return pieces, bytes, err
		}
	}
	return pieces, bytes, it.Err()
}

// moveLocalRows moves what a page keeps local to its new name (toPage
// empty: drops it), with the page's other rows.
func moveLocalRows(txn *badger.Txn, ledger, page, toLedger, toPage string) error {
	base := localPrefix(ledger, PageIDFor(page))
	var whats []string
	it := txn.NewIterator(badger.IteratorOptions{Prefix: base, PrefetchValues: false})
	for it.Rewind(); it.Valid(); it.Next() {
		whats = append(whats, string(it.Item().Key()[len(base):]))
	}
	it.Close()
	for _, w := range whats {
		if err := txn.Delete(append(slices.Clone(base), w...)); err != nil {
			return err
		}
		if toPage != "" {
			if err := txn.Set(append(localPrefix(toLedger, PageIDFor(toPage)), w...), nil); err != nil {
				return err
			}
		}
	}
	return nil
}
