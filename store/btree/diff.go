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
