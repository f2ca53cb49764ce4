package journal

import (
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/ledgerfs/ledgerfs/internal/synclog"
	"github.com/ledgerfs/ledgerfs/store"
)

// killed returns the repository as a kill -9 of the process leaves it,
// opened (recovery run) in a copy: every file as it is now, the db's
// unsynced writes and the sync log's appends included, since the page
// cache keeps them.
func (e *env) killed() *env {
	e.t.Helper()
	snap := filepath.Join(e.t.TempDir(), "killed")
	copyTree(e.t, e.dir, snap)
	k := &env{t: e.t, dir: snap, eng: NewEngine()}
	k.open()
	e.t.Cleanup(func() { k.repo.Close() })
	k.acquire()
	return k
}

// rows returns the keys journal id has rows for in the db.
func (e *env) rows(id store.JournalID) map[string]bool {
	e.t.Helper()
	out := map[string]bool{}
	err := e.p.JournalEntries(id, "", func(key string, _ []byte) error {
		out[key] = true
		return nil
	})
	if err != nil {
		e.t.Fatal(err)
	}
	return out
}

// marker is the op of directory dir's marker, with mtime ns.
func (e *env) marker(dir string, ns int64) Op {
	en := e.value("")
	en.Meta.Mode, en.Meta.MtimeNs, en.Meta.HasMtime = 0o40755, ns, true
	return Op{Key: dir, Kind: store.OpMarker, Entry: en}
}

// TestQueuedChangesSurviveAKill: unlinks, directory markers, renames and
// changes of metadata of an implicit journal go to the sync log alone, no
// journal row in the db;
// after a kill -9 before the journal lands, recovery writes them into
// their journal and commits them with it.
func TestQueuedChangesSurviveAKill(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	c := e.eng.CommitterFor(e.p)
	if err := c.Apply(true, e.put("d/a", "1"), e.put("d/b", "2"), e.put("keep", "3")); err != nil {
		t.Fatal(err)
	}
	before := e.repo.Stats().QueuedInLog
	j, err := e.eng.Begin(e.p, false)
	if err != nil {
		t.Fatal(err)
	}
	if err := j.Apply(e.marker("d/", 7), Op{Key: "d/a", Kind: store.OpDelete}); err != nil {
		t.Fatal(err)
	}
	if err := j.Apply(Op{Key: "d/b", Kind: store.OpDelete}, e.marker("e/", 8)); err != nil {
		t.Fatal(err)
	}
	// A rename and a change of metadata: puts of a value stored already.
	kept, _ := e.headEntry("keep")
	if err := j.Apply(Op{Key: "keep", Kind: store.OpRenameDelete}, Op{Key: "moved", Entry: kept}); err != nil {
		t.Fatal(err)
	}
	chmod := kept
	chmod.Meta.Mode = 0o100600
	if err := j.Apply(Op{Key: "moved", Entry: chmod}); err != nil {
		t.Fatal(err)
	}
	if n := e.repo.Stats().QueuedInLog - before; n != 7 {
		t.Fatalf("%d changes queued in the log, want 7", n)
	}
	if rows := e.rows(j.ID); len(rows) != 0 {
		t.Fatalf("queued changes wrote rows %v", rows)
	}
	recs, err := synclog.ReadFile(filepath.Join(e.p.Dir(), synclog.FileName))
	if err != nil {
		t.Fatal(err)
	}
	// The epoch may still hold the records of the setup's changes, which
	// its checkpoint wrote as rows.
	if n := len(slices.DeleteFunc(recs, func(r synclog.Record) bool { return store.JournalID(r.Journal) != j.ID })); n != 7 {
		t.Fatalf("the log holds %d records of the journal, want the 7 changes", n)
	}

	k := e.killed()
	want := map[string]string{"d/": "", "e/": "", "moved": "3"}
	if got := k.state(); !maps.Equal(got, want) {
		t.Fatalf("after the kill: %v, want %v", got, want)
	}
	if m, ok := k.headEntry("e/"); !ok || m.Meta.MtimeNs != 8 {
		t.Fatalf("marker e/ after the kill: %+v", m)
	}
	if m, ok := k.headEntry("moved"); !ok || m.Meta.Mode != 0o100600 {
		t.Fatalf("moved after the kill: %+v", m)
	}
	if has, err := k.p.HasJournals(); err != nil || has {
		t.Fatalf("journal rows left after recovery: %v %v", has, err)
	}
	k.verify()

	// The journal lands: a kill after it has nothing to write.
	if _, err := j.Commit(); err != nil {
		t.Fatal(err)
	}
	if got := e.killed().state(); !maps.Equal(got, want) {
		t.Fatalf("after the commit and a kill: %v, want %v", got, want)
	}
}

