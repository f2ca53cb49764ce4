// Package check examines a page as fsck does: every row against the
// documented schema and every object against its digest, then every commit
// the heads reach, every tree node of their trees and every piece of every
// value those trees name, and the rows of journals and pieces that only a
// crash leaves.
//
// Layer: above store, btree and cas; the command line runs it.
package check

import (
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"

	"github.com/ledgerfs/ledgerfs/cas"
	"github.com/ledgerfs/ledgerfs/internal/btree"
	"github.com/ledgerfs/ledgerfs/store"
)

// maxProblems bounds a page's report: a missing subtree would otherwise
// list every piece under it.
const maxProblems = 50

// Report is what Page found in one page.
type Report struct {
	Problems []string
	// Leftovers are what a crash leaves and recovery (or --repair)
	// settles: journals not committed, transient pieces.
	Leftovers []string
	// Status is what disagrees between objects and status rows.
	Status  *store.StatusFaults
	Commits int
	// Pruned counts parents a collection removed: history before the
	// commits that name them is gone, as the retention policy says.
	Pruned int
	Nodes  int
	// Unreached counts stored pieces no stored commit reaches: what a
	// collection stopped or killed before its end left; the next one
	// deletes them.
	Unreached int
	Values    int
	Pieces    int
	// Remote counts pieces not held that the remote store holds: values
	// a lazy pull left to be fetched when read.
	Remote int
	// Notes say what was not checked, and why.
	Notes []string
}

// OK reports whether the page has no problem and nothing left over.
func (r *Report) OK() bool { return len(r.Problems) == 0 && len(r.Leftovers) == 0 }

func (r *Report) problem(format string, args ...any) bool {
	if len(r.Problems) < maxProblems {
		r.Problems = append(r.Problems, fmt.Sprintf(format, args...))
	} else if len(r.Problems) == maxProblems {
		r.Problems = append(r.Problems, "(more problems not listed)")
	}
	return len(r.Problems) <= maxProblems
}

// Page checks p. decodeOp parses journal entry rows (journal.DecodeOp).
func Page(p *store.Page, decodeOp func(key string, v []byte) error) (*Report, error) {
	r := &Report{}
	counts, err := p.VerifyRows(decodeOp)
	if err != nil {
		r.problem("%v", err)
	}
	if r.Status, err = p.CheckStatus(); err != nil {
		return nil, err
	}
	if n := len(r.Status.Missing); n > 0 {
		r.problem("%d objects have no status row (--repair makes them local)", n)
	}
	if n := len(r.Status.Orphans); n > 0 {
		r.problem("%d status rows name objects that are not stored (--repair deletes them)", n)
	}
	if n := len(r.Status.Doubled); n > 0 {
		r.problem("%d objects have more than one status row (--repair keeps the most advanced)", n)
	}
	implicit, err := p.ImplicitJournals()
	if err != nil {
		return nil, err
	}
	if len(implicit) > 0 {
		r.Leftovers = append(r.Leftovers, fmt.Sprintf("%d journals of changes not committed (left by a crash; a mount or --repair commits them)", len(implicit)))
	} else if n := counts["journals/{id}/entry/"]; n > 0 {
		r.Leftovers = append(r.Leftovers, fmt.Sprintf("%d journal rows of transactions never committed or already landed (a mount or --repair deletes them)", n))
	}
	if n := counts[store.StatusPrefix(store.Transient)]; n > 0 {
		r.Leftovers = append(r.Leftovers, fmt.Sprintf("%d transient pieces (a crash's or an unfinished write's; a mount or --repair keeps those a commit reaches and deletes the rest)", n))
	}
	heads, err := p.Heads()
	if err != nil {
		r.problem("heads: %v", err)
		return r, nil
	}
	for _, h := range heads {
		links(p.Tree(h), h.ID, r)
	}
	w := walker{p: p, r: r, nodes: map[cas.Digest]bool{}, pieces: map[cas.Digest]bool{}, seen: map[store.CommitID]bool{}}
	w.commits(heads)
	// Commits a collection kept after pruning their children's parents
	// are reached by no parent link.
	err = p.CommitIDs(nil, func(id store.CommitID) error {
		if w.seen[id] {
			return nil
		}
		c, err := p.Commit(id)
		if err != nil {
			r.problem("commit %s: %v", id, err)
			return nil
		}
		w.commits([]*store.Commit{c})
		return nil
	})
	if err != nil {
		r.problem("commits: %v", err)
	}
	for _, s := range []store.PieceStatus{store.Local, store.Synced} {
		err := p.Pieces(s, func(d cas.Digest) error {
			if !w.nodes[d] && !w.pieces[d] {
				r.Unreached++
			}
			return nil
		})
		if err != nil {
			return nil, err
		}
	}
	return r, nil
}

type walker struct {
	p      *store.Page
	r      *Report
	nodes  map[cas.Digest]bool
	pieces map[cas.Digest]bool
	seen   map[store.CommitID]bool
}

