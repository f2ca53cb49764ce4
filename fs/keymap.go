package fs

import (
	"strings"

	gbtree "github.com/google/btree"
)

// keyMap maps keys to values in key order, for what a page shows before
// its commit lands (pending files, queued deletes and markers): a lookup
// asks whether anything is queued under a directory, and with a few hundred
// changes queued a scan of them all cost more than the lookup itself.
// Clone is O(1): the clone and the original share nodes until either
// changes one. The zero value is empty and ready to use.
type keyMap[V any] struct {
	t *gbtree.BTreeG[keyItem[V]]
}

type keyItem[V any] struct {
	key string
	v   V
}

func (a keyItem[V]) less(b keyItem[V]) bool { return a.key < b.key }

func (m *keyMap[V]) Len() int {
	if m.t == nil {
		return 0
	}
	return m.t.Len()
}

func (m *keyMap[V]) Get(key string) (V, bool) {
	if m.t == nil {
		var zero V
		return zero, false
	}
	it, ok := m.t.Get(keyItem[V]{key: key})
	return it.v, ok
}

func (m *keyMap[V]) Set(key string, v V) {
	if m.t == nil {
		m.t = gbtree.NewG(16, keyItem[V].less)
	}
	m.t.ReplaceOrInsert(keyItem[V]{key, v})
}

func (m *keyMap[V]) Delete(key string) {
	if m.t != nil {
		m.t.Delete(keyItem[V]{key: key})
	}
}

// Under calls fn with each entry whose key starts with prefix, in key
// order, until fn returns false, and reports whether it went through them
// all.
func (m *keyMap[V]) Under(prefix string, fn func(key string, v V) bool) bool {
	if m.t == nil {
		return true
	}
	all := true
	m.t.AscendGreaterOrEqual(keyItem[V]{key: prefix}, func(it keyItem[V]) bool {
		if !strings.HasPrefix(it.key, prefix) {
			return false
		}
		all = fn(it.key, it.v)
		return all
	})
	return all
}

// Clone returns a copy that later changes to m do not affect. Like every
// change, it needs m's lock; the copy can then be read without it.
func (m *keyMap[V]) Clone() keyMap[V] {
	if m.t == nil {
		return keyMap[V]{}
	}
	return keyMap[V]{m.t.Clone()}
}
