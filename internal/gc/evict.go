package gc

import (
	"cmp"
	"errors"
	"log/slog"
	"slices"
	"time"

	"github.com/ledgerfs/ledgerfs/store"
)

// EvictOver evicts pages whose every commit and piece is synced and that
// nobody uses, least recently closed first (page_usage_db's opened/ rows;
// pages open with no user after them), while the
// repository's directory holds more than budget bytes; busy, if set, keeps
// the pages a mount uses. An evicted page keeps its name and comes back
// when next opened (store.Repository.Evict). It returns how many pages it
// evicted, the bytes their dbs held, and whether the repository is still
// over budget (its pages in use, or holding changes not synced).
func EvictOver(repo *store.Repository, budget uint64, busy func(ledger, page string) bool) (n int, freed int64, over bool, err error) {
	used := repo.DiskUsage()
	if used <= int64(budget) {
		return 0, 0, false, nil
	}
	defer func() { over = used-freed > int64(budget) }()
	usage, err := repo.Usage()
	if err != nil {
		return 0, 0, true, err
	}
	// Open pages (zero) come last: one nobody uses is closed and goes
	// too, if it must.
	closed := map[string]time.Time{}
	for _, u := range usage {
		at := u.Closed
		if at.IsZero() {
			at = time.Unix(1<<62, 0)
		}
		closed[u.Ledger+"\x00"+string(u.ID[:])] = at
	}
	type candidate struct {
		ledger, page string
		closed       time.Time
	}
	var cands []candidate
	ledgers, err := repo.Ledgers()
	if err != nil {
		return 0, 0, true, err
	}
	for _, l := range ledgers {
		pages, err := repo.Pages(l)
		if err != nil {
			return 0, 0, true, err
		}
		for _, p := range pages {
			id := store.PageIDFor(p)
			if at, ok := closed[l+"\x00"+string(id[:])]; ok {
				cands = append(cands, candidate{l, p, at})
			}
		}
	}
	slices.SortFunc(cands, func(a, b candidate) int { return cmp.Compare(a.closed.UnixNano(), b.closed.UnixNano()) })
	for _, c := range cands {
		if used-freed <= int64(budget) {
			break
		}
		if ev, err := repo.Evicted(c.ledger, c.page); err != nil || ev {
			continue
		}
		if busy != nil && busy(c.ledger, c.page) {
			continue
		}
		size, err := repo.Evict(c.ledger, c.page)
		switch {
		case errors.Is(err, store.ErrBusy), errors.Is(err, store.ErrNotEvictable):
			slog.Debug("page not evicted", "page", c.ledger+"/"+c.page, "err", err)
			continue
		case err != nil:
			return n, freed, true, err
		}
		n++
		freed += size
	}
	return n, freed, true, nil
}
