package fs

import (
	"github.com/ledgerfs/ledgerfs/cas"
	"github.com/ledgerfs/ledgerfs/store"
)

// A read-only handle holds its page as a reader (store.Repository.AsReader),
// which does not keep a collection from the page: the value it reads is
// pinned at the live page's pageRef, and the collection keeps the pins'
// pieces (see FS.Pinned). So an open file in a page, or a shell reading
// one with tail -f, no longer makes .collect fail with EBUSY.

// pin records that a handle reads v. Called with the page held by a
// plain ref, which keeps collections off until the pin is in place.
func (pg *pageRef) pin(v cas.ObjectIdentifier) {
	if v == (cas.ObjectIdentifier{}) {
		return
	}
	o := pg.owner
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.pins == nil {
		o.pins = map[cas.ObjectIdentifier]int{}
	}
	o.pins[v]++
}

// unpin drops a pin of v.
func (pg *pageRef) unpin(v cas.ObjectIdentifier) {
	if v == (cas.ObjectIdentifier{}) {
		return
	}
	o := pg.owner
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.pins[v]--; o.pins[v] <= 0 {
		delete(o.pins, v)
	}
}

// reading makes the caller's ref of p, with v pinned, a reader's.
func (pg *pageRef) reading(p *store.Page, v cas.ObjectIdentifier) {
	pg.pin(v)
	pg.fs.repo.AsReader(p)
}

// doneReading gives back a reader's ref of p and its pin of v.
func (pg *pageRef) doneReading(p *store.Page, v cas.ObjectIdentifier) {
	pg.unpin(v)
	pg.fs.repo.ReleaseReader(p)
}

// Pinned lists the values the page's read-only handles read, for its
// collection (gc.Collector.Pinned).
func (f *FS) Pinned(ledger, name string) []cas.ObjectIdentifier {
	p, ok := f.known(ledger, name)
	if !ok {
		return nil
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	out := make([]cas.ObjectIdentifier, 0, len(p.pins))
	for v := range p.pins {
		out = append(out, v)
	}
	return out
}
