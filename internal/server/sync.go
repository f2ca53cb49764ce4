package server

import (
	"cmp"
	"context"
	"errors"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/ledgerfs/ledgerfs/cas"
	"github.com/ledgerfs/ledgerfs/internal/cloudsync"
	"github.com/ledgerfs/ledgerfs/internal/gc"
	"github.com/ledgerfs/ledgerfs/internal/repokey"
	"github.com/ledgerfs/ledgerfs/store"
)

// syncer runs a mount's sync: a round (pull, then push) every SyncEvery,
// and soon after a commit lands.
type syncer struct {
	s       *Server
	cs      *cloudsync.Syncer                // nil until the remote answered
	watched atomic.Pointer[cloudsync.Syncer] // cs, for commits to tell it of their pages
	none    bool                             // the repository has no remote
	// failingSince is when the rounds began to fail (zero: the last went
	// through): the failure is logged once per outage.
	failingSince time.Time
	// ready is closed once cs is connected, or never will be (readyErr
	// says why): reads wait for it (Fetch).
	ready     chan struct{}
	readyOnce sync.Once
	readyErr  error
	evicted   time.Time // the last check of the cache size
	closes    uint64    // the repository's Closes at it
	fetched   int64     // the syncer's Fetched at it
	over      bool      // it left the repository over its cache size
}

// pushDelay lets the commits of a burst of closes land before they go up.
const pushDelay = 200 * time.Millisecond

// For activeFor after a commit here or a round that moved something, a
// mount syncs every activeEvery rather than every SyncEvery: a change made
// on one device then shows on another within about a second while the two
// are in use, and an idle mount lists the store only every SyncEvery (each
// round of an idle mount is one LIST request).
const (
	activeEvery = 500 * time.Millisecond
	activeFor   = 30 * time.Second
)

// lastTimeout bounds the round at unmount.
const lastTimeout = 30 * time.Second

func (y *syncer) run(ctx context.Context) {
	every := y.s.cfg.SyncEvery
	if every <= 0 {
		every = 2 * time.Second
	}
	t := time.NewTimer(every)
	defer t.Stop()
	var activeUntil time.Time
	for {
		if y.round(ctx) {
			activeUntil = time.Now().Add(activeFor)
		}
		if y.none {
			return
		}
		wait := every
		if time.Now().Before(activeUntil) {
			wait = min(wait, activeEvery)
		}
		t.Reset(wait)
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		case <-y.s.syncKick:
			activeUntil = time.Now().Add(activeFor)
			t.Stop() // no stale tick since Go 1.23
			select {
			case <-ctx.Done():
				return
			case <-time.After(pushDelay):
			}
		}
	}
}

// round connects if it has not, then syncs once; an error is logged once
// until it changes or a round goes through. It reports whether the round
// moved commits or batches either way.
func (y *syncer) round(ctx context.Context) (moved bool) {
	err := y.connect(ctx)
	if locked(err) {
		// No retry opens it: each would cost a passphrase's hashing.
		slog.Error("sync is off until the mount is started with the remote's passphrase or key file", "err", err)
		cloudsync.NoteError(y.s.repo, err)
		y.none = true
		y.settle(err)
		return false
	}
	var st cloudsync.Stats
	if err == nil && y.cs != nil {
		st, err = y.cs.Sync(ctx) // records its own errors
		y.s.metrics.ObserveSync(st, err)
	} else if err != nil && ctx.Err() == nil {
		cloudsync.NoteError(y.s.repo, err)
	}
	if ctx.Err() != nil {
		return false // stopping: the error is the stop's
	}
	if err == nil && y.cs != nil {
		y.collectStore(ctx)
		y.evict(st)
	}
	// Once per outage: a failure's text may differ at every round (a
	// refused connection names a new local port each time), and an
	// offline mount retried every few seconds logged 108 lines in 8
	// minutes. .ledger/sync and ledgerfs status show the latest error.
	switch {
	case err != nil && y.failingSince.IsZero():
		slog.Warn("sync failed; the mount serves local data and retries", "err", err)
		y.failingSince = time.Now()
	case err != nil:
		slog.Debug("sync failed again", "err", err)
	case !y.failingSince.IsZero():
		slog.Info("sync works again", "after", time.Since(y.failingSince).Round(time.Second))
		y.failingSince = time.Time{}
	}
	return st.CommitsUp > 0 || st.CommitsDown > 0 || st.BatchesUp > 0
}

