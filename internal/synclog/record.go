package synclog

import (
	"encoding/binary"
	"errors"
	"fmt"

	"github.com/ledgerfs/ledgerfs/internal/wire"
)

// A Record is one change of an entry: a delete, or a put whose value is
// the bytes Keep of the value Base, zeros up to Size, and Extents over
// them. Base is a value that was durable when the record was appended, or
// the Result of the key's previous record in the same epoch; a record with
// Keep 0 needs no base. Result is the digest of the value that content
// makes, Op the journal row of the put (value and metadata).
//
// An intent is a put whose value is computed when it is replayed: it has
// no Result, and its Op names another value. An intent that Follows the
// key's previous record, an intent too, holds the changes since that one:
// its content is that record's first Keep bytes, zeros up to Size, and
// Extents over them.
//
// A record with a Journal stands in for the journal row of a queued
// change: the row was never written to the db, and recovery writes it
// into that journal (Op for a put; a delete's row) before committing it.
// Such a record is a delete or a put, never an intent.
type Record struct {
	Key     string
	Delete  bool
	Intent  bool
	Follows bool
	Journal []byte
	Op      []byte
	Base    []byte
	Keep    uint64
	Size    uint64
	Result  []byte
	Extents []Extent
}

// An Extent is bytes at an offset.
type Extent struct {
	Off  uint64
	Data []byte
}

const (
	kindPut     = 1
	kindDelete  = 2
	kindIntent  = 3
	kindFollows = 4
	// kindQueued prefixes a delete or put with the journal it stands
	// in for.
	kindQueued = 5
)

// Len is an upper bound of the record's encoded size.
func (r *Record) Len() int {
	n := 2 + 5*binary.MaxVarintLen64 + len(r.Journal) + len(r.Key) + len(r.Op) + len(r.Base) + len(r.Result) + 2*8
	for _, e := range r.Extents {
		n += 8 + binary.MaxVarintLen64 + len(e.Data)
	}
	return n + binary.MaxVarintLen64
}

// MarshalBinary encodes the record: a kind byte (put, delete, intent or
// intent that follows), then for a put or an intent the
// length-prefixed key, op, base and result, keep and size (8 bytes each,
// little-endian), the extent count and each extent's offset (8 bytes) and
// length-prefixed bytes; for a delete the key alone. A record with a
// Journal is kind byte 5, the length-prefixed journal, then the record as
// it would be without one.
func (r *Record) MarshalBinary() ([]byte, error) {
	var b []byte
	if len(r.Journal) > 0 {
		if r.Intent {
			return nil, fmt.Errorf("synclog: an intent stands for no journal row")
		}
		b = wire.AppendBytes([]byte{kindQueued}, r.Journal)
	}
	if r.Delete {
		b = append(b, kindDelete)
		return wire.AppendBytes(b, []byte(r.Key)), nil
	}
	for i, e := range r.Extents {
		if e.Off+uint64(len(e.Data)) > r.Size || e.Off+uint64(len(e.Data)) < e.Off {
			return nil, fmt.Errorf("synclog: extent %d past the value's size %d", i, r.Size)
		}
	}
	if b == nil {
		b = make([]byte, 0, r.Len())
	}
	switch {
	case r.Follows:
		b = append(b, kindFollows)
	case r.Intent:
		b = append(b, kindIntent)
	default:
		b = append(b, kindPut)
	}
	b = wire.AppendBytes(b, []byte(r.Key))
	b = wire.AppendBytes(b, r.Op)
	b = wire.AppendBytes(b, r.Base)
	b = wire.AppendBytes(b, r.Result)
	b = binary.LittleEndian.AppendUint64(b, r.Keep)
	b = binary.LittleEndian.AppendUint64(b, r.Size)
	b = binary.AppendUvarint(b, uint64(len(r.Extents)))
	for _, e := range r.Extents {
		b = binary.LittleEndian.AppendUint64(b, e.Off)
		b = wire.AppendBytes(b, e.Data)
	}
	return b, nil
}

var errMalformed = errors.New("synclog: malformed record")

// UnmarshalBinary decodes a record; its byte slices alias b.
func (r *Record) UnmarshalBinary(b []byte) error {
	*r = Record{}
	d := wire.Reader{B: b}
	kind := d.Byte()
	if kind == kindQueued {
		if r.Journal = d.Bytes(); len(r.Journal) == 0 {
			return errMalformed
		}
		if kind = d.Byte(); kind != kindPut && kind != kindDelete {
			return errMalformed
		}
	}
	r.Key = string(d.Bytes())
	switch kind {
	case kindDelete:
		r.Delete = true
	case kindPut, kindIntent, kindFollows:
		r.Intent, r.Follows = kind != kindPut, kind == kindFollows
		r.Op, r.Base, r.Result = d.Bytes(), d.Bytes(), d.Bytes()
		r.Keep, r.Size = d.Uint64(), d.Uint64()
		n := d.Uvarint()
		if n > uint64(len(d.B)) {
			return errMalformed
		}
		for i := uint64(0); i < n && d.Err == nil; i++ {
			e := Extent{Off: d.Uint64(), Data: d.Bytes()}
			if e.Off+uint64(len(e.Data)) > r.Size || e.Off+uint64(len(e.Data)) < e.Off {
				return errMalformed
			}
			r.Extents = append(r.Extents, e)
		}
	default:
		return errMalformed
	}
	if d.Err != nil || len(d.B) != 0 {
		return errMalformed
	}
	return nil
}
