package btree

import (
	"fmt"
	"slices"

	"github.com/restic/chunker"

	"github.com/ledgerfs/ledgerfs/cas"
)

// Tree is a tree being read or edited. Edits are in memory until Write; a
// Tree is not safe for concurrent edits, but stored trees are immutable and
// any number of Trees may read them at once.
type Tree struct {
	s      *Store
	root   ref
	hidden func(key string) bool
	// replaced are the stored nodes the edits copied (Forget).
	replaced []cas.Digest
}

// Hiding returns a view of t for reading in which the keys hidden reports
// are absent, from Get and from iterators: changes queued but not committed
// yet (a page's pending deletes) show through it.
func (t *Tree) Hiding(hidden func(key string) bool) *Tree {
	return &Tree{s: t.s, root: t.root, hidden: hidden}
}

// Open returns the tree with the given root.
func (s *Store) Open(root cas.ObjectIdentifier) *Tree {
	if root == EmptyRoot {
		return &Tree{s: s}
	}
	return &Tree{s: s, root: ref{id: root}}
}

// Get returns the entry for key.
func (t *Tree) Get(key string) (Entry, bool, error) {
	r, parent := t.root, -1
	for {
		n, err := t.s.load(r, parent)
		if err != nil || n == nil {
			return Entry{}, false, err
		}
		i, found := search(n.entries, key)
		if found {
			if t.hidden != nil && t.hidden(key) {
				return Entry{}, false, nil
			}
			return n.entries[i], true, nil
		}
		r, parent = n.children[i], int(n.level)
	}
}

// Put inserts or replaces an entry.
func (t *Tree) Put(e Entry) error {
	if len(e.Key) > MaxKeySize {
		return fmt.Errorf("btree: put %d-byte key: %w", len(e.Key), ErrKeyTooLong)
	}
	r, err := t.insert(t.root, -1, e, Level(e.Key))
	if err != nil {
		return err
	}
	t.root = r
	return nil
}

// Delete removes key; it reports whether the key was there.
func (t *Tree) Delete(key string) (bool, error) {
	r, found, err := t.delete(t.root, -1, key, Level(key))
	if err != nil || !found {
		return false, err
	}
	t.root = r
	return true, nil
}

// Forget drops the stored nodes that this tree's edits replaced from the
// node cache. Called once the tree is a page's head, when only the page's
// past refers to them: a commit replaces every node on the path to each key
// it changes, and the cache's admission policy favours the old versions,
// often read, over the new ones, so that they filled the cache while the
// live tree's nodes were decoded again and again.
func (t *Tree) Forget() {
	for _, d := range t.replaced {
		t.s.cache.del(string(d))
	}
	t.replaced = nil
}

// replacing notes that an edit copies the node r refers to, if stored and
// there is a cache to forget it from.
func (t *Tree) replacing(r ref) {
	if t.s.cache != nil && !r.dirty() && r.id.Digest != "" {
		t.replaced = append(t.replaced, r.id.Digest)
	}
}

// Clear removes every entry.
func (t *Tree) Clear() { t.root = ref{} }

// mk returns a ref to a new node, collapsing a node with no entries into its
// only child so that the tree stays canonical.
// The new node owns entries and children: edits later in the session change
// it in place, so neither may share an array with a stored node, which
// readers of other trees share through the cache.
func mk(level uint8, entries []Entry, children []ref) ref {
	if len(entries) == 0 {
		return children[0]
	}
	return ref{n: &node{level: level, entries: entries, children: children}}
}