func (y *syncer) connect(ctx context.Context) error {
	if y.cs != nil || y.none {
		return nil
	}
	be, err := y.s.cfg.Remote(ctx, y.s.repo)
	if err != nil {
		return err
	}
	if be == nil {
		y.none = true
		y.settle(errors.New("the repository has no remote"))
		return nil
	}
	cs, err := cloudsync.New(ctx, y.s.repo, y.s.metrics.CountRequests(be), y.s.cfg.Sync)
	if locked(err) {
		y.settle(err)
	}
	if err != nil {
		return err
	}
	cs.Landed = y.s.fsys.HeadMoved
	// A close that lands after a sync brought another device's version
	// of its file keeps that version as a conflict file.
	y.s.journals.KeepUnseen(cs.Unseen)
	cs.Names = y.s.fsys.RemoteNames()
	cs.Watched = true
	y.cs = cs
	y.watched.Store(cs)
	y.settle(nil) // cs fetches from now on (cloudsync.New made it the fetcher)
	slog.Info("syncing", "remote", be.Location(), "device", cs.Device())
	return nil
}

// Fetch is the repository's fetcher until the syncer connects
// (store.Fetcher): a read of content in the remote right after the mount
// serves waits for the connection, up to the fetch timeout, rather than
// fail because the first round has not run yet.
func (y *syncer) Fetch(p *store.Page, d cas.Digest, ahead int64) ([]byte, error) {
	t := time.NewTimer(cmp.Or(y.s.cfg.Sync.FetchTimeout, cloudsync.DefaultFetchTimeout))
	defer t.Stop()
	select {
	case <-y.ready:
	case <-t.C:
		return nil, errors.New("the remote is not connected yet")
	}
	if y.readyErr != nil {
		return nil, y.readyErr
	}
	return y.watched.Load().Fetch(p, d, ahead)
}

// Pending returns what the syncer's fetches hold unstored, once it
// connected (store.Fetcher).
func (y *syncer) Pending(p *store.Page, d cas.Digest, ahead int64) ([]byte, bool) {
	if cs := y.watched.Load(); cs != nil {
		return cs.Pending(p, d, ahead)
	}
	return nil, false
}

// settle ends the wait of reads for the connection: err says why none
// will come.
func (y *syncer) settle(err error) {
	y.readyOnce.Do(func() {
		y.readyErr = err
		if err != nil {
			y.s.repo.DropFetcher(y)
		}
		close(y.ready)
	})
}

// changed tells the syncer, once connected, of a commit of ledger/page: its
// rounds push only pages told of (before, its first round pushes all).
func (y *syncer) changed(ledger, page string) {
	if cs := y.watched.Load(); cs != nil {
		cs.Changed(ledger, page)
	}
}

// joinTimeout bounds the wait for the remote before a new repository is
// served.
const joinTimeout = 15 * time.Second

// joinFirst connects before the mount serves when the repository has no
// ledger yet: it then takes the remote's chunker polynomial before anything
// is written. A page made before it joins keeps the repository's own
// (store.Repository.AdoptPolynomial): it syncs, but shares no pieces with
// the other devices' pages. A remote that does not answer in joinTimeout
// is logged, and the loop retries.
func (y *syncer) joinFirst() error {
	ledgers, err := y.s.repo.Ledgers()
	if err != nil || len(ledgers) > 0 {
		return err
	}
	ctx, cancel := context.WithTimeout(context.Background(), joinTimeout)
	defer cancel()
	if err := y.connect(ctx); locked(err) {
		return err // a mount that could never sync is not served
	} else if err != nil {
		slog.Warn("the remote did not answer before the mount serves; pages made before it answers keep this repository's own chunking, and share no pieces with other machines' pages", "err", err)
		cloudsync.NoteError(y.s.repo, err)
		y.failingSince = time.Now()
	}
	return nil
}

// evictEvery is how often a mount with a cache size checks it when
// nothing changed meanwhile; evictRetry, while the last check left it over
// (pages in use then may be idle now).
const (
	evictEvery = time.Minute
	evictRetry = 2 * time.Second
)

