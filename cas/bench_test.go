package cas

import (
	"bytes"
	"crypto/sha256"
	"io"
	"testing"

	"github.com/restic/chunker"
)

// discard accepts pieces without storing them.
type discard struct{}

func (discard) Put(Digest, []byte) error { return nil }

var benchData = randBytes(42, 64<<20)

// BenchmarkChunker is restic's chunker alone at ledgerfs's parameters.
func BenchmarkChunker(b *testing.B) {
	b.SetBytes(int64(len(benchData)))
	buf := make([]byte, 0, MaxChunkSize)
	for b.Loop() {
		c := chunker.NewWithBoundaries(bytes.NewReader(benchData), testPol, MinChunkSize, MaxChunkSize)
		c.SetAverageBits(averageBits)
		for {
			if _, err := c.Next(buf); err == io.EOF {
				break
			}
		}
	}
}

// BenchmarkHash is SHA-256 alone.
func BenchmarkHash(b *testing.B) {
	b.SetBytes(int64(len(benchData)))
	for b.Loop() {
		for i := 0; i < len(benchData); i += 20 << 10 {
			sha256.Sum256(benchData[i:min(len(benchData), i+20<<10)])
		}
	}
}

// BenchmarkWriter is the streaming writer: chunking, hashing and index
// building, pipelined, into a sink that stores nothing.
func BenchmarkWriter(b *testing.B) {
	b.SetBytes(int64(len(benchData)))
	for b.Loop() {
		w := NewWriter(discard{}, testPol, KindBlob)
		for i := 0; i < len(benchData); i += 1 << 20 {
			w.Write(benchData[i : i+1<<20])
		}
		if _, _, err := w.Close(); err != nil {
			b.Fatal(err)
		}
	}
}
