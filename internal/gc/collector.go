package gc

import (
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/dustin/go-humanize"

	"github.com/ledgerfs/ledgerfs/cas"
	"github.com/ledgerfs/ledgerfs/store"
)

// Collector collects a mounted repository's pages in the background: every
// Every, each page changed since its last collection, and soon after a
// page's changes removed After bytes (deleted or replaced content). A page
// is collected only while nobody uses it (no open file, queued change or
// open transaction: Busy), and the collection stops as soon as anyone
// wants the page, to go on later: writers never wait for it. Every 0
// collects only what Removed and Request make due.
type Collector struct {
	Repo *store.Repository
	// Busy reports whether the mount uses a page beyond what the store
	// sees: queued changes, open transactions.
	Busy func(ledger, page string) bool
	// Pinned lists the values the mount's readers of a page hold open
	// (read-only files), which a collection of the page keeps.
	Pinned       func(ledger, page string) []cas.ObjectIdentifier
	Every        time.Duration
	After        uint64
	KeepUnsynced bool
	// Observe, if set, is told of every collection tried: its result, or
	// store.ErrBusy (the page was in use) or its error.
	Observe func(Result, error)

	running sync.Mutex // held by the one collection running
	// preempt counts the callers of exclusively waiting for running: a
	// scheduled collection stops for them.
	preempt atomic.Int32
	mu      sync.Mutex
	// current is the page being collected, since when (Status).
	current      [2]string
	currentSince time.Time
	removed      map[[2]string]uint64
	due          map[[2]string]bool // collect soon
	// reclaim holds the pages collected while readers held them open,
	// whose space is still to give back (Result.ReclaimLater).
	reclaim map[[2]string]bool
	last    map[[2]string]string
	// finished is each page's Result.Done: a scheduled collection of a
	// page left as it was does nothing.
	finished map[[2]string]string
	// ahead holds the prunings for space to run before the collections
	// due (Pressure.Ahead), a page's latest only, until one reports it
	// is done: a page in use is tried again every retry.
	ahead map[[2]string]func() bool
	wake  chan struct{}
	stop  chan struct{}
	done  chan struct{}
	once  sync.Once
}

// retry is how often pages due but busy are tried again: the check of a
// page in use costs a lookup.
const retry = time.Second

func (c *Collector) init() {
	c.once.Do(func() {
		c.removed = map[[2]string]uint64{}
		c.due = map[[2]string]bool{}
		c.reclaim = map[[2]string]bool{}
		c.last = map[[2]string]string{}
		c.finished = map[[2]string]string{}
		c.ahead = map[[2]string]func() bool{}
		c.wake = make(chan struct{}, 1)
		c.stop = make(chan struct{})
		c.done = make(chan struct{})
	})
}

// Removed counts content a page's change removed from its head.
func (c *Collector) Removed(ledger, page string, n uint64) {
	c.init()
	k := [2]string{ledger, page}
	c.mu.Lock()
	c.removed[k] += n
	trigger := c.After > 0 && c.removed[k] >= c.After && !c.due[k]
	if trigger {
		c.due[k] = true
	}
	c.mu.Unlock()
	if trigger {
		c.poke()
	}
}

