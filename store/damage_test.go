package store

import (
	"errors"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"syscall"
	"testing"

	"github.com/ledgerfs/ledgerfs/internal/badgerdb"

	"github.com/dgraph-io/badger/v4"

	"github.com/ledgerfs/ledgerfs/cas"
)

// closedPage writes a value into page l/p and a small one into l/q of a new
// repository, closes it, and returns the repository, p's db directory and
// the chunks of p's value.
func closedPage(t *testing.T) (dir, pageDir string, chunks []cas.Digest) {
	t.Helper()
	dir = t.TempDir()
	r := openRepo(t, dir, Options{})
	p := newPage(t, r)
	chunks = storedChunks(t, p, writeValue(t, p, benchBytes(8<<20)))
	pageDir = p.Dir()
	r.Release(p)
	must(t, r.CreatePage("l", "q"))
	q, err := r.Acquire("l", "q")
	must(t, err)
	writeValue(t, q, benchBytes(1<<20))
	r.Release(q)
	must(t, r.Close())
	return dir, pageDir, chunks
}

func newestLog(t *testing.T, dir, ext string) string {
	t.Helper()
	logs, err := filepath.Glob(filepath.Join(dir, "*"+ext))
	if err != nil || len(logs) == 0 {
		t.Fatalf("no %s file in %s: %v", ext, dir, err)
	}
	slices.SortFunc(logs, func(a, b string) int { return badgerdb.FileID(a) - badgerdb.FileID(b) })
	return logs[len(logs)-1]
}

// Bytes flipped in the middle of the value log: Badger would cut the log
// there and every later value would be lost. The page is served read-only
// instead, reads what is intact, refuses changes, and the log keeps its
// size.
func TestDamagedValueLogIsReadOnly(t *testing.T) {
	dir, pageDir, chunks := closedPage(t)
	vlog := newestLog(t, pageDir, ".vlog")
	fi, err := os.Stat(vlog)
	must(t, err)
	f, err := os.OpenFile(vlog, os.O_RDWR, 0)
	must(t, err)
	_, err = f.WriteAt([]byte("sixteen flipped!"), fi.Size()/2)
	must(t, err)
	must(t, f.Close())

	r := openRepo(t, dir, Options{})
	defer r.Close()
	p, err := r.Acquire("l", "p")
	if err != nil {
		t.Fatalf("a page with a damaged value log does not open: %v", err)
	}
	if _, err := p.Get(chunks[0], nil); err != nil {
		t.Errorf("a chunk before the damage: %v", err)
	}
	if _, err := p.Get(chunks[len(chunks)-1], nil); err != nil {
		t.Errorf("a chunk after the damage: %v", err)
	}
	w := p.NewValueWriter()
	_, err = w.Write(benchBytes(4 << 10))
	if err == nil {
		_, _, err = w.Close()
	}
	if !errors.Is(err, syscall.EROFS) {
		t.Errorf("a change to the damaged page: %v, want EROFS", err)
	}
	r.Release(p)
	q, err := r.Acquire("l", "q")
	if err != nil {
		t.Fatalf("the other page: %v", err)
	}
	if q.damaged || q.readOnly != nil {
		t.Errorf("the other page is read-only: %v", q.readOnly)
	}
	r.Release(q)
	must(t, r.Close())
	if after, err := os.Stat(vlog); err != nil || after.Size() != fi.Size() {
		t.Fatalf("value log after open: %v, %v; was %d bytes", after, err, fi.Size())
	}
}

