package cloudsync

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"slices"
	"strings"
	"time"

	"github.com/ledgerfs/ledgerfs/cas"
	"github.com/ledgerfs/ledgerfs/store"
)

// DefaultFetchTimeout bounds a read's wait for a piece from the remote
// store: past it the read fails (EIO through a mount) instead of hanging.
const DefaultFetchTimeout = 20 * time.Second

// fetchAhead bounds what a read in order fetches in one request: the piece
// asked for and those after it in its pack, which a pack holds in the order
// a value is read. A pack closes once past its size, so a whole one is a
// little more than DefaultPackSize.
const fetchAhead = DefaultPackSize + DefaultPackSize/8

// streamAhead is how many ranges of fetchAhead a stream has on their way
// ahead of the one it reads: one downloads while another is opened.
const streamAhead = 2

// Fetch fetches piece d of page p from the remote store, verifies it,
// stores it as synced (in the cache, if the syncer has one) and returns it
// (store.Fetcher). For a read in order, which goes on to read ahead bytes
// from d on, it fetches, in the same ranged request, the pieces after d in
// its pack, up to fetchAhead bytes, and starts fetching the range after that
// one, so that a stream finds its next pieces on their way; neither goes
// much past the ahead bytes (see streamEnd): the pieces after a value's
// last are another's, which nobody may read. A piece that a fetch
// under way brings is waited for, not fetched again: the kernel reads ahead
// in several requests at once. Fetched pieces are stored in the background;
// until they are, reads take them from the fetch (Pending). Safe for
// concurrent use.
func (s *Syncer) Fetch(p *store.Page, d cas.Digest, ahead int64) ([]byte, error) {
	if s.cache != nil {
		if data, ok := s.cache.Get(d); ok {
			return data, nil
		}
	}
	r, ok, err := s.pieceAt(d)
	if err != nil {
		return nil, err
	}
	if !ok {
		return nil, fmt.Errorf("piece %s: %w", d, cas.ErrNotFound)
	}
	var idx []pieceRef
	if ahead > 0 {
		if idx, err = s.packIndex(r.Pack); err != nil {
			return nil, err
		}
	}
	page := p.Ledger + "/" + p.Name
	for {
		s.flightMu.Lock()
		f := s.covering(page, r)
		if f == nil {
			s.missed.Add(1)
			f = s.fly(page, r, idx, ahead, false)
		}
		s.reached(f)
		s.flightMu.Unlock()
		if ahead > 0 {
			s.goAhead(page, f, ahead-(f.end-r.Off))
		}
		<-f.done
		if data, ok := f.got[string(d)]; ok {
			return data, nil
		}
		if f.err != nil {
			return nil, f.err
		}
		// d did not open there; fetched alone, it says why.
		ahead, idx = 0, nil
	}
}

// streamEnd is where, in a pack, a fetch for a read in order with ahead
// bytes to read from off on stops: past them by what stored pieces add to
// their content (1 %, with the margin of an index piece or two), so that
// it brings the value's last pieces in its request.
func streamEnd(off, ahead int64) int64 {
	if ahead >= math.MaxInt64-off {
		return math.MaxInt64
	}
	slack := ahead/64 + 2*cas.MaxChunkSize
	return off + min(ahead, math.MaxInt64-off-slack) + slack
}

// Pending returns piece d of page p if a fetch under way brings it, or
// brought it and has not stored it yet, once that fetch is done
// (store.Fetcher). The first read in order to reach a fetch ahead of it
// starts the fetches after that one, as Fetch does.
func (s *Syncer) Pending(p *store.Page, d cas.Digest, ahead int64) ([]byte, bool) {
	if s.nflights.Load() == 0 {
		return nil, false
	}
	page := p.Ledger + "/" + p.Name
	s.flightMu.Lock()
	var f *fetchFlight
	var off int64
	for _, g := range s.flights {
		if o, ok := g.brings[string(d)]; ok && g.page == page {
			f, off = g, o
			break
		}
	}
	first := f != nil && s.reached(f)
	s.flightMu.Unlock()
	if f == nil {
		return nil, false
	}
	if first && ahead > 0 {
		s.goAhead(page, f, ahead-(f.end-off))
	}
	<-f.done
	data, ok := f.got[string(d)]
	return data, ok
}

