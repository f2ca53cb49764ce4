package scrub_test

import (
	"context"
	"testing"
	"time"

	"github.com/dgraph-io/badger/v4"

	"github.com/ledgerfs/ledgerfs/internal/badgerdb"
	"github.com/ledgerfs/ledgerfs/internal/btree"
	"github.com/ledgerfs/ledgerfs/internal/scrub"
	"github.com/ledgerfs/ledgerfs/internal/testutil"
	"github.com/ledgerfs/ledgerfs/journal"
	"github.com/ledgerfs/ledgerfs/store"
)

// page makes a repository with page l/p holding a file of size random
// bytes, closed, and returns its directory and the page db's.
func page(t *testing.T, size int) (dir, pageDir string) {
	t.Helper()
	dir = t.TempDir()
	eng := journal.NewEngine()
	repo, err := store.Open(dir, eng.Hooks(store.Options{}))
	if err != nil {
		t.Fatal(err)
	}
	if err := repo.CreateLedger("l"); err != nil {
		t.Fatal(err)
	}
	if err := repo.CreatePage("l", "p"); err != nil {
		t.Fatal(err)
	}
	p, err := repo.Acquire("l", "p")
	if err != nil {
		t.Fatal(err)
	}
	w := p.NewValueWriter()
	if _, err := w.Write(testutil.Random(1, 0, size)); err != nil {
		t.Fatal(err)
	}
	id, n, err := w.Close()
	if err != nil {
		t.Fatal(err)
	}
	if err := eng.CommitterFor(p).Apply(false, journal.Op{Key: "f", Entry: btree.Entry{Value: id, Meta: btree.Meta{Size: n}}}); err != nil {
		t.Fatal(err)
	}
	pageDir = p.Dir()
	repo.Release(p)
	if err := repo.Close(); err != nil {
		t.Fatal(err)
	}
	return dir, pageDir
}

func open(t *testing.T, dir string) *store.Repository {
	t.Helper()
	repo, err := store.Open(dir, journal.NewEngine().Hooks(store.Options{}))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { repo.Close() })
	return repo
}

// A row rewritten with other bytes through Badger, whose checksums then
// hold: reads trust them, the scrub finds it, and records when it ran.
func TestScrubFindsARowThatIsNotItsDigest(t *testing.T) {
	dir, pageDir := page(t, 4<<20)
	db, err := badgerdb.Open(badgerdb.Options(pageDir, false))
	if err != nil {
		t.Fatal(err)
	}
	var changed []byte
	err = db.Update(func(txn *badger.Txn) error {
		it := txn.NewIterator(badger.IteratorOptions{Prefix: []byte(store.PrefixObjects)})
		defer it.Close()
		for it.Rewind(); it.Valid(); it.Next() {
			if it.Item().ValueSize() < 8<<10 || it.Item().UserMeta() != 0 {
				continue // a chunk stored as written
			}
			v, err := it.Item().ValueCopy(nil)
			if err != nil {
				return err
			}
			v[len(v)/2] ^= 0x40
			changed = it.Item().KeyCopy(nil)[len(store.PrefixObjects):]
			return txn.Set(it.Item().KeyCopy(nil), v)
		}
		return nil
	})
	if err != nil || changed == nil || db.Close() != nil {
		t.Fatalf("change a chunk's row: %v", err)
	}
	repo := open(t, dir)
	s := &scrub.Scrubber{Repo: repo, Every: time.Hour}
	r, err := s.Page(context.Background(), "l", "p")
	if err != nil {
		t.Fatal(err)
	}
	if len(r.Damaged) != 1 || string(r.Damaged[0]) != string(changed) || r.Bytes < 4<<20 {
		t.Fatalf("the scrub found %x in %d bytes, want %x", r.Damaged, r.Bytes, changed)
	}
	if at, err := repo.Scrubbed("l", "p"); err != nil || time.Since(at) > time.Minute {
		t.Fatalf("the scrub recorded %v, %v", at, err)
	}
}

// A scrub reads no faster than its rate: a limiter never lets it.
func TestScrubKeepsItsRate(t *testing.T) {
	dir, _ := page(t, 6<<20)
	repo := open(t, dir)
	s := &scrub.Scrubber{Repo: repo, Every: time.Hour, Rate: 8 << 20}
	start := time.Now()
	r, err := s.Page(context.Background(), "l", "p")
	if err != nil || len(r.Damaged) != 0 {
		t.Fatalf("scrub: %v, damaged %x", err, r.Damaged)
	}
	// The burst (two batches) comes at once; the rest at the rate.
	if took, least := time.Since(start), time.Duration(float64(r.Bytes-2<<20-1<<20)/float64(8<<20)*float64(time.Second)); took < least {
		t.Fatalf("%d bytes scrubbed in %v at 8 MiB/s: want %v at least", r.Bytes, took, least)
	}
}

// Run scrubs the pages due, each once per Every, and ends at Close.
func TestRunScrubsWhatIsDue(t *testing.T) {
	dir, _ := page(t, 1<<20)
	repo := open(t, dir)
	done := make(chan scrub.Result, 10)
	s := &scrub.Scrubber{Repo: repo, Every: 50 * time.Millisecond, Observe: func(r scrub.Result) { done <- r }}
	go s.Run()
	defer s.Close()
	for range 2 {
		select {
		case r := <-done:
			if r.Ledger != "l" || r.Page != "p" || r.Bytes == 0 {
				t.Fatalf("scrubbed %+v", r)
			}
		case <-time.After(time.Minute):
			t.Fatal("no scrub within a minute")
		}
	}
}
