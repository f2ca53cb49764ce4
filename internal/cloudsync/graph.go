package cloudsync

import (
	"bytes"
	"container/heap"
	"errors"

	"github.com/ledgerfs/ledgerfs/store"
)

// graph reads a page's commits, and commits fetched but not landed yet.
type graph struct {
	p     *store.Page
	extra map[store.CommitID]*store.Commit
	// known are ancestors of a commit, beyond its parents, that a walk
	// from it may not reach here: the commits between were pruned from
	// the store (see knownEdges). Walks take them as parents.
	known map[store.CommitID][]*store.Commit
}

// know records ancs as ancestors of c. Only older generations are taken:
// a walk steps to lower generations only, and a true ancestor is older.
func (g *graph) know(c *store.Commit, ancs []*store.Commit) {
	for _, a := range ancs {
		if a.ID == c.ID || a.Generation >= c.Generation {
			continue
		}
		if g.known == nil {
			g.known = map[store.CommitID][]*store.Commit{}
		}
		g.known[c.ID] = append(g.known[c.ID], a)
	}
}

func (g *graph) commit(id store.CommitID) (*store.Commit, error) {
	if c, ok := g.extra[id]; ok {
		return c, nil
	}
	if id == store.FirstCommitID {
		return store.FirstCommit(), nil
	}
	c, err := g.p.Commit(id)
	if errors.Is(err, store.ErrNotFound) {
		// Pruned here (history starts after it), or not here at all (a
		// page whose history came grafted): the walk ends there.
		return nil, nil
	}
	return c, err
}

// isAncestor reports whether a is b or an ancestor of b. It walks back
// from b no further than a's generation.
func (g *graph) isAncestor(a, b *store.Commit) (bool, error) {
	if a.ID == store.FirstCommitID {
		return true, nil // of every commit, whatever history is here
	}
	seen := map[store.CommitID]bool{}
	stack := []*store.Commit{b}
	for len(stack) > 0 {
		c := stack[len(stack)-1]
		stack = stack[:len(stack)-1]
		if c.ID == a.ID {
			return true, nil
		}
		if seen[c.ID] || c.Generation <= a.Generation {
			continue
		}
		seen[c.ID] = true
		for _, pid := range c.Parents {
			pc, err := g.commit(pid)
			if err != nil {
				return false, err
			}
			if pc != nil {
				stack = append(stack, pc)
			}
		}
		stack = append(stack, g.known[c.ID]...)
	}
	return false, nil
}

// mergeBase returns the common ancestor of a and b of highest generation
// (ties: the larger id), the base of their three-way merge: the same
// whichever of the two is local.
func (g *graph) mergeBase(a, b *store.Commit) (*store.Commit, error) {
	const fromA, fromB = 1, 2
	color := map[store.CommitID]int{a.ID: fromA, b.ID: fromB}
	q := &commitQueue{a, b}
	heap.Init(q)
	queued := map[store.CommitID]bool{a.ID: true, b.ID: true}
	for q.Len() > 0 {
		c := heap.Pop(q).(*store.Commit)
		if color[c.ID] == fromA|fromB {
			return c, nil
		}
		if err := g.paint(q, queued, color, c, color[c.ID]); err != nil {
			return nil, err
		}
	}
	return store.FirstCommit(), nil
}

// mergeBases returns the best common ancestors of a and b: the common
// ancestors of which none is an ancestor of another, in the order of
// commitQueue (the same on every device). Heads that crossed merges have
// several; the first commit when they share none here.
func (g *graph) mergeBases(a, b *store.Commit) ([]*store.Commit, error) {
	const fromA, fromB, stale = 1, 2, 4
	color := map[store.CommitID]int{a.ID: fromA, b.ID: fromB}
	q := &commitQueue{a, b}
	heap.Init(q)
	queued := map[store.CommitID]bool{a.ID: true, b.ID: true}
	var found []*store.Commit
	for q.Len() > 0 {
		// A commit's children have higher generations, so all of them
		// came out before it: its colors are final here.
		c := heap.Pop(q).(*store.Commit)
		flags := color[c.ID]
		if flags&(fromA|fromB) == fromA|fromB && flags&stale == 0 {
			found = append(found, c)
			flags |= stale // its ancestors are common, and no better
			color[c.ID] = flags
		}
		if err := g.paint(q, queued, color, c, flags); err != nil {
			return nil, err
		}
		live := false
		for _, qc := range *q {
			live = live || color[qc.ID]&stale == 0
		}
		if !live {
			break
		}
	}
	if len(found) == 0 {
		return []*store.Commit{store.FirstCommit()}, nil
	}
	// A commit found before its descendant's stale color reached it
	// (through another path) is an ancestor of another found one.
	var best []*store.Commit
	for i, c := range found {
		covered := false
		for j, d := range found {
			if i == j || c.ID == d.ID {
				continue
			}
			anc, err := g.isAncestor(c, d)
			if err != nil {
				return nil, err
			}
			if anc {
				covered = true
				break
			}
		}
		if !covered {
			best = append(best, c)
		}
	}
	return best, nil
}

// paint gives c's parents, and its known ancestors, the colors flags, and
// queues those not queued before (a parent pruned here ends the walk
// there).
func (g *graph) paint(q *commitQueue, queued map[store.CommitID]bool, color map[store.CommitID]int, c *store.Commit, flags int) error {
	for _, pid := range c.Parents {
		color[pid] |= flags
		if queued[pid] {
			continue
		}
		pc, err := g.commit(pid)
		if err != nil {
			return err
		}
		queued[pid] = true
		if pc != nil {
			heap.Push(q, pc)
		}
	}
	for _, a := range g.known[c.ID] {
		color[a.ID] |= flags
		if !queued[a.ID] {
			queued[a.ID] = true
			heap.Push(q, a)
		}
	}
	return nil
}

// commitQueue pops the commit of highest generation first (ties: larger id).
type commitQueue []*store.Commit

func (q commitQueue) Len() int { return len(q) }
func (q commitQueue) Less(i, j int) bool {
	if q[i].Generation != q[j].Generation {
		return q[i].Generation > q[j].Generation
	}
	return bytes.Compare(q[i].ID[:], q[j].ID[:]) > 0
}
func (q commitQueue) Swap(i, j int) { q[i], q[j] = q[j], q[i] }
func (q *commitQueue) Push(x any)   { *q = append(*q, x.(*store.Commit)) }
func (q *commitQueue) Pop() any {
	old := *q
	c := old[len(old)-1]
	*q = old[:len(old)-1]
	return c
}
