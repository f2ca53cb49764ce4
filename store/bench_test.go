package store

import (
	"bytes"
	"cmp"
	"fmt"
	"math/rand/v2"
	"runtime"
	"slices"
	"strconv"
	"testing"

	"github.com/ledgerfs/ledgerfs/internal/badgerdb"

	"github.com/ledgerfs/ledgerfs/cas"
	"github.com/ledgerfs/ledgerfs/internal/btree"
	"github.com/ledgerfs/ledgerfs/internal/testutil"
)

// benchBytes returns n bytes that neither compress nor repeat.
func benchBytes(n int) []byte { return testutil.Random(7, 0, n) }

// BenchmarkPut streams a 1 GiB value into a page db: chunking, hashing and
// Badger writes.
func BenchmarkPut(b *testing.B) {
	block := benchBytes(1 << 20)
	const size = 1 << 30
	b.SetBytes(size)
	for b.Loop() {
		b.StopTimer()
		p := testPage(b)
		b.StartTimer()
		w := p.NewValueWriter()
		for off := 0; off < size; off += len(block) {
			block[0], block[1] = byte(off>>20), byte(off>>28) // no two blocks alike
			if _, err := w.Write(block); err != nil {
				b.Fatal(err)
			}
		}
		if _, _, err := w.Close(); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkReadAt reads 4 KiB at random offsets of a 256 MiB value.
func BenchmarkReadAt(b *testing.B) {
	p := testPage(b)
	data := benchBytes(256 << 20)
	id := writeValue(b, p, data)
	r, err := p.OpenValue(id)
	if err != nil {
		b.Fatal(err)
	}
	rng := rand.New(rand.NewPCG(1, 1))
	buf := make([]byte, 4096)
	b.SetBytes(4096)
	for b.Loop() {
		if _, err := r.ReadAt(buf, rng.Int64N(int64(len(data)-4096))); err != nil {
			b.Fatal(err)
		}
	}
}

// pageWithEntries builds a page of n entries in one commit.
func pageWithEntries(b *testing.B, n int) (*Page, *Commit) {
	p := testPage(b)
	t := p.Tree(FirstCommit())
	for i := range n {
		v := fmt.Sprintf("value %d", i)
		if err := t.Put(btree.Entry{Key: fmt.Sprintf("dir%03d/file-%08d", i%500, i), Value: cas.ObjectIdentifier{Digest: cas.ComputeDigest(cas.KindBlob, false, []byte(v))}, Meta: btree.Meta{Size: uint64(len(v))}}); err != nil {
			b.Fatal(err)
		}
	}
	pw := p.NewPieceWriter()
	root, _, err := t.Write(pw)
	if err == nil {
		err = pw.Flush()
	}
	if err != nil {
		b.Fatal(err)
	}
	c, err := NewCommit(1, root, FirstCommit())
	if err != nil {
		b.Fatal(err)
	}
	return p, c
}

// BenchmarkCommitOneEntry changes one entry of a page of n entries and writes
// the new tree: the cost of a commit's tree work, which must grow with log n.
func BenchmarkCommitOneEntry(b *testing.B) {
	for _, n := range []int{1_000, 100_000, 1_000_000} {
		b.Run(strconv.Itoa(n), func(b *testing.B) {
			p, c := pageWithEntries(b, n)
			rng := rand.New(rand.NewPCG(2, 2))
			i := 0
			for b.Loop() {
				t := p.Tree(c)
				i++
				v := fmt.Sprintf("changed %d", i)
				k := rng.IntN(n)
				err := t.Put(btree.Entry{Key: fmt.Sprintf("dir%03d/file-%08d", k%500, k), Value: cas.ObjectIdentifier{Digest: cas.ComputeDigest(cas.KindBlob, false, []byte(v))}})
				if err != nil {
					b.Fatal(err)
				}
				pw := p.NewPieceWriter()
				if _, _, err := t.Write(pw); err != nil {
					b.Fatal(err)
				}
				if err := pw.Flush(); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// BenchmarkRangeScan iterates all entries of a page of 100,000.
func BenchmarkRangeScan(b *testing.B) {
	p, c := pageWithEntries(b, 100_000)
	for b.Loop() {
		n := 0
		it := p.Tree(c).Seek("")
		for it.Next() {
			n++
		}
		if n != 100_000 || it.Err() != nil {
			b.Fatalf("%d entries, %v", n, it.Err())
		}
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N)/100_000, "ns/entry")
}

// BenchmarkOpenPages opens 1,000 pages one after another (with a write to
// each) through a repository that keeps 16 idle, and reports the process
// RSS after, and the cost of each page held open.
func BenchmarkOpenPages(b *testing.B) {
	for b.Loop() {
		r := openRepo(b, b.TempDir(), Options{MaxIdlePages: 16})
		if err := r.CreateLedger("l"); err != nil {
			b.Fatal(err)
		}
		runtime.GC()
		base := rssKiB()
		for i := range 1000 {
			name := fmt.Sprintf("p%04d", i)
			if err := r.CreatePage("l", name); err != nil {
				b.Fatal(err)
			}
			p, err := r.Acquire("l", name)
			if err != nil {
				b.Fatal(err)
			}
			writeValue(b, p, benchBytes(100_000))
			r.Release(p)
		}
		runtime.GC()
		after := rssKiB()
		var held []*Page
		for i := range 100 {
			p, err := r.Acquire("l", fmt.Sprintf("p%04d", i))
			if err != nil {
				b.Fatal(err)
			}
			held = append(held, p)
		}
		runtime.GC()
		perPage := float64(rssKiB()-after) / 100 / 1024
		for _, p := range held {
			r.Release(p)
		}
		r.Close()
		b.ReportMetric(float64(after-base)/1024, "MiB-RSS-after-1000-pages")
		b.ReportMetric(perPage, "MiB-per-open-page")
	}
}

// rssKiB is the process's resident memory (VmRSS) in KiB.
func rssKiB() int {
	total, _ := badgerdb.RSS()
	return int(total >> 10)
}

// BenchmarkEditScattered edits 256 random 4 KiB blocks of a 1 GiB value in
// one EditValue, as the commit of a database file's fsynced changes does:
// its cost is the stall of a write that waits for that commit.
func BenchmarkEditScattered(b *testing.B) {
	p := testPage(b)
	data := benchBytes(1 << 30)
	id := writeValue(b, p, data)
	rng := rand.New(rand.NewPCG(1, 1))
	for b.Loop() {
		var changed []cas.Range
		for range 256 {
			off := rng.Uint64N(uint64(len(data))>>12) << 12
			for i := off; i < off+4096; i += 8 {
				data[i]++
			}
			changed = append(changed, cas.Range{Start: off, End: off + 4096})
		}
		slices.SortFunc(changed, func(a, b cas.Range) int { return cmp.Compare(a.Start, b.Start) })
		w, nid, err := p.EditValue(id, bytes.NewReader(data), uint64(len(data)), changed)
		if err != nil {
			b.Fatal(err)
		}
		if err := w.Commit(); err != nil {
			b.Fatal(err)
		}
		id = nid
	}
}