// goAhead has flyAhead start the fetches after f in the background, for a
// read in order with rest bytes to read past f (none: nothing to start):
// the read that reached f goes on meanwhile. Stored pieces are a little
// longer than their content (sealed, and the value's index pieces among its
// chunks), so rest comes short of the value's end by as much: a stream
// fetches its last pieces itself (one request either way), and starts no
// fetch of another value's. store.ReadOn less what a stream reads stays
// beyond any pack.
func (s *Syncer) goAhead(page string, f *fetchFlight, rest int64) {
	if rest <= 0 {
		return
	}
	s.bg.Add(1)
	go func() {
		defer s.bg.Done()
		p, err := s.acquire(page)
		if err != nil {
			return // the page is gone: nothing to read ahead for
		}
		defer s.repo.Release(p)
		if idx, err := s.packIndex(f.pack); err == nil {
			s.flyAhead(p, page, f, idx, rest)
		}
	}()
}

// flyAhead has streamAhead fetches under way after f, which brings a
// stream's pieces from the pack whose pieces are idx: past it, on into the
// pack pushed next when that one ends, as far as the rest bytes the stream
// has to read past f. It takes flightMu only to look up and start fetches:
// finding what a page lacks reads its db, which waits while fetched pieces
// are committed.
func (s *Syncer) flyAhead(p *store.Page, page string, f *fetchFlight, idx []pieceRef, rest int64) {
	cur := idx
	for next, k := f, 0; k < streamAhead; k++ {
		var i int
		var held int64
		if cur, i, held = s.wanted(p, page, cur, next.pack, next.end); cur == nil {
			return
		}
		if rest -= held; rest <= 0 {
			return
		}
		s.flightMu.Lock()
		g := s.covering(page, cur[i])
		if g == nil {
			g = s.fly(page, cur[i], cur, rest, true)
		}
		s.flightMu.Unlock()
		if rest -= g.end - cur[i].Off; rest <= 0 {
			return
		}
		next = g
	}
}

// wanted finds where a read in order goes on from offset end of pack,
// whose pieces are idx: the first piece from there that p does not hold,
// in that pack or, past its end, in the packs pushed after it (held pieces
// are skipped: index pieces come with the tree, among a value's chunks), or
// the first on its way.
// It returns that piece's pack's pieces, its place and the bytes of the
// pieces skipped, or nil if none is found within a few packs.
func (s *Syncer) wanted(p *store.Page, page string, idx []pieceRef, pack string, end int64) ([]pieceRef, int, int64) {
	const packsAhead = 4
	i, found := refAt(idx, end)
	var held int64
	for range packsAhead {
		for ; found && i < len(idx); i++ {
			// A piece on its way needs no look in the db.
			s.flightMu.Lock()
			coming := s.covering(page, idx[i]) != nil
			s.flightMu.Unlock()
			if coming {
				return idx, i, held
			}
			d := cas.Digest(idx[i].Digest)
			has, err := p.Has(d)
			if err != nil {
				return nil, 0, 0
			}
			if !has && (s.cache == nil || !s.cache.Has(d)) {
				return idx, i, held
			}
			held += idx[i].Len
		}
		if idx = s.nextPack(pack); len(idx) == 0 {
			return nil, 0, 0
		}
		pack, i, found = idx[0].Pack, 0, true
	}
	return nil, 0, 0
}

// nextPack returns the pieces of the pack pushed after pack (see
// stateNextPack), or none: a stream reads on into it.
func (s *Syncer) nextPack(pack string) []pieceRef {
	next, cached := s.nexts.Get(pack)
	if !cached {
		v, _, err := s.repo.SyncState(stateNextPack + pack)
		if err != nil {
			return nil
		}
		next = string(v)
		s.nexts.Add(pack, next)
	}
	if next == "" {
		return nil
	}
	idx, err := s.packIndex(next)
	if err != nil {
		return nil
	}
	return idx
}

// A fetchFlight is a ranged read of a pack under way for a page: got
// holds, once done is closed, the pieces it brought, by digest. It stays
// among the flights until they are stored.
type fetchFlight struct {
	page, pack string
	start, end int64
	stream     bool // a read in order's, reaching ahead
	done       chan struct{}
	brings     map[string]int64 // the digests of the pieces it reads, and their offsets
	got        map[string][]byte
	err        error
	// ahead: started ahead of the reader, it keeps what it brought
	// unstored until the reader reaches it (or s.keptFor passes), so that
	// the reader's first read of it starts the fetches after it; stored
	// at once, the reader read it locally, and the fetches ahead stopped
	// (a lazy read waited for every third pack).
	ahead     bool
	reach     chan struct{}
	isReached bool // reach is closed; under flightMu
	// A stream's fetch, once reached, keeps its pieces until the reader
	// passes it (reaches a later fetch of the page: passed is closed) or
	// s.keptFor passes: the reader takes them from memory (Pending), not
	// from the db after they are stored, and the store of one fetch runs
	// while the reader is in the next (BENCHMARKS.md: a lazy read 10–15 %
	// faster).
	passed   chan struct{}
	isPassed bool          // passed is closed; under flightMu
	stored   chan struct{} // closed once its pieces are stored and it left the flights
}

