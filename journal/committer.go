package journal

import (
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/ledgerfs/ledgerfs/store"
)

// Committer commits a page's ordinary writes through implicit journals, with
// group commit: changes that arrive while a commit is running go into the
// next implicit journal, and all of them become one commit when the running
// one ends.
//
// Apply returns once its changes are committed, so a reader that comes after
// it sees them. Queue returns once its changes are recorded in the journal,
// where recovery finds them after a crash, and commits them in the
// background, waiting up to batchDelay for more: a close that does not wait
// for its commit lets a stream of closes share one.
//
// Commits run on their own goroutine and are never abandoned halfway: a
// caller that gives up waiting (an interrupted FUSE request) leaves its
// changes to be committed all the same.
type Committer struct {
	p *store.Page
	e *Engine

	mu      sync.Mutex
	cur     *Journal
	ops     int           // changes in cur
	since   time.Time     // when cur got its first change
	last    time.Time     // when cur got its latest change
	stamp   int64         // the time (Unix ns) that change gives the commit (Engine.stampAt)
	waiters []chan error  // wait for cur's commit
	done    []func(error) // called after cur's commit
	idle    []chan error  // wait until nothing is queued
	running bool
	urgent  bool // someone waits for cur: commit it without delay
	synced  bool // a waiter asked for the commit to reach the disk
	kick    chan struct{}
	// err is the failure of a commit nobody waited for; the next Wait or
	// Apply returns it.
	err error
	// delay and maxOps bound the growth of the next batch (see pace),
	// set by cost, the time of the recent commits.
	delay  time.Duration
	maxOps int
	cost   time.Duration
}

// CommitterFor returns the page's committer, made on first use; Close
// drops it.
func (e *Engine) CommitterFor(p *store.Page) *Committer {
	if c, ok := e.committers.Load(p); ok {
		return c.(*Committer)
	}
	d, n := pace(0)
	c, _ := e.committers.LoadOrStore(p, &Committer{p: p, e: e, kick: make(chan struct{}, 1), delay: d, maxOps: n})
	return c.(*Committer)
}

// Close waits for the page's queued changes to be committed, drops its
// committer and collects the pieces no commit took. It is the store's
// OnClose hook: a page with no open file may be closed while a change
// queued at a close has yet to commit.
func (e *Engine) Close(p *store.Page) error {
	if c, ok := e.committers.LoadAndDelete(p); ok {
		if err := c.(*Committer).Wait(); err != nil {
			return err
		}
	}
	return e.collectAtClose(p)
}

// collectAtClose deletes the pieces of values that no commit took — a file
// written and removed before its close, a write cut short — which would
// otherwise take space until the page's next open. Nothing writes a page
// while it closes, and with no journal left nothing else reaches them.
func (e *Engine) collectAtClose(p *store.Page) error {
	if !p.Writable() {
		return nil
	}
	if has, err := p.HasJournals(); err != nil || has {
		return err
	}
	if err := e.collectTransient(p); err != nil {
		return fmt.Errorf("collect at close: %w", err)
	}
	return nil
}

// maxImplicitOps is the largest group of changes that goes through the
// implicit journal: its rows must land in one db transaction, or a crash
// could leave part of the group for recovery to commit. A larger group is
// applied as a transaction, on the head it began from.
const maxImplicitOps = MaxQueued

// MaxQueued is the most changes one call may queue and still go through
// the implicit journal. Access times (Op.Atime) must: applied in a larger
// group, on a transaction's base, a concurrent change could be overwritten.
const MaxQueued = 256

