package btree

import "strings"

// Iterator walks a tree's entries in byte order, loading nodes as it goes.
type Iterator struct {
	t     *Tree
	stack []frame
	cur   Entry
	err   error
	pre   string
}

type frame struct {
	n         *node
	i         int  // next entry to return
	childDone bool // children[i] has been visited
}

// Seek returns an iterator positioned before the first entry with a key at or
// after start.
func (t *Tree) Seek(start string) *Iterator {
	it := &Iterator{t: t}
	r, parent := t.root, -1
	for {
		n, err := t.s.load(r, parent)
		if err != nil {
			it.err = err
			return it
		}
		if n == nil {
			return it
		}
		i, _ := search(n.entries, start)
		it.stack = append(it.stack, frame{n: n, i: i, childDone: true})
		r, parent = n.children[i], int(n.level)
	}
}

// Prefix returns an iterator over the entries whose key starts with prefix.
func (t *Tree) Prefix(prefix string) *Iterator {
	it := t.Seek(prefix)
	it.pre = prefix
	return it
}

// SeekPrefix returns an iterator over the keys with prefix from start on.
func (t *Tree) SeekPrefix(start, prefix string) *Iterator {
	it := t.Seek(max(start, prefix))
	it.pre = prefix
	return it
}

// Next advances to the next entry and reports whether there is one.
func (it *Iterator) Next() bool {
	for it.err == nil && len(it.stack) > 0 {
		f := &it.stack[len(it.stack)-1]
		if !f.childDone {
			f.childDone = true
			c, err := it.t.s.load(f.n.children[f.i], int(f.n.level))
			if err != nil {
				it.err = err
				return false
			}
			if c != nil {
				it.stack = append(it.stack, frame{n: c})
				continue
			}
		}
		if f.i < len(f.n.entries) {
			it.cur = f.n.entries[f.i]
			f.i++
			f.childDone = false
			if !strings.HasPrefix(it.cur.Key, it.pre) {
				it.stack = nil
				return false
			}
			if it.t.hidden != nil && it.t.hidden(it.cur.Key) {
				continue
			}
			return true
		}
		it.stack = it.stack[:len(it.stack)-1]
	}
	return false
}

// Entry returns the current entry.
func (it *Iterator) Entry() Entry { return it.cur }

// Err returns the error that stopped the iteration, if any.
func (it *Iterator) Err() error { return it.err }
