package mount_test

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/dgraph-io/badger/v4"

	"github.com/ledgerfs/ledgerfs/journal"
	"github.com/ledgerfs/ledgerfs/store"
)

// verifySchema opens every page db of an unmounted repository directly with
// Badger and checks every row against the documented schema.
func verifySchema(t testing.TB, repo string) {
	t.Helper()
	dirs, err := filepath.Glob(filepath.Join(repo, store.SerializationVersion, "ledgers", "*", "*"))
	if err != nil || len(dirs) == 0 {
		t.Fatalf("no page dbs in %s (%v)", repo, err)
	}
	for _, dir := range dirs {
		if fi, err := os.Stat(dir); err != nil || !fi.IsDir() {
			continue
		}
		db, err := badger.Open(badger.DefaultOptions(dir).WithLogger(nil))
		if err != nil {
			t.Fatalf("open %s: %v", dir, err)
		}
		counts, err := store.VerifyRows(db, func(k string, v []byte) error {
			_, err := journal.DecodeOp(k, v)
			return err
		})
		db.Close()
		if err != nil {
			t.Fatalf("%s: %v", dir, err)
		}
		if counts[store.StatusPrefix(store.Transient)] != 0 {
			t.Fatalf("%s: transient pieces left after unmount: %v", dir, counts)
		}
		t.Logf("%s: rows %v", filepath.Base(dir), counts)
	}
}