// A queued batch is committed once it holds batchOps changes, once
// batchDelay has passed since its first change or batchQuiet since its
// latest, or as soon as someone waits for it. A commit rewrites every tree
// node on the paths to the keys it changes; shared by a stream of closes or
// unlinks, it costs each a fraction, the smaller the more of them share a
// node. Nobody waits for the delay (a waiter hurries the batch) and a crash
// finds the batch in the journal, so it is set by what it saves. rm -rf of
// 100,000 entries (in inode order, so every unlink a different leaf of ~25
// KiB) took 36 s with 40 ms batches of ~90 unlinks and 25 s with 200 ms
// (mount CPU 41 -> 25 s). Creates of 4 KiB files cost the mount 8 % less
// CPU at 200 ms. A batch nothing joins for batchQuiet is done growing: a
// page written once then left kept its db open for the whole delay, and
// touching 1,000 pages one after another peaked at 184-189 MiB of RSS
// instead of 135 (135 with batchQuiet).
//
// A batch whose changes are scattered over a large tree rewrites most of
// its leaves however few changes it holds, so the cost of the last commit
// sets the pace: the next batch may grow for paceFactor times as long as
// that commit took (and hold as many more changes), up to maxBatchDelay:
// commits then take about a tenth of the time at most, whatever the
// tree's size. Nobody who waits is delayed by it. rm -rf of 100,000
// entries in inode order (random in key order: every batch rewrote most of
// the ~390 leaves) took 41-56 s in four runs with batches of 200 ms and
// 1,024 changes, 31-47 s paced (mount CPU 43-61 s against 31-49 s); in key
// order, 25-33 s either way.
const (
	batchDelay    = 200 * time.Millisecond
	batchQuiet    = 40 * time.Millisecond
	batchOps      = 1024
	paceFactor    = 10
	maxBatchDelay = 2 * time.Second
)

// pace returns how long a batch may grow, and how many changes it may
// hold, after a commit that took took.
func pace(took time.Duration) (time.Duration, int) {
	d := min(max(batchDelay, paceFactor*took), maxBatchDelay)
	return d, int(batchOps * (d / batchDelay))
}

// Apply records ops in the current implicit journal and waits until they are
// committed; with sync, also until the commit is on disk. Its error includes
// the failure of an earlier queued commit. A larger group of
// changes (a directory rename) commits through its own explicit journal,
// which a crash discards whole. With no ops, it waits for what is queued,
// or with sync makes it durable without waiting (Sync).
func (c *Committer) Apply(sync bool, ops ...Op) error {
	if len(ops) == 0 {
		if sync {
			return c.Sync()
		}
		return c.Wait()
	}
	if len(ops) > maxImplicitOps {
		if err := c.Wait(); err != nil {
			return err
		}
		return c.applyExplicit(sync, ops)
	}
	ch := make(chan error, 1)
	if err := c.record(ops, nil, ch, nil, sync); err != nil {
		return err
	}
	return c.reported(<-ch)
}

// reported joins err with the failure of a queued commit nobody has been
// told of yet.
func (c *Committer) reported(err error) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	err = errors.Join(err, c.err)
	c.err = nil
	return err
}

// Queue records ops in the current implicit journal and returns; done (if
// not nil) is called on the committer's goroutine once they are committed,
// if Queue returned nil. done must not wait for anything a caller of Apply
// or Wait may hold.
func (c *Committer) Queue(done func(error), ops ...Op) error {
	return c.QueueWith(nil, done, ops...)
}

// QueueWith is Queue with the journal rows landing through commit, with
// rows of its own (see Journal.ApplyWith): a close's value and its journal
// entry in one db transaction.
func (c *Committer) QueueWith(commit CommitFunc, done func(error), ops ...Op) error {
	if len(ops) > maxImplicitOps {
		if commit != nil {
			// The value's pieces alone; the rows go through Apply.
			if err := commit("", nil); err != nil {
				return err
			}
		}
		err := c.Apply(false, ops...)
		if err == nil && done != nil {
			done(nil)
		}
		return err
	}
	return c.record(ops, commit, nil, done, false)
}

// Sync makes every change recorded before it durable, and returns without
// waiting for their commit: no commit runs inside a caller's fsync. The
// changes go on through the sync log alone when it holds every change since
// the db's last sync, else through a checkpoint, which writes the rows the
// log stood in for (the journal's metadata and rows are then on disk, and
// recovery commits them). A journal so written queues no more changes in
// the log, so its batch is cut, for what comes next to be queued again in
// a journal of its own. Its error includes the failure of an earlier
// queued commit. A view of history waits for the commits (Wait).
func (c *Committer) Sync() error {
	d := c.p.Durability()
	err := d.SyncChanges()
	c.mu.Lock()
	if c.cur != nil && d.Folded(c.cur.ID) {
		c.hurry()
	}
	c.mu.Unlock()
	return c.reported(err)
}

// Wait returns once every change recorded before it is committed, with the
// error of a queued commit that failed since the last Wait.
func (c *Committer) Wait() error {
	c.mu.Lock()
	if !c.running {
		c.mu.Unlock()
		return c.reported(nil)
	}
	ch := make(chan error, 1)
	if c.cur != nil {
		c.waiters = append(c.waiters, ch)
		c.hurry()
	} else {
		c.idle = append(c.idle, ch)
	}
	c.mu.Unlock()
	return c.reported(<-ch)
}

