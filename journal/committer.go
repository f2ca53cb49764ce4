package journal

import (
	"sync"

	"github.com/ledgerfs/ledgerfs/store"
)

// Committer commits a page's ordinary writes through implicit journals, with
// group commit: changes that arrive while a commit is running go into the
// next implicit journal, and all of them become one commit when the running
// one ends. Apply returns once its changes are committed, so a reader that
// comes after it sees them.
//
// Commits run on their own goroutine and are never abandoned halfway: a
// caller that gives up waiting (an interrupted FUSE request) leaves its
// changes to be committed all the same.
type Committer struct {
	p *store.Page

	mu      sync.Mutex
	cur     *Journal
	waiters []chan error
	running bool
	synced  bool // a waiter asked for the commit to reach the disk
}

// CommitterFor returns the page's committer.
func CommitterFor(p *store.Page) *Committer {
	return p.State(func() any { return &Committer{p: p} }).(*Committer)
}

// maxImplicitOps is the largest group of changes that goes through the
// implicit journal: its rows must land in one db transaction, or a crash
// could leave part of the group for recovery to commit.
const maxImplicitOps = 256

// Apply records ops in the current implicit journal and waits until they are
// committed; with sync, also until the commit is on disk. A larger group of
// changes (a directory rename) commits through its own explicit journal,
// which a crash discards whole.
func (c *Committer) Apply(sync bool, ops ...Op) error {
	if len(ops) == 0 {
		// Nothing to record: every earlier Apply has returned after its
		// commit, so syncing the db makes them durable.
		if sync {
			return c.p.Sync()
		}
		return nil
	}
	if len(ops) > maxImplicitOps {
		return c.applyExplicit(sync, ops)
	}
	c.mu.Lock()
	if c.cur == nil {
		j, err := Begin(c.p, false)
		if err != nil {
			c.mu.Unlock()
			return err
		}
		c.cur = j
	}
	if err := c.cur.Apply(ops...); err != nil {
		c.mu.Unlock()
		return err
	}
	ch := make(chan error, 1)
	c.waiters = append(c.waiters, ch)
	c.synced = c.synced || sync
	if !c.running {
		c.running = true
		go c.run()
	}
	c.mu.Unlock()
	return <-ch
}

func (c *Committer) applyExplicit(sync bool, ops []Op) error {
	j, err := Begin(c.p, true)
	if err != nil {
		return err
	}
	if err := j.Apply(ops...); err != nil {
		j.Rollback()
		return err
	}
	if _, err := j.Commit(); err != nil {
		j.Rollback()
		return err
	}
	c.p.Settle()
	if sync {
		return c.p.Sync()
	}
	return nil
}

func (c *Committer) run() {
	for {
		c.mu.Lock()
		j, ws, sync := c.cur, c.waiters, c.synced
		c.cur, c.waiters, c.synced = nil, nil, false
		if j == nil {
			c.running = false
			c.mu.Unlock()
			return
		}
		c.mu.Unlock()
		_, err := j.Commit()
		if err == nil && sync {
			err = c.p.Sync()
		}
		c.p.Settle()
		for _, w := range ws {
			w <- err
		}
	}
}
