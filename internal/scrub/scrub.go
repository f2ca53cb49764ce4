// Package scrub hashes, in the background and at a bounded rate, every
// piece a mounted repository stores against its digest. Reads trust
// Badger's checksums (cas.CheckedSource), which find damage to the disk's
// bytes; a scrub also finds what those cannot: a row written with other
// bytes than its digest names, or damage Badger had read and cached before
// it happened. It reports; it repairs nothing (a piece held by the remote
// store comes back when the damaged page is evicted and read again).
package scrub

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/dustin/go-humanize"
	"golang.org/x/time/rate"

	"github.com/ledgerfs/ledgerfs/store"
)

// batch is how many bytes of a page one step reads while it holds the
// page: collections and evictions wait for moments only.
const batch = 1 << 20

// Result is one page's scrub.
type Result struct {
	Ledger, Page string
	Bytes        int64
	// Damaged holds the digests of the pieces that do not match, or
	// could not be read.
	Damaged [][]byte
	Took    time.Duration
}

// Scrubber scrubs a repository's pages in the background: each page at
// most once per Every, reading at most Rate bytes a second.
type Scrubber struct {
	Repo  *store.Repository
	Every time.Duration
	Rate  int
	// Observe, if set, is told of every page scrubbed whole.
	Observe func(Result)

	once sync.Once
	stop chan struct{}
	done chan struct{}
}

func (s *Scrubber) init() {
	s.once.Do(func() {
		s.stop = make(chan struct{})
		s.done = make(chan struct{})
	})
}

// recheck is how often Run looks for pages due (or Every, if less); the
// first look comes as late, so that a scrub never competes with a mount's
// start.
const recheck = 10 * time.Minute

// Run scrubs the pages due until Close.
func (s *Scrubber) Run() {
	s.init()
	defer close(s.done)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go func() {
		select {
		case <-s.stop:
			cancel()
		case <-ctx.Done():
		}
	}()
	lim := s.limiter()
	for {
		t := time.NewTimer(min(recheck, s.Every))
		select {
		case <-ctx.Done():
			t.Stop()
			return
		case <-t.C:
		}
		if err := s.due(ctx, lim); err != nil && ctx.Err() == nil {
			slog.Warn("scrub", "err", err)
		}
	}
}

// Close stops Run, cutting a page's scrub short, and waits for it.
func (s *Scrubber) Close() {
	s.init()
	select {
	case <-s.stop:
	default:
		close(s.stop)
	}
	<-s.done
}

func (s *Scrubber) limiter() *rate.Limiter {
	if s.Rate <= 0 {
		return rate.NewLimiter(rate.Inf, 0)
	}
	// The burst takes a batch and the piece that ends it.
	return rate.NewLimiter(rate.Limit(s.Rate), 2*batch)
}

// due scrubs every page not scrubbed within Every.
func (s *Scrubber) due(ctx context.Context, lim *rate.Limiter) error {
	ledgers, err := s.Repo.Ledgers()
	if err != nil {
		return err
	}
	for _, l := range ledgers {
		pages, err := s.Repo.Pages(l)
		if err != nil {
			return err
		}
		for _, p := range pages {
			at, err := s.Repo.Scrubbed(l, p)
			if err != nil {
				return err
			}
			if time.Since(at) < s.Every {
				continue
			}
			r, err := s.page(ctx, lim, l, p)
			switch {
			case errors.Is(err, store.ErrNotFound):
				continue // deleted meanwhile
			case err != nil:
				return err
			}
			if s.Observe != nil {
				s.Observe(r)
			}
			report(r)
		}
	}
	return nil
}

// Page scrubs one page whole now, at the Scrubber's rate, and records when.
// An evicted page holds nothing here and is left alone.
func (s *Scrubber) Page(ctx context.Context, ledger, page string) (Result, error) {
	r, err := s.page(ctx, s.limiter(), ledger, page)
	if err == nil {
		report(r)
	}
	return r, err
}

// report logs a page's scrub: damage at ERROR, a whole page at INFO,
// after Observe has counted it (tests wait for the line).
func report(r Result) {
	if len(r.Damaged) > 0 {
		slog.Error("scrub: pieces of the page do not match their digests: its db is damaged; fsck says more, and a page synced to a remote store is whole again once evicted (ledgerfs evict) and read",
			"page", r.Ledger+"/"+r.Page, "damaged", len(r.Damaged), "first", fmt.Sprintf("%x", r.Damaged[0]))
		return
	}
	slog.Info("scrubbed", "page", r.Ledger+"/"+r.Page, "bytes", humanize.IBytes(uint64(r.Bytes)), "took", r.Took.Round(time.Millisecond))
}

func (s *Scrubber) page(ctx context.Context, lim *rate.Limiter, ledger, page string) (Result, error) {
	r := Result{Ledger: ledger, Page: page}
	if ev, err := s.Repo.Evicted(ledger, page); err != nil || ev {
		return r, err
	}
	start := time.Now()
	var next []byte
	for {
		p, err := s.Repo.Acquire(ledger, page)
		if err != nil {
			return r, err
		}
		var n int
		var damaged [][]byte
		next, n, damaged, err = p.Scrub(next, batch)
		s.Repo.Release(p)
		if err != nil {
			return r, fmt.Errorf("scrub %s/%s: %w", ledger, page, err)
		}
		r.Bytes += int64(n)
		r.Damaged = append(r.Damaged, damaged...)
		if next == nil {
			break
		}
		if err := lim.WaitN(ctx, min(n, lim.Burst())); err != nil {
			return r, err
		}
	}
	r.Took = time.Since(start)
	return r, s.Repo.SetScrubbed(ledger, page, time.Now())
}
