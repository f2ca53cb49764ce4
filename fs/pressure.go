package fs

// yieldHistory lets the page's history make room for a write expected to
// take need bytes (sized: a rewrite, expected to take about its file's
// size; else a new file) when the repository's filesystem runs short
// (gc.Pressure): in the background while there is room for the write
// (Ahead); when there is not, the closes queued land first, then the page
// is collected keeping its newest commits, if nothing else writes to it,
// while the writer waits. Called before
// a file of the live page is created or opened for writing, with no lock
// of this package held: once the file is open, the page's space cannot be
// given back until it is closed.
func (pg *pageRef) yieldHistory(need uint64, sized bool) {
	s := pg.fs.opts.Pressure
	if s == nil || !pg.v.queues() {
		return
	}
	l, n := pg.names()
	if !s.Due(l, n, need, sized) {
		s.Ahead(l, n, need, sized) // in the background, if due at all
		return
	}
	if err := pg.settle(); err != nil || pg.busy() {
		return
	}
	s.Yield(l, n, need, sized)
}