// A cut table made Badger panic in its own goroutines, which ended the
// process; a cut manifest made it delete every table. Both pages are
// refused, with the file named, and nothing is deleted; other pages open.
func TestDamagedTablesAndManifestAreRefused(t *testing.T) {
	for _, c := range []struct {
		file string
		size int64
	}{{"*.sst", 2000}, {"MANIFEST", 8}, {"MANIFEST", 20}} {
		t.Run(c.file, func(t *testing.T) {
			dir, pageDir, _ := closedPage(t)
			names, _ := filepath.Glob(filepath.Join(pageDir, c.file))
			if len(names) == 0 {
				t.Fatalf("no %s in %s", c.file, pageDir)
			}
			must(t, os.Truncate(names[0], c.size))
			tables, _ := filepath.Glob(filepath.Join(pageDir, "*.sst"))
			r := openRepo(t, dir, Options{})
			defer r.Close()
			if _, err := r.Acquire("l", "p"); !errors.Is(err, ErrDamaged) {
				t.Fatalf("open a page with a cut %s: %v, want ErrDamaged", c.file, err)
			}
			q, err := r.Acquire("l", "q")
			if err != nil {
				t.Fatalf("the other page: %v", err)
			}
			r.Release(q)
			if after, _ := filepath.Glob(filepath.Join(pageDir, "*.sst")); !slices.Equal(after, tables) {
				t.Fatalf("tables %v after the open, were %v", after, tables)
			}
		})
	}
}

// A panic in a page's db, in the goroutine that uses it, breaks that page
// only: the call and every later use of the page get EIO, other pages keep
// serving, and the repository closes.
func TestPanicInPageDBIsIsolated(t *testing.T) {
	dir, _, _ := closedPage(t)
	r := openRepo(t, dir, Options{})
	p, err := r.Acquire("l", "p")
	must(t, err)
	err = p.view(func(*badger.Txn) error { panic("damaged block") })
	if !errors.Is(err, syscall.EIO) {
		t.Fatalf("a panic in the db: %v, want EIO", err)
	}
	if _, err := p.Head(); !errors.Is(err, syscall.EIO) {
		t.Fatalf("the broken page's head: %v, want EIO", err)
	}
	q, err := r.Acquire("l", "q")
	must(t, err)
	if _, err := q.Head(); err != nil {
		t.Fatalf("the other page: %v", err)
	}
	r.Release(q)
	r.Release(p)
	must(t, r.Close())
}

// Bytes changed in a table after the page was opened (and checked) give
// errors at the reads that meet them, never a panic. A piece read with
// other content (a value pointer changed in a block Badger had checked and
// cached, onto another entry whose checksum holds) is the scrub's to find:
// reads trust Badger's checksums (cas.CheckedSource).
func TestTableDamagedAfterOpen(t *testing.T) {
	dir, pageDir, chunks := closedPage(t)
	r := openRepo(t, dir, Options{})
	defer r.Close()
	p, err := r.Acquire("l", "p")
	must(t, err)
	defer r.Release(p)
	tables, _ := filepath.Glob(filepath.Join(pageDir, "*.sst"))
	if len(tables) == 0 {
		t.Fatalf("no table in %s", pageDir)
	}
	rng := rand.New(rand.NewPCG(1, 2))
	for _, name := range tables {
		fi, err := os.Stat(name)
		must(t, err)
		f, err := os.OpenFile(name, os.O_RDWR, 0)
		must(t, err)
		for range 8 {
			_, err = f.WriteAt([]byte("flipped!"), rng.Int64N(fi.Size()/2))
			must(t, err)
		}
		must(t, f.Close())
	}
	failed, wrong := 0, map[cas.Digest]bool{}
	for _, d := range chunks {
		b, err := p.Get(d, nil)
		if err != nil {
			failed++
			continue
		}
		if got := cas.ComputeDigest(cas.KindBlob, false, b); got != d {
			wrong[d] = true
		}
	}
	found := map[cas.Digest]bool{}
	for next := []byte(nil); ; {
		var damaged [][]byte
		next, _, damaged, err = p.Scrub(next, 1<<20)
		for _, d := range damaged {
			found[cas.Digest(d)] = true
		}
		if err != nil || next == nil {
			break
		}
	}
	for d := range wrong {
		if !found[d] && err == nil {
			t.Fatalf("piece %x read with the wrong content, and the scrub did not find it", d[:8])
		}
	}
	t.Logf("%d of %d pieces unreadable after the damage, %d read wrong (the scrub found %d damaged, err %v)", failed, len(chunks), len(wrong), len(found), err)
}
