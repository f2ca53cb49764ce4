package store

import (
	"bytes"
	"cmp"
	"encoding/binary"
	"encoding/hex"
	"fmt"
	"slices"

	flatbuffers "github.com/google/flatbuffers/go"

	"github.com/ledgerfs/ledgerfs/cas"
	"github.com/ledgerfs/ledgerfs/internal/btree"
	"github.com/ledgerfs/ledgerfs/internal/format"
)

// CommitID is the hash of a commit's bytes.
type CommitID [cas.HashSize]byte

// FirstCommitID is the id of every page's first commit: all zeros, with the
// empty tree. It is never stored as a row.
var FirstCommitID CommitID

func (id CommitID) String() string { return hex.EncodeToString(id[:]) }

// ParseCommitID parses a CommitID's String.
func ParseCommitID(h string) (CommitID, error) {
	var id CommitID
	b, err := hex.DecodeString(h)
	if err != nil || len(b) != len(id) {
		return id, fmt.Errorf("commit id %q: want %d hex digits", h, 2*len(id))
	}
	copy(id[:], b)
	return id, nil
}

// MarshalText writes the id as String does, for JSON.
func (id CommitID) MarshalText() ([]byte, error) { return []byte(id.String()), nil }

// UnmarshalText reads an id MarshalText wrote.
func (id *CommitID) UnmarshalText(b []byte) error {
	v, err := ParseCommitID(string(b))
	*id = v
	return err
}

// Commit is one version of a page.
type Commit struct {
	ID CommitID
	// Timestamp is the commit's time in Unix nanoseconds: when it was made,
	// or for a batch of queued changes, when its latest change was queued.
	Timestamp int64
	// Generation is the length of the longest path to the first commit.
	Generation uint64
	Root       cas.ObjectIdentifier
	// Parents are sorted; one for a plain commit, two for a merge.
	Parents []CommitID
	Salt    []byte
	// Bytes is the CommitStorage the id is the hash of.
	Bytes []byte
}

// FirstCommit returns the first commit of every page.
func FirstCommit() *Commit {
	return &Commit{ID: FirstCommitID, Root: btree.EmptyRoot}
}

// ParentsFirst orders commits by generation, then id: every commit after
// its parents, the same on every device.
func ParentsFirst(a, b *Commit) int {
	if a.Generation != b.Generation {
		return cmp.Compare(a.Generation, b.Generation)
	}
	return bytes.Compare(a.ID[:], b.ID[:])
}

// NewCommit builds a commit on parents: generation max+1, sorted parents. A
// merge's timestamp is the latest of its parents'; a plain commit's is ts.
func NewCommit(ts int64, root cas.ObjectIdentifier, parents ...*Commit) (*Commit, error) {
	if len(parents) < 1 || len(parents) > 2 {
		return nil, fmt.Errorf("store: a commit has 1 or 2 parents, not %d", len(parents))
	}
	c := &Commit{Timestamp: ts, Root: root}
	for _, p := range parents {
		c.Generation = max(c.Generation, p.Generation+1)
		c.Parents = append(c.Parents, p.ID)
	}
	if len(parents) == 2 {
		if parents[0].ID == parents[1].ID {
			return nil, fmt.Errorf("store: merge of %s with itself", parents[0].ID)
		}
		c.Timestamp = max(parents[0].Timestamp, parents[1].Timestamp)
	}
	slices.SortFunc(c.Parents, func(a, b CommitID) int { return bytes.Compare(a[:], b[:]) })
	c.Bytes = encodeCommit(c)
	c.ID = CommitID(cas.Hash(c.Bytes))
	return c, nil
}

func encodeCommit(c *Commit) []byte {
	b := flatbuffers.NewBuilder(256)
	root := format.PutObjectIdentifier(b, c.Root.KeyIndex, string(c.Root.Digest))
	var salt flatbuffers.UOffsetT
	if c.Salt != nil {
		salt = b.CreateByteVector(c.Salt)
	}
	format.CommitStorageStartParentsVector(b, len(c.Parents))
	for i := len(c.Parents) - 1; i >= 0; i-- {
		p := c.Parents[i]
		format.CreateIdStorage(b,
			binary.LittleEndian.Uint64(p[0:]), binary.LittleEndian.Uint64(p[8:]),
			binary.LittleEndian.Uint64(p[16:]), binary.LittleEndian.Uint64(p[24:]))
	}
	parents := b.EndVector(len(c.Parents))
	format.CommitStorageStart(b)
	format.CommitStorageAddTimestamp(b, c.Timestamp)
	format.CommitStorageAddGeneration(b, c.Generation)
	format.CommitStorageAddRootNodeId(b, root)
	format.CommitStorageAddParents(b, parents)
	if c.Salt != nil {
		format.CommitStorageAddSalt(b, salt)
	}
	b.Finish(format.CommitStorageEnd(b))
	return b.FinishedBytes()
}

// DecodeCommit parses a commit row and checks that its bytes hash to id.
func DecodeCommit(id CommitID, buf []byte) (*Commit, error) {
	if CommitID(cas.Hash(buf)) != id {
		return nil, &cas.CorruptError{Digest: cas.Digest("commit:" + id.String())}
	}
	c := &Commit{ID: id, Bytes: buf}
	err := format.Decode("commit", func() error {
		if err := format.CheckRoot(buf); err != nil {
			return err
		}
		fb := format.GetRootAsCommitStorage(buf, 0)
		c.Timestamp = fb.Timestamp()
		c.Generation = fb.Generation()
		ki, d, err := format.ObjectIdentifierFields(fb.RootNodeId(nil))
		if err != nil {
			return fmt.Errorf("root: %w", err)
		}
		root, err := cas.NewIdentifier(ki, d)
		if err != nil {
			return fmt.Errorf("root: %w", err)
		}
		if !root.Digest.IsTreeNode() {
			return fmt.Errorf("root %s is not a tree node", root)
		}
		c.Root = root
		n := fb.ParentsLength()
		if n < 1 || n > 2 {
			return fmt.Errorf("%d parents", n)
		}
		var p format.IdStorage
		for i := range n {
			if !fb.Parents(&p, i) {
				return fmt.Errorf("parent %d missing", i)
			}
			var pid CommitID
			binary.LittleEndian.PutUint64(pid[0:], p.W0())
			binary.LittleEndian.PutUint64(pid[8:], p.W1())
			binary.LittleEndian.PutUint64(pid[16:], p.W2())
			binary.LittleEndian.PutUint64(pid[24:], p.W3())
			c.Parents = append(c.Parents, pid)
		}
		if n == 2 && bytes.Compare(c.Parents[0][:], c.Parents[1][:]) >= 0 {
			return fmt.Errorf("parents not sorted")
		}
		if c.Generation == 0 {
			return fmt.Errorf("generation 0 is the first commit's")
		}
		if s := fb.SaltBytes(); s != nil {
			c.Salt = bytes.Clone(s)
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	return c, nil
}