// TestQueuedThenWrittenKeepsTheLaterChange: a key whose change was queued
// and then changed again through a written row (a close's put, which the
// log cannot stand in for) ends with the put, in the same journal or the next,
// after a kill; so does a checkpoint in between, which writes the queued
// rows, and after which the journal queues nothing more.
func TestQueuedThenWrittenKeepsTheLaterChange(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	c := e.eng.CommitterFor(e.p)
	if err := c.Apply(true, e.put("a", "old"), e.put("b", "old"), e.put("c", "old")); err != nil {
		t.Fatal(err)
	}
	j0, err := e.eng.Begin(e.p, false)
	if err != nil {
		t.Fatal(err)
	}
	for _, k := range []string{"a", "b"} {
		if err := j0.Apply(Op{Key: k, Kind: store.OpDelete}); err != nil {
			t.Fatal(err)
		}
	}
	// A close's put comes with its value's last pieces, written with its
	// row: never queued.
	closed := func(j *Journal, op Op) error { return j.ApplyWith(e.p.PutJournalEntries, op) }
	if err := closed(j0, e.put("a", "new")); err != nil { // same journal
		t.Fatal(err)
	}
	j1, err := e.eng.Begin(e.p, false)
	if err != nil {
		t.Fatal(err)
	}
	if err := closed(j1, e.put("b", "new")); err != nil { // the next
		t.Fatal(err)
	}
	// Queued after the put of a in j0: never (recovery could not tell
	// the order).
	queued := e.repo.Stats().QueuedInLog
	if err := j0.Apply(Op{Key: "a", Kind: store.OpDelete}); err != nil {
		t.Fatal(err)
	}
	if e.repo.Stats().QueuedInLog != queued || !e.rows(j0.ID)["a"] {
		t.Fatal("a change queued after its key's row in the same journal")
	}
	if err := closed(j0, e.put("a", "newer")); err != nil {
		t.Fatal(err)
	}
	want := map[string]string{"a": "newer", "b": "new", "c": "old"}
	if got := e.killed().state(); !maps.Equal(got, want) {
		t.Fatalf("after a kill: %v, want %v", got, want)
	}

	// A checkpoint writes the rows the log stood in for, and the db
	// alone then holds them: the log may go.
	queued = e.repo.Stats().QueuedInLog
	if err := j0.Apply(Op{Key: "c", Kind: store.OpDelete}); err != nil {
		t.Fatal(err)
	}
	if e.repo.Stats().QueuedInLog == queued || e.rows(j0.ID)["c"] {
		t.Fatalf("the delete of c was not queued: %d queued, row %v", e.repo.Stats().QueuedInLog-queued, e.rows(j0.ID)["c"])
	}
	if err := e.p.Durability().Checkpoint(); err != nil {
		t.Fatal(err)
	}
	if !e.rows(j0.ID)["c"] {
		t.Fatal("the checkpoint did not write the queued row of c")
	}
	queued = e.repo.Stats().QueuedInLog
	if err := j0.Apply(e.marker("d/", 1)); err != nil {
		t.Fatal(err)
	}
	if e.repo.Stats().QueuedInLog != queued {
		t.Fatal("a journal whose rows a checkpoint wrote queued another change")
	}
	delete(want, "c")
	want["d/"] = ""
	k := e.killed()
	if err := os.Remove(filepath.Join(k.p.Dir(), synclog.FileName)); err != nil && !os.IsNotExist(err) {
		t.Fatal(err)
	}
	if got := k.state(); !maps.Equal(got, want) {
		t.Fatalf("after a checkpoint and a kill: %v, want %v", got, want)
	}
}

