package btree

import (
	"fmt"
	"slices"
	"strings"
	"sync"
	"unsafe"

	flatbuffers "github.com/google/flatbuffers/go"

	"github.com/ledgerfs/ledgerfs/cas"
	"github.com/ledgerfs/ledgerfs/internal/format"
)

// node is a decoded tree node. Stored nodes are shared through the cache and
// never modified; edits work on copies.
type node struct {
	level    uint8
	entries  []Entry
	children []ref // len(entries)+1; an empty ref is an empty gap
}

// ref points to a subtree: by id once stored, by pointer while it is being
// built (then id is empty until the node is written).
type ref struct {
	id cas.ObjectIdentifier
	n  *node
}

func (r ref) empty() bool { return r.n == nil && r.id.Digest == "" }

// dirty reports whether the subtree has unwritten nodes.
func (r ref) dirty() bool { return r.n != nil && r.id.Digest == "" }

// size is the heap a decoded node holds, for the cache's bound: its
// slices and every string decodeNode allocated, each rounded up as the
// allocator rounds it. Counting the bytes of the strings alone bounded the
// 16 MiB cache at 24.6 MiB of heap (pprof, writing 4 GiB into a page with
// history).
func (n *node) size() int64 {
	s := int64(unsafe.Sizeof(*n)) + int64(cap(n.entries))*int64(unsafe.Sizeof(Entry{})) +
		int64(cap(n.children))*int64(unsafe.Sizeof(ref{}))
	for _, e := range n.entries {
		s += allocSize(len(e.Key)) + allocSize(len(e.Value.Digest)) +
			allocSize(len(e.Meta.Symlink)) + allocSize(len(e.Meta.Xattrs))
	}
	for _, c := range n.children {
		s += allocSize(len(c.id.Digest))
	}
	return s
}

// allocSize is about what the Go allocator takes for n bytes: its size
// classes step by 16 bytes up to 256, more coarsely above.
func allocSize(n int) int64 {
	switch {
	case n == 0:
		return 0
	case n <= 8:
		return 8
	case n <= 256:
		return int64(n+15) &^ 15
	default:
		return int64(n+63) &^ 63
	}
}

// builders are reused across commits: growing a fresh builder to a node's
// size, ~40 KiB for a full leaf, cost a tenth of a one-entry commit.
var builders = sync.Pool{New: func() any { return flatbuffers.NewBuilder(64 << 10) }}

// encodeNode serializes a node whose children are all stored.
func encodeNode(n *node) []byte {
	b := builders.Get().(*flatbuffers.Builder)
	defer builders.Put(b)
	b.Reset()
	eoffs := make([]flatbuffers.UOffsetT, len(n.entries))
	for i, e := range n.entries {
		key := b.CreateString(e.Key)
		id := format.PutObjectIdentifier(b, e.Value.KeyIndex, string(e.Value.Digest))
		meta := buildMeta(b, e.Meta)
		format.EntryStorageStart(b)
		format.EntryStorageAddKey(b, key)
		format.EntryStorageAddObjectId(b, id)
		format.EntryStorageAddPriority(b, format.KeyPriorityStorage(e.Priority))
		format.EntryStorageAddMeta(b, meta)
		eoffs[i] = format.EntryStorageEnd(b)
	}
	var coffs []flatbuffers.UOffsetT
	for i, c := range n.children {
		if c.empty() {
			continue
		}
		id := format.PutObjectIdentifier(b, c.id.KeyIndex, string(c.id.Digest))
		format.ChildStorageStart(b)
		format.ChildStorageAddIndex(b, uint16(i))
		format.ChildStorageAddObjectId(b, id)
		coffs = append(coffs, format.ChildStorageEnd(b))
	}
	entries := vector(b, eoffs)
	children := vector(b, coffs)
	format.TreeNodeStorageStart(b)
	format.TreeNodeStorageAddEntries(b, entries)
	format.TreeNodeStorageAddChildren(b, children)
	format.TreeNodeStorageAddLevel(b, n.level)
	b.Finish(format.TreeNodeStorageEnd(b))
	// The encoding outlives the builder: sinks may keep what they are given.
	return slices.Clone(b.FinishedBytes())
}

