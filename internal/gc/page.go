package gc

import (
	"errors"
	"fmt"
	"time"

	"github.com/ledgerfs/ledgerfs/cas"
	"github.com/ledgerfs/ledgerfs/internal/retention"
	"github.com/ledgerfs/ledgerfs/store"
)

// PolicyOf returns the policy that applies to a page: the most specific
// one stored (page, ledger, repository), else retention.Default.
func PolicyOf(repo *store.Repository, ledger, page string) (retention.Policy, store.Scope, error) {
	text, scope, err := repo.Retention(ledger, page)
	if err != nil || scope == store.ScopeNone {
		return retention.Default, scope, err
	}
	p, err := retention.Parse(text)
	if err != nil {
		return p, scope, fmt.Errorf("the %s's retention policy %q: %w", scope, text, err)
	}
	return p, scope, nil
}

// KeepPrefix is the page's sync_metadata rows (store.Page.SyncMetadata)
// keep/DEVICE: the page's retention policy on another device, as its last
// batch of the page said.
const KeepPrefix = "keep/"

// withOthers returns the union of policy and the page's policies on the
// other devices that sync it. A policy this ledgerfs cannot read (a newer
// one's) keeps everything.
func withOthers(p *store.Page, policy retention.Policy) (retention.Policy, error) {
	err := p.ScanSyncMetadata(KeepPrefix, func(_ string, v []byte) error {
		o, err := retention.Parse(string(v))
		if err != nil {
			o = retention.Policy{All: true}
		}
		policy = policy.Union(o)
		return nil
	})
	return policy, err
}

// PageOptions steer CollectPage.
type PageOptions struct {
	// Policy, if set, replaces the page's stored policy.
	Policy *retention.Policy
	DryRun bool
	// KeepUnsynced: see Options.
	KeepUnsynced bool
	// Stop, polled, ends the collection early; so does anyone's wanting
	// the page.
	Stop     func() bool
	Progress func(phase string, done, total int64)
	// Gentle: see Options.
	Gentle bool
	// Reclaim gives space back even if this collection deleted nothing
	// (an earlier one may have, and stopped before), at once and for
	// sure: with the db opened alone (store.Repository.ReclaimAlone).
	Reclaim bool
	// Wait: nobody's wanting the page ends the collection; they wait for
	// it (an explicit request, .collect or ledgerfs gc).
	Wait bool
	// Done, if set, is the Result.Done of the page's last collection: if
	// the page and its policy are as they were then, nothing is done.
	Done string
	// Pinned, if set, lists the values the page's readers hold open, once
	// the collection holds the page (see Options.Pinned).
	Pinned func() []cas.ObjectIdentifier
	// Busy, if set, reports whether the page is used beyond what the store
	// sees (the mount's open transactions): a collection that finds it so
	// once it holds the page gives it back, with store.ErrBusy.
	Busy func() bool
	// NoCompress leaves the pieces written since the last collection
	// uncompressed, for a later one: a pruning for space runs while a
	// writer waits, and compressing a large file took most of its time.
	NoCompress bool
}