func (t *Tree) insert(r ref, parent int, e Entry, lv uint8) (ref, error) {
	n, err := t.s.load(r, parent)
	if err != nil {
		return ref{}, err
	}
	if n == nil {
		return mk(lv, []Entry{e}, make([]ref, 2)), nil
	}
	if n.level < lv {
		l, rr, err := t.split(r, parent, e.Key)
		if err != nil {
			return ref{}, err
		}
		return mk(lv, []Entry{e}, []ref{l, rr}), nil
	}
	i, found := search(n.entries, e.Key)
	if r.dirty() {
		// A node made by this edit session belongs to this tree alone:
		// change it in place rather than copying it for every key.
		switch {
		case n.level == lv && found:
			n.entries[i] = e
		case n.level == lv:
			l, rr, err := t.split(n.children[i], int(n.level), e.Key)
			if err != nil {
				return ref{}, err
			}
			n.entries = slices.Insert(n.entries, i, e)
			n.children[i] = l
			n.children = slices.Insert(n.children, i+1, rr)
		default:
			c, err := t.insert(n.children[i], int(n.level), e, lv)
			if err != nil {
				return ref{}, err
			}
			n.children[i] = c
		}
		return r, nil
	}
	t.replacing(r)
	if n.level == lv {
		entries := make([]Entry, 0, len(n.entries)+1)
		children := make([]ref, 0, len(n.children)+1)
		if found {
			entries = append(append(append(entries, n.entries[:i]...), e), n.entries[i+1:]...)
			children = append(children, n.children...)
			return mk(n.level, entries, children), nil
		}
		l, rr, err := t.split(n.children[i], int(n.level), e.Key)
		if err != nil {
			return ref{}, err
		}
		entries = append(append(append(entries, n.entries[:i]...), e), n.entries[i:]...)
		children = append(append(append(children, n.children[:i]...), l, rr), n.children[i+1:]...)
		return mk(n.level, entries, children), nil
	}
	c, err := t.insert(n.children[i], int(n.level), e, lv)
	if err != nil {
		return ref{}, err
	}
	children := append([]ref(nil), n.children...)
	children[i] = c
	return mk(n.level, slices.Clone(n.entries), children), nil
}

// split divides the subtree r into the canonical trees of its keys below and
// above key, which it does not hold.
func (t *Tree) split(r ref, parent int, key string) (ref, ref, error) {
	n, err := t.s.load(r, parent)
	if err != nil || n == nil {
		return ref{}, ref{}, err
	}
	i, found := search(n.entries, key)
	if found {
		return ref{}, ref{}, fmt.Errorf("btree: split at key %q held at level %d", key, n.level)
	}
	cl, cr, err := t.split(n.children[i], int(n.level), key)
	if err != nil {
		return ref{}, ref{}, err
	}
	t.replacing(r)
	lc := append(append([]ref(nil), n.children[:i]...), cl)
	rc := append([]ref{cr}, n.children[i+1:]...)
	return mk(n.level, slices.Clone(n.entries[:i]), lc), mk(n.level, slices.Clone(n.entries[i:]), rc), nil
}

func (t *Tree) delete(r ref, parent int, key string, lv uint8) (ref, bool, error) {
	n, err := t.s.load(r, parent)
	if err != nil || n == nil || n.level < lv {
		return r, false, err
	}
	i, found := search(n.entries, key)
	if n.level > lv {
		c, found, err := t.delete(n.children[i], int(n.level), key, lv)
		if err != nil || !found {
			return r, false, err
		}
		if r.dirty() {
			n.children[i] = c
			return r, true, nil
		}
		t.replacing(r)
		children := append([]ref(nil), n.children...)
		children[i] = c
		return mk(n.level, slices.Clone(n.entries), children), true, nil
	}
	if !found {
		return r, false, nil
	}
	j, err := t.join(n.children[i], n.children[i+1], int(n.level))
	if err != nil {
		return r, false, err
	}
	if r.dirty() {
		// This session's node: change it in place, as insert does.
		n.entries = slices.Delete(n.entries, i, i+1)
		n.children[i] = j
		n.children = slices.Delete(n.children, i+1, i+2)
		if len(n.entries) == 0 {
			return n.children[0], true, nil
		}
		return r, true, nil
	}
	t.replacing(r)
	// One allocation of the final size each: leaves of a large directory
	// hold hundreds of entries, and appending the two halves to a nil
	// slice copied them twice (a sixth of rm -rf's CPU).
	entries := make([]Entry, 0, len(n.entries)-1)
	entries = append(append(entries, n.entries[:i]...), n.entries[i+1:]...)
	children := make([]ref, 0, len(n.children)-1)
	children = append(append(append(children, n.children[:i]...), j), n.children[i+2:]...)
	return mk(n.level, entries, children), true, nil
}

