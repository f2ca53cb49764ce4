package gc

import (
	"fmt"
	"time"

	"github.com/ledgerfs/ledgerfs/cas"
	"github.com/ledgerfs/ledgerfs/internal/btree"
	"github.com/ledgerfs/ledgerfs/store"
)

// Usage is where a page's space goes.
type Usage struct {
	Commits int
	Objects int   // pieces stored
	Stored  int64 // bytes their rows hold
	// Head is what the head reaches: pieces, the bytes their rows hold,
	// and the bytes of content they hold (uncompressed; tree nodes count
	// as stored).
	HeadObjects int
	HeadStored  int64
	HeadContent int64
	// History is what only history (older commits), unfinished writes
	// and garbage a collection has not reached yet hold: Stored less
	// HeadStored.
	History   int64
	Collected time.Time // last collection; zero if none
}

// Add adds o's counts to u's (a repository's total).
func (u *Usage) Add(o Usage) {
	u.Commits += o.Commits
	u.Objects += o.Objects
	u.Stored += o.Stored
	u.HeadObjects += o.HeadObjects
	u.HeadStored += o.HeadStored
	u.HeadContent += o.HeadContent
	u.History += o.History
}

// Ratio is the head's stored bytes over its content bytes: 1 uncompressed.
func (u Usage) Ratio() float64 {
	if u.HeadContent == 0 {
		return 1
	}
	return float64(u.HeadStored) / float64(u.HeadContent)
}

// PageUsage reads a page's usage: a walk of the head's tree and values,
// then every piece's row size. It reads every status row, so it takes time
// in proportion to the pieces stored, and holds the head's pieces.
func PageUsage(repo *store.Repository, p *store.Page) (Usage, error) {
	var u Usage
	var err error
	if u.Collected, err = repo.Collected(p.Ledger, p.Name); err != nil {
		return u, err
	}
	if err := p.CommitIDs(nil, func(store.CommitID) error { u.Commits++; return nil }); err != nil {
		return u, err
	}
	head, err := p.Head()
	if err != nil {
		return u, err
	}
	// The head's pieces with their content bytes (tree nodes: 0, counted as
	// stored below); then every piece's row, summed, and the head's.
	content := map[cas.Digest]int64{}
	count := func(d cas.Digest, n int64) bool {
		if d.IsInline() {
			return false
		}
		if _, ok := content[d]; ok {
			return false
		}
		content[d] = n
		return true
	}
	var node func(id cas.ObjectIdentifier) error
	node = func(id cas.ObjectIdentifier) error {
		if id.Digest.IsInline() {
			return nil
		}
		if _, ok := content[id.Digest]; ok {
			return nil
		}
		if held, err := p.Has(id.Digest); err != nil || !held {
			return err // fetched when read, with what is below it
		}
		// A large node is an index over chunks: count them all as the
		// node's, at their length as written (what a collection's
		// compression stores is less, and is not the head's content).
		err := cas.Walk(p, id, func(d cas.Digest) (bool, error) {
			if _, ok := content[d]; ok || d.IsInline() {
				return false, nil
			}
			data, err := cas.GetPiece(p, d, nil)
			if err != nil {
				return false, err
			}
			return count(d, int64(len(data))), nil
		}, nil)
		if err != nil {
			return err
		}
		children, _, err := p.Nodes().Refs(id)
		if err != nil {
			return err
		}
		for _, c := range children {
			if err := node(c); err != nil {
				return err
			}
		}
		return nil
	}
	if head.Root != btree.EmptyRoot {
		if err := node(head.Root); err != nil {
			return u, fmt.Errorf("gc: usage of %s/%s: %w", p.Ledger, p.Name, err)
		}
	}
	var value func(d cas.Digest, n int64) error
	value = func(d cas.Digest, n int64) error {
		if !d.IsIndex() {
			count(d, n)
			return nil
		}
		if held, err := p.Has(d); err != nil || !held {
			return err // not fetched yet (a lazy pull's): nothing held below
		}
		data, err := cas.GetPiece(p, d, nil)
		if err != nil {
			return err
		}
		if !count(d, int64(len(data))) {
			return nil
		}
		ix, err := cas.DecodeFileIndex(data)
		if err != nil {
			return err
		}
		for _, c := range ix.Children {
			if err := value(c.ID.Digest, int64(c.Size)); err != nil {
				return err
			}
		}
		return nil
	}
	it := p.Tree(head).Seek("")
	for it.Next() {
		e := it.Entry()
		if err := value(e.Value.Digest, int64(e.Meta.Size)); err != nil {
			return u, fmt.Errorf("gc: usage of %s: %w", e.Key, err)
		}
	}
	if err := it.Err(); err != nil {
		return u, err
	}
	err = p.Objects("", func(d cas.Digest, stored int64) error {
		u.Objects++
		u.Stored += stored
		if n, ok := content[d]; ok {
			u.HeadObjects++
			u.HeadStored += stored
			u.HeadContent += n
		}
		return nil
	})
	if err != nil {
		return u, err
	}
	u.History = u.Stored - u.HeadStored
	return u, nil
}

// Text is the usage as .ledger/stats shows it: one "name value" line each.
func (u Usage) Text() string {
	collected := "never"
	if !u.Collected.IsZero() {
		collected = u.Collected.UTC().Format(time.RFC3339)
	}
	return fmt.Sprintf("commits %d\nobjects %d\nstored_bytes %d\nhead_objects %d\nhead_stored_bytes %d\nhead_content_bytes %d\nhistory_bytes %d\ncompression_ratio %.3f\nlast_collection %s\n",
		u.Commits, u.Objects, u.Stored, u.HeadObjects, u.HeadStored, u.HeadContent, u.History, u.Ratio(), collected)
}