// commits walks history from the heads: every commit, parents included.
func (w *walker) commits(heads []*store.Commit) {
	seen := w.seen
	queue := heads
	for len(queue) > 0 {
		c := queue[0]
		queue = queue[1:]
		if seen[c.ID] {
			continue
		}
		seen[c.ID] = true
		if c.ID != store.FirstCommitID {
			// Ledger's first commit, empty, is every page's: counted
			// as ledgerfs du and .ledger/stats count, it is not.
			w.r.Commits++
		}
		if c.Root != btree.EmptyRoot && !w.node(c.Root, c.ID) {
			return
		}
		for _, id := range c.Parents {
			if seen[id] {
				continue
			}
			parent, err := w.p.Commit(id)
			if errors.Is(err, store.ErrNotFound) {
				w.r.Pruned++ // a collection pruned it: history starts later
				continue
			}
			if err != nil {
				if !w.r.problem("commit %s: parent %s: %v", c.ID, id, err) {
					return
				}
				continue
			}
			queue = append(queue, parent)
		}
	}
}

// node walks a tree node once: its children and its entries' values. It
// returns false once the report is full.
func (w *walker) node(id cas.ObjectIdentifier, c store.CommitID) bool {
	if id.Digest.IsInline() || w.nodes[id.Digest] {
		return true
	}
	w.nodes[id.Digest] = true
	w.r.Nodes++
	if held, err := w.p.Has(id.Digest); err != nil {
		return w.r.problem("commit %s: tree node %s: %v", c, short(id.Digest), err)
	} else if !held {
		// A page that came back after eviction fetches its tree as
		// it is read.
		if located, err := w.p.Located(id.Digest); err != nil || !located {
			return w.r.problem("commit %s: tree node %s is missing", c, short(id.Digest))
		}
		w.r.Remote++
		return true
	}
	// A large node is stored as an index over chunks.
	if id.Digest.IsIndex() {
		err := cas.Walk(w.p, id, func(d cas.Digest) (bool, error) {
			if d != id.Digest && !w.nodes[d] {
				w.nodes[d] = true
				w.r.Pieces++
			}
			return d.IsIndex(), nil
		}, nil)
		if err != nil {
			return w.r.problem("commit %s: tree node %s: %v", c, short(id.Digest), err)
		}
	}
	children, values, err := w.p.Nodes().Refs(id)
	if err != nil {
		return w.r.problem("commit %s: tree node %s: %v", c, short(id.Digest), err)
	}
	for _, v := range values {
		if !w.value(v, c) {
			return false
		}
	}
	for _, ch := range children {
		if !w.node(ch, c) {
			return false
		}
	}
	return true
}

// value checks that every piece of a value is stored; the row check has
// matched each stored piece with its digest.
func (w *walker) value(id cas.ObjectIdentifier, c store.CommitID) bool {
	if w.pieces[id.Digest] {
		return true
	}
	w.r.Values++
	ok := true
	err := cas.Walk(w.p, id, func(d cas.Digest) (bool, error) {
		if d.IsInline() || w.pieces[d] {
			return false, nil
		}
		w.pieces[d] = true
		w.r.Pieces++
		has, err := w.p.Has(d)
		if err != nil {
			return false, err
		}
		if !has {
			// A value of a lazy pull is fetched when read.
			if located, err := w.p.Located(d); err != nil || located {
				w.r.Remote++
				return false, err
			}
			ok = w.r.problem("commit %s: piece %s of value %s is missing", c, short(d), short(id.Digest))
			return false, nil
		}
		return d.IsIndex(), nil
	}, nil)
	if err != nil {
		return w.r.problem("commit %s: value %s: %v", c, short(id.Digest), err)
	}
	return ok
}

func short(d cas.Digest) string {
	s := fmt.Sprintf("%x", []byte(d))
	return strings.TrimSpace(s[:min(len(s), 16)])
}

// links checks a head's files with hard links: each name points at an
// entry that is a file's (a link key), holds no value of its own, and
// every such entry is pointed at by as many names as it counts.
func links(t *btree.Tree, c store.CommitID, r *Report) {
	names := map[string]uint32{}
	files := map[string]uint32{}
	it := t.Seek("")
	for it.Next() {
		e := it.Entry()
		switch {
		case btree.IsLinkKey(e.Key):
			if e.Meta.Link != "" {
				r.problem("commit %s: the entry of a file with hard links %q is itself a link", c, e.Key)
			}
			files[e.Key] = e.Meta.Nlink
		case e.Meta.Link != "":
			if !btree.IsLinkKey(e.Meta.Link) {
				r.problem("commit %s: name %q points at %q, not a file's entry", c, e.Key, e.Meta.Link)
			}
			if e.Meta.Size != 0 || !e.Value.Digest.IsInline() {
				r.problem("commit %s: name %q of a file with hard links holds a value of its own", c, e.Key)
			}
			names[e.Meta.Link]++
		}
	}
	if err := it.Err(); errors.Is(err, store.ErrRemoteOnly) {
		// Part of the tree is in the remote only (a page that came back
		// after eviction): the counts of names cannot be checked here.
		r.Notes = append(r.Notes, fmt.Sprintf("commit %s: hard links not checked: part of the tree is in the remote only", c))
		return
	} else if err != nil {
		r.problem("commit %s: list entries: %v", c, err)
		return
	}
	for _, g := range slices.Sorted(maps.Keys(names)) {
		n, ok := files[g]
		switch {
		case !ok:
			r.problem("commit %s: %d names point at %q, which is missing", c, names[g], g)
		case n != names[g]:
			r.problem("commit %s: %q counts %d names, %d point at it", c, g, n, names[g])
		}
	}
	for _, g := range slices.Sorted(maps.Keys(files)) {
		if names[g] == 0 {
			r.problem("commit %s: no name points at %q", c, g)
		}
	}
}
