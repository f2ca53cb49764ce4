package mount_test

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/ledgerfs/ledgerfs/journal"
	"github.com/ledgerfs/ledgerfs/store"
)

// verifySchema opens every page db of an unmounted repository directly with
// Badger and checks every row against the documented schema. It returns
// the number of rows of each kind, over all pages.
func verifySchema(t testing.TB, repo string) map[string]int {
	return verifyRows(t, repo, true)
}

// verifyRows is verifySchema, which may be told to allow transient pieces,
// which a crash leaves for the next start to collect.
func verifyRows(t testing.TB, repo string, clean bool) map[string]int {
	t.Helper()
	dirs, err := filepath.Glob(filepath.Join(repo, store.SerializationVersion, "ledgers", "*", "*"))
	if err != nil || len(dirs) == 0 {
		t.Fatalf("no page dbs in %s (%v)", repo, err)
	}
	total := map[string]int{}
	for _, dir := range dirs {
		if fi, err := os.Stat(dir); err != nil || !fi.IsDir() {
			continue
		}
		counts, err := store.VerifyDir(dir, func(k string, v []byte) error {
			_, err := journal.DecodeOp(k, v)
			return err
		})
		if err != nil {
			t.Fatalf("%s: %v", dir, err)
		}
		for k, n := range counts {
			total[k] += n
		}
		if clean && counts[store.StatusPrefix(store.Transient)] != 0 {
			t.Fatalf("%s: transient pieces left after unmount: %v", dir, counts)
		}
		t.Logf("%s: rows %v", filepath.Base(dir), counts)
	}
	return total
}

// A page made and left empty holds the first commit's head row, as
// Ledger's storage does for every page (verifySchema fails a page db with
// no heads/ row); so does one emptied by deleting its files.
func TestEmptyPageHasItsHead(t *testing.T) {
	t.Parallel()
	repo := t.TempDir()
	s := mount(t, repo)
	must(t, os.MkdirAll(filepath.Join(s.mnt, "l", "empty"), 0o755))
	pg := s.page("l", "emptied")
	must(t, os.WriteFile(filepath.Join(pg, "f"), []byte("x"), 0o644))
	must(t, os.Remove(filepath.Join(pg, "f")))
	syncDir(t, pg)
	s.stop()
	if got := verifySchema(t, repo)[store.PrefixHeads]; got != 2 {
		t.Fatalf("%d head rows in two pages, want 2", got)
	}
}
