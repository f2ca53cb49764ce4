package fs

import (
	"slices"
	"sync"
	"sync/atomic"

	gofs "github.com/hanwen/go-fuse/v2/fs"
)

// movedNodes are the nodes a rename has moved in the page whose inodes
// go-fuse has yet to move: it moves a renamed inode after Rename returns,
// and until then a key computed from the node's place (a close committing
// a file in a directory just renamed) would be the old one. pathFrom takes
// the place a rename gave such a node instead.
type movedNodes struct {
	mu      sync.Mutex
	pending atomic.Int32 // len(list), read without mu on every path walk
	list    []movedNode
}

// movedNode is one rename's move of node from (from, name) to (to, newName).
type movedNode struct {
	node     *gofs.Inode
	from, to *gofs.Inode
	name     string
	newName  string
}

// done reports whether go-fuse has moved the node, or something else
// already took it from its old place.
func (m movedNode) done() bool {
	name, parent := m.node.Parent()
	return parent != m.from || name != m.name
}

// add records that node, at (from, name), is renamed to (to, newName).
// Called by a rename holding its page's keys lock exclusively, before it
// returns.
func (mv *movedNodes) add(node, from *gofs.Inode, name string, to *gofs.Inode, newName string) {
	mv.mu.Lock()
	defer mv.mu.Unlock()
	mv.pruneLocked()
	mv.list = append(mv.list, movedNode{node: node, from: from, to: to, name: name, newName: newName})
	mv.pending.Store(int32(len(mv.list)))
}

// parent returns where n is after the renames recorded: (name, parent) as
// go-fuse has them, unless a rename moved n and go-fuse has not yet.
func (mv *movedNodes) parent(n *gofs.Inode) (string, *gofs.Inode) {
	name, parent := n.Parent()
	if mv.pending.Load() == 0 {
		return name, parent
	}
	mv.mu.Lock()
	defer mv.mu.Unlock()
	// Matched before pruning: go-fuse may have moved n since Parent
	// answered, and the answer is then the old place. A move is pruned
	// before n can be back at its old place (a rename back prunes it).
	for _, m := range mv.list {
		if m.node == n && m.from == parent && m.name == name {
			return m.newName, m.to
		}
	}
	mv.pruneLocked()
	return name, parent
}

// pruneLocked drops the moves go-fuse has made. Called with mv.mu held.
func (mv *movedNodes) pruneLocked() {
	mv.list = slices.DeleteFunc(mv.list, movedNode.done)
	mv.pending.Store(int32(len(mv.list)))
}