// evict keeps the repository under the mount's cache size, after a round
// that went through, when the round moved something, reads fetched
// contents or a page closed since the last check, or evictEvery passed.
func (y *syncer) evict(st cloudsync.Stats) {
	budget := y.s.cfg.CacheSize
	closes, fetched := y.s.repo.Closes(), y.cs.Fetched()
	wait := evictEvery
	if y.over {
		wait = evictRetry
	}
	if budget == 0 || st == (cloudsync.Stats{}) && closes == y.closes && fetched == y.fetched && time.Since(y.evicted) < wait {
		return
	}
	y.evicted, y.closes, y.fetched = time.Now(), closes, fetched
	y.sizeCache()
	n, freed, over, err := gc.EvictOver(y.s.repo, budget, y.s.fsys.Busy)
	y.over = over
	switch {
	case err != nil:
		slog.Warn("evict pages", "err", err)
	case n > 0:
		slog.Info("evicted pages to stay under --cache-size", "pages", n, "bytes", freed, "cache_size", budget)
	}
}

// stateStoreCollected is the repository's sync state row of the time,
// RFC 3339, the mount last collected the remote store or found another
// device collecting it.
const stateStoreCollected = "store_collected_at"

// collectStore collects the remote store, after a round that went
// through, if CollectStore passed since the last time (of any mount of the
// repository; the first mount with a schedule starts it). A store another
// device collects counts as collected.
func (y *syncer) collectStore(ctx context.Context) {
	every := y.s.cfg.CollectStore
	if every <= 0 {
		return
	}
	v, ok, err := y.s.repo.SyncState(stateStoreCollected)
	if err != nil {
		slog.Warn("collect the remote store", "err", err)
		return
	}
	at, perr := time.Parse(time.RFC3339Nano, string(v))
	if ok && perr == nil && time.Since(at) < every {
		return
	}
	if !ok {
		// The schedule starts with the first mount that has one.
		if err := y.s.repo.SetSyncState(map[string][]byte{stateStoreCollected: []byte(time.Now().UTC().Format(time.RFC3339Nano))}); err != nil {
			slog.Warn("collect the remote store", "err", err)
		}
		return
	}
	start := time.Now()
	cs, err := y.cs.Collect(ctx, cloudsync.CollectOptions{Grace: y.s.cfg.StoreGrace})
	switch {
	case ctx.Err() != nil:
		return // stopping: the next mount collects
	case errors.Is(err, cloudsync.ErrLocked):
		slog.Info("another device is collecting the remote store", "err", err)
	case err != nil:
		slog.Warn("collect the remote store; retried at the next round", "err", err)
		return
	default:
		slog.Info("collected the remote store", "packs", cs.Packs, "unreached", cs.Recorded,
			"deleted", cs.Deleted, "deleted_bytes", cs.DeletedBytes, "took", time.Since(start).Round(time.Millisecond))
	}
	if err := y.s.repo.SetSyncState(map[string][]byte{stateStoreCollected: []byte(time.Now().UTC().Format(time.RFC3339Nano))}); err != nil {
		slog.Warn("collect the remote store", "err", err)
	}
}

// sizeCache gives the cache of fetched pieces what the cache size leaves
// of the repository's disk beside it: pieces go, least recently used
// first, before pages are evicted.
func (y *syncer) sizeCache() {
	c := y.s.cfg.Sync.Cache
	if c == nil {
		return
	}
	rest := y.s.repo.DiskUsage() - c.Size()
	c.SetLimit(int64(y.s.cfg.CacheSize) - rest)
}

// locked reports an error of a remote that the mount has no secret for.
func locked(err error) bool {
	return errors.Is(err, cloudsync.ErrNoSecret) || errors.Is(err, repokey.ErrWrongSecret)
}

// last runs one round after the mount ended, bounded by lastTimeout.
func (y *syncer) last() {
	y.settle(errors.New("the mount ended before it reached its remote"))
	if y.cs == nil {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), lastTimeout)
	defer cancel()
	y.cs.Landed, y.cs.Names = nil, nil // nothing is mounted to update
	if _, err := y.cs.Sync(ctx); err != nil {
		slog.Warn("sync at unmount failed; the next sync sends what is left", "err", err)
	}
	y.cs.Close()
}
