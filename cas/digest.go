// Package cas stores values as content-addressed pieces: it hashes, splits
// content into chunks with a rolling hash, builds FileIndex trees over the
// chunks and reads a value back at any offset. It knows nothing of Badger: the
// pieces go to a Sink and come from a Source, which the store implements.
//
// Layer: above format only; btree and store build on it.
package cas

import (
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
)

// HashSize is the size of a content hash.
const HashSize = sha256.Size

// MaxInlineSize is the largest content kept inside its digest instead of in a
// row of its own.
const MaxInlineSize = HashSize

// Digest type bits, the first byte of every digest.
const (
	flagInline   = 0x01 // the rest of the digest is the content itself
	flagIndex    = 0x02 // the piece is a FileIndex over other pieces
	flagTreeNode = 0x04 // the object is a B-tree node, not a value
)

// Kind says what an object is: a user value or a tree node.
type Kind uint8

const (
	KindBlob Kind = iota
	KindTreeNode
)

// Digest names a piece: one type byte followed by either the content (when it
// is at most MaxInlineSize bytes) or its hash. It is a string so that it can be
// compared and used as a map key.
type Digest string

// Hash is SHA-256 over an 8-byte little-endian length followed by the data, as
// in Ledger.
func Hash(data []byte) [HashSize]byte {
	h := sha256.New()
	var n [8]byte
	binary.LittleEndian.PutUint64(n[:], uint64(len(data)))
	h.Write(n[:])
	h.Write(data)
	var out [HashSize]byte
	h.Sum(out[:0])
	return out
}

// ComputeDigest returns the digest of a piece. index marks a FileIndex piece;
// kind applies to the root piece of an object (inner pieces are KindBlob).
func ComputeDigest(kind Kind, index bool, data []byte) Digest {
	var t byte
	if index {
		t |= flagIndex
	}
	if kind == KindTreeNode {
		t |= flagTreeNode
	}
	if len(data) <= MaxInlineSize {
		b := make([]byte, 1+len(data))
		b[0] = t | flagInline
		copy(b[1:], data)
		return Digest(b)
	}
	h := Hash(data)
	b := make([]byte, 1+HashSize)
	b[0] = t
	copy(b[1:], h[:])
	return Digest(b)
}

// ErrBadDigest reports a digest that is not of a valid form.
var ErrBadDigest = errors.New("cas: malformed digest")

// ParseDigest checks that b has the form of a digest.
func ParseDigest(b []byte) (Digest, error) {
	if len(b) == 0 || b[0]&^(flagInline|flagIndex|flagTreeNode) != 0 {
		return "", ErrBadDigest
	}
	if b[0]&flagInline != 0 {
		if len(b)-1 > MaxInlineSize {
			return "", ErrBadDigest
		}
	} else if len(b) != 1+HashSize {
		return "", ErrBadDigest
	}
	return Digest(b), nil
}

// IsInline reports whether the content lives in the digest.
func (d Digest) IsInline() bool { return len(d) > 0 && d[0]&flagInline != 0 }

// IsIndex reports whether the piece is a FileIndex.
func (d Digest) IsIndex() bool { return len(d) > 0 && d[0]&flagIndex != 0 }

// IsTreeNode reports whether the object is a tree node.
func (d Digest) IsTreeNode() bool { return len(d) > 0 && d[0]&flagTreeNode != 0 }

// InlineData returns the content of an inline digest.
func (d Digest) InlineData() []byte { return []byte(d[1:]) }

// Verify checks that data is the content d names.
func (d Digest) Verify(data []byte) error {
	if d.IsInline() {
		if string(data) != string(d[1:]) {
			return &CorruptError{Digest: d}
		}
		return nil
	}
	if len(d) != 1+HashSize {
		return ErrBadDigest
	}
	h := Hash(data)
	if string(h[:]) != string(d[1:]) {
		return &CorruptError{Digest: d}
	}
	return nil
}

func (d Digest) String() string {
	if d.IsInline() {
		return fmt.Sprintf("inline:%02x:%x", d[0], []byte(d[1:]))
	}
	return hex.EncodeToString([]byte(d))
}

// CorruptError reports a piece whose bytes do not match its digest.
type CorruptError struct {
	Digest Digest
}

func (e *CorruptError) Error() string {
	return fmt.Sprintf("cas: piece %s is corrupt: content does not match its digest", e.Digest)
}

// ErrNotFound reports a piece missing from its store.
var ErrNotFound = errors.New("cas: piece not found")