func vector(b *flatbuffers.Builder, offs []flatbuffers.UOffsetT) flatbuffers.UOffsetT {
	b.StartVector(4, len(offs), 4)
	for i := len(offs) - 1; i >= 0; i-- {
		b.PrependUOffsetT(offs[i])
	}
	return b.EndVector(len(offs))
}

// BuildMeta adds m to b; the journal stores the same table.
func buildMeta(b *flatbuffers.Builder, m Meta) flatbuffers.UOffsetT {
	var target, xattrs, link flatbuffers.UOffsetT
	if m.Symlink != "" {
		target = b.CreateString(m.Symlink)
	}
	if m.Link != "" {
		link = b.CreateString(m.Link)
	}
	if m.Xattrs != "" {
		// Meta's own encoding was made by SetXattrs: it parses.
		xs, _ := m.XattrList()
		offs := make([]flatbuffers.UOffsetT, len(xs))
		for i, x := range xs {
			name, value := b.CreateString(x.Name), b.CreateString(x.Value)
			format.XattrStorageStart(b)
			format.XattrStorageAddName(b, name)
			format.XattrStorageAddValue(b, value)
			offs[i] = format.XattrStorageEnd(b)
		}
		xattrs = vector(b, offs)
	}
	format.EntryMetaStorageStart(b)
	format.EntryMetaStorageAddSize(b, m.Size)
	if m.Mode != 0 {
		format.EntryMetaStorageAddMode(b, m.Mode)
	}
	if m.HasMtime {
		format.EntryMetaStorageAddMtimeNs(b, m.MtimeNs)
	}
	if m.Symlink != "" {
		format.EntryMetaStorageAddSymlinkTarget(b, target)
	}
	if m.HasOwner {
		format.EntryMetaStorageAddUid(b, m.Uid)
		format.EntryMetaStorageAddGid(b, m.Gid)
	}
	if m.Rdev != 0 {
		format.EntryMetaStorageAddRdev(b, m.Rdev)
	}
	if m.HasAtime {
		format.EntryMetaStorageAddAtimeNs(b, m.AtimeNs)
	}
	if m.HasCtime {
		format.EntryMetaStorageAddCtimeNs(b, m.CtimeNs)
	}
	if m.Xattrs != "" {
		format.EntryMetaStorageAddXattrs(b, xattrs)
	}
	if m.Link != "" {
		format.EntryMetaStorageAddLink(b, link)
	}
	if m.Nlink != 0 {
		format.EntryMetaStorageAddNlink(b, m.Nlink)
	}
	return format.EntryMetaStorageEnd(b)
}

func metaFrom(s *format.EntryMetaStorage) Meta {
	if s == nil {
		return Meta{}
	}
	m := Meta{Size: s.Size(), Symlink: string(s.SymlinkTargetBytes()), Link: string(s.LinkBytes())}
	if p := s.Nlink(); p != nil {
		m.Nlink = *p
	}
	if p := s.Mode(); p != nil {
		m.Mode = *p
	}
	if p := s.MtimeNs(); p != nil {
		m.MtimeNs, m.HasMtime = *p, true
	}
	// Both or neither are written; either alone is taken with the other
	// as root's.
	uid, gid := s.Uid(), s.Gid()
	if uid != nil || gid != nil {
		m.HasOwner = true
		if uid != nil {
			m.Uid = *uid
		}
		if gid != nil {
			m.Gid = *gid
		}
	}
	if p := s.Rdev(); p != nil {
		m.Rdev = *p
	}
	if p := s.AtimeNs(); p != nil {
		m.AtimeNs, m.HasAtime = *p, true
	}
	if p := s.CtimeNs(); p != nil {
		m.CtimeNs, m.HasCtime = *p, true
	}
	if n := s.XattrsLength(); n > 0 {
		var xs []Xattr // not made n long: n is untrusted
		var x format.XattrStorage
		for i := range n {
			if s.Xattrs(&x, i) {
				xs = append(xs, Xattr{Name: string(x.NameBytes()), Value: string(x.ValueBytes())})
			}
		}
		// Stored sorted and unique; whatever a damaged row holds is
		// made so, the last of a name winning.
		slices.SortStableFunc(xs, func(a, b Xattr) int { return strings.Compare(a.Name, b.Name) })
		unique := xs[:0]
		for i, x := range xs {
			if i+1 < len(xs) && xs[i+1].Name == x.Name {
				continue
			}
			unique = append(unique, x)
		}
		m.SetXattrs(unique)
	}
	return m
}

