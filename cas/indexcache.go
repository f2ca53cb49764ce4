package cas

import (
	"fmt"
	"sync/atomic"
	"unsafe"

	"github.com/dgraph-io/ristretto/v2"
)

// IndexCache holds decoded index pieces for every Reader of a process.
// Pieces are content-addressed, so one cache serves every file of every
// page. A Reader keeps the last index pieces it used, which serves a
// stream; a random read walks a path of its own from the root, through
// one index piece per level (a 1 GiB file has about 4,400 of them), and
// without this fetched, verified and decoded most of them again: two of
// the three pieces a 4 KiB random read fetched were index pieces.
type IndexCache struct {
	c            *ristretto.Cache[string, cached]
	hits, misses atomic.Uint64
}

// NewIndexCache returns a cache that holds about maxBytes of decoded index
// pieces.
func NewIndexCache(maxBytes int64) (*IndexCache, error) {
	c, err := ristretto.NewCache(&ristretto.Config[string, cached]{
		NumCounters: max(maxBytes/256, 1000),
		MaxCost:     maxBytes,
		BufferItems: 64,
	})
	if err != nil {
		return nil, fmt.Errorf("index cache: %w", err)
	}
	return &IndexCache{c: c}, nil
}

// Close stops the cache's goroutines.
func (ic *IndexCache) Close() { ic.c.Close() }

func (ic *IndexCache) get(d Digest) (cached, bool) {
	if ic == nil {
		return cached{}, false
	}
	c, ok := ic.c.Get(string(d))
	if ok {
		ic.hits.Add(1)
	} else {
		ic.misses.Add(1)
	}
	return c, ok
}

// Stats returns how many lookups found their index piece, and how many
// did not.
func (ic *IndexCache) Stats() (hits, misses uint64) { return ic.hits.Load(), ic.misses.Load() }

// set offers an index piece to the cache. Ristretto applies sets
// asynchronously and may decline one when full.
func (ic *IndexCache) set(c cached) {
	if ic == nil {
		return
	}
	ic.c.Set(string(c.d), c, indexCost(c))
}

// indexCost is the memory a cached index piece holds: its entry and key,
// and for each child the IndexChild, its digest's allocation (a 33-byte
// digest takes 48) and its end.
func indexCost(c cached) int64 {
	const perPiece = int64(unsafe.Sizeof(c)+unsafe.Sizeof(FileIndex{})) + 2*48 + 64 // entry, key, digest, ristretto's item
	perChild := int64(unsafe.Sizeof(IndexChild{})) + 48 + 8
	return perPiece + perChild*int64(cap(c.index.Children))
}
