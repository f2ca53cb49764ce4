package wire

import (
	"bytes"
	"encoding/binary"
	"testing"

	"pgregory.net/rapid"
)

// Fields written with encoding/binary and AppendBytes read back the same,
// and a cut record reads as ErrShort, never a panic.
func TestFieldsRoundTrip(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		u := rapid.Uint64().Draw(t, "u")
		i := rapid.Int64().Draw(t, "i")
		f := rapid.Uint64().Draw(t, "f")
		c := rapid.Byte().Draw(t, "c")
		v := rapid.SliceOfN(rapid.Byte(), 0, 40).Draw(t, "v")
		b := binary.AppendUvarint(nil, u)
		b = binary.AppendVarint(b, i)
		b = binary.LittleEndian.AppendUint64(b, f)
		b = append(b, c)
		b = AppendBytes(b, v)
		r := Reader{B: b}
		if gu, gi, gf, gc, gv := r.Uvarint(), r.Varint(), r.Uint64(), r.Byte(), r.Bytes(); r.Err != nil || len(r.B) != 0 ||
			gu != u || gi != i || gf != f || gc != c || !bytes.Equal(gv, v) {
			t.Fatalf("read %d %d %d %d %x (%v, %d left), wrote %d %d %d %d %x", gu, gi, gf, gc, gv, r.Err, len(r.B), u, i, f, c, v)
		}
		cut := Reader{B: b[:rapid.IntRange(0, len(b)-1).Draw(t, "cut")]}
		cut.Uvarint()
		cut.Varint()
		cut.Uint64()
		cut.Byte()
		cut.Bytes()
		if cut.Err != ErrShort {
			t.Fatalf("a record cut short read with %v", cut.Err)
		}
	})
}