// CollectPage collects one idle page of repo with its policy and has the
// store give the space back. A page in use gives store.ErrBusy.
func CollectPage(repo *store.Repository, ledger, page string, o PageOptions) (Result, error) {
	// An evicted page holds nothing here: opening it would bring it back.
	if ev, err := repo.Evicted(ledger, page); err != nil || ev {
		return Result{Unchanged: true}, err
	}
	policy, _, err := PolicyOf(repo, ledger, page)
	if err != nil {
		return Result{}, err
	}
	if o.Policy != nil {
		policy = *o.Policy
	}
	// A repository that syncs never prunes what is not in its remote yet.
	syncs, err := repo.Syncs()
	if err != nil {
		return Result{}, err
	}
	o.KeepUnsynced = o.KeepUnsynced || syncs
	// take takes the page alone, after its users' turn; an explicit
	// collection waits for it, as writers who come back without a pause
	// leave it idle for moments only: it is handed over at one.
	take := func(turn time.Duration) (*store.Page, error) {
		var p *store.Page
		var err error
		if o.Wait {
			p, err = repo.AcquireIdleWithin(ledger, page, turn, resumeWait)
		} else {
			p, err = repo.AcquireIdle(ledger, page)
		}
		if err == nil && o.Busy != nil && o.Busy() {
			repo.ReleaseIdle(p)
			p, err = nil, fmt.Errorf("page %s/%s: %w", ledger, page, store.ErrBusy)
		}
		return p, err
	}
	p, err := take(0)
	if err != nil {
		return Result{}, err
	}
	if syncs && o.Policy == nil {
		// What any device's policy keeps stays here, so that the
		// store's collection, which keeps what this device holds,
		// keeps it too. A policy given for this collection is taken
		// as given.
		policy, err = withOthers(p, policy)
		if err != nil {
			repo.ReleaseIdle(p)
			return Result{}, err
		}
	}
	head, err := p.Head()
	if err != nil {
		repo.ReleaseIdle(p)
		return Result{}, err
	}
	compressing, err := repo.Compression()
	if err != nil {
		repo.ReleaseIdle(p)
		return Result{}, err
	}
	done := fmt.Sprintf("%x %s compression=%v", head.ID[:], policy, compressing)
	if o.Done != "" && o.Done == done {
		// Nothing to do: no commit since, and the same policy, whose
		// rules count from the commits' times, not from now.
		repo.ReleaseIdle(p)
		return Result{Unchanged: true, Done: done}, nil
	}
	c := newCollection(Options{
		Policy:       policy,
		DryRun:       o.DryRun,
		KeepUnsynced: o.KeepUnsynced,
		Progress:     o.Progress,
		Gentle:       o.Gentle,
	})
	compressed := o.DryRun || o.NoCompress
	var pass compressPass
	for {
		// Someone wanting the page stops the collection; an explicit
		// one goes on once they are done, after a stretch of work, so
		// that writers coming one after another cannot starve it.
		began := time.Now()
		yield := func() bool { return p.Yielding() && (!o.Wait || time.Since(began) >= minStretch) }
		c.o.Stop = func() bool { return yield() || o.Stop != nil && o.Stop() }
		if o.Pinned != nil {
			c.o.Pinned = o.Pinned()
		}
		if !c.done() {
			err = c.run(p)
		}
		if err == nil && c.done() && !compressed {
			pace := &pacer{gentle: o.Gentle}
			compressed, err = compress(repo, p, &c.r, &pass, func() bool {
				pace.pace()
				return c.o.Stop()
			})
			// An explicit collection goes on compressing; a background
			// one leaves the rest for its next.
			compressed = compressed || !o.Wait
			c.r.Stopped = !compressed
		}
		repo.ReleaseIdle(p)
		if err != nil || !c.r.Stopped || !o.Wait || o.Stop != nil && o.Stop() {
			break
		}
		c.r.GaveWay++
		step(p, "gave way")
		if p, err = take(minStretch); err != nil {
			return c.r, err
		}
	}
	r := c.r
	if err != nil || o.DryRun {
		return r, err
	}
	// Deleted rows, and raw rows compression replaced, are space to give
	// back. That takes the page's db for a compaction nobody can stop: a
	// background collection leaves it to the collector's next try, which
	// waits for a quiet page (reclaimPending), rather than hold a writer
	// who comes back every moment.
	switch worth := r.Deleted > 0 || r.Compressed > 0 || o.Reclaim; {
	case !worth || r.Stopped:
	case o.Gentle && !o.Wait, r.GaveWay > 0 && !o.Reclaim:
		// Writers kept coming during an explicit collection too:
		// closing the db would hold them (100-200 ms with a loop of
		// closes on 2 vCPUs). The space comes back at a quiet moment.
		r.ReclaimLater = true
	default:
		start := time.Now()
		reclaim := func() error { return repo.Reclaim(ledger, page) }
		if o.Reclaim {
			reclaim = func() error { return repo.ReclaimAlone(ledger, page) }
		}
		if o.Wait {
			// An explicit request gives the space back before it
			// returns: users on their way out (a release after close,
			// a getattr's read of the tree) are waited for.
			err = repo.WhileBusy(ledger, page, start.Add(reclaimWait), reclaim)
		} else {
			err = reclaim()
		}
		if errors.Is(err, store.ErrBusy) {
			// Readers hold the page open: its db cannot be reopened
			// to compact it. What was pruned and deleted stays so;
			// the space is for a later Reclaim.
			r.ReclaimLater, err = true, nil
		}
		if err != nil {
			return r, err
		}
		r.Took += time.Since(start)
	}
	if r.Stopped {
		return r, nil
	}
	r.Done = done
	return r, repo.SetCollected(ledger, page, time.Now())
}

// minStretch is how long an explicit collection works on a page before it
// gives way to a writer who wants it (the longest a writer waits for it,
// give or take a step: a batch of deletes), and how long the page's users
// have it before the collection goes on.
const minStretch = 20 * time.Millisecond

// resumeWait bounds how long an explicit collection that gave way waits
// for the page to be left again before it gives up (store.ErrBusy).
const resumeWait = 10 * time.Second

// reclaimQuiet is how long nobody must have used a page before the
// collector gives its space back (reclaimPending).
const reclaimQuiet = 2 * time.Second

// reclaimWait bounds how long an explicit collection waits for its page's
// users to go before giving its space back; readers that stay leave it
// for later (Result.ReclaimLater).
const reclaimWait = 10 * time.Second

// compress offers the pieces written since the page's last collection to
// compression (store.Page.CompressNew), so that writes never wait for it,
// from the piece a stopped pass left off at (*from) on. It reports whether
// the pass went through them all.
func compress(repo *store.Repository, p *store.Page, r *Result, pass *compressPass, stop func() bool) (bool, error) {
	since, err := repo.CompressedUpTo(p.Ledger, p.Name)
	if err != nil {
		return false, err
	}
	start := time.Now()
	upTo, stopped, n, saved, err := p.CompressNew(since, pass.from, stop)
	r.Compressed += n
	r.CompressSaved += saved
	r.Took += time.Since(start)
	if err != nil {
		return false, err
	}
	if pass.upTo == 0 {
		pass.upTo = upTo // what was written after the pass began is for the next
	}
	if pass.from = stopped; stopped != "" {
		return false, nil
	}
	return true, repo.SetCompressedUpTo(p.Ledger, p.Name, pass.upTo)
}

// compressPass is where a compression pass stopped: the piece to go on
// from, and the db's version when it began.
type compressPass struct {
	from cas.Digest
	upTo uint64
}
