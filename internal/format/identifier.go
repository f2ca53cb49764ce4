package format

import (
	"errors"
	"unsafe"

	flatbuffers "github.com/google/flatbuffers/go"
)

// PutObjectIdentifier adds an ObjectIdentifierStorage to b and returns its
// offset.
func PutObjectIdentifier(b *flatbuffers.Builder, keyIndex uint32, digest string) flatbuffers.UOffsetT {
	// CreateByteVector copies its argument, so a view of the string's bytes
	// spares an allocation for every entry of every node encoded.
	d := b.CreateByteVector(unsafe.Slice(unsafe.StringData(digest), len(digest)))
	ObjectIdentifierStorageStart(b)
	ObjectIdentifierStorageAddKeyIndex(b, keyIndex)
	ObjectIdentifierStorageAddObjectDigest(b, d)
	return ObjectIdentifierStorageEnd(b)
}

// ErrMissingIdentifier is the error of a table whose object identifier,
// a required field, is absent.
var ErrMissingIdentifier = errors.New("missing object identifier")

// ObjectIdentifierFields returns the fields of a decoded identifier; s is
// nil when the field holding it is absent. The digest aliases the buffer.
func ObjectIdentifierFields(s *ObjectIdentifierStorage) (keyIndex uint32, digest []byte, err error) {
	if s == nil {
		return 0, nil, ErrMissingIdentifier
	}
	return s.KeyIndex(), s.ObjectDigestBytes(), nil
}
