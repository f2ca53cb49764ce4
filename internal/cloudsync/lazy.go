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
// a value is read.
const fetchAhead = 8 << 20

// streamAhead is how many ranges of fetchAhead a stream has on their way
// ahead of the one it reads: one downloads while another is opened.
const streamAhead = 2

// Fetch fetches piece d of page p from the remote store, verifies it,
// stores it as synced (in the cache, if the syncer has one) and returns it
// (store.Fetcher). For a read in order
// it fetches, in the same ranged request, the pieces after d in its pack,
// up to fetchAhead bytes, and starts fetching the range after that one, so
// that a stream finds its next pieces on their way. A piece that a fetch
// under way brings is waited for, not fetched again: the kernel reads ahead
// in several requests at once. Fetched pieces are stored in the background;
// until they are, reads take them from the fetch. Safe for concurrent use.
func (s *Syncer) Fetch(p *store.Page, d cas.Digest, stream bool) ([]byte, error) {
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
	if stream {
		if idx, err = s.packIndex(r.Pack); err != nil {
			return nil, err
		}
	}
	page := p.Ledger + "/" + p.Name
	for {
		s.flightMu.Lock()
		f := s.covering(page, r)
		if f == nil {
			f = s.fly(page, r, idx, stream)
		}
		if stream {
			// streamAhead ranges ahead of the reader.
			for next, k := f, 0; k < streamAhead; k++ {
				i, found := refAt(idx, next.end)
				if !found {
					break
				}
				if g := s.covering(page, idx[i]); g != nil {
					next = g
					continue
				}
				if held, err := p.Has(cas.Digest(idx[i].Digest)); err != nil || held || s.cache != nil && s.cache.Has(cas.Digest(idx[i].Digest)) {
					break
				}
				next = s.fly(page, idx[i], idx, true)
			}
		}
		s.flightMu.Unlock()
		<-f.done
		if data, ok := f.got[string(d)]; ok {
			return data, nil
		}
		if f.err != nil {
			return nil, f.err
		}
		// d did not open there; fetched alone, it says why.
		stream, idx = false, nil
	}
}

// A fetchFlight is a ranged read of a pack under way for a page: got
// holds, once done is closed, the pieces it brought, by digest. It stays
// among the flights until they are stored.
type fetchFlight struct {
	page, pack string
	start, end int64
	stream     bool // a read in order's, reaching ahead
	done       chan struct{}
	got        map[string][]byte
	err        error
}

// fly starts fetching r, and the pieces after it in idx for a stream, in
// the background. Called with flightMu held.
func (s *Syncer) fly(page string, r pieceRef, idx []pieceRef, stream bool) *fetchFlight {
	f := &fetchFlight{page: page, pack: r.Pack, start: r.Off, stream: stream, done: make(chan struct{}), got: map[string][]byte{}}
	refs := []pieceRef{r}
	if stream {
		refs = s.ahead(idx, r, s.nextFlight(page, r))
	}
	f.end = refs[len(refs)-1].Off + refs[len(refs)-1].Len
	s.flights = append(s.flights, f)
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
		s.flightMu.Unlock()
	}()
	return f
}

// store keeps fetched pieces in page, which it holds meanwhile; a failure
// is logged (the pieces are fetched again when read).
func (s *Syncer) store(page string, ds []cas.Digest, datas [][]byte) {
	l, n, _ := strings.Cut(page, "/")
	p, err := s.repo.Acquire(l, n)
	if err == nil {
		err = p.PutFetched(ds, datas)
		s.repo.Release(p)
	}
	if err != nil {
		slog.Warn("cloudsync: keep fetched pieces", "page", page, "err", err)
	}
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
// use until they are. Not while reads go on (they start fetches).
func (s *Syncer) Settle() { s.bg.Wait() }

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
