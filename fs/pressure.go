package fs

import "time"

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

// letCollectionIn lets a collection of the page that gave way to its
// writers have it back before a file is created or opened for writing: the
// closes queued land now rather than at the end of their batch, and the
// writer waits for the collection to take the page, a moment at most
// (store.Repository.WaitTurn). A file rewritten in a loop otherwise keeps
// the page held from one close to the next, through batches that grow as
// long as closes keep coming, and the collection would never find it left.
// Called with no lock of this package held.
func (pg *pageRef) letCollectionIn() {
	l, n := pg.names()
	if !pg.fs.repo.CollectionWaits(l, n) {
		return
	}
	if err := pg.settle(); err != nil {
		return // the write will say
	}
	pg.fs.repo.WaitTurn(l, n, turnWait)
}

// turnWait bounds how long a writer waits for a collection to take the
// page back (letCollectionIn), after the closes queued landed; then comes
// the collection's own stretch, which it gives up for the writer in 20 ms.
const turnWait = 20 * time.Millisecond
