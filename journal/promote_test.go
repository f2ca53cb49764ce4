package journal

import (
	"maps"
	"path/filepath"
	"strings"
	"testing"

	"github.com/ledgerfs/ledgerfs/internal/btree"
	"github.com/ledgerfs/ledgerfs/internal/synclog"
	"github.com/ledgerfs/ledgerfs/store"
)

// synced copies the repository as a power loss after the db's last sync
// leaves it, before the log's records that follow: call it right after a
// sync of the db. lost then adds the log as it is now (synced: the test
// syncs it first) and opens the copy, recovery run.
func (e *env) synced() (lost func() *env) {
	e.t.Helper()
	snap := filepath.Join(e.t.TempDir(), "power-loss")
	copyTree(e.t, e.dir, snap)
	return func() *env {
		e.t.Helper()
		rel, err := filepath.Rel(e.dir, e.p.Dir())
		if err != nil {
			e.t.Fatal(err)
		}
		copyTree(e.t, filepath.Join(e.p.Dir(), synclog.FileName), filepath.Join(snap, rel, synclog.FileName))
		l := &env{t: e.t, dir: snap, eng: NewEngine()}
		l.open()
		e.t.Cleanup(func() { l.repo.Close() })
		l.acquire()
		return l
	}
}

// TestSyncPromotesQueuedChanges: a sync of the page after changes that have
// no record in the log (queued for a crash of the process alone, or written
// to the db) records each of them whole and syncs the log, not the db — a
// directory's fsync after creates, renames and unlinks — and a power loss
// then loses none of them: an empty file, a tiny one, one of 10 KiB, a
// rename, a directory's times, an unlink.
func TestSyncPromotesQueuedChanges(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	c := e.eng.CommitterFor(e.p)
	if err := c.Apply(true, e.marker("d/", 1), e.put("d/old", "renamed"), e.put("gone", "unlinked"), e.put("kept", "as is")); err != nil {
		t.Fatal(err)
	}
	lost := e.synced()
	tenK := strings.Repeat("0123456789", 1024)
	moved := e.put("d/new", "renamed")
	for _, ops := range [][]Op{
		{e.put("d/empty", "")},
		{e.put("d/tiny", "tiny"), e.marker("d/", 2)},
		{e.put("ten", tenK)},
		{{Key: "d/old", Kind: store.OpRenameDelete}, moved, e.marker("d/", 3)},
		{{Key: "gone", Kind: store.OpDelete}},
	} {
		if err := c.Queue(nil, ops...); err != nil {
			t.Fatal(err)
		}
	}
	st := e.repo.Stats()
	if err := c.Apply(true); err != nil {
		t.Fatal(err)
	}
	after := e.repo.Stats()
	if after.DBSyncs != st.DBSyncs || after.Promoted-st.Promoted < 7 || after.LogSyncs == st.LogSyncs {
		t.Fatalf("the sync: %d db syncs, %d log syncs, %d changes promoted; want 0, 1 and 7",
			after.DBSyncs-st.DBSyncs, after.LogSyncs-st.LogSyncs, after.Promoted-st.Promoted)
	}
	if err := c.Wait(); err != nil {
		t.Fatal(err)
	}
	want := map[string]string{"d/": "", "d/empty": "", "d/tiny": "tiny", "ten": tenK, "d/new": "renamed", "kept": "as is"}
	if got := e.state(); !maps.Equal(got, want) {
		t.Fatalf("the page: %v, want %v", slicesKeys(got), slicesKeys(want))
	}
	l := lost()
	if got := l.state(); !maps.Equal(got, want) {
		t.Fatalf("after a power loss: %v, want %v", slicesKeys(got), slicesKeys(want))
	}
	if m := l.meta("d/"); m.MtimeNs != 3 {
		t.Fatalf("after a power loss the directory's mtime is %d, want 3", m.MtimeNs)
	}
	l.verify()
}

