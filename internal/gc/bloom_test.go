package gc

import (
	"math/rand/v2"
	"testing"

	"github.com/ledgerfs/ledgerfs/cas"
)

// chunkDigest is a chunk's digest whose hash starts with b.
func chunkDigest(b [32]byte) cas.Digest {
	return cas.Digest(append([]byte{0}, b[:]...))
}

// TestChunkFilterProbesDistinctBits: z.Bloom probes h + i·l (mod its size)
// with l the hash's low bits. A digest whose low bits are 0 (1 in 2^15 at
// this size) had all 20 probes on one bit, reached whenever that bit was
// set: in the store's collection such a chunk of a deleted page, reported
// reached by the kept page's filter on every collection, kept its whole
// 8 MiB pack (TestMountCollectsStore, about 1 run in 100). Of 2,000 such
// digests queried against a filter holding 300 chunks, none may pass.
func TestChunkFilterProbesDistinctBits(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	m := newMarker(nil, 1024)
	var b [32]byte
	for range 300 {
		for i := range b {
			b[i] = byte(rng.Uint32())
		}
		m.add(chunkDigest(b))
	}
	wrong := 0
	for range 2000 {
		for i := range b {
			b[i] = byte(rng.Uint32())
		}
		b[0], b[1] = 0, 0 // the hash's low 16 bits, little-endian
		if m.reached(chunkDigest(b)) {
			wrong++
		}
	}
	if wrong > 0 {
		t.Fatalf("%d of 2,000 chunks never added reported reached", wrong)
	}
}
