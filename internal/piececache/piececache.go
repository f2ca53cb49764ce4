// Package piececache keeps pieces read from the remote store in files
// under a directory, up to a size, dropping the least recently used first,
// as JuiceFS's disk cache keeps blocks: what a device reads of its remote
// without keeping it in its page dbs. Everything in it is in the remote
// store, so anything may go at any time; a piece that no longer verifies
// (a damaged file) is dropped and read again.
//
// Layer: below the sync machinery; it imports cas only.
package piececache

import (
	"container/list"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/ledgerfs/ledgerfs/cas"
)

// Cache is a directory of pieces. Safe for concurrent use.
type Cache struct {
	dir   string
	mu    sync.Mutex
	lru   *list.List // of *entry, the most recently used first
	items map[string]*list.Element
	size  int64
	limit int64
	// Hits, Misses count Get's answers.
	hits, misses int64
}

type entry struct {
	name string // hex of the digest
	size int64
}

// Open opens the cache in dir, made if missing, holding at most limit
// bytes. What an earlier process left there is kept, the files changed
// last counted as used last.
func Open(dir string, limit int64) (*Cache, error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, fmt.Errorf("piececache: %w", err)
	}
	c := &Cache{dir: dir, lru: list.New(), items: map[string]*list.Element{}, limit: limit}
	type found struct {
		name string
		size int64
		mod  time.Time
	}
	var all []found
	err := filepath.WalkDir(dir, func(p string, e fs.DirEntry, err error) error {
		if err != nil || e.IsDir() {
			return err
		}
		if strings.HasPrefix(e.Name(), ".tmp-") {
			return os.Remove(p) // a write cut short
		}
		info, err := e.Info()
		if err != nil {
			return err
		}
		all = append(all, found{e.Name(), info.Size(), info.ModTime()})
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("piececache: %w", err)
	}
	slices.SortFunc(all, func(a, b found) int { return b.mod.Compare(a.mod) })
	for _, f := range all {
		c.items[f.name] = c.lru.PushBack(&entry{f.name, f.size})
		c.size += f.size
	}
	c.mu.Lock()
	c.trim()
	c.mu.Unlock()
	return c, nil
}

func (c *Cache) path(name string) string { return filepath.Join(c.dir, name[:2], name) }

// Get returns piece d if the cache holds it, verified.
func (c *Cache) Get(d cas.Digest) ([]byte, bool) {
	name := hex.EncodeToString([]byte(d))
	c.mu.Lock()
	el, ok := c.items[name]
	if ok {
		c.lru.MoveToFront(el)
		c.hits++
	} else {
		c.misses++
	}
	c.mu.Unlock()
	if !ok {
		return nil, false
	}
	data, err := os.ReadFile(c.path(name))
	if err == nil {
		err = d.Verify(data)
	}
	if err != nil {
		if !errors.Is(err, fs.ErrNotExist) {
			slog.Warn("piececache: a cached piece is damaged; it is read from the remote again", "piece", name, "err", err)
		}
		c.drop(name)
		return nil, false
	}
	return data, true
}

// Has reports whether the cache holds piece d.
func (c *Cache) Has(d cas.Digest) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	_, ok := c.items[hex.EncodeToString([]byte(d))]
	return ok
}

// Put keeps piece d, verified by the caller, dropping the least recently
// used pieces to stay under the limit. A piece larger than the limit is
// not kept; a failure to write is logged (the piece is read again).
func (c *Cache) Put(d cas.Digest, data []byte) {
	name := hex.EncodeToString([]byte(d))
	c.mu.Lock()
	_, held := c.items[name]
	limit := c.limit
	c.mu.Unlock()
	if held || int64(len(data)) > limit {
		return
	}
	if err := c.write(name, data); err != nil {
		slog.Warn("piececache: keep a piece", "piece", name, "err", err)
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if _, held := c.items[name]; held {
		return // put meanwhile, the same bytes
	}
	c.items[name] = c.lru.PushFront(&entry{name, int64(len(data))})
	c.size += int64(len(data))
	c.trim()
}

// write writes a piece's file whole: a temporary file renamed.
func (c *Cache) write(name string, data []byte) error {
	sub := filepath.Join(c.dir, name[:2])
	if err := os.MkdirAll(sub, 0o755); err != nil {
		return err
	}
	f, err := os.CreateTemp(sub, ".tmp-")
	if err != nil {
		return err
	}
	_, err = f.Write(data)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(f.Name(), c.path(name))
	}
	if err != nil {
		os.Remove(f.Name())
	}
	return err
}

// SetLimit changes the limit, dropping pieces if the cache is over it.
func (c *Cache) SetLimit(n int64) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.limit = max(n, 0)
	c.trim()
}

// Size is the bytes of the pieces the cache holds.
func (c *Cache) Size() int64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.size
}

// Stats are the cache's hits and misses so far.
func (c *Cache) Stats() (hits, misses int64) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.hits, c.misses
}

// trim drops the least recently used pieces until the cache is under its
// limit. Called with mu held.
func (c *Cache) trim() {
	for c.size > c.limit {
		el := c.lru.Back()
		if el == nil {
			return
		}
		c.remove(el)
	}
}

// drop forgets name and removes its file.
func (c *Cache) drop(name string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if el, ok := c.items[name]; ok {
		c.remove(el)
	}
}

// remove forgets el and removes its file. Called with mu held.
func (c *Cache) remove(el *list.Element) {
	e := el.Value.(*entry)
	c.lru.Remove(el)
	delete(c.items, e.name)
	c.size -= e.size
	if err := os.Remove(c.path(e.name)); err != nil && !errors.Is(err, fs.ErrNotExist) {
		slog.Warn("piececache: drop a piece", "piece", e.name, "err", err)
	}
}
