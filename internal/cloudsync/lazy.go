package cloudsync

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"slices"
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

// Fetch fetches piece d of page p from the remote store, verifies it,
// stores it as synced and returns it (store.Fetcher). For a read in order
// it fetches, in the same ranged request, the pieces after d in its pack,
// up to fetchAhead bytes. A piece that a fetch under way brings is waited
// for, not fetched again: the kernel reads ahead in several requests at
// once. Safe for concurrent use.
func (s *Syncer) Fetch(p *store.Page, d cas.Digest, stream bool) ([]byte, error) {
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
		if f := s.covering(page, r); f != nil {
			s.flightMu.Unlock()
			<-f.done
			if data, ok := f.got[string(d)]; ok {
				return data, nil
			}
			if f.err != nil {
				return nil, f.err
			}
			continue // d did not open there: fetched alone, it says why
		}
		f := &fetchFlight{page: page, pack: r.Pack, start: r.Off, stream: stream, done: make(chan struct{}), got: map[string][]byte{}}
		refs := s.ahead(idx, r, s.nextFlight(page, r))
		f.end = refs[len(refs)-1].Off + refs[len(refs)-1].Len
		s.flights = append(s.flights, f)
		s.flightMu.Unlock()

		f.err = s.fetchRange(p, refs, f.got)
		s.flightMu.Lock()
		s.flights = slices.DeleteFunc(s.flights, func(g *fetchFlight) bool { return g == f })
		s.flightMu.Unlock()
		close(f.done)
		if f.err != nil {
			return nil, f.err
		}
		return f.got[string(d)], nil
	}
}

// A fetchFlight is a ranged read of a pack under way for a page: got
// holds, once done is closed, the pieces it brought, by digest.
type fetchFlight struct {
	page, pack string
	start, end int64
	stream     bool // a read in order's, reaching ahead
	done       chan struct{}
	got        map[string][]byte
	err        error
}

// covering returns the fetch under way that brings r to page. Called with
// flightMu held.
func (s *Syncer) covering(page string, r pieceRef) *fetchFlight {
	for _, f := range s.flights {
		if f.page == page && f.pack == r.Pack && f.start <= r.Off && r.Off+r.Len <= f.end {
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
	i, found := slices.BinarySearchFunc(idx, r.Off, func(e pieceRef, off int64) int { return cmpInt64(e.Off, off) })
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

func cmpInt64(a, b int64) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}

// fetchRange reads refs, back to back in one pack, in one ranged request
// bounded by the fetch timeout, and stores and puts in got those that open
// and verify. A piece that does not open is an error (with the pack's
// name) only if it is the first, the one asked for.
func (s *Syncer) fetchRange(p *store.Page, refs []pieceRef, got map[string][]byte) error {
	first, last := refs[0], refs[len(refs)-1]
	ctx, cancel := context.WithTimeout(context.Background(), s.fetchTimeout)
	defer cancel()
	body, err := s.be.GetRange(ctx, first.Pack, first.Off, last.Off+last.Len-first.Off)
	if err != nil {
		if errors.Is(err, context.DeadlineExceeded) {
			err = fmt.Errorf("no answer within %s (--fetch-timeout): %w", s.fetchTimeout, err)
		}
		return fmt.Errorf("fetch pack %s: %w", first.Pack, err)
	}
	if int64(len(body)) != last.Off+last.Len-first.Off {
		return fmt.Errorf("fetch pack %s: %d bytes at %d, want %d: the pack is shorter than its batch says", first.Pack, len(body), first.Off, last.Off+last.Len-first.Off)
	}
	ds := make([]cas.Digest, 0, len(refs))
	datas := make([][]byte, 0, len(refs))
	for i, r := range refs {
		d := cas.Digest(r.Digest)
		data, err := s.openPiece(d, r.Pack, body[r.Off-first.Off:r.Off-first.Off+r.Len])
		if err != nil {
			if i == 0 {
				return err
			}
			break
		}
		ds, datas = append(ds, d), append(datas, data)
		got[string(d)] = data
	}
	if err := p.PutFetched(ds, datas); err != nil {
		slog.Warn("cloudsync: keep fetched pieces", "page", p.Ledger+"/"+p.Name, "err", err)
	}
	s.fetched.Add(int64(len(body)))
	return nil
}
