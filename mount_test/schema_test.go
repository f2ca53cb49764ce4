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
