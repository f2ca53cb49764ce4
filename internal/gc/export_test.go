package gc

import "github.com/ledgerfs/ledgerfs/store"

// CollectInBackground collects a page as the background loop does, from a
// list of due pages it took earlier.
func (c *Collector) CollectInBackground(ledger, page string) error {
	return c.collect([2]string{ledger, page}, false)
}

// CollectInSteps collects p as an explicit collection that gives way to
// writers does: its runs stop at every stopEvery-th poll of Stop, polled
// every `every` pieces, and between two runs it calls between, which may
// change the page. It returns how many runs it took.
func CollectInSteps(p *store.Page, o Options, every, stopEvery int, between func() error) (Result, int, error) {
	c := newCollection(o)
	c.every = every
	polls := 0
	c.o.Stop = func() bool { polls++; return polls%stopEvery == 0 }
	runs := 0
	for {
		runs++
		if err := c.run(p); err != nil || c.done() {
			return c.r, runs, err
		}
		if err := between(); err != nil {
			return c.r, runs, err
		}
	}
}