// TestQueuedChangesAreDurableByACheckpoint: an fsync after queued changes
// one of which cannot be recorded whole (a value of more than maxWhole
// bytes) syncs the db, not the log alone (the queued records are for a
// crash of the process), and the db as synced then holds the changes
// without the log: what a power loss leaves.
func TestQueuedChangesAreDurableByACheckpoint(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	c := e.eng.CommitterFor(e.p)
	if err := c.Apply(true, e.put("f", "1"), e.put("g", "2")); err != nil {
		t.Fatal(err)
	}
	queued := e.repo.Stats().QueuedInLog
	big := strings.Repeat("b", 100<<10)
	if err := c.Queue(nil, Op{Key: "f", Kind: store.OpDelete}, e.put("big", big)); err != nil {
		t.Fatal(err)
	}
	if e.repo.Stats().QueuedInLog == queued {
		t.Fatal("the unlink was not queued in the log")
	}
	if e.p.Durability().Durable("f") {
		t.Fatal("a queued change counts as durable before a checkpoint")
	}
	syncs := e.repo.Stats().DBSyncs
	if err := e.p.Durability().SyncChanges(); err != nil {
		t.Fatal(err)
	}
	if e.repo.Stats().DBSyncs == syncs {
		t.Fatal("syncing the changes did not sync the db")
	}
	snap := filepath.Join(t.TempDir(), "power-loss")
	copyTree(t, e.dir, snap)
	if err := c.Wait(); err != nil {
		t.Fatal(err)
	}
	lost := &env{t: t, dir: snap, eng: NewEngine()}
	lost.open()
	defer lost.repo.Close()
	lost.acquire()
	if err := os.Remove(filepath.Join(lost.p.Dir(), synclog.FileName)); err != nil && !os.IsNotExist(err) {
		t.Fatal(err)
	}
	if got, want := lost.state(), map[string]string{"g": "2", "big": big}; !maps.Equal(got, want) {
		t.Fatalf("after the power loss: %v, want %v", got, want)
	}
}

// TestSyncReturnsBeforeTheCommit: an fsync with no change of its own (a
// directory's) makes the changes queued so far durable without waiting
// for their commit, which here is held at its first step: with one too
// large to be recorded whole (promote), a checkpoint writes the rows the
// log stood in for and syncs the db, so the db alone, as a power loss
// leaves it, holds the changes in their journal, and recovery commits
// them. The next change starts a journal of its own.
func TestSyncReturnsBeforeTheCommit(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	c := e.eng.CommitterFor(e.p)
	if err := c.Apply(true, e.put("f", "1"), e.put("g", "2")); err != nil {
		t.Fatal(err)
	}
	held, release := make(chan struct{}), make(chan struct{})
	var once sync.Once
	e.eng.crashAt = func(string) error {
		once.Do(func() {
			close(held)
			<-release
		})
		return nil
	}
	var released sync.Once
	free := func() { released.Do(func() { close(release) }) }
	defer free()
	queued := e.repo.Stats().QueuedInLog
	if err := c.Queue(nil, Op{Key: "f", Kind: store.OpDelete}); err != nil {
		t.Fatal(err)
	}
	h := strings.Repeat("3", 100<<10)
	if err := c.Queue(nil, e.put("h", h)); err != nil {
		t.Fatal(err)
	}
	if e.repo.Stats().QueuedInLog < queued+2 {
		t.Fatal("the changes were not queued in the log")
	}
	syncs := e.repo.Stats().DBSyncs
	done := make(chan error, 1)
	go func() { done <- c.Apply(true) }()
	select {
	case err := <-done:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("the sync waited for the commit")
	}
	if e.repo.Stats().DBSyncs == syncs {
		t.Fatal("queued changes were made durable without syncing the db")
	}
	snap := filepath.Join(t.TempDir(), "power-loss")
	copyTree(t, e.dir, snap)
	<-held // the commit began, cut from the batch by the sync
	free()
	if err := c.Wait(); err != nil {
		t.Fatal(err)
	}
	want := map[string]string{"g": "2", "h": h}
	if got := e.state(); !maps.Equal(got, want) {
		t.Fatalf("after the commit: %v, want %v", got, want)
	}
	lost := &env{t: t, dir: snap, eng: NewEngine()}
	lost.open()
	defer lost.repo.Close()
	rel, err := filepath.Rel(e.dir, e.p.Dir())
	if err != nil {
		t.Fatal(err)
	}
	if err := os.Remove(filepath.Join(snap, rel, synclog.FileName)); err != nil && !os.IsNotExist(err) {
		t.Fatal(err)
	}
	lost.acquire()
	if got := lost.state(); !maps.Equal(got, want) {
		t.Fatalf("after the power loss: %v, want %v", got, want)
	}
}