// defaultKeptFor bounds how long a fetch keeps its pieces in memory,
// waiting for its reader to reach it (ahead) or to pass it, before it
// stores them.
const defaultKeptFor = 3 * time.Second

// reached records that a read reached f, and reports whether it is the
// first time for a fetch ahead of the reader. The fetches of f's page that
// the reader reached before f are passed. Called with flightMu held.
func (s *Syncer) reached(f *fetchFlight) bool {
	if f.isReached {
		return false
	}
	f.isReached = true
	close(f.reach)
	if f.stream {
		for _, g := range s.flights {
			if g != f && g.page == f.page && g.isReached {
				g.pass()
			}
		}
	}
	return f.ahead
}

// pass lets f store its pieces now. Called with flightMu held.
func (f *fetchFlight) pass() {
	if !f.isPassed {
		f.isPassed = true
		close(f.passed)
	}
}

// keep waits, once f is done, until its pieces may be stored: for a
// stream's fetch, until its reader reaches it and then passes it, each
// within s.keptFor; at once while the syncer settles.
func (s *Syncer) keep(f *fetchFlight) {
	if !f.stream {
		return
	}
	for _, ch := range []chan struct{}{f.reach, f.passed} {
		if s.settling.Load() != 0 {
			return
		}
		t := time.NewTimer(s.keptFor)
		select {
		case <-ch:
			t.Stop()
		case <-t.C:
			return // not reached: not passed either
		}
	}
}

// fly starts fetching r in the background, and for a read in order with
// toRead bytes to read from r on (0: not one), the pieces after it in idx
// (up to streamEnd); isAhead: ahead of its reader. Called with flightMu
// held.
func (s *Syncer) fly(page string, r pieceRef, idx []pieceRef, toRead int64, isAhead bool) *fetchFlight {
	f := &fetchFlight{page: page, pack: r.Pack, start: r.Off, stream: toRead > 0, done: make(chan struct{}), got: map[string][]byte{},
		ahead: isAhead, reach: make(chan struct{}), passed: make(chan struct{}), stored: make(chan struct{})}
	refs := []pieceRef{r}
	if f.stream {
		refs = s.ahead(idx, r, min(s.nextFlight(page, r), streamEnd(r.Off, toRead)))
	}
	f.end = refs[len(refs)-1].Off + refs[len(refs)-1].Len
	f.brings = make(map[string]int64, len(refs))
	for _, r := range refs {
		f.brings[string(r.Digest)] = r.Off
	}
	s.flights = append(s.flights, f)
	s.nflights.Store(int32(len(s.flights)))
	s.bg.Add(1)
	go func() {
		defer s.bg.Done()
		var ds []cas.Digest
		var datas [][]byte
		ds, datas, f.err = s.fetchRange(refs)
		for i, d := range ds {
			f.got[string(d)] = datas[i]
		}
		close(f.done)
		if len(ds) > 0 {
			s.keep(f)
		}
		switch {
		case s.cache != nil:
			for i, d := range ds {
				s.cache.Put(d, datas[i])
			}
		case len(ds) > 0:
			s.store(page, ds, datas)
		}
		s.flightMu.Lock()
		s.flights = slices.DeleteFunc(s.flights, func(g *fetchFlight) bool { return g == f })
		s.nflights.Store(int32(len(s.flights)))
		s.flightMu.Unlock()
		close(f.stored)
	}()
	return f
}

// store keeps fetched pieces in page, which it holds meanwhile; a failure
// is logged (the pieces are fetched again when read).
func (s *Syncer) store(page string, ds []cas.Digest, datas [][]byte) {
	p, err := s.acquire(page)
	if err == nil {
		err = p.PutFetched(ds, datas)
		s.repo.Release(p)
	}
	if err != nil {
		slog.Warn("cloudsync: keep fetched pieces", "page", page, "err", err)
	}
}

// acquire holds page, named "LEDGER/PAGE" as a flight names it, for work
// a flight does after the read that started it returned.
func (s *Syncer) acquire(page string) (*store.Page, error) {
	l, n, _ := strings.Cut(page, "/")
	return s.repo.Acquire(l, n)
}

