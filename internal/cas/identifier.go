package cas

import (
	"fmt"
	"unsafe"

	flatbuffers "github.com/google/flatbuffers/go"

	"github.com/ledgerfs/ledgerfs/internal/format"
)

// ObjectIdentifier names an object: the index of the key it is encrypted with
// (always 0: ledgerfs does not encrypt) and the digest of its root piece.
type ObjectIdentifier struct {
	KeyIndex uint32
	Digest   Digest
}

// BuildIdentifier adds id to b and returns its offset.
func BuildIdentifier(b *flatbuffers.Builder, id ObjectIdentifier) flatbuffers.UOffsetT {
	// CreateByteVector copies its argument, so a view of the string's bytes
	// spares an allocation for every entry of every node encoded.
	d := b.CreateByteVector(unsafe.Slice(unsafe.StringData(string(id.Digest)), len(id.Digest)))
	format.ObjectIdentifierStorageStart(b)
	format.ObjectIdentifierStorageAddKeyIndex(b, id.KeyIndex)
	format.ObjectIdentifierStorageAddObjectDigest(b, d)
	return format.ObjectIdentifierStorageEnd(b)
}

// IdentifierFrom converts a decoded ObjectIdentifierStorage, validating the
// digest.
func IdentifierFrom(s *format.ObjectIdentifierStorage) (ObjectIdentifier, error) {
	if s == nil {
		return ObjectIdentifier{}, fmt.Errorf("cas: missing object identifier")
	}
	d, err := ParseDigest(s.ObjectDigestBytes())
	if err != nil {
		return ObjectIdentifier{}, err
	}
	return ObjectIdentifier{KeyIndex: s.KeyIndex(), Digest: Digest(string(d))}, nil
}

// EncodeIdentifier serializes id as a size-prefixed ObjectIdentifierStorage.
func EncodeIdentifier(id ObjectIdentifier) []byte {
	b := flatbuffers.NewBuilder(64)
	b.FinishSizePrefixed(BuildIdentifier(b, id))
	return b.FinishedBytes()
}

// DecodeIdentifier parses a size-prefixed ObjectIdentifierStorage at the start
// of buf and returns it with the bytes that follow it.
func DecodeIdentifier(buf []byte) (id ObjectIdentifier, rest []byte, err error) {
	err = format.Decode("object identifier", func() error {
		n, body, err := format.SizePrefixed(buf)
		if err != nil {
			return err
		}
		id, err = IdentifierFrom(format.GetRootAsObjectIdentifierStorage(body, 0))
		rest = buf[4+n:]
		return err
	})
	return id, rest, err
}

// String shows the digest.
func (id ObjectIdentifier) String() string { return id.Digest.String() }
