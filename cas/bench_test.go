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

// chunkAll runs restic's chunker at ledgerfs's parameters over data on one
// goroutine and hands each chunk to fn.
func chunkAll(data []byte, buf []byte, fn func(chunk []byte)) {
	c := chunker.NewWithBoundaries(bytes.NewReader(data), testPol, MinChunkSize, MaxChunkSize)
	c.SetAverageBits(averageBits)
	for {
		ch, err := c.Next(buf)
		if err == io.EOF {
			return
		}
		fn(ch.Data)
	}
}

// BenchmarkChunker is restic's chunker alone at ledgerfs's parameters.
func BenchmarkChunker(b *testing.B) {
	b.SetBytes(int64(len(benchData)))
	buf := make([]byte, 0, MaxChunkSize)
	for b.Loop() {
		chunkAll(benchData, buf, func([]byte) {})
	}
}

// BenchmarkChunkAndHash is the single-stream ceiling the performance
// targets refer to: restic's chunker and SHA-256 of every chunk, on one
// goroutine, storing nothing.
func BenchmarkChunkAndHash(b *testing.B) {
	b.SetBytes(int64(len(benchData)))
	buf := make([]byte, 0, MaxChunkSize)
	for b.Loop() {
		chunkAll(benchData, buf, func(c []byte) { sha256.Sum256(c) })
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

// BenchmarkWriter is the streaming writer: chunking on every core, hashing
// and index building, pipelined, into a sink that stores nothing.
func BenchmarkWriter(b *testing.B) {
	cutters := NewCutters()
	defer cutters.Close()
	b.SetBytes(int64(len(benchData)))
	for b.Loop() {
		w := cutters.NewWriter(discard{}, testPol, KindBlob)
		for i := 0; i < len(benchData); i += 1 << 20 {
			if _, err := w.Write(benchData[i : i+1<<20]); err != nil {
				b.Fatal(err)
			}
		}
		if _, _, err := w.Close(); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkWriterSmallValue is one small file's value, as cp -a writes
// thousands of them: the writer's fixed cost per value.
func BenchmarkWriterSmallValue(b *testing.B) {
	cutters := NewCutters()
	defer cutters.Close()
	data := benchData[:14<<10]
	b.SetBytes(int64(len(data)))
	b.ReportAllocs()
	for b.Loop() {
		w := cutters.NewWriter(discard{}, testPol, KindBlob)
		if _, err := w.Write(data); err != nil {
			b.Fatal(err)
		}
		if _, _, err := w.Close(); err != nil {
			b.Fatal(err)
		}
	}
}
