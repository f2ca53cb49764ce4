package btree

import (
	"errors"
	"fmt"
	"sync"
	"sync/atomic"

	"github.com/dgraph-io/ristretto/v2"
	"github.com/restic/chunker"

	"github.com/ledgerfs/ledgerfs/cas"
)

// Pieces is where a tree's nodes are read from and written to: a page's
// object rows.
type Pieces interface {
	cas.Source
	cas.Sink
}

// NodeCache holds decoded nodes by digest. Nodes are content-addressed, so
// one cache serves every page of a process.
//
// Ristretto admits a node only after it has been seen often enough, and
// applies sets asynchronously, so a node decoded once and wanted again at
// once (the parent commit's root while walking history, a child whose
// level was just read) would be decoded again. A small ring of the nodes
// decoded last covers that.
type NodeCache struct {
	c            *ristretto.Cache[string, *node]
	hits, misses atomic.Uint64

	mu     sync.Mutex
	recent [32]recentNode
	next   int
}

type recentNode struct {
	key string
	n   *node
}

func (nc *NodeCache) get(key string) (*node, bool) {
	if n, ok := nc.c.Get(key); ok {
		nc.hits.Add(1)
		return n, true
	}
	nc.mu.Lock()
	defer nc.mu.Unlock()
	for _, r := range nc.recent {
		if r.n != nil && r.key == key {
			nc.hits.Add(1)
			return r.n, true
		}
	}
	nc.misses.Add(1)
	return nil, false
}

// Stats returns how many lookups found their node decoded, and how many
// did not.
func (nc *NodeCache) Stats() (hits, misses uint64) { return nc.hits.Load(), nc.misses.Load() }

func (nc *NodeCache) set(key string, n *node) {
	nc.c.Set(key, n, n.size())
	nc.mu.Lock()
	nc.recent[nc.next] = recentNode{key, n}
	nc.next = (nc.next + 1) % len(nc.recent)
	nc.mu.Unlock()
}

func (nc *NodeCache) del(key string) { nc.c.Del(key) }

// NewNodeCache returns a cache that holds about maxBytes of decoded nodes.
func NewNodeCache(maxBytes int64) (*NodeCache, error) {
	c, err := ristretto.NewCache(&ristretto.Config[string, *node]{
		NumCounters: max(maxBytes/1024, 1000),
		MaxCost:     maxBytes,
		BufferItems: 64,
	})
	if err != nil {
		return nil, fmt.Errorf("node cache: %w", err)
	}
	return &NodeCache{c: c}, nil
}

// Close stops the cache's goroutines.
func (nc *NodeCache) Close() { nc.c.Close() }

// Store reads and writes the nodes of one page's trees.
type Store struct {
	pieces Pieces
	pol    atomic.Uint64 // the chunker.Pol a node too large to be one piece is cut with
	cache  *NodeCache
}

// NewStore returns a node store over a page's pieces. cache may be nil.
func NewStore(p Pieces, pol chunker.Pol, cache *NodeCache) *Store {
	s := &Store{pieces: p, cache: cache}
	s.pol.Store(uint64(pol))
	return s
}

// SetPolynomial makes pol the polynomial the store cuts large nodes with,
// for a page whose polynomial is set before its first commit lands.
func (s *Store) SetPolynomial(pol chunker.Pol) { s.pol.Store(uint64(pol)) }

// EmptyRoot is the id of the empty tree: a level-0 node with no entries,
// small enough to be inline.
var EmptyRoot = func() cas.ObjectIdentifier {
	data := encodeNode(&node{children: make([]ref, 1)})
	return cas.ObjectIdentifier{Digest: cas.ComputeDigest(cas.KindTreeNode, false, data)}
}()

func (s *Store) loadID(id cas.ObjectIdentifier) (*node, error) {
	if !id.Digest.IsTreeNode() {
		return nil, fmt.Errorf("btree: %s is not a tree node", id)
	}
	if s.cache != nil {
		if n, ok := s.cache.get(string(id.Digest)); ok {
			return n, nil
		}
	}
	data, err := s.readObject(id)
	if err != nil {
		return nil, fmt.Errorf("btree: read node %s: %w", id, err)
	}
	n, err := decodeNode(data)
	if err != nil {
		return nil, fmt.Errorf("btree: node %s: %w", id, err)
	}
	if s.cache != nil {
		s.cache.set(string(id.Digest), n)
	}
	return n, nil
}

// readObject returns a node's bytes, joining its pieces if it was split.
func (s *Store) readObject(id cas.ObjectIdentifier) ([]byte, error) {
	if !id.Digest.IsIndex() {
		return cas.GetPiece(s.pieces, id.Digest, nil)
	}
	r, err := cas.NewReader(s.pieces, id, nil)
	if err != nil {
		return nil, err
	}
	if r.Size() > 1<<30 {
		return nil, fmt.Errorf("node of %d bytes", r.Size())
	}
	buf := make([]byte, r.Size())
	if _, err := r.ReadAt(buf, 0); err != nil && len(buf) > 0 {
		return nil, err
	}
	return buf, nil
}

// load returns the node r points to, nil for an empty subtree. parent is the
// level of the node holding r, which bounds the child's level.
func (s *Store) load(r ref, parent int) (*node, error) {
	if r.n != nil {
		return r.n, nil
	}
	if r.id.Digest == "" {
		return nil, nil
	}
	n, err := s.loadID(r.id)
	if err != nil {
		return nil, err
	}
	if parent >= 0 && int(n.level) >= parent {
		return nil, fmt.Errorf("btree: node %s of level %d under a node of level %d", r.id, n.level, parent)
	}
	if len(n.entries) == 0 {
		if parent >= 0 {
			return nil, fmt.Errorf("btree: empty node %s below the root", r.id)
		}
		return nil, nil
	}
	return n, nil
}

// ErrKeyTooLong reports a key over MaxKeySize.
var ErrKeyTooLong = errors.New("key too long")

// MaxKeySize is the longest key a page holds. It leaves room for deep paths
// while keeping a tree node's worst case within a few chunks.
const MaxKeySize = 8192
