package store

import (
	"bytes"
	"math/rand/v2"
	"os"
	"path/filepath"
	"runtime"
	"testing"

	"github.com/dgraph-io/badger/v4"

	"github.com/ledgerfs/ledgerfs/cas"
)

// stored returns a piece's row: its value's size and its encoding byte.
func stored(t *testing.T, p *Page, d cas.Digest) (int, byte) {
	t.Helper()
	var n int
	var enc byte
	err := p.db.View(func(txn *badger.Txn) error {
		it, err := txn.Get(objectKey(d))
		if err != nil {
			return err
		}
		v, err := it.ValueCopy(nil)
		n, enc = len(v), it.UserMeta()
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	return n, enc
}

// TestCompressedPieces: pieces are stored as they are; CompressNew then
// stores a compressible one as zstd, marked in the row's user-meta byte, at
// least an eighth smaller, and leaves an incompressible one and a tiny one
// raw; every one reads back and verifies, through the page and as any
// reader of the schema would (VerifyDir, Badger's defaults). A second pass
// from the version the first returned offers only what was written since;
// with compression off, it compresses nothing.
func TestCompressedPieces(t *testing.T) {
	r := openRepo(t, t.TempDir(), Options{})
	defer r.Close()
	p := newPage(t, r)
	text := bytes.Repeat([]byte("a line of text that repeats, as source code does\n"), 1300)
	noise := make([]byte, 60_000)
	for i := range noise {
		noise[i] = byte(rand.Uint32())
	}
	tiny := bytes.Repeat([]byte("t"), 200)
	put := func(data []byte) cas.Digest {
		d := cas.ComputeDigest(cas.KindBlob, false, data)
		if err := p.Put(d, data); err != nil {
			t.Fatal(err)
		}
		return d
	}
	check := func(d cas.Digest, data []byte) {
		got, err := p.Get(d, nil)
		if err != nil || !bytes.Equal(got, data) {
			t.Fatalf("piece of %d bytes reads back as %d bytes, %v", len(data), len(got), err)
		}
	}
	dText, dNoise, dTiny := put(text), put(noise), put(tiny)
	if n, enc := stored(t, p, dText); enc != encodingRaw || n != len(text) {
		t.Errorf("a piece is stored as %d bytes with encoding %d before any pass, want raw", n, enc)
	}
	next, _, n, saved, err := p.CompressNew(0, "", nil)
	if err != nil || n != 1 || saved <= int64(len(text)/8) {
		t.Fatalf("CompressNew: %d pieces, %d bytes saved, %v; want the text piece", n, saved, err)
	}
	if n, enc := stored(t, p, dText); enc != encodingZstd || n > len(text)-len(text)/8 {
		t.Errorf("text piece of %d bytes stored as %d bytes with encoding %d, want zstd", len(text), n, enc)
	}
	if n, enc := stored(t, p, dNoise); enc != encodingRaw || n != len(noise) {
		t.Errorf("random piece of %d bytes stored as %d bytes with encoding %d, want raw", len(noise), n, enc)
	}
	if _, enc := stored(t, p, dTiny); enc != encodingRaw {
		t.Errorf("tiny piece stored with encoding %d, want raw", enc)
	}
	for d, data := range map[cas.Digest][]byte{dText: text, dNoise: noise, dTiny: tiny} {
		check(d, data)
	}
	more := append(bytes.Clone(text), "and one more line\n"...)
	dMore := put(more)
	next, _, n, _, err = p.CompressNew(next, "", nil)
	if err != nil || n != 1 {
		t.Fatalf("second pass: %d pieces, %v; want only the new one", n, err)
	}
	// A pass stopped goes on from where it stopped.
	put(append(bytes.Clone(text), "a third\n"...))
	put(append(bytes.Clone(text), "a fourth\n"...))
	_, at, n, _, err := p.CompressNew(next, "", func() bool { return true })
	if err != nil || n != 0 || at == "" {
		t.Fatalf("a pass stopped at once: %d pieces, stopped at %q, %v", n, at, err)
	}
	if _, at, n, _, err = p.CompressNew(next, at, nil); err != nil || n != 2 || at != "" {
		t.Fatalf("the pass going on: %d pieces, stopped at %q, %v; want both new ones", n, at, err)
	}
	if err := r.SetCompression(false); err != nil {
		t.Fatal(err)
	}
	evenMore := append(bytes.Clone(more), "and another\n"...)
	dEvenMore := put(evenMore)
	if _, _, n, _, err := p.CompressNew(0, "", nil); err != nil || n != 0 {
		t.Fatalf("with compression off, a pass compressed %d pieces (%v)", n, err)
	}
	if _, enc := stored(t, p, dEvenMore); enc != encodingRaw {
		t.Errorf("with compression off, a text piece has encoding %d", enc)
	}
	check(dMore, more)
	if on, err := r.Compression(); err != nil || on {
		t.Errorf("Compression() = %v, %v after SetCompression(false)", on, err)
	}
	dir := p.Dir()
	r.Release(p)
	if err := r.Close(); err != nil {
		t.Fatal(err)
	}
	counts, err := VerifyDir(dir, func(string, []byte) error { return nil })
	if err != nil || counts[PrefixObjects] != 7 {
		t.Fatalf("VerifyDir: %v, %v", counts, err)
	}
}

// TestFormat2IsUpgraded: a format 2 repository (no compressed piece yet)
// opens, read-only as it is, and for changes as format 3.
func TestFormat2IsUpgraded(t *testing.T) {
	dir := t.TempDir()
	r := openRepo(t, dir, Options{})
	if err := r.db.Update(func(txn *badger.Txn) error { return txn.Set([]byte(keyFormat), EncodeUint64(2)) }); err != nil {
		t.Fatal(err)
	}
	r.Close()
	ro := openRepo(t, dir, Options{ReadOnly: true})
	ro.Close()
	r = openRepo(t, dir, Options{})
	defer r.Close()
	var f uint64
	err := r.db.View(func(txn *badger.Txn) error {
		it, err := txn.Get([]byte(keyFormat))
		if err != nil {
			return err
		}
		return it.Value(func(v []byte) error { f, err = DecodeUint64(v); return err })
	})
	if err != nil || f != Format {
		t.Fatalf("format after a writable open: %d, %v; want %d", f, err, Format)
	}
}

// BenchmarkEncodePiece: what compressing a piece costs, for source code
// (compressible) and random bytes (not), at the average chunk size. It is
// why pieces are compressed by collections and not at close.
func BenchmarkEncodePiece(b *testing.B) {
	src, err := os.ReadFile(filepath.Join(runtime.GOROOT(), "src", "net", "http", "server.go"))
	if err != nil {
		b.Skip(err)
	}
	noise := make([]byte, 16<<10)
	for i := range noise {
		noise[i] = byte(rand.Uint32())
	}
	for _, c := range []struct {
		name string
		data []byte
	}{{"source", src[:16<<10]}, {"random", noise}} {
		b.Run(c.name, func(b *testing.B) {
			b.SetBytes(int64(len(c.data)))
			for b.Loop() {
				encodePiece(c.data)
			}
		})
	}
}
