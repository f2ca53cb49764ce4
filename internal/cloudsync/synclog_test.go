package cloudsync

import (
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	"github.com/ledgerfs/ledgerfs/internal/btree"
	"github.com/ledgerfs/ledgerfs/internal/remote"
	"github.com/ledgerfs/ledgerfs/journal"
	"github.com/ledgerfs/ledgerfs/store"
)

// TestArrivalIsNotUndoneByTheSyncLog: a remote change that lands over an
// entry whose local change a sync recorded in the page's sync log (a
// directory's fsync after a rename, say) stays after a kill -9: recovery
// replays the log's records over the head, and the record of the older,
// local change must not be among them.
func TestArrivalIsNotUndoneByTheSyncLog(t *testing.T) {
	be, err := remote.NewDir(t.TempDir())
	must(t, err)
	a, b := newDevice(t, "a", be), newDevice(t, "b", be)
	second := time.Now().Truncate(time.Second)
	a.writeAt("l", "p", "f", []byte("first"), second)
	a.sync()
	b.sync()

	// a changes f, and a sync of the page records the change in its log.
	pg := a.page("l", "p")
	w := pg.NewValueWriter()
	_, err = w.Write([]byte("a's"))
	must(t, err)
	id, size, err := w.Close()
	must(t, err)
	c := a.eng.CommitterFor(pg)
	must(t, c.Apply(true)) // the page's first sync checkpoints
	must(t, c.Queue(nil, journal.Op{Key: "f", Entry: btree.Entry{Value: id, Meta: btree.Meta{Size: size, Mode: 0o100644,
		MtimeNs: second.Add(time.Second).UnixNano(), HasMtime: true}}}))
	must(t, c.Apply(true))
	must(t, c.Wait()) // landed
	if !pg.Durability().Has("f") {
		t.Fatal("the sync did not record the change in the log")
	}
	a.repo.Release(pg)

	// b's later change of f lands on a, and wins the merge.
	b.writeAt("l", "p", "f", []byte("b's"), second.Add(2*time.Second))
	b.sync()
	a.sync()
	if got := a.files("l", "p")["f"]; got != "b's" {
		t.Fatalf("after the merge a's f holds %q, want b's", got)
	}

	// A kill -9 now: every file as it is.
	snap := filepath.Join(t.TempDir(), "killed")
	if out, err := exec.Command("cp", "-a", "--sparse=always", a.repo.Dir(), snap).CombinedOutput(); err != nil {
		t.Fatalf("cp: %v: %s", err, out)
	}
	eng := journal.NewEngine()
	repo, err := store.Open(snap, eng.Hooks(store.Options{}))
	must(t, err)
	defer repo.Close()
	k := &device{t: t, name: "a after a kill", repo: repo, eng: eng}
	if got := k.files("l", "p")["f"]; got != "b's" {
		t.Fatalf("after a kill a's f holds %q, want b's", got)
	}
}