// EncodeMeta serializes m as a size-prefixed EntryMetaStorage.
func EncodeMeta(m Meta) []byte {
	b := flatbuffers.NewBuilder(64)
	b.FinishSizePrefixed(buildMeta(b, m))
	return b.FinishedBytes()
}

// DecodeMeta parses a size-prefixed EntryMetaStorage.
func DecodeMeta(buf []byte) (Meta, error) {
	var m Meta
	err := format.Decode("entry metadata", func() error {
		_, body, err := format.SizePrefixed(buf)
		if err != nil {
			return err
		}
		if err := format.CheckRoot(body); err != nil {
			return err
		}
		m = metaFrom(format.GetRootAsEntryMetaStorage(body, 0))
		return nil
	})
	return m, err
}

// decodeNode parses a node and checks its invariants: sorted unique keys of
// the node's level, children within range and in order.
func decodeNode(buf []byte) (*node, error) {
	n := &node{}
	err := format.Decode("tree node", func() error {
		if err := format.CheckRoot(buf); err != nil {
			return err
		}
		fb := format.GetRootAsTreeNodeStorage(buf, 0)
		n.level = fb.Level()
		ne := fb.EntriesLength()
		if err := format.CheckVector("entries", ne, buf); err != nil {
			return err
		}
		n.entries = make([]Entry, ne)
		// One accessor of each table for every entry: the generated getters
		// allocate one per call when given nil, two of the four allocations
		// an entry cost.
		var (
			es  format.EntryStorage
			ids format.ObjectIdentifierStorage
			ms  format.EntryMetaStorage
		)
		for i := range ne {
			if !fb.Entries(&es, i) {
				return fmt.Errorf("entry %d missing", i)
			}
			id, err := identifier(es.ObjectId(&ids))
			if err != nil {
				return fmt.Errorf("entry %d: %w", i, err)
			}
			e := Entry{
				Key:      string(es.KeyBytes()),
				Value:    id,
				Priority: Priority(es.Priority()),
				Meta:     metaFrom(es.Meta(&ms)),
			}
			if e.Priority > Lazy {
				return fmt.Errorf("entry %d: bad priority %d", i, e.Priority)
			}
			if Level(e.Key) != n.level {
				return fmt.Errorf("entry %d: key of level %d in a node of level %d", i, Level(e.Key), n.level)
			}
			if i > 0 && n.entries[i-1].Key >= e.Key {
				return fmt.Errorf("entry %d: keys out of order", i)
			}
			n.entries[i] = e
		}
		n.children = make([]ref, ne+1)
		nc := fb.ChildrenLength()
		if err := format.CheckVector("children", nc, buf); err != nil {
			return err
		}
		var cs format.ChildStorage
		last := -1
		for i := range nc {
			if !fb.Children(&cs, i) {
				return fmt.Errorf("child %d missing", i)
			}
			idx := int(cs.Index())
			if idx <= last || idx > ne {
				return fmt.Errorf("child %d: index %d out of order or range", i, idx)
			}
			last = idx
			id, err := identifier(cs.ObjectId(&ids))
			if err != nil {
				return fmt.Errorf("child %d: %w", i, err)
			}
			if !id.Digest.IsTreeNode() {
				return fmt.Errorf("child %d: %s is not a tree node", i, id)
			}
			n.children[idx] = ref{id: id}
		}
		if n.level > 0 || len(n.entries) > 0 || nc > 0 {
			if ne == 0 {
				return fmt.Errorf("non-root node without entries")
			}
		}
		if n.level == 0 && nc > 0 {
			return fmt.Errorf("level-0 node with children")
		}
		return nil
	})
	return n, err
}

// identifier converts a decoded object identifier.
func identifier(s *format.ObjectIdentifierStorage) (cas.ObjectIdentifier, error) {
	ki, d, err := format.ObjectIdentifierFields(s)
	if err != nil {
		return cas.ObjectIdentifier{}, err
	}
	return cas.NewIdentifier(ki, d)
}
