package gc

import (
	"context"
	"errors"
	"log/slog"
	"sync"
	"time"

	"github.com/dustin/go-humanize"

	"github.com/ledgerfs/ledgerfs/cas"
	"github.com/ledgerfs/ledgerfs/internal/retention"
	"github.com/ledgerfs/ledgerfs/store"
)

// PressureKeep is how many of a page's newest commits a collection for
// space keeps, whatever the retention policy says: a write that fits on
// the filesystem must not fail for history, and the newest versions stay
// browsable. When that leaves the filesystem short still, it keeps the
// head alone: the commit before a delete holds every file it deleted, and
// deleting files must make room for new ones.
const PressureKeep = 2

// Pressure prunes history when the repository's filesystem runs short, as
// APFS thins local snapshots: a page about to be written while less than
// Below bytes (plus what the write is expected to take) are free on that
// filesystem is first collected keeping only its PressureKeep newest
// commits (and, with KeepUnsynced, every unsynced one; heads always). Open
// transactions and files open for writing keep their page from it, as from
// any collection; readers do not. A page's space comes back only while
// nothing holds its db, so the decision is made before a file is opened:
// a file's rewrite is expected to take about its present size.
type Pressure struct {
	Repo         *store.Repository
	Below        uint64
	KeepUnsynced bool
	// Pinned: see Collector.Pinned.
	Pinned func(ledger, page string) []cas.ObjectIdentifier
	// Collector, if set, is the mount's background collector: a pruning
	// for space stops its collection and keeps it off the page until the
	// space is given back, which a collection taking the page between
	// the pruning and the giving back would delay past the write.
	Collector *Collector

	mu     sync.Mutex
	logged map[[2]string]bool // pages whose pruning for space was logged
	// after is the free space each page's last pruning for space left,
	// and done its Result.Done: a page is pruned again only once writes
	// have taken Step more of the filesystem, so that a disk filled
	// with live data, not history, does not collect a page at every
	// open for writing.
	after map[[2]string]uint64
	done  map[[2]string]string
	// removed is the content each page's commits removed from its head
	// since its last pruning for space (Removed).
	removed map[[2]string]uint64
}

