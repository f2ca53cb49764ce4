// Package wire reads and writes the fields of ledgerfs's own binary
// records (the sync log's, the version file's): unsigned and zig-zag
// varints (encoding/binary's), 8-byte little-endian integers, fixed-size
// and length-prefixed bytes.
//
// Layer: below everything that uses it; it knows no record.
package wire

import (
	"encoding/binary"
	"errors"
)

// ErrShort reports a field that runs past the bytes, or a varint that
// does not parse.
var ErrShort = errors.New("wire: field past the end of the record")

// AppendBytes appends v to b, prefixed by its length as an unsigned
// varint.
func AppendBytes(b, v []byte) []byte {
	return append(binary.AppendUvarint(b, uint64(len(v))), v...)
}

// A Reader takes fields off the front of B. Its first failure is kept in
// Err, and every later read returns a zero value: a decoder reads all its
// fields and checks Err once.
type Reader struct {
	B   []byte
	Err error
}

// Fixed returns the next n bytes, a slice of B (its capacity ends with it).
func (r *Reader) Fixed(n uint64) []byte {
	if r.Err != nil {
		return nil
	}
	if n > uint64(len(r.B)) {
		r.Err = ErrShort
		return nil
	}
	v := r.B[:n:n]
	r.B = r.B[n:]
	return v
}

// Bytes returns the next length-prefixed bytes (AppendBytes).
func (r *Reader) Bytes() []byte { return r.Fixed(r.Uvarint()) }

// Byte returns the next byte.
func (r *Reader) Byte() byte {
	if b := r.Fixed(1); b != nil {
		return b[0]
	}
	return 0
}

// Uint64 returns the next 8-byte little-endian integer.
func (r *Reader) Uint64() uint64 {
	if b := r.Fixed(8); b != nil {
		return binary.LittleEndian.Uint64(b)
	}
	return 0
}

// Uvarint returns the next unsigned varint.
func (r *Reader) Uvarint() uint64 {
	if r.Err != nil {
		return 0
	}
	v, n := binary.Uvarint(r.B)
	if n <= 0 {
		r.Err = ErrShort
		return 0
	}
	r.B = r.B[n:]
	return v
}

// Varint returns the next zig-zag varint (binary.AppendVarint).
func (r *Reader) Varint() int64 {
	u := r.Uvarint()
	x := int64(u >> 1)
	if u&1 != 0 {
		x = ^x
	}
	return x
}
