package fs

// yieldHistory lets the page's history make room for a write when the
// repository's filesystem runs short (gc.Pressure): the closes queued
// land first, then the page is collected keeping its newest commits, if
// nothing else writes to it. Called before a file of the live page is
// created or opened for writing, with no lock of this package held.
func (pg *pageRef) yieldHistory() {
	s := pg.fs.opts.Pressure
	if s == nil || !pg.v.queues() || !s.Low() {
		return
	}
	if err := pg.settle(); err != nil || pg.busy() {
		return
	}
	l, n := pg.names()
	s.Yield(l, n)
}