// logSize is the size of the page's sync log file.
func (e *env) logSize() int64 {
	e.t.Helper()
	st, err := os.Stat(filepath.Join(e.p.Dir(), synclog.FileName))
	if err != nil {
		e.t.Fatal(err)
	}
	return st.Size()
}

// TestQueuedChangesStartASmallLog: a new log is small (making a full one
// writes and syncs 8 MiB) and takes records of every kind while they fit.
// Full of queued changes alone, which no fsync waits on, it grows in
// place, having written their rows into their journal; holding records an
// fsync made, it grows through a checkpoint. A kill -9 after either loses
// none of the changes.
func TestQueuedChangesStartASmallLog(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	j, err := e.eng.Begin(e.p, false)
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]string{}
	if err := j.Apply(e.marker("d/", 1)); err != nil {
		t.Fatal(err)
	}
	want["d/"] = ""
	if n := e.logSize(); n >= synclog.DefaultSize {
		t.Fatalf("a log made for a queued change has %d bytes, a full one's", n)
	}
	// Queued changes past what the small log holds.
	queued := e.repo.Stats().QueuedInLog
	for i := range 2000 {
		if err := j.Apply(e.marker(fmt.Sprintf("d/%04d/", i), int64(i))); err != nil {
			t.Fatal(err)
		}
		want[fmt.Sprintf("d/%04d/", i)] = ""
	}
	if n := e.logSize(); n != synclog.DefaultSize {
		t.Fatalf("the log has %d bytes after 2,000 queued changes, want %d", n, synclog.DefaultSize)
	}
	if e.repo.Stats().QueuedInLog-queued >= 2000 {
		t.Fatal("every change was queued: the journal grew its log and kept queueing")
	}
	if got := e.killed().state(); !maps.Equal(got, want) {
		t.Fatalf("after the log grew and a kill: %d keys, want %d", len(got), len(want))
	}

	// A logged put that fits goes into the small log, beside the queued
	// change; one that does not fit grows it through a checkpoint.
	e2 := newEnv(t)
	j2, err := e2.eng.Begin(e2.p, false)
	if err != nil {
		t.Fatal(err)
	}
	if err := j2.Apply(e2.marker("d/", 1)); err != nil {
		t.Fatal(err)
	}
	small := e2.logSize()
	if small >= synclog.DefaultSize {
		t.Fatalf("a log made for a queued change has %d bytes, a full one's", small)
	}
	content := []byte("written and fsynced")
	if err := j2.Apply(e2.loggedPut("f", nil, nil, content, []store.Extent{{Data: content}})); err != nil {
		t.Fatal(err)
	}
	if n := e2.logSize(); n != small {
		t.Fatalf("the log has %d bytes after a small logged put, want %d", n, small)
	}
	recs, err := synclog.ReadFile(filepath.Join(e2.p.Dir(), synclog.FileName))
	if err != nil || len(recs) != 2 || recs[1].Key != "f" || len(recs[1].Journal) != 0 {
		t.Fatalf("the small log holds %+v (%v), want the queued change's record and the put's", recs, err)
	}
	syncs := e2.repo.Stats().DBSyncs
	large := randomBytes(3, int(small)) // twice what an epoch of it holds
	if err := j2.Apply(e2.loggedPut("g", nil, nil, large, []store.Extent{{Data: large}})); err != nil {
		t.Fatal(err)
	}
	if n := e2.logSize(); n != synclog.DefaultSize {
		t.Fatalf("the log has %d bytes after a logged put of %d, want %d", n, len(large), synclog.DefaultSize)
	}
	if e2.repo.Stats().DBSyncs == syncs {
		t.Fatal("the log grew without a checkpoint while it held a put's record")
	}
	recs, err = synclog.ReadFile(filepath.Join(e2.p.Dir(), synclog.FileName))
	if err != nil || len(recs) != 1 || recs[0].Key != "g" {
		t.Fatalf("the grown log holds %d records (%v), want the large put's alone", len(recs), err)
	}
	want2 := map[string]string{"d/": "", "f": string(content), "g": string(large)}
	if got := e2.killed().state(); !maps.Equal(got, want2) {
		t.Fatalf("after the log grew and a kill: keys %v, want %v", slicesKeys(got), slicesKeys(want2))
	}
}

