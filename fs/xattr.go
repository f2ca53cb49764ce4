package fs

import (
	"context"
	"encoding/binary"
	"strings"
	"syscall"

	gofs "github.com/hanwen/go-fuse/v2/fs"

	"github.com/ledgerfs/ledgerfs/internal/btree"
)

// Extended attributes live in an entry's metadata (btree.Meta.Xattrs), as
// its mode does, and a directory's in its marker: they are versioned, in
// snapshots and transactions, and change with the entry in one commit. A
// page's root has no entry of its own, and has none.

// Limits, as ext4 with large values has them.
const (
	xattrNameMax = 255      // a name's bytes, namespace included: ERANGE beyond
	xattrSizeMax = 64 << 10 // a value's bytes: E2BIG beyond (the kernel's own limit)
	// xattrTotalMax bounds all of an entry's names and values, which
	// live in its tree node: ENOSPC beyond.
	xattrTotalMax = 64 << 10
)

// setxattr(2) flags.
const (
	xattrCreate  = 1
	xattrReplace = 2
)

var (
	_ gofs.NodeGetxattrer    = (*fileNode)(nil)
	_ gofs.NodeSetxattrer    = (*fileNode)(nil)
	_ gofs.NodeListxattrer   = (*fileNode)(nil)
	_ gofs.NodeRemovexattrer = (*fileNode)(nil)
	_ gofs.NodeGetxattrer    = (*dirNode)(nil)
	_ gofs.NodeSetxattrer    = (*dirNode)(nil)
	_ gofs.NodeListxattrer   = (*dirNode)(nil)
	_ gofs.NodeRemovexattrer = (*dirNode)(nil)
)

// checkXattrName refuses names outside the namespaces kept: user.,
// trusted. and security. (the kernel checks who may use which). POSIX
// ACLs (system.), security.capability (a nosuid mount ignores it) and
// security.selinux (a FUSE mount's label is its context= option) are not
// supported, and say so with EOPNOTSUPP rather than ENODATA: ls -l asks
// for an ACL and a label of every file, and stops asking on a device
// that answers EOPNOTSUPP once (100,000 entries: 9.4 s with ENODATA).
func checkXattrName(name string) syscall.Errno {
	switch {
	case name == "" || len(name) > xattrNameMax:
		return syscall.ERANGE
	case name == "security.capability", name == "security.selinux":
		return syscall.EOPNOTSUPP
	case strings.HasPrefix(name, "user."), strings.HasPrefix(name, "trusted."), strings.HasPrefix(name, "security."):
		return 0
	}
	return syscall.EOPNOTSUPP
}

// getXattr answers getxattr(2) from m.
func getXattr(m btree.Meta, name string, dest []byte) (uint32, syscall.Errno) {
	if eno := checkXattrName(name); eno != 0 {
		return 0, eno
	}
	v, ok := m.Xattr(name)
	if !ok {
		return 0, syscall.ENODATA
	}
	if len(dest) < len(v) {
		return uint32(len(v)), syscall.ERANGE
	}
	return uint32(copy(dest, v)), 0
}

// listXattrs answers listxattr(2) from m: the names, each ending in NUL.
func listXattrs(m btree.Meta, dest []byte) (uint32, syscall.Errno) {
	xs, err := m.XattrList()
	if err != nil {
		return 0, errno("listxattr", err)
	}
	var names []byte
	for _, x := range xs {
		names = append(append(names, x.Name...), 0)
	}
	if len(dest) < len(names) {
		return uint32(len(names)), syscall.ERANGE
	}
	return uint32(copy(dest, names)), 0
}

// setXattr returns the change of setxattr(2) to make to an entry's
// metadata.
func setXattr(name string, value []byte, flags uint32) func(*btree.Meta) syscall.Errno {
	return func(m *btree.Meta) syscall.Errno {
		if eno := checkXattrName(name); eno != 0 {
			return eno
		}
		if len(value) > xattrSizeMax {
			return syscall.E2BIG
		}
		old, exists := m.Xattr(name)
		switch {
		case exists && flags&xattrCreate != 0:
			return syscall.EEXIST
		case !exists && flags&xattrReplace != 0:
			return syscall.ENODATA
		}
		// What the entry's attributes take, encoded: their names and
		// values and a few bytes each.
		total := len(m.Xattrs) + len(name) + len(value) + 2*binary.MaxVarintLen16
		if exists {
			total -= len(name) + len(old)
		}
		if total > xattrTotalMax {
			return syscall.ENOSPC
		}
		if err := m.SetXattr(name, string(value)); err != nil {
			return errno("setxattr", err)
		}
		return 0
	}
}

