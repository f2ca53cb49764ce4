package cas

import (
	flatbuffers "github.com/google/flatbuffers/go"

	"github.com/ledgerfs/ledgerfs/internal/format"
)

// ObjectIdentifier names an object: the index of the key it is encrypted with
// (always 0: ledgerfs does not encrypt) and the digest of its root piece.
type ObjectIdentifier struct {
	KeyIndex uint32
	Digest   Digest
}

// NewIdentifier makes the identifier of a decoded key index and digest,
// validating the digest.
func NewIdentifier(keyIndex uint32, digest []byte) (ObjectIdentifier, error) {
	d, err := ParseDigest(digest)
	if err != nil {
		return ObjectIdentifier{}, err
	}
	return ObjectIdentifier{KeyIndex: keyIndex, Digest: Digest(string(d))}, nil
}

// identifierFrom converts a decoded ObjectIdentifierStorage.
func identifierFrom(s *format.ObjectIdentifierStorage) (ObjectIdentifier, error) {
	ki, d, err := format.ObjectIdentifierFields(s)
	if err != nil {
		return ObjectIdentifier{}, err
	}
	return NewIdentifier(ki, d)
}

// EncodeIdentifier serializes id as a size-prefixed ObjectIdentifierStorage.
func EncodeIdentifier(id ObjectIdentifier) []byte {
	b := flatbuffers.NewBuilder(64)
	b.FinishSizePrefixed(format.PutObjectIdentifier(b, id.KeyIndex, string(id.Digest)))
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
		id, err = identifierFrom(format.GetRootAsObjectIdentifierStorage(body, 0))
		rest = buf[4+n:]
		return err
	})
	return id, rest, err
}

// String shows the digest.
func (id ObjectIdentifier) String() string { return id.Digest.String() }