// Now collects a page (or, ledger empty, every page) at once and returns
// when done: store.ErrBusy if it is in use (its collection stays due).
// Once it has begun, a writer who wants the page waits for it a moment at
// most: the collection gives way, and goes on once the page is left again
// (store.ErrBusy if that takes over 10 s).
func (c *Collector) Now(ledger, page string) error {
	c.init()
	names, err := c.named(ledger, page)
	if err != nil {
		return err
	}
	var errs []error
	for _, k := range names {
		c.mu.Lock()
		c.due[k] = true
		c.mu.Unlock()
		if err := c.collect(k, true); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// named lists the page, or every page.
func (c *Collector) named(ledger, page string) ([][2]string, error) {
	if ledger == "" {
		return c.pages()
	}
	if ok, err := c.Repo.HasPage(ledger, page); err != nil {
		return nil, err
	} else if !ok {
		return nil, fmt.Errorf("page %s/%s: %w", ledger, page, store.ErrNotFound)
	}
	return [][2]string{{ledger, page}}, nil
}

// Request makes a page (or, ledger empty, every page) due now.
func (c *Collector) Request(ledger, page string) error {
	c.init()
	names, err := c.named(ledger, page)
	if err != nil {
		return err
	}
	c.mu.Lock()
	for _, k := range names {
		c.due[k] = true
	}
	c.mu.Unlock()
	c.poke()
	return nil
}

func (c *Collector) poke() {
	select {
	case c.wake <- struct{}{}:
	default:
	}
}

// Run collects until Close.
func (c *Collector) Run() {
	c.init()
	defer close(c.done)
	var tick <-chan time.Time // none when Every is 0
	if c.Every > 0 {
		every := time.NewTicker(c.Every)
		defer every.Stop()
		tick = every.C
	}
	again := time.NewTicker(retry)
	defer again.Stop()
	for {
		select {
		case <-c.stop:
			return
		case <-tick:
			c.scheduled()
		case <-again.C:
		case <-c.wake:
		}
		c.pruneAhead()
		c.collectDue()
	}
}

// soon queues fn, a pruning of the page for space, for Run.
func (c *Collector) soon(k [2]string, fn func() bool) {
	c.init()
	c.mu.Lock()
	c.ahead[k] = fn
	c.mu.Unlock()
	c.poke()
}

// pruneAhead runs the prunings for space queued, one at a time, on the
// pages nobody uses; the others, and those that stopped, stay queued.
func (c *Collector) pruneAhead() {
	c.mu.Lock()
	ahead := c.ahead
	c.ahead = map[[2]string]func() bool{}
	c.mu.Unlock()
	for k, fn := range ahead {
		done := false
		if !c.stopped() && (c.Busy == nil || !c.Busy(k[0], k[1])) {
			c.running.Lock()
			done = fn()
			c.running.Unlock()
		}
		if !done {
			c.mu.Lock()
			if _, newer := c.ahead[k]; !newer {
				c.ahead[k] = fn
			}
			c.mu.Unlock()
		}
	}
}

// Close stops Run, interrupting a collection, and waits for it.
func (c *Collector) Close() {
	c.init()
	select {
	case <-c.stop:
	default:
		close(c.stop)
	}
	<-c.done
}

// exclusively runs fn with no other collection running: one running in
// the background stops at its next check, to go on later.
func (c *Collector) exclusively(fn func()) {
	c.preempt.Add(1)
	c.running.Lock()
	c.preempt.Add(-1)
	defer c.running.Unlock()
	fn()
}

// preempted reports whether a collection of the background should stop:
// the mount stops, or a pruning for space waits.
func (c *Collector) preempted() bool { return c.preempt.Load() > 0 || c.stopped() }

func (c *Collector) stopped() bool {
	select {
	case <-c.stop:
		return true
	default:
		return false
	}
}

// scheduled makes due every page changed since its last collection: closed
// after it, or open now.
func (c *Collector) scheduled() {
	names, err := c.pages()
	if err != nil {
		slog.Warn("collection: list pages", "err", err)
		return
	}
	usage, err := c.Repo.Usage()
	if err != nil {
		slog.Warn("collection: read page usage", "err", err)
		return
	}
	closed := map[[2]string]time.Time{}
	byID := map[string]time.Time{}
	for _, u := range usage {
		byID[u.Ledger+"\x00"+string(u.ID[:])] = u.Closed
	}
	for _, k := range names {
		id := store.PageIDFor(k[1])
		closed[k] = byID[k[0]+"\x00"+string(id[:])]
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, k := range names {
		at, err := c.Repo.Collected(k[0], k[1])
		if err != nil {
			continue
		}
		if cl := closed[k]; cl.IsZero() || cl.After(at) {
			c.due[k] = true
		}
	}
}

func (c *Collector) pages() ([][2]string, error) {
	ledgers, err := c.Repo.Ledgers()
	if err != nil {
		return nil, err
	}
	var out [][2]string
	for _, l := range ledgers {
		ps, err := c.Repo.Pages(l)
		if err != nil {
			return nil, err
		}
		for _, p := range ps {
			out = append(out, [2]string{l, p})
		}
	}
	return out, nil
}

// collectDue collects the due pages that are idle; the others stay due.
func (c *Collector) collectDue() {
	c.mu.Lock()
	var due [][2]string
	for k := range c.due {
		due = append(due, k)
	}
	c.mu.Unlock()
	slices.SortFunc(due, func(a, b [2]string) int { return strings.Compare(a[0]+"/"+a[1], b[0]+"/"+b[1]) })
	for _, k := range due {
		if c.stopped() {
			return
		}
		c.collect(k, false)
	}
}

// collect collects a due page if it is idle, and records what it did; one
// collection runs at a time. A page in use stays due (store.ErrBusy).
func (c *Collector) collect(k [2]string, wait bool) error {
	c.running.Lock()
	defer c.running.Unlock()
	if !wait {
		// The background's list of due pages was taken before it waited
		// for running: an explicit request may have collected the page
		// meanwhile, and collecting it again would only show in .collect.
		c.mu.Lock()
		due := c.due[k]
		c.mu.Unlock()
		if !due {
			return nil
		}
	}
	if !wait && c.Busy != nil && c.Busy(k[0], k[1]) {
		// An explicit request waits a while for the page instead
		// (CollectPage).
		return fmt.Errorf("page %s/%s: %w", k[0], k[1], store.ErrBusy)
	}
	c.mu.Lock()
	c.current, c.currentSince = k, time.Now()
	c.mu.Unlock()
	if wait {
		// An explicit request (.collect): its user may wait a while.
		slog.Info("collecting", "page", k[0]+"/"+k[1])
	}
	defer func() {
		c.mu.Lock()
		c.currentSince = time.Time{}
		c.mu.Unlock()
	}()
	if err := c.reclaimPending(k, wait); err != nil {
		return err
	}
	c.mu.Lock()
	finished := c.finished[k]
	c.mu.Unlock()
	var pinned func() []cas.ObjectIdentifier
	if c.Pinned != nil {
		pinned = func() []cas.ObjectIdentifier { return c.Pinned(k[0], k[1]) }
	}
	var busy func() bool
	if c.Busy != nil {
		busy = func() bool { return c.Busy(k[0], k[1]) }
	}
	r, err := CollectPage(c.Repo, k[0], k[1], PageOptions{KeepUnsynced: c.KeepUnsynced, Stop: c.preempted, Gentle: true, Done: finished, Wait: wait, Pinned: pinned, Busy: busy})
	switch {
	case errors.Is(err, store.ErrBusy) || errors.Is(err, ErrJournals) || err == nil && r.Stopped:
		err = fmt.Errorf("page %s/%s: %w", k[0], k[1], store.ErrBusy) // later
		if c.Observe != nil {
			c.Observe(r, err)
		}
		return err
	case errors.Is(err, store.ErrNotFound):
	case err != nil:
		slog.Warn("collection failed", "page", k[0]+"/"+k[1], "err", err)
	default:
		slog.Info("collected", "page", k[0]+"/"+k[1], "pruned", r.Pruned, "commits", r.Commits, "deleted", r.Deleted, "bytes", r.Freed, "took", r.Took, "gave_way", r.GaveWay)
	}
	if c.Observe != nil {
		c.Observe(r, err)
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if r.ReclaimLater {
		c.reclaim[k] = true // stays due
	} else {
		delete(c.due, k)
	}
	c.removed[k] = 0
	if r.Unchanged {
		return nil
	}
	if err == nil {
		c.finished[k] = r.Done
	}
	if err != nil {
		c.last[k] = fmt.Sprintf("%s failed: %v", time.Now().UTC().Format(time.RFC3339), err)
	} else {
		c.last[k] = fmt.Sprintf("%s pruned %d of %d commits, deleted %d of %d pieces (%s of %s), compressed %d (saving %s) in %s",
			time.Now().UTC().Format(time.RFC3339), r.Pruned, r.Commits, r.Deleted, r.Objects,
			humanize.IBytes(uint64(r.Freed)), humanize.IBytes(uint64(r.Bytes)), r.Compressed, humanize.IBytes(uint64(r.CompressSaved)), r.Took.Round(time.Millisecond))
		if r.GaveWay > 0 {
			c.last[k] += fmt.Sprintf(", giving way to writers %d times", r.GaveWay)
		}
		switch {
		case r.ReclaimLater && r.GaveWay > 0:
			c.last[k] += "; the space is given back once its writers pause"
		case r.ReclaimLater:
			c.last[k] += "; the space is given back once the page's open files are closed"
		}
	}
	return err
}

// reclaimPending gives back the space of a page collected while readers
// held it, if it has any to give back: store.ErrBusy while they still do.
func (c *Collector) reclaimPending(k [2]string, wait bool) error {
	c.mu.Lock()
	pending := c.reclaim[k]
	c.mu.Unlock()
	if !pending {
		return nil
	}
	if !wait && c.Repo.UnusedFor(k[0], k[1]) < reclaimQuiet {
		return fmt.Errorf("page %s/%s: %w", k[0], k[1], store.ErrBusy) // later, when quiet
	}
	err := c.Repo.Reclaim(k[0], k[1])
	switch {
	case errors.Is(err, store.ErrNotFound):
	case errors.Is(err, store.ErrBusy) && wait:
		return nil // readers still hold it: collect, and the space waits for them
	case err != nil:
		if !errors.Is(err, store.ErrBusy) {
			slog.Warn("giving back a collected page's space failed", "page", k[0]+"/"+k[1], "err", err)
		}
		return fmt.Errorf("page %s/%s: %w", k[0], k[1], store.ErrBusy) // later
	}
	c.mu.Lock()
	delete(c.reclaim, k)
	c.mu.Unlock()
	return nil
}

// Status is the text of the mount's .collect file: each page's last
// collection, and the pages due.
func (c *Collector) Status() []byte {
	c.init()
	c.mu.Lock()
	defer c.mu.Unlock()
	var b strings.Builder
	if !c.currentSince.IsZero() {
		fmt.Fprintf(&b, "%s/%s: collecting since %s\n", c.current[0], c.current[1], c.currentSince.UTC().Format(time.RFC3339))
	}
	keys := slices.Collect(maps.Keys(c.last))
	slices.SortFunc(keys, func(a, b [2]string) int { return strings.Compare(a[0]+"/"+a[1], b[0]+"/"+b[1]) })
	for _, k := range keys {
		fmt.Fprintf(&b, "%s/%s: %s\n", k[0], k[1], c.last[k])
	}
	for k := range c.due {
		fmt.Fprintf(&b, "%s/%s: due\n", k[0], k[1])
	}
	return []byte(b.String())
}