// record adds ops to the current implicit journal (through commit, if not
// nil), starting the committer.
func (c *Committer) record(ops []Op, commit CommitFunc, wait chan error, done func(error), sync bool) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	now := c.e.clock()
	if c.cur == nil {
		j, err := c.e.Begin(c.p, false)
		if err != nil {
			return err
		}
		c.cur, c.ops, c.since = j, 0, now
	}
	if err := c.cur.ApplyWith(commit, ops...); err != nil {
		return err
	}
	c.last, c.stamp = now, c.e.stampAt(now)
	c.ops += len(ops)
	if wait != nil {
		c.waiters = append(c.waiters, wait)
		c.synced = c.synced || sync
		c.hurry()
	}
	if done != nil {
		c.done = append(c.done, done)
	}
	if c.ops >= c.maxOps {
		c.hurry()
	}
	if !c.running {
		c.running = true
		go c.run()
	}
	return nil
}

// Latest returns the time (Unix ns) of the latest change recorded, 0 if
// none. A batch's commit takes the time of its latest change, so a view
// that shows queued changes shows the later of the head's time and this
// one, and that time does not move when the batch lands: tar, for one,
// fails a directory whose ctime changed while it read it.
func (c *Committer) Latest() int64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.last.IsZero() {
		return 0
	}
	return c.stamp
}

// hurry makes the committer commit the current journal without delay.
// Called with c.mu held.
func (c *Committer) hurry() {
	c.urgent = true
	select {
	case c.kick <- struct{}{}:
	default:
	}
}

func (c *Committer) applyExplicit(sync bool, ops []Op) error {
	j, err := c.e.Begin(c.p, true)
	if err != nil {
		return err
	}
	if err := j.Apply(ops...); err != nil {
		return errors.Join(err, rollback(j))
	}
	if _, err := j.Commit(); err != nil {
		return errors.Join(err, rollback(j))
	}
	c.p.Settle()
	if sync {
		return c.p.Durability().Checkpoint()
	}
	return nil
}

func (c *Committer) run() {
	for {
		c.mu.Lock()
		// Let more queued changes join the batch.
		for c.cur != nil && !c.urgent {
			now := c.e.clock()
			wait := min(c.delay-now.Sub(c.since), batchQuiet-now.Sub(c.last))
			if wait <= 0 {
				break
			}
			c.mu.Unlock()
			t := time.NewTimer(wait)
			select {
			case <-c.kick:
			case <-t.C:
			}
			t.Stop()
			c.mu.Lock()
		}
		j, ws, done, sync := c.cur, c.waiters, c.done, c.synced
		if j != nil {
			j.at = c.stamp
		}
		c.cur, c.waiters, c.done, c.synced, c.urgent = nil, nil, nil, false, false
		if j == nil {
			c.running = false
			idle := c.idle
			c.idle = nil
			c.mu.Unlock()
			for _, w := range idle {
				w <- nil
			}
			return
		}
		c.mu.Unlock()
		start := c.e.clock()
		_, err := j.Commit()
		took := c.e.clock().Sub(start)
		if err == nil && sync {
			err = c.p.Durability().SyncChanges()
		}
		c.p.Settle()
		c.mu.Lock()
		// A batch that happened to touch little says little of the next:
		// the cost that sets the pace falls off slowly.
		c.cost = max(took, c.cost*3/4)
		c.delay, c.maxOps = pace(c.cost)
		if err != nil && len(ws) == 0 {
			slog.Error("queued commit failed; its changes stay in the journal for recovery", "page", c.p.Ledger+"/"+c.p.Name, "err", err)
			c.err = errors.Join(c.err, err)
		}
		// Waiters that came while this batch was committing wait for it alone.
		idle := c.idle
		c.idle = nil
		c.mu.Unlock()
		// Callbacks first: a waiter that returns sees their effects.
		for _, d := range done {
			d(err)
		}
		for _, w := range ws {
			w <- err
		}
		for _, w := range idle {
			w <- nil
		}
	}
}

// rollback drops a journal whose changes failed. Its rows are explicit: if
// this fails too, the next start drops them.
func rollback(j *Journal) error {
	if err := j.Rollback(); err != nil && !errors.Is(err, ErrDone) {
		return fmt.Errorf("journal: rollback of %s: %w", j.ID, err)
	}
	return nil
}