// TestPromotedKeysAreRecordedAfter: once a sync has promoted a key's
// change, the key's later changes are recorded too (a replay of the
// earlier record would undo them): a small one whole, with its group, and
// no sync of the db; one too large to copy by a checkpoint first. After a
// kill, and after a power loss, the page holds the latest of each.
func TestPromotedKeysAreRecordedAfter(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	c := e.eng.CommitterFor(e.p)
	if err := c.Apply(true, e.marker("d/", 1)); err != nil {
		t.Fatal(err)
	}
	lost := e.synced()
	if err := c.Queue(nil, e.put("d/a", "first"), e.marker("d/", 2)); err != nil {
		t.Fatal(err)
	}
	if err := c.Apply(true); err != nil {
		t.Fatal(err)
	}
	if !e.p.Durability().Has("d/a") {
		t.Fatal("the sync did not promote the change")
	}
	st := e.repo.Stats()
	// A rename of the promoted key into a new name, the directory's
	// times with it: recorded, both halves.
	if err := c.Queue(nil, Op{Key: "d/a", Kind: store.OpRenameDelete}, e.put("d/b", "first"), e.marker("d/", 3)); err != nil {
		t.Fatal(err)
	}
	if got := e.repo.Stats().DBSyncs - st.DBSyncs; got != 0 || !e.p.Durability().Has("d/b") {
		t.Fatalf("a rename of a promoted key: %d db syncs, new name recorded %v; want 0 and true", got, e.p.Durability().Has("d/b"))
	}
	if err := c.Apply(true); err != nil {
		t.Fatal(err)
	}
	if got := e.repo.Stats().DBSyncs - st.DBSyncs; got != 0 {
		t.Fatalf("the second sync: %d db syncs, want 0", got)
	}
	want := map[string]string{"d/": "", "d/b": "first"}
	if got := e.killed().state(); !maps.Equal(got, want) {
		t.Fatalf("after a kill: %v, want %v", slicesKeys(got), slicesKeys(want))
	}
	if got := lost().state(); !maps.Equal(got, want) {
		t.Fatalf("after a power loss: %v, want %v", slicesKeys(got), slicesKeys(want))
	}
	// Too large to copy whole: the db is synced first, and no record is
	// left to undo it.
	big := strings.Repeat("x", 100<<10)
	if err := c.Queue(nil, e.put("d/b", big)); err != nil {
		t.Fatal(err)
	}
	if e.repo.Stats().DBSyncs == st.DBSyncs || e.p.Durability().Has("d/b") {
		t.Fatal("a large change of a promoted key did not checkpoint the log")
	}
	if err := c.Wait(); err != nil {
		t.Fatal(err)
	}
	want["d/b"] = big
	if got := e.killed().state(); !maps.Equal(got, want) {
		t.Fatalf("after a kill: d/b %d bytes, want %d", len(got["d/b"]), len(big))
	}
}

// TestPromotionLeavesLargeValuesToACheckpoint: a sync after a change whose
// value is too large to copy whole syncs the db, as before.
func TestPromotionLeavesLargeValuesToACheckpoint(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	c := e.eng.CommitterFor(e.p)
	if err := c.Apply(true, e.put("f", "1")); err != nil {
		t.Fatal(err)
	}
	if err := c.Queue(nil, e.put("big", strings.Repeat("y", 100<<10)), Op{Key: "f", Kind: store.OpDelete}); err != nil {
		t.Fatal(err)
	}
	st := e.repo.Stats()
	if err := c.Apply(true); err != nil {
		t.Fatal(err)
	}
	if after := e.repo.Stats(); after.DBSyncs == st.DBSyncs || after.Promoted != st.Promoted {
		t.Fatalf("%d db syncs, %d promoted; want a checkpoint and none", after.DBSyncs-st.DBSyncs, after.Promoted-st.Promoted)
	}
}

// meta is the metadata of the head's entry at key.
func (e *env) meta(key string) btree.Meta {
	e.t.Helper()
	head, err := e.p.Head()
	if err != nil {
		e.t.Fatal(err)
	}
	en, found, err := e.p.Tree(head).Get(key)
	if err != nil || !found {
		e.t.Fatalf("entry %q: found %v, %v", key, found, err)
	}
	return en.Meta
}

// TestRecordsFillingASmallLogGrowIt: a small log filled with records a
// replay makes (here whole records of a promoted key's changes, promoted
// again by a sync every 100 changes) grows to the default size at the
// checkpoint that empties it, once, rather than checkpointing again each
// time a small log's worth is appended.
func TestRecordsFillingASmallLogGrowIt(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	c := e.eng.CommitterFor(e.p)
	if err := c.Apply(true, e.marker("d/", 1)); err != nil {
		t.Fatal(err)
	}
	if err := c.Queue(nil, e.put("d/f", "x"), e.marker("d/", 2)); err != nil {
		t.Fatal(err)
	}
	if err := c.Apply(true); err != nil {
		t.Fatal(err)
	}
	if !e.p.Durability().Has("d/") || e.logSize() >= synclog.DefaultSize {
		t.Fatalf("after the promotion: marker recorded %v, log of %d bytes; want a small log holding it", e.p.Durability().Has("d/"), e.logSize())
	}
	syncs := e.repo.Stats().DBSyncs
	for i := range 6000 { // records of about 100 bytes: over two small logs' worth
		if err := c.Queue(nil, e.marker("d/", int64(3+i))); err != nil {
			t.Fatal(err)
		}
		if i%100 == 99 { // as an fsync now and then does
			if err := c.Apply(true); err != nil {
				t.Fatal(err)
			}
		}
	}
	if err := c.Wait(); err != nil {
		t.Fatal(err)
	}
	if n, got := e.repo.Stats().DBSyncs-syncs, e.logSize(); n != 1 || got != synclog.DefaultSize {
		t.Fatalf("6,000 changes recorded whole: %d db syncs, a log of %d bytes; want 1 and %d", n, got, synclog.DefaultSize)
	}
}