// TestLargeFirstChangeMakesAFullLog: logged puts applied together, more
// than a small log holds, make a full-sized log at once: no checkpoint (a
// sync of the db) for their records, and all of them in the log.
func TestLargeFirstChangeMakesAFullLog(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	j, err := e.eng.Begin(e.p, false)
	if err != nil {
		t.Fatal(err)
	}
	syncs := e.repo.Stats().DBSyncs
	var ops []Op
	want := map[string]string{}
	for i := range 4 {
		b := randomBytes(uint64(10+i), 60<<10)
		key := fmt.Sprintf("f%d", i)
		ops = append(ops, e.loggedPut(key, nil, nil, b, []store.Extent{{Data: b}}))
		want[key] = string(b)
	}
	if err := j.Apply(ops...); err != nil {
		t.Fatal(err)
	}
	if n := e.logSize(); n != synclog.DefaultSize {
		t.Fatalf("the log has %d bytes after 240 KiB of logged puts, want %d", n, synclog.DefaultSize)
	}
	if n := e.repo.Stats().DBSyncs - syncs; n != 0 {
		t.Fatalf("%d db syncs for logged puts that fit a full log, want none", n)
	}
	recs, err := synclog.ReadFile(filepath.Join(e.p.Dir(), synclog.FileName))
	if err != nil || len(recs) != len(ops) {
		t.Fatalf("the log holds %d records (%v), want %d", len(recs), err, len(ops))
	}
	if got := e.killed().state(); !maps.Equal(got, want) {
		t.Fatalf("after a kill: keys %v, want %v", slicesKeys(got), slicesKeys(want))
	}
}

