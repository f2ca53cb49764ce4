package cas

import (
	"fmt"

	flatbuffers "github.com/google/flatbuffers/go"

	"github.com/ledgerfs/ledgerfs/internal/format"
)

// IndexChild is one entry of a FileIndex: a piece and the number of content
// bytes under it.
type IndexChild struct {
	Size uint64
	ID   ObjectIdentifier
}

// FileIndex is a piece that lists, in order, the pieces an object's content is
// made of.
type FileIndex struct {
	Size     uint64
	Children []IndexChild
}

// EncodeFileIndex serializes a FileIndex.
func EncodeFileIndex(ix FileIndex) []byte {
	b := flatbuffers.NewBuilder(64 + 80*len(ix.Children))
	offs := make([]flatbuffers.UOffsetT, len(ix.Children))
	for i, c := range ix.Children {
		id := format.PutObjectIdentifier(b, c.ID.KeyIndex, string(c.ID.Digest))
		format.ObjectChildStart(b)
		format.ObjectChildAddSize(b, c.Size)
		format.ObjectChildAddObjectIdentifier(b, id)
		offs[i] = format.ObjectChildEnd(b)
	}
	format.FileIndexStartChildrenVector(b, len(offs))
	for i := len(offs) - 1; i >= 0; i-- {
		b.PrependUOffsetT(offs[i])
	}
	children := b.EndVector(len(offs))
	format.FileIndexStart(b)
	format.FileIndexAddSize(b, ix.Size)
	format.FileIndexAddChildren(b, children)
	b.Finish(format.FileIndexEnd(b))
	return b.FinishedBytes()
}

// DecodeFileIndex parses a FileIndex and checks that its sizes add up.
func DecodeFileIndex(buf []byte) (FileIndex, error) {
	var ix FileIndex
	err := format.Decode("file index", func() error {
		if err := format.CheckRoot(buf); err != nil {
			return err
		}
		fb := format.GetRootAsFileIndex(buf, 0)
		ix.Size = fb.Size()
		n := fb.ChildrenLength()
		if n == 0 {
			return fmt.Errorf("index has no children")
		}
		if err := format.CheckVector("children", n, buf); err != nil {
			return err
		}
		ix.Children = make([]IndexChild, n)
		var sum uint64
		var c format.ObjectChild
		for i := 0; i < n; i++ {
			if !fb.Children(&c, i) {
				return fmt.Errorf("child %d missing", i)
			}
			id, err := identifierFrom(c.ObjectIdentifier(nil))
			if err != nil {
				return fmt.Errorf("child %d: %w", i, err)
			}
			ix.Children[i] = IndexChild{Size: c.Size(), ID: id}
			if sum+c.Size() < sum {
				return fmt.Errorf("child sizes overflow")
			}
			sum += c.Size()
		}
		if sum != ix.Size {
			return fmt.Errorf("children hold %d bytes, index says %d", sum, ix.Size)
		}
		return nil
	})
	return ix, err
}
