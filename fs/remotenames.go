package fs

import (
	"fmt"

	gofs "github.com/hanwen/go-fuse/v2/fs"

	"github.com/ledgerfs/ledgerfs/store"
)

// RemoteNames changes ledger and page names as another device did, for a
// sync to apply them under the mount: through the store without recording
// them again, refused with store.ErrBusy while the mount uses the page or
// ledger (files open or queued, transactions open; the sync tries again
// later), then followed in the mount's state and the kernel's caches, as
// the mount's own renames and deletes are.
type RemoteNames struct {
	f *FS
	u store.Unrecorded
}

// RemoteNames returns the mount's RemoteNames.
func (f *FS) RemoteNames() *RemoteNames { return &RemoteNames{f: f, u: f.repo.Unrecorded()} }

func busy(what string) error { return fmt.Errorf("%s: %w", what, store.ErrBusy) }

// ledgerInode is the kernel-visible inode of ledger, if it was looked up.
func (n *RemoteNames) ledgerInode(ledger string) *gofs.Inode {
	return n.f.root.GetChild(ledger)
}

// forget drops name from parent's children and the kernel's entry cache.
func forget(parent *gofs.Inode, name string) {
	if parent == nil {
		return
	}
	if child := parent.GetChild(name); child != nil {
		dropChild(parent, name, child)
	} else {
		parent.NotifyEntry(name) // a cached negative entry
	}
}

// CreateLedger makes a ledger another device made.
func (n *RemoteNames) CreateLedger(ledger string) error {
	if err := n.u.CreateLedger(ledger); err != nil {
		return err
	}
	n.f.root.NotifyEntry(ledger)
	return nil
}

// DeleteLedger deletes an empty ledger another device deleted.
func (n *RemoteNames) DeleteLedger(ledger string) error {
	if n.f.ledgerBusy(ledger) {
		return busy("ledger " + ledger)
	}
	if err := n.u.DeleteLedger(ledger); err != nil {
		return err
	}
	forget(n.f.root.EmbeddedInode(), ledger)
	return nil
}

// RenameLedger renames a ledger as another device did.
func (n *RemoteNames) RenameLedger(from, to string) error {
	if n.f.ledgerBusy(from) {
		return busy("ledger " + from)
	}
	if err := n.u.RenameLedger(from, to); err != nil {
		return err
	}
	n.f.renameLedger(from, to)
	root := n.f.root.EmbeddedInode()
	if ch := root.GetChild(from); ch != nil {
		if ln, ok := ch.Operations().(*ledgerNode); ok {
			n.f.mu.Lock()
			ln.name = to
			n.f.mu.Unlock()
		}
		root.MvChild(from, root, to, true)
	}
	root.NotifyEntry(from)
	root.NotifyEntry(to)
	return nil
}

// CreatePage makes a page another device made.
func (n *RemoteNames) CreatePage(ledger, page string) error {
	if err := n.u.CreatePage(ledger, page); err != nil {
		return err
	}
	if l := n.ledgerInode(ledger); l != nil {
		l.NotifyEntry(page)
	}
	return nil
}

// DeletePage deletes a page another device deleted.
func (n *RemoteNames) DeletePage(ledger, page string) error {
	if p, ok := n.f.known(ledger, page); ok && p.busy() {
		return busy("page " + ledger + "/" + page)
	}
	if err := n.u.DeletePage(ledger, page); err != nil {
		return err
	}
	n.f.dropPage(ledger, page)
	forget(n.ledgerInode(ledger), page)
	return nil
}

// RenamePage renames a page as another device did, within its ledger or
// into another.
func (n *RemoteNames) RenamePage(ledger, from, toLedger, to string) error {
	if p, ok := n.f.known(ledger, from); ok && p.busy() {
		return busy("page " + ledger + "/" + from)
	}
	if err := n.u.RenamePage(ledger, from, toLedger, to); err != nil {
		return err
	}
	n.f.movePage(ledger, from, toLedger, to)
	l, nl := n.ledgerInode(ledger), n.ledgerInode(toLedger)
	switch {
	case l != nil && nl != nil && l.GetChild(from) != nil:
		l.MvChild(from, nl, to, true)
	case l != nil:
		forget(l, from)
	}
	if l != nil {
		l.NotifyEntry(from)
	}
	if nl != nil {
		nl.NotifyEntry(to)
	}
	return nil
}
