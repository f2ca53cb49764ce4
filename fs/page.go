package fs

import (
	"sync"

	"github.com/ledgerfs/ledgerfs/journal"
	"github.com/ledgerfs/ledgerfs/store"
	"github.com/ledgerfs/ledgerfs/store/btree"
)

// pageRef is the filesystem's state of one page: its names (a rename
// changes them), the files created but not yet committed, and how many
// files are open. The page's db is acquired from the repository for each
// operation and held by open files.
type pageRef struct {
	fs *FS

	mu      sync.Mutex
	ledger  string
	name    string
	pending map[string]*fileNode // created, not yet committed, by key
	opens   int
}

func (pg *pageRef) names() (string, string) {
	pg.mu.Lock()
	defer pg.mu.Unlock()
	return pg.ledger, pg.name
}

func (pg *pageRef) acquire() (*store.Page, error) {
	l, n := pg.names()
	return pg.fs.repo.Acquire(l, n)
}

func (pg *pageRef) release(p *store.Page) { pg.fs.repo.Release(p) }

// view runs fn with the page and its head tree.
func (pg *pageRef) view(fn func(p *store.Page, head *store.Commit, t *btree.Tree) error) error {
	p, err := pg.acquire()
	if err != nil {
		return err
	}
	defer pg.release(p)
	head, err := p.Head()
	if err != nil {
		return err
	}
	return fn(p, head, p.Tree(head))
}

// apply commits ops through the page's implicit journal.
func (pg *pageRef) apply(sync bool, ops ...journal.Op) error {
	p, err := pg.acquire()
	if err != nil {
		return err
	}
	defer pg.release(p)
	return journal.CommitterFor(p).Apply(sync, ops...)
}

// id is the inode table id of a key: kind 'f' for a file, 'd' for a
// directory prefix.
func (pg *pageRef) id(kind byte, key string) string {
	l, n := pg.names()
	return pageID(l, n) + "\x00" + string(kind) + key
}

func (pg *pageRef) busy() bool {
	pg.mu.Lock()
	defer pg.mu.Unlock()
	return pg.opens > 0 || len(pg.pending) > 0
}

// empty reports whether the page has no entries.
func (pg *pageRef) empty() (bool, error) {
	if pg.busy() {
		return false, nil
	}
	empty := true
	err := pg.view(func(p *store.Page, head *store.Commit, t *btree.Tree) error {
		it := t.Seek("")
		empty = !it.Next()
		return it.Err()
	})
	return empty, err
}

func (pg *pageRef) pendingFile(key string) *fileNode {
	pg.mu.Lock()
	defer pg.mu.Unlock()
	return pg.pending[key]
}

// pendingUnder lists pending keys starting with prefix.
func (pg *pageRef) pendingUnder(prefix string) map[string]*fileNode {
	pg.mu.Lock()
	defer pg.mu.Unlock()
	var out map[string]*fileNode
	for k, f := range pg.pending {
		if len(k) >= len(prefix) && k[:len(prefix)] == prefix {
			if out == nil {
				out = map[string]*fileNode{}
			}
			out[k] = f
		}
	}
	return out
}