// Fetched is the bytes reads fetched from the remote so far.
func (s *Syncer) Fetched() int64 { return s.fetched.Load() }

// Close waits for the fetches under way, and stops fetching for the
// repository.
func (s *Syncer) Close() {
	s.repo.DropFetcher(s)
	s.Settle()
}

// Settle waits until the pieces fetched so far are stored: a page is in
// use until they are. Fetches ahead of a reader, and those the reads start
// meanwhile, store theirs at once. Not while reads go on (they
// start fetches).
func (s *Syncer) Settle() {
	s.settling.Add(1)
	defer s.settling.Add(-1)
	s.flightMu.Lock()
	for _, f := range s.flights {
		s.reached(f)
		f.pass()
	}
	s.flightMu.Unlock()
	s.bg.Wait()
}

// covering returns the fetch under way that brings r to page, or brought
// it and has not stored it yet. Called with flightMu held.
func (s *Syncer) covering(page string, r pieceRef) *fetchFlight {
	for _, f := range s.flights {
		if f.page == page && f.pack == r.Pack && f.start <= r.Off && r.Off+r.Len <= f.end {
			select {
			case <-f.done:
				if _, ok := f.got[string(r.Digest)]; !ok {
					continue // it failed there
				}
			default:
			}
			return f
		}
	}
	return nil
}

// nextFlight returns where the first fetch in order under way for page
// after r in its pack starts (the pack's end: none): a stream stops short
// of another. A fetch of one piece does not stop it; the overlap is that
// piece. Called with flightMu held.
func (s *Syncer) nextFlight(page string, r pieceRef) int64 {
	next := int64(math.MaxInt64)
	for _, f := range s.flights {
		if f.stream && f.page == page && f.pack == r.Pack && f.start > r.Off {
			next = min(next, f.start)
		}
	}
	return next
}

// ahead returns r and the pieces after it in its pack (idx, in order), back
// to back, up to fetchAhead bytes in all and short of limit, where another
// fetch starts. Pieces held already come along (the index pieces of a value
// lie among its chunks, and are read first); they are not stored again.
func (s *Syncer) ahead(idx []pieceRef, r pieceRef, limit int64) []pieceRef {
	out := []pieceRef{r}
	i, found := refAt(idx, r.Off)
	if !found {
		return out
	}
	end := r.Off + r.Len
	for _, n := range idx[i+1:] {
		if n.Off != end || end+n.Len-r.Off > fetchAhead || end+n.Len > limit {
			break
		}
		out = append(out, n)
		end += n.Len
	}
	return out
}

// refAt finds the piece at offset off of a pack's pieces, in order.
func refAt(idx []pieceRef, off int64) (int, bool) {
	return slices.BinarySearchFunc(idx, off, func(e pieceRef, off int64) int { return cmp.Compare(e.Off, off) })
}

// fetchRange reads refs, back to back in one pack, in one ranged request
// bounded by the fetch timeout, and returns those that open and verify. A
// piece that does not open is an error (with the pack's name) only if it is
// the first, the one asked for.
func (s *Syncer) fetchRange(refs []pieceRef) ([]cas.Digest, [][]byte, error) {
	first, last := refs[0], refs[len(refs)-1]
	ctx, cancel := context.WithTimeout(context.Background(), s.fetchTimeout)
	defer cancel()
	body, err := s.be.GetRange(ctx, first.Pack, first.Off, last.Off+last.Len-first.Off)
	if err != nil {
		if errors.Is(err, context.DeadlineExceeded) {
			err = fmt.Errorf("no answer within %s (--fetch-timeout): %w", s.fetchTimeout, err)
		}
		return nil, nil, fmt.Errorf("fetch pack %s: %w", first.Pack, err)
	}
	if int64(len(body)) != last.Off+last.Len-first.Off {
		return nil, nil, fmt.Errorf("fetch pack %s: %d bytes at %d, want %d: the pack is shorter than its batch says", first.Pack, len(body), first.Off, last.Off+last.Len-first.Off)
	}
	s.fetched.Add(int64(len(body)))
	ds := make([]cas.Digest, 0, len(refs))
	datas := make([][]byte, 0, len(refs))
	for i, r := range refs {
		d := cas.Digest(r.Digest)
		data, err := s.openPiece(d, r.Pack, body[r.Off-first.Off:r.Off-first.Off+r.Len], true)
		if err != nil {
			if i == 0 {
				return nil, nil, err
			}
			break
		}
		ds, datas = append(ds, d), append(datas, data)
	}
	return ds, datas, nil
}
