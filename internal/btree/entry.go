// Package btree is Ledger's history-independent B-tree of a page's entries.
//
// An entry's level is Ledger's: the number of zero bytes at the low end of
// the 32-bit MurmurHash3 (seed 0xbeef) of its key (the hash's bytes in memory
// order on a little-endian machine), and 255 for a zero hash, so about one
// key in 256 rises a level. The tree for a set of entries is canonical: the root holds the
// entries of the highest level present, and each gap between them is the
// canonical tree of the entries in that gap. The same entries give the same
// nodes, and so the same root id, whatever the order of the edits that led to
// them. Edits copy only the nodes on the path of the changed key; nodes are
// immutable once stored, and are named by the digest of their encoding.
//
// Layer: above cas and format; store owns the node store's rows.
package btree

import (
	"math/bits"
	"strings"

	"github.com/twmb/murmur3"

	"github.com/ledgerfs/ledgerfs/cas"
)

// Priority is Ledger's per-entry priority: eager values are kept on the
// device, lazy ones may be fetched on demand.
type Priority uint8

const (
	Eager Priority = iota
	Lazy
)

// Meta is the per-entry file metadata ledgerfs stores with an entry. Its
// fields are ordered by size, largest first, so that it packs without
// padding: every decoded entry of every cached tree node holds one (104
// bytes, 136 in the order of meaning).
type Meta struct {
	Size uint64
	// MtimeNs is the modification time in Unix nanoseconds, if HasMtime;
	// otherwise the entry's mtime is its commit's time.
	MtimeNs int64
	// AtimeNs and CtimeNs are the access and status change times, if
	// HasAtime and HasCtime; otherwise they are the mtime.
	AtimeNs, CtimeNs int64
	// Symlink is the target of a symbolic link.
	Symlink string
	// Xattrs are the extended attributes, encoded (see xattr.go): read
	// them with XattrList and Xattr, change them with SetXattr.
	Xattrs string
	// Link is set on a name of a file with hard links: the key of the
	// entry that holds the file, which its names point at (see
	// IsLinkKey).
	Link string
	// Mode holds the file type and permission bits; 0 means absent: a 0644
	// regular file.
	Mode uint32
	// Uid and Gid own the entry, if HasOwner; otherwise the mount's owner
	// does.
	Uid, Gid uint32
	// Rdev is the device number of a character or block device.
	Rdev uint32
	// Nlink is set on the entry names point at: how many do.
	Nlink uint32
	// HasMtime, HasAtime, HasCtime and HasOwner say which of the times
	// and the owner above are set.
	HasMtime, HasAtime, HasCtime, HasOwner bool
}

// Entry is one key of a page and what it maps to.
type Entry struct {
	Key      string
	Value    cas.ObjectIdentifier
	Priority Priority
	Meta     Meta
}

// Equal reports whether two entries are identical in every field.
func (e Entry) Equal(o Entry) bool { return e == o }

// FileMode returns the entry's mode with defaults applied.
func (m Meta) FileMode() uint32 {
	if m.Mode == 0 {
		return uint32(0o644) | 0o100000
	}
	return m.Mode
}

// IsDir reports whether the mode is a directory's.
func (m Meta) IsDir() bool { return m.Mode&0o170000 == 0o040000 }

// Level returns the level of key in the tree.
func Level(key string) uint8 {
	return levelOf(murmur3.SeedSum32(0xbeef, []byte(key)))
}

// levelOf is Ledger's GetNodeLevel: the index of the hash's first non-zero
// byte in little-endian order, and 255 when there is none.
func levelOf(h uint32) uint8 {
	if h == 0 {
		return 255
	}
	return uint8(bits.TrailingZeros32(h) / 8)
}

// search returns the index of the first entry with key >= k and whether it
// equals k.
func search(es []Entry, k string) (int, bool) {
	lo, hi := 0, len(es)
	for lo < hi {
		m := int(uint(lo+hi) >> 1)
		if es[m].Key < k {
			lo = m + 1
		} else {
			hi = m
		}
	}
	return lo, lo < len(es) && es[lo].Key == k
}

// LinkPrefix starts the keys of the entries that hold files with hard
// links (see Meta.Link): a NUL, which no file name has, so they sort before
// every name, in one run a listing of the page's top skips.
const LinkPrefix = "\x00links\x00"

// LinkEnd is the first key after every link key.
const LinkEnd = "\x00links\x01"

// IsLinkKey reports whether key holds a file with hard links, rather than
// being a name.
func IsLinkKey(key string) bool { return strings.HasPrefix(key, LinkPrefix) }

// Follow returns the entry a name's entry stands for in t: itself, or the
// entry of the file with hard links its Link names.
func (t *Tree) Follow(e Entry) (Entry, bool, error) {
	if e.Meta.Link == "" {
		return e, true, nil
	}
	return t.Get(e.Meta.Link)
}
