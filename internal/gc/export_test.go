package gc

// CollectInBackground collects a page as the background loop does, from a
// list of due pages it took earlier.
func (c *Collector) CollectInBackground(ledger, page string) error {
	return c.collect([2]string{ledger, page}, false)
}