// TestIntentsStartASmallLog: a page's first fsyncs are logged in a small
// log; intents past what it holds grow it, through a checkpoint that
// carries them, and every fsynced edit comes back after a power loss and a
// crash of the process.
func TestIntentsStartASmallLog(t *testing.T) {
	t.Parallel()
	e, _, f0, big, snap := syncedBeforeIntents(t, 8, 1<<20)
	syncs := e.repo.Stats().DBSyncs
	cur, x := edit4k(big, 4096, 1)
	e.intent("f", f0.Entry, len(cur), &store.LogSource{Base: f0.Entry.Value.Digest, Keep: uint64(len(big)), Extents: x}, false)
	small := e.logSize()
	if small >= synclog.DefaultSize {
		t.Fatalf("a log made for an fsync of 4 KiB has %d bytes, a full one's", small)
	}
	for i := 1; e.logSize() == small; i++ {
		if i == 200 {
			t.Fatalf("%d intents of 4 KiB and the log did not grow past %d bytes", i, small)
		}
		next, x := edit4k(cur, (i*37%250)<<12, byte(i))
		e.intent("f", f0.Entry, len(next), &store.LogSource{Keep: uint64(len(cur)), Extents: x}, true)
		cur = next
	}
	if n := e.logSize(); n != synclog.DefaultSize {
		t.Fatalf("the log grew to %d bytes, want %d", n, synclog.DefaultSize)
	}
	if n := e.repo.Stats().DBSyncs - syncs; n != 1 {
		t.Fatalf("%d db syncs while the log grew, want 1 (the checkpoint carrying the intents)", n)
	}
	for i := range 3 {
		next, x := edit4k(cur, (i*53%250)<<12, byte(100+i))
		e.intent("f", f0.Entry, len(next), &store.LogSource{Keep: uint64(len(cur)), Extents: x}, true)
		cur = next
	}
	if err := e.p.Durability().SyncLog(); err != nil {
		t.Fatal(err)
	}
	e.recovers(snap, map[string]string{"f": string(cur), "kept": "unchanged"})
}

// logEpoch is the current epoch of the page's sync log.
func (e *env) logEpoch() uint64 {
	e.t.Helper()
	data, err := os.ReadFile(filepath.Join(e.p.Dir(), synclog.FileName))
	if err != nil {
		e.t.Fatal(err)
	}
	epoch, _, _, err := synclog.Parse(data)
	if err != nil {
		e.t.Fatal(err)
	}
	return epoch
}

// TestCheckpointKeepsAnEpochOfQueuedRecords: a checkpoint whose epoch
// holds queued records alone writes their rows and keeps the epoch (one
// fdatasync less). The records left are stale, and recovery after a kill
// takes none of them over a later change of their key: their journal has
// landed, or holds a row of the key.
func TestCheckpointKeepsAnEpochOfQueuedRecords(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	c := e.eng.CommitterFor(e.p)
	if err := c.Apply(true, e.put("k", "1"), e.put("m", "2")); err != nil {
		t.Fatal(err)
	}
	begin := func() *Journal {
		j, err := e.eng.Begin(e.p, false)
		if err != nil {
			t.Fatal(err)
		}
		return j
	}
	j1, j3 := begin(), begin()
	if err := j1.Apply(Op{Key: "k", Kind: store.OpDelete}); err != nil {
		t.Fatal(err)
	}
	if err := j3.Apply(Op{Key: "m", Kind: store.OpDelete}); err != nil {
		t.Fatal(err)
	}
	epoch := e.logEpoch()
	if err := e.p.Durability().Checkpoint(); err != nil {
		t.Fatal(err)
	}
	if got := e.logEpoch(); got != epoch {
		t.Fatalf("the checkpoint began epoch %d after %d, which held queued records alone", got, epoch)
	}
	if !e.rows(j1.ID)["k"] || !e.rows(j3.ID)["m"] {
		t.Fatal("the checkpoint did not write the queued rows")
	}
	// k: its journal lands, then a later change of k is a row of the
	// next. m: a later change is a row of the same journal, not landed.
	if _, err := j1.Commit(); err != nil {
		t.Fatal(err)
	}
	if err := begin().ApplyWith(e.p.PutJournalEntries, e.put("k", "4")); err != nil {
		t.Fatal(err)
	}
	if err := j3.ApplyWith(e.p.PutJournalEntries, e.put("m", "3")); err != nil {
		t.Fatal(err)
	}
	recs, err := synclog.ReadFile(filepath.Join(e.p.Dir(), synclog.FileName))
	if err != nil {
		t.Fatal(err)
	}
	if n := len(slices.DeleteFunc(recs, func(r synclog.Record) bool { return len(r.Journal) == 0 })); n < 2 {
		t.Fatalf("%d queued records left in the log, want the 2 the checkpoint kept", n)
	}
	want := map[string]string{"k": "4", "m": "3"}
	if got := e.killed().state(); !maps.Equal(got, want) {
		t.Fatalf("after a kill: %v, want %v", got, want)
	}
}