// Removed counts content a page's commit removed from its head (deleted or
// replaced). The history holding it is what a pruning frees: a page short
// of space that removed a Step of content since its last pruning is due
// again, however little writes took since. (After a disk was filled to
// ENOSPC, files deleted and new ones written, the first new one failed
// when the fill had stopped within a Step of the last pruning.)
func (s *Pressure) Removed(ledger, page string, n uint64) {
	if s == nil {
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.removed == nil {
		s.removed = map[[2]string]uint64{}
	}
	s.removed[[2]string{ledger, page}] += n
}

// step is how much more of the filesystem writes must take before a page
// is pruned for space again.
func (s *Pressure) step() uint64 { return max(s.Repo.Reserve(), s.Below/8) }

// Due reports whether Yield would collect the page now, with its writer
// waiting: the page is due (see due) and less than twice the reserve, plus
// need, is free, so that the write would fail without it (sized: need is
// the size of the file being rewritten; else a new file's, not known). Short of that
// (Below, plus need, not free), Ahead has the mount's collector prune the
// page in the background instead, and the writer goes on. The caller
// settles the page before Yield only when Due: settling at every create
// while the disk stayed short made each wait for the one before it to
// commit (420 creates/s against 1,300).
func (s *Pressure) Due(ledger, page string, need uint64, sized bool) bool {
	free, ok := s.due(ledger, page, need)
	return ok && s.urgent(free, need, sized)
}

// urgent reports whether a write of need bytes, with free bytes free, must
// wait for its page's pruning: without it, it would come within a reserve
// of failing. A write of a size not known (sized false: a new file) must:
// after deletes on a full disk, the first new file failed while its page
// was pruned beside it. With no collector to prune in the background, any
// due pruning is urgent.
func (s *Pressure) urgent(free, need uint64, sized bool) bool {
	return s.Collector == nil || !sized || free < 2*s.Repo.Reserve()+need
}

// due reports whether the page is due for pruning: less than Below bytes,
// plus need, are free on the repository's filesystem (by a statfs made
// now, a few µs at an open for writing: a figure taken while the last
// write was still landing says too much), and the page was not pruned for
// space since writes took a step more of it, or since its commits removed
// a step of content; and the space free now.
func (s *Pressure) due(ledger, page string, need uint64) (uint64, bool) {
	if s == nil || s.Below == 0 {
		return 0, false
	}
	free, err := s.Repo.Free()
	if err != nil || free >= s.Below+need {
		return free, false
	}
	k := [2]string{ledger, page}
	s.mu.Lock()
	after, pruned := s.after[k]
	removed := s.removed[k]
	s.mu.Unlock()
	return free, !pruned || free+s.step() <= after || removed >= s.step()
}

// Ahead has the mount's collector prune the page for space in the
// background if it is due and its writer need not wait (Due says not):
// the pruning stops as soon as anyone wants the page, as any background
// collection does, and is tried again at the page's next open for
// writing. Pruning for space held a writer 21 s while fio wrote.
func (s *Pressure) Ahead(ledger, page string, need uint64, sized bool) {
	free, ok := s.due(ledger, page, need)
	if !ok || s.urgent(free, need, sized) {
		return
	}
	s.Collector.soon([2]string{ledger, page}, func() bool {
		free, ok := s.due(ledger, page, need)
		if !ok {
			return true // room came back, or pruned since
		}
		return s.prune(ledger, page, need, free, false)
	})
}

// Yield collects the page for space if Due says so, for a write expected
// to take need bytes; its caller waits. The caller must not hold the page:
// a page in use is left as it is.
func (s *Pressure) Yield(ledger, page string, need uint64, sized bool) {
	free, ok := s.due(ledger, page, need)
	if !ok || !s.urgent(free, need, sized) {
		return
	}
	collect := func() { s.prune(ledger, page, need, free, true) }
	if s.Collector != nil {
		s.Collector.exclusively(collect)
	} else {
		collect()
	}
}

// prune collects the page keeping its PressureKeep newest commits, or its
// head alone if that leaves the filesystem short still, and records it.
// wait: its writer waits, and nobody's wanting the page stops it; else it
// stops for anyone, to be tried again. It reports whether it is done with
// the page: false if the page was in use, or it stopped. Called with no
// other collection running.
func (s *Pressure) prune(ledger, page string, need, free uint64, wait bool) bool {
	k := [2]string{ledger, page}
	s.mu.Lock()
	done := s.done[k]
	s.mu.Unlock()
	var pinned func() []cas.ObjectIdentifier
	if s.Pinned != nil {
		pinned = func() []cas.ObjectIdentifier { return s.Pinned(ledger, page) }
	}
	var stop func() bool
	if !wait && s.Collector != nil {
		stop = s.Collector.preempted
	}
	start := time.Now()
	opts := func(keep int, done string) PageOptions {
		return PageOptions{Policy: &retention.Policy{Last: keep}, KeepUnsynced: s.KeepUnsynced, Wait: wait, Reclaim: true,
			Pinned: pinned, Done: done, NoCompress: true, Stop: stop}
	}
	kept := PressureKeep
	r, err := CollectPage(s.Repo, ledger, page, opts(PressureKeep, done))
	if err == nil && !r.Stopped && s.free() < s.Below+need {
		// Short still: what the newest commits but the head hold (the
		// files a delete dropped, the version a rewrite replaced) goes.
		more, moreErr := CollectPage(s.Repo, ledger, page, opts(1, ""))
		err = moreErr
		kept = 1
		r.Pruned += more.Pruned
		r.Deleted += more.Deleted
		r.Freed += more.Freed
		r.Done = more.Done
		r.Stopped = more.Stopped
	}
	switch {
	case errors.Is(err, store.ErrBusy) || errors.Is(err, ErrJournals):
		return false
	case errors.Is(err, store.ErrNotFound):
		return true
	case err != nil:
		slog.Warn("pruning history for space failed", "page", ledger+"/"+page, "err", err)
		return true
	case r.Stopped:
		return false // someone wanted the page
	}
	s.mu.Lock()
	if s.after == nil {
		s.after, s.done, s.logged = map[[2]string]uint64{}, map[[2]string]string{}, map[[2]string]bool{}
	}
	s.after[k] = s.free()
	delete(s.removed, k)
	if r.Done != "" {
		s.done[k] = r.Done
	}
	first := !s.logged[k] && r.Pruned > 0
	s.logged[k] = s.logged[k] || r.Pruned > 0
	s.mu.Unlock()
	if r.Pruned == 0 {
		return true
	}
	level := slog.LevelDebug
	if first {
		level = slog.LevelWarn // once per page: the log says what went and why
	}
	slog.Log(context.Background(), level, "filesystem nearly full: pruned history beyond the newest commits",
		"page", ledger+"/"+page, "kept", kept, "pruned", r.Pruned, "of", r.Commits,
		"freed", humanize.IBytes(uint64(r.Freed)), "free before", humanize.IBytes(free),
		"free after", humanize.IBytes(s.free()), "below", humanize.IBytes(s.Below), "took", time.Since(start).Round(time.Millisecond),
		"writer waited", wait)
	return true
}

// free is the space free now, for what a pruning left.
func (s *Pressure) free() uint64 {
	free, _ := s.Repo.Free()
	return free
}
