package fs

// yieldHistory lets the page's history make room for a write expected to
// take need bytes when the repository's filesystem runs short
// (gc.Pressure): the closes queued land first, then the page is collected
// keeping its newest commits, if nothing else writes to it. Called before
// a file of the live page is created or opened for writing, with no lock
// of this package held: once the file is open, the page's space cannot be
// given back until it is closed.
func (pg *pageRef) yieldHistory(need uint64) {
	s := pg.fs.opts.Pressure
	if s == nil || !pg.v.queues() {
		return
	}
	l, n := pg.names()
	if !s.Due(l, n, need) {
		return
	}
	if err := pg.settle(); err != nil || pg.busy() {
		return
	}
	s.Yield(l, n, need)
}
