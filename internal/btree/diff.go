package btree

import "github.com/ledgerfs/ledgerfs/cas"

// Change is one difference between two trees: Before is nil for a key added,
// After is nil for a key removed.
type Change struct {
	Key    string
	Before *Entry
	After  *Entry
}

// cursor walks a tree as a sequence of items: child 0, entry 0, child 1, ...
// so that two cursors can skip equal subtrees together.
type cursor struct {
	s     *Store
	stack []frame2
}

type frame2 struct {
	n   *node
	pos int // 2*i is children[i], 2*i+1 is entries[i]
}

func (c *cursor) init(root cas.ObjectIdentifier) error {
	if root == EmptyRoot {
		return nil
	}
	n, err := c.s.load(ref{id: root}, -1)
	if err != nil || n == nil {
		return err
	}
	c.stack = []frame2{{n: n}}
	return nil
}

// peek returns the next item: a non-empty child ref, or an entry. ok is false
// at the end.
func (c *cursor) peek() (child ref, level int, e *Entry, ok bool) {
	for len(c.stack) > 0 {
		f := &c.stack[len(c.stack)-1]
		if f.pos > 2*len(f.n.entries) {
			c.stack = c.stack[:len(c.stack)-1]
			continue
		}
		if f.pos%2 == 1 {
			return ref{}, int(f.n.level), &f.n.entries[f.pos/2], true
		}
		r := f.n.children[f.pos/2]
		if r.empty() {
			f.pos++
			continue
		}
		return r, int(f.n.level), nil, true
	}
	return ref{}, 0, nil, false
}

func (c *cursor) advance() { c.stack[len(c.stack)-1].pos++ }

// descend replaces the child at the cursor by its items.
func (c *cursor) descend(r ref, parent int) error {
	c.advance()
	n, err := c.s.load(r, parent)
	if err != nil || n == nil {
		return err
	}
	c.stack = append(c.stack, frame2{n: n})
	return nil
}

func (c *cursor) childLevel(r ref, parent int) (int, error) {
	n, err := c.s.load(r, parent)
	if err != nil || n == nil {
		return -1, err
	}
	return int(n.level), nil
}

// Diff calls fn for every key whose entry differs between the trees with
// roots a and b, in key order. Subtrees with the same id on both sides are
// skipped without being read.
func (s *Store) Diff(a, b cas.ObjectIdentifier, fn func(Change) error) error {
	ca, cb := &cursor{s: s}, &cursor{s: s}
	if err := ca.init(a); err != nil {
		return err
	}
	if err := cb.init(b); err != nil {
		return err
	}
	for {
		ra, pa, ea, oka := ca.peek()
		rb, pb, eb, okb := cb.peek()
		switch {
		case !oka && !okb:
			return nil
		case oka && okb && ea == nil && eb == nil && ra.id == rb.id:
			ca.advance()
			cb.advance()
		case oka && ea == nil && okb && eb == nil:
			// Two different subtrees: open the higher one, or both.
			la, err := ca.childLevel(ra, pa)
			if err != nil {
				return err
			}
			lb, err := cb.childLevel(rb, pb)
			if err != nil {
				return err
			}
			if la >= lb {
				if err := ca.descend(ra, pa); err != nil {
					return err
				}
			}
			if lb >= la {
				if err := cb.descend(rb, pb); err != nil {
					return err
				}
			}
		case oka && ea == nil:
			if err := ca.descend(ra, pa); err != nil {
				return err
			}
		case okb && eb == nil:
			if err := cb.descend(rb, pb); err != nil {
				return err
			}
		case !okb || (oka && ea.Key < eb.Key):
			if err := fn(Change{Key: ea.Key, Before: ea}); err != nil {
				return err
			}
			ca.advance()
		case !oka || eb.Key < ea.Key:
			if err := fn(Change{Key: eb.Key, After: eb}); err != nil {
				return err
			}
			cb.advance()
		default:
			if !ea.Equal(*eb) {
				if err := fn(Change{Key: ea.Key, Before: ea, After: eb}); err != nil {
					return err
				}
			}
			ca.advance()
			cb.advance()
		}
	}
}

// KeyChanged reports whether key's entry differs between the trees with
// roots a and b, and returns the entry in a. It descends both trees along
// the key's search path together and stops at the first subtree they share,
// so unchanged parts of the trees are not read: the cost of tracking one
// entry through history is the changed nodes on its path.
func (s *Store) KeyChanged(a, b cas.ObjectIdentifier, key string) (Entry, bool, bool, error) {
	if a == b {
		e, ok, err := s.Open(a).Get(key)
		return e, ok, false, err
	}
	type side struct {
		r      ref
		parent int
		e      Entry
		found  bool
		done   bool
	}
	root := func(id cas.ObjectIdentifier) side {
		if id == EmptyRoot {
			return side{parent: -1, done: true}
		}
		return side{r: ref{id: id}, parent: -1}
	}
	sa, sb := root(a), root(b)
	step := func(sd *side) error {
		n, err := s.load(sd.r, sd.parent)
		if err != nil || n == nil {
			sd.done = true
			return err
		}
		i, found := search(n.entries, key)
		if found {
			sd.e, sd.found, sd.done = n.entries[i], true, true
			return nil
		}
		sd.r, sd.parent = n.children[i], int(n.level)
		return nil
	}
	shared := false
	for !sa.done || !sb.done {
		if !sa.done && !sb.done && sa.r.id == sb.r.id {
			shared = true // the rest of the path is one subtree
			sb.done = true
		}
		if !sa.done {
			if err := step(&sa); err != nil {
				return Entry{}, false, false, err
			}
		}
		if !sb.done {
			if err := step(&sb); err != nil {
				return Entry{}, false, false, err
			}
		}
	}
	if shared {
		return sa.e, sa.found, false, nil
	}
	return sa.e, sa.found, sa.found != sb.found || sa.found && !sa.e.Equal(sb.e), nil
}
