package mount_test

import (
	"bytes"
	"math/rand/v2"
	"os"
	"path/filepath"
	"testing"

	"golang.org/x/sys/unix"
)

// syncLogs lists the sync logs in the repository's page directories.
func syncLogs(t *testing.T, repo string) []string {
	t.Helper()
	logs, err := filepath.Glob(filepath.Join(repo, "1", "ledgers", "*", "*", "ledgerfs-sync.log"))
	must(t, err)
	return logs
}

// Small writes each followed by fdatasync are made durable by the page's
// sync log, one append and one flush each, not by syncing the page's db;
// the log is removed when the page closes cleanly, and what was written
// reads back after a remount.
func TestFsyncGoesThroughTheSyncLog(t *testing.T) {
	t.Parallel()
	repo := t.TempDir()
	s := mountPlain(t, repo)
	pg := s.page("s", "p")
	path := filepath.Join(pg, "db")
	data := content(11, 1<<20)
	must(t, os.WriteFile(path, data, 0o644))
	syncDir(t, pg)
	before := statsOf(t, s.mnt)

	f, err := os.OpenFile(path, os.O_RDWR, 0)
	must(t, err)
	r := rand.New(rand.NewPCG(5, 5))
	const writes = 50
	for i := range writes {
		off := r.Int64N(int64(len(data)) - 4096)
		block := content(200+i, 4096)
		_, err := f.WriteAt(block, off)
		must(t, err)
		must(t, unix.Fdatasync(int(f.Fd())))
		copy(data[off:], block)
	}
	after := statsOf(t, s.mnt)
	logSyncs := after[`ledgerfs_syncs_total{what="log"}`] - before[`ledgerfs_syncs_total{what="log"}`]
	dbSyncs := after[`ledgerfs_syncs_total{what="db"}`] - before[`ledgerfs_syncs_total{what="db"}`]
	t.Logf("%d fdatasyncs: %v syncs of the log, %v of the db", writes, logSyncs, dbSyncs)
	if logSyncs < writes || dbSyncs > 1 {
		t.Errorf("%d fdatasyncs synced the log %v times and the db %v times; want the log each time", writes, logSyncs, dbSyncs)
	}
	if logs := syncLogs(t, repo); len(logs) != 1 {
		t.Errorf("sync logs while the page is in use: %v", logs)
	}
	must(t, f.Close())
	s.stop()
	if logs := syncLogs(t, repo); len(logs) != 0 {
		t.Errorf("sync logs left after a clean unmount: %v", logs)
	}
	s = mountPlain(t, repo)
	if got, err := os.ReadFile(filepath.Join(s.page("s", "p"), "db")); err != nil || !bytes.Equal(got, data) {
		t.Fatalf("after remount the file differs (%v)", err)
	}
}
