package testutil

import (
	"bytes"
	"testing"

	"github.com/klauspost/compress/zstd"
)

// The same seed gives the same bytes, a longer read extends a shorter one,
// another seed or part other bytes, and none of it compresses.
func TestRandom(t *testing.T) {
	a := Random(1, 0, 1<<20)
	if !bytes.Equal(a, Random(1, 0, 1<<20)) || !bytes.Equal(a[:1000], Random(1, 0, 1000)) {
		t.Fatal("the same seed gave other bytes")
	}
	if bytes.Equal(a[:64], Random(2, 0, 64)) || bytes.Equal(a[:64], Random(1, 1, 64)) {
		t.Fatal("another seed or part gave the same bytes")
	}
	enc, err := zstd.NewWriter(nil)
	if err != nil {
		t.Fatal(err)
	}
	if n := len(enc.EncodeAll(a, nil)); n < len(a) {
		t.Fatalf("%d random bytes compress to %d", len(a), n)
	}
}