// join merges two adjacent subtrees, every key of a below every key of b.
func (t *Tree) join(a, b ref, parent int) (ref, error) {
	na, err := t.s.load(a, parent)
	if err != nil {
		return ref{}, err
	}
	nb, err := t.s.load(b, parent)
	if err != nil {
		return ref{}, err
	}
	switch {
	case na == nil:
		return b, nil
	case nb == nil:
		return a, nil
	case na.level > nb.level:
		last := len(na.children) - 1
		j, err := t.join(na.children[last], b, int(na.level))
		if err != nil {
			return ref{}, err
		}
		t.replacing(a)
		children := append([]ref(nil), na.children...)
		children[last] = j
		return mk(na.level, slices.Clone(na.entries), children), nil
	case nb.level > na.level:
		j, err := t.join(a, nb.children[0], int(nb.level))
		if err != nil {
			return ref{}, err
		}
		t.replacing(b)
		children := append([]ref(nil), nb.children...)
		children[0] = j
		return mk(nb.level, slices.Clone(nb.entries), children), nil
	}
	last := len(na.children) - 1
	j, err := t.join(na.children[last], nb.children[0], int(na.level))
	if err != nil {
		return ref{}, err
	}
	t.replacing(a)
	t.replacing(b)
	entries := make([]Entry, 0, len(na.entries)+len(nb.entries))
	entries = append(append(entries, na.entries...), nb.entries...)
	children := make([]ref, 0, len(na.children)+len(nb.children)-1)
	children = append(append(append(children, na.children[:last]...), j), nb.children[1:]...)
	return mk(na.level, entries, children), nil
}

// Write stores the nodes edited since the tree was opened, through sink (nil:
// the store's pieces), and returns the root id and the number of nodes
// written. Children are written before their parents.
func (t *Tree) Write(sink cas.Sink) (cas.ObjectIdentifier, int, error) {
	if t.root.empty() {
		return EmptyRoot, 0, nil
	}
	if sink == nil {
		sink = t.s.pieces
	}
	written := 0
	r, err := t.write(t.root, sink, &written)
	if err != nil {
		return cas.ObjectIdentifier{}, 0, err
	}
	t.root = r
	return r.id, written, nil
}

func (t *Tree) write(r ref, sink cas.Sink, written *int) (ref, error) {
	if !r.dirty() {
		return r, nil
	}
	n := r.n
	for i, c := range n.children {
		w, err := t.write(c, sink, written)
		if err != nil {
			return ref{}, err
		}
		// Keep only the id: a cached node must not pin its subtree.
		n.children[i] = ref{id: w.id}
	}
	id, err := cas.WriteObject(sink, chunker.Pol(t.s.pol.Load()), cas.KindTreeNode, encodeNode(n))
	if err != nil {
		return ref{}, fmt.Errorf("btree: write node: %w", err)
	}
	*written++
	if t.s.cache != nil {
		t.s.cache.set(string(id.Digest), n)
	}
	return ref{id: id, n: n}, nil
}

// Identity names the entries t shows: two trees of one store with the same
// identity show the same entries. ok is false for a tree with unwritten
// edits or hidden keys, whose entries no id names.
func (t *Tree) Identity() (id cas.ObjectIdentifier, ok bool) {
	if t.hidden != nil || t.root.dirty() {
		return cas.ObjectIdentifier{}, false
	}
	if t.root.empty() {
		return EmptyRoot, true
	}
	return t.root.id, true
}

// Root returns the id of a tree without unwritten edits.
func (t *Tree) Root() (cas.ObjectIdentifier, error) {
	if t.root.empty() {
		return EmptyRoot, nil
	}
	if t.root.dirty() {
		return cas.ObjectIdentifier{}, fmt.Errorf("btree: tree has unwritten edits")
	}
	return t.root.id, nil
}

// Refs returns what a stored node points to: its child nodes and its
// entries' values. Recovery walks trees with it.
func (s *Store) Refs(id cas.ObjectIdentifier) (children, values []cas.ObjectIdentifier, err error) {
	n, err := s.loadID(id)
	if err != nil {
		return nil, nil, err
	}
	for _, c := range n.children {
		if !c.empty() {
			children = append(children, c.id)
		}
	}
	for _, e := range n.entries {
		values = append(values, e.Value)
	}
	return children, values, nil
}