// removeXattr returns the change of removexattr(2).
func removeXattr(name string) func(*btree.Meta) syscall.Errno {
	return func(m *btree.Meta) syscall.Errno {
		if eno := checkXattrName(name); eno != 0 {
			return eno
		}
		ok, err := m.RemoveXattr(name)
		if err != nil {
			return errno("removexattr", err)
		}
		if !ok {
			return syscall.ENODATA
		}
		return 0
	}
}

// metaShower is a node whose metadata holds extended attributes.
type metaShower interface {
	shownMeta() (btree.Meta, syscall.Errno)
}

// getXattrOf answers getxattr(2) for n.
func getXattrOf(n metaShower, name string, dest []byte) (uint32, syscall.Errno) {
	m, eno := n.shownMeta()
	if eno != 0 {
		return 0, eno
	}
	return getXattr(m, name, dest)
}

// listXattrsOf answers listxattr(2) for n.
func listXattrsOf(n metaShower, dest []byte) (uint32, syscall.Errno) {
	m, eno := n.shownMeta()
	if eno != 0 {
		return 0, eno
	}
	return listXattrs(m, dest)
}

func (f *fileNode) Getxattr(ctx context.Context, name string, dest []byte) (uint32, syscall.Errno) {
	return getXattrOf(f, name, dest)
}

func (f *fileNode) Listxattr(ctx context.Context, dest []byte) (uint32, syscall.Errno) {
	return listXattrsOf(f, dest)
}

func (f *fileNode) Setxattr(ctx context.Context, name string, value []byte, flags uint32) syscall.Errno {
	return f.changeMeta(commitQueue, xattrChange(setXattr(name, value, flags)))
}

func (f *fileNode) Removexattr(ctx context.Context, name string) syscall.Errno {
	return f.changeMeta(commitQueue, xattrChange(removeXattr(name)))
}

// xattrChange is a change of extended attributes as changeMeta takes it:
// one that succeeds advances the ctime, as on Linux.
func xattrChange(change func(*btree.Meta) syscall.Errno) func(*btree.Meta, *content) (bool, syscall.Errno) {
	return func(m *btree.Meta, _ *content) (bool, syscall.Errno) {
		if eno := change(m); eno != 0 {
			return false, eno
		}
		m.CtimeNs, m.HasCtime = nowNs(), true
		return true, 0
	}
}

// shownMeta returns the metadata the file shows: what is being written,
// or once unlinked what it showed last, else its committed entry's.
func (f *fileNode) shownMeta() (btree.Meta, syscall.Errno) {
	f.mu.Lock()
	if f.c != nil || f.unlinked {
		m := f.meta
		f.mu.Unlock()
		return m, 0
	}
	f.mu.Unlock()
	e, _, err := f.entry()
	if err != nil {
		return btree.Meta{}, errno("getxattr", err)
	}
	return e.Meta, 0
}

func (d *dirNode) Getxattr(ctx context.Context, name string, dest []byte) (uint32, syscall.Errno) {
	return getXattrOf(d, name, dest)
}

func (d *dirNode) Listxattr(ctx context.Context, dest []byte) (uint32, syscall.Errno) {
	return listXattrsOf(d, dest)
}

func (d *dirNode) Setxattr(ctx context.Context, name string, value []byte, flags uint32) syscall.Errno {
	change := xattrChange(setXattr(name, value, flags))
	return d.changeMarker(syscall.EOPNOTSUPP, func(m *btree.Meta) (bool, syscall.Errno) { return change(m, nil) })
}

func (d *dirNode) Removexattr(ctx context.Context, name string) syscall.Errno {
	change := xattrChange(removeXattr(name))
	return d.changeMarker(syscall.EOPNOTSUPP, func(m *btree.Meta) (bool, syscall.Errno) { return change(m, nil) })
}

// shownMeta returns the directory's metadata: its marker's, queued or
// committed; a page's root has none.
func (d *dirNode) shownMeta() (btree.Meta, syscall.Errno) {
	prefix, _, err := d.prefix()
	if err != nil {
		return btree.Meta{}, errno("getxattr", err)
	}
	m, _, err := d.meta(prefix)
	return m, errno("getxattr", err)
}
