package journal

import (
	"bytes"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/ledgerfs/ledgerfs/cas"
	"github.com/ledgerfs/ledgerfs/internal/btree"
	"github.com/ledgerfs/ledgerfs/internal/synclog"
	"github.com/ledgerfs/ledgerfs/internal/testutil"
	"github.com/ledgerfs/ledgerfs/store"
)

// copyTree copies the files under src to dst, as they are now; Badger's
// logs are sparse, and stay so.
func copyTree(t testing.TB, src, dst string) {
	t.Helper()
	if out, err := exec.Command("cp", "-a", "--sparse=always", src, dst).CombinedOutput(); err != nil {
		t.Fatalf("cp: %v: %s", err, out)
	}
}

// randomBytes returns n bytes of a random stream seeded by seed.
func randomBytes(seed uint64, n int) []byte { return testutil.Random(seed, 0, n) }

// loggedPut is a put of key to content, recorded in the sync log as the
// extents of content that differ from base's (the whole content when base
// is nil: read back from the value, or copied by the caller as extents).
func (e *env) loggedPut(key string, base *Op, baseContent, content []byte, extents []store.Extent) Op {
	op := Op{Key: key, Entry: e.value(string(content)), Log: &store.LogSource{Extents: extents}}
	if base != nil {
		op.Log = &store.LogSource{Base: base.Entry.Value.Digest, Keep: uint64(len(baseContent)), Extents: extents}
	}
	return op
}

// TestSyncLogReplaysWhatTheDbLost copies a repository as a power loss
// leaves it after changes that only the sync log made durable: the db as
// of its last sync, the log as synced. Recovery must bring those changes
// back, and only once.
func TestSyncLogReplaysWhatTheDbLost(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	big := randomBytes(1, 600<<10)
	c := e.eng.CommitterFor(e.p)
	f0 := e.put("f", string(big))
	if err := c.Apply(true, f0, e.put("kept", "unchanged"), e.put("old", "replaced by a logged put")); err != nil {
		t.Fatal(err)
	}
	snap := filepath.Join(t.TempDir(), "snap")
	copyTree(t, e.dir, snap)

	// f edited twice (the second record chains from the first), a new
	// small file, and a logged file unlinked.
	patch := bytes.Repeat([]byte("x"), 4096)
	f1 := bytes.Clone(big)
	copy(f1[100<<10:], patch)
	f1 = append(f1, "tail"...)
	op1 := e.loggedPut("f", &f0, big, f1, []store.Extent{{Off: 100 << 10, Data: patch}, {Off: uint64(len(big)), Data: []byte("tail")}})
	f2 := f1[:300<<10] // truncated
	op2 := e.loggedPut("f", &op1, f2, f2, nil)
	newOp := e.loggedPut("new", nil, nil, []byte("written and fsynced"), nil)
	copied := []byte("a small file, copied from memory")
	copiedOp := e.loggedPut("copied", nil, nil, copied, []store.Extent{{Data: copied}})
	oldOp := e.loggedPut("old", nil, nil, []byte("new content"), nil)
	for _, op := range []Op{op1, op2, newOp, copiedOp, oldOp} {
		if err := c.Queue(nil, op); err != nil {
			t.Fatal(err)
		}
	}
	if err := c.Queue(nil, Op{Key: "old", Kind: store.OpDelete}); err != nil {
		t.Fatal(err)
	}
	if !e.p.Durability().Durable("f") || !e.p.Durability().Durable("old") {
		t.Fatal("logged changes not durable through the log")
	}
	if e.p.Durability().Durable("kept") != true {
		t.Fatal("a change synced with the db is not durable")
	}
	if err := e.p.Durability().SyncLog(); err != nil {
		t.Fatal(err)
	}
	pageDir := e.p.Dir()
	rel, _ := filepath.Rel(e.dir, pageDir)
	copyTree(t, filepath.Join(pageDir, synclog.FileName), filepath.Join(snap, rel, synclog.FileName))

	want := map[string]string{"f": string(f2), "kept": "unchanged", "new": "written and fsynced", "copied": string(copied)}
	if err := c.Wait(); err != nil {
		t.Fatal(err)
	}
	if got := e.state(); !maps.Equal(got, want) {
		t.Fatalf("before the copy's recovery the page itself holds %d keys, want %v", len(got), slicesKeys(want))
	}
	lost := &env{t: t, dir: snap, eng: NewEngine()}
	lost.open()
	defer func() { lost.repo.Close() }() // the one open at the end
	lost.acquire()
	if got := lost.state(); !maps.Equal(got, want) {
		t.Fatalf("after recovery from the log: keys %v, f %d bytes; want keys %v, f %d bytes",
			slicesKeys(got), len(got["f"]), slicesKeys(want), len(f2))
	}
	if recs, err := synclog.ReadFile(filepath.Join(lost.p.Dir(), synclog.FileName)); err != nil || len(recs) != 0 {
		t.Fatalf("%d records left for the next recovery", len(recs))
	}
	lost.verify()
	// A change after recovery is not undone by the records replayed.
	if err := lost.eng.CommitterFor(lost.p).Apply(false, Op{Key: "new", Kind: store.OpDelete}); err != nil {
		t.Fatal(err)
	}
	lost.repo.Close()
	lost.open()
	lost.acquire()
	delete(want, "new")
	if got := lost.state(); !maps.Equal(got, want) {
		t.Fatalf("second open: keys %v, want %v", slicesKeys(got), slicesKeys(want))
	}
}

// TestUnloggedChangeOfLoggedKeyCheckpoints: a change of a key the log
// holds, made without a record and too large to be recorded whole (a put
// of more than maxWhole bytes), syncs the db and empties the log first,
// so that no replay can undo it.
func TestUnloggedChangeOfLoggedKeyCheckpoints(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	c := e.eng.CommitterFor(e.p)
	if err := c.Apply(true, e.put("a", "1")); err != nil {
		t.Fatal(err)
	}
	if err := c.Queue(nil, e.loggedPut("a", nil, nil, []byte("2"), nil)); err != nil {
		t.Fatal(err)
	}
	if !e.p.Durability().Has("a") {
		t.Fatal("logged put not in the log")
	}
	if err := c.Queue(nil, e.put("a", strings.Repeat("3", 100<<10))); err != nil {
		t.Fatal(err)
	}
	if e.p.Durability().Has("a") || !e.p.Durability().Empty() {
		t.Fatal("an unlogged put of a logged key left the log's records")
	}
}

// TestCanLogNeedsADurableBase: a record may build on the key's value only
// if that value is durable or the key's latest record's result.
func TestCanLogNeedsADurableBase(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	c := e.eng.CommitterFor(e.p)
	a := e.put("a", "closed, not synced")
	if err := c.Apply(false, a); err != nil {
		t.Fatal(err)
	}
	if e.p.Durability().CanLog("a", a.Entry.Value.Digest) {
		t.Fatal("a record may build on a value never synced")
	}
	if err := e.p.Durability().Checkpoint(); err != nil {
		t.Fatal(err)
	}
	if !e.p.Durability().CanLog("a", a.Entry.Value.Digest) {
		t.Fatal("a synced value may not be built on")
	}
	op := e.loggedPut("a", &a, []byte("closed, not synced"), []byte("closed, not synced!"), []store.Extent{{Off: 18, Data: []byte("!")}})
	if err := c.Queue(nil, op); err != nil {
		t.Fatal(err)
	}
	if !e.p.Durability().CanLog("a", op.Entry.Value.Digest) || e.p.Durability().CanLog("a", a.Entry.Value.Digest) {
		t.Fatal("the next record must chain from the latest one")
	}
}

func slicesKeys(m map[string]string) []string {
	var out []string
	for k := range m {
		out = append(out, k)
	}
	return out
}

// A transaction that changes a key a logged fsync changed after the
// transaction recorded its own change checkpoints at its commit: the
// record must not undo the transaction's change on replay.
func TestTransactionCommitCheckpointsLoggedKeys(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	c := e.eng.CommitterFor(e.p)
	if err := c.Apply(true, e.put("a", "1")); err != nil {
		t.Fatal(err)
	}
	tx, err := e.eng.Begin(e.p, true)
	if err != nil {
		t.Fatal(err)
	}
	if err := tx.Apply(e.put("a", "from the transaction")); err != nil {
		t.Fatal(err)
	}
	if err := c.Queue(nil, e.loggedPut("a", nil, nil, []byte("fsynced meanwhile"), nil)); err != nil {
		t.Fatal(err)
	}
	if err := c.Wait(); err != nil {
		t.Fatal(err)
	}
	if !e.p.Durability().Has("a") {
		t.Fatal("the fsync's record is not in the log")
	}
	if _, err := tx.Commit(); err != nil {
		t.Fatal(err)
	}
	if e.p.Durability().Has("a") {
		t.Fatal("the transaction committed over a key the log still holds")
	}
}

// TestUnlinkWithItsDirectoryTimesIsLogged: an unlink of a logged key that
// carries its directory marker's new times is recorded as a delete, with
// no checkpoint: a marker's put moves no entry, as a rename's put does.
func TestUnlinkWithItsDirectoryTimesIsLogged(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	c := e.eng.CommitterFor(e.p)
	dir := Op{Key: "d/", Kind: store.OpMarker, Entry: e.value("")}
	if err := c.Apply(true, dir, e.put("d/f", "1")); err != nil {
		t.Fatal(err)
	}
	if err := c.Queue(nil, e.loggedPut("d/f", nil, nil, []byte("2"), nil)); err != nil {
		t.Fatal(err)
	}
	before := e.repo.Stats().DBSyncs
	if err := c.Queue(nil, dir, Op{Key: "d/f", Kind: store.OpDelete}); err != nil {
		t.Fatal(err)
	}
	if syncs := e.repo.Stats().DBSyncs - before; syncs != 0 || !e.p.Durability().Has("d/f") {
		t.Fatalf("unlink with its directory's times: %d db syncs, delete recorded %v; want none and a record", syncs, e.p.Durability().Has("d/f"))
	}
}

// TestRenameDeleteIsNeverLoggedAlone: a rename's delete of a logged key
// checkpoints rather than being recorded: replayed without the put it goes
// with, it would lose the entry under both names.
func TestRenameDeleteIsNeverLoggedAlone(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	c := e.eng.CommitterFor(e.p)
	if err := c.Apply(true, e.put("a", "1")); err != nil {
		t.Fatal(err)
	}
	moved := e.loggedPut("a", nil, nil, bytes.Repeat([]byte("2"), 100<<10), nil)
	if err := c.Queue(nil, moved); err != nil {
		t.Fatal(err)
	}
	if err := c.Wait(); err != nil {
		t.Fatal(err)
	}
	before := e.repo.Stats().DBSyncs
	to := moved
	to.Key, to.Log = "b", nil
	if err := c.Queue(nil, Op{Key: "a", Kind: store.OpRenameDelete}, to); err != nil {
		t.Fatal(err)
	}
	if err := c.Wait(); err != nil {
		t.Fatal(err)
	}
	if syncs := e.repo.Stats().DBSyncs - before; syncs == 0 || e.p.Durability().Has("a") {
		t.Fatalf("rename of a logged key: %d db syncs, delete recorded %v; want a checkpoint and no record", syncs, e.p.Durability().Has("a"))
	}
}

// intent logs an fsync's intent for key: the row names base's value, the
// content is size bytes.
func (e *env) intent(key string, base btree.Entry, size int, src *store.LogSource, follows bool) store.Intent {
	e.t.Helper()
	m := base.Meta
	m.Size = uint64(size)
	if base.Value.Digest == "" {
		base.Value.Digest = cas.ComputeDigest(cas.KindBlob, false, nil)
	}
	row := EncodeOp(Op{Key: key, Entry: btree.Entry{Key: key, Value: base.Value, Meta: m}})
	mark, _, err := e.p.Durability().LogIntent(key, row, uint64(size), src, follows)
	if err != nil || mark.IsZero() {
		e.t.Fatalf("intent of %q not logged: %v", key, err)
	}
	return mark
}

// syncedBeforeIntents commits and syncs "f", size random bytes of seed,
// and "kept", and copies the repository to snap as a power loss after
// that sync would leave it.
func syncedBeforeIntents(t *testing.T, seed uint64, size int) (e *env, c *Committer, f0 Op, big []byte, snap string) {
	e = newEnv(t)
	big = randomBytes(seed, size)
	c = e.eng.CommitterFor(e.p)
	f0 = e.put("f", string(big))
	if err := c.Apply(true, f0, e.put("kept", "unchanged")); err != nil {
		t.Fatal(err)
	}
	snap = filepath.Join(t.TempDir(), "snap")
	copyTree(t, e.dir, snap)
	return e, c, f0, big, snap
}

// TestIntentsReplay: fsyncs made durable by intents alone, never
// committed — an edit of a committed file followed by a truncate, an
// extension and a write (the intent that follows), carried across a
// checkpoint; a new file; a new file unlinked after — come back, exactly,
// from the log after a power loss (the db as of its last sync) and after
// a crash of the process (the db as it was).
func TestIntentsReplay(t *testing.T) {
	t.Parallel()
	e, c, f0, big, snap := syncedBeforeIntents(t, 2, 600<<10)

	patch := bytes.Repeat([]byte("p"), 4096)
	f1 := bytes.Clone(big)
	copy(f1[100<<10:], patch)
	e.intent("f", f0.Entry, len(f1), &store.LogSource{Base: f0.Entry.Value.Digest, Keep: uint64(len(big)),
		Extents: []store.Extent{{Off: 100 << 10, Data: patch}}}, false)
	// A checkpoint now must carry the intent into the next epoch.
	if err := e.p.Durability().Checkpoint(); err != nil {
		t.Fatal(err)
	}
	// Truncated to 300 KiB, extended to 400 KiB, 4 KiB written at 350.
	f2 := append(bytes.Clone(f1[:300<<10]), make([]byte, 100<<10)...)
	more := bytes.Repeat([]byte("m"), 4096)
	copy(f2[350<<10:], more)
	e.intent("f", f0.Entry, len(f2), &store.LogSource{Keep: 300 << 10,
		Extents: []store.Extent{{Off: 350 << 10, Data: more}}}, true)
	g := []byte("a new file, fsynced")
	e.intent("g", btree.Entry{}, len(g), &store.LogSource{Extents: []store.Extent{{Data: g}}}, false)
	e.intent("h", btree.Entry{}, 5, &store.LogSource{Extents: []store.Extent{{Data: []byte("gone!")}}}, false)
	if err := c.Queue(nil, Op{Key: "h", Kind: store.OpDelete}); err != nil {
		t.Fatal(err)
	}
	if err := c.Wait(); err != nil {
		t.Fatal(err)
	}
	if err := e.p.Durability().SyncLog(); err != nil {
		t.Fatal(err)
	}
	e.recovers(snap, map[string]string{"f": string(f2), "g": string(g), "kept": "unchanged"})
}

// recovers checks that the page comes back as want after a power loss —
// snap, a copy of the repository as of the db's last sync, with the log as
// it is now — and after a crash of the process (the repository as it is,
// closed with the log left for the next open).
func (e *env) recovers(snap string, want map[string]string) {
	e.t.Helper()
	pageDir := e.p.Dir()
	rel, _ := filepath.Rel(e.dir, pageDir)
	copyTree(e.t, filepath.Join(pageDir, synclog.FileName), filepath.Join(snap, rel, synclog.FileName))
	for _, dir := range []string{snap, e.dir} {
		if dir == e.dir {
			e.repo.Close() // with intents: the log stays for the next open
		}
		r := &env{t: e.t, dir: dir, eng: NewEngine()}
		r.open()
		r.acquire()
		if got := r.state(); !maps.Equal(got, want) {
			e.t.Fatalf("%s: after recovery: keys %v, f %d bytes, equal %v; want keys %v, f %d bytes",
				dir, slicesKeys(got), len(got["f"]), got["f"] == want["f"], slicesKeys(want), len(want["f"]))
		}
		r.verify()
		r.repo.Close()
	}
}

// A journal that clears the page supersedes every intent: neither a
// checkpoint nor a replay after a crash brings an intent's file back.
func TestClearSupersedesIntents(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	c := e.eng.CommitterFor(e.p)
	if err := c.Apply(true, e.put("kept", "before the clear")); err != nil {
		t.Fatal(err)
	}
	x := []byte("fsynced, then cleared")
	e.intent("x", btree.Entry{}, len(x), &store.LogSource{Extents: []store.Extent{{Data: x}}}, false)
	j, err := e.eng.Begin(e.p, false)
	if err != nil {
		t.Fatal(err)
	}
	if err := j.Clear(); err != nil {
		t.Fatal(err)
	}
	if _, err := j.Commit(); err != nil {
		t.Fatal(err)
	}
	if err := e.p.Durability().SyncLog(); err != nil {
		t.Fatal(err)
	}
	e.repo.Close()
	r := &env{t: t, dir: e.dir, eng: NewEngine()}
	r.open()
	r.acquire()
	defer r.repo.Close()
	if got := r.state(); len(got) != 0 {
		t.Fatalf("after a clear and a reopen the page holds %v, want nothing", slicesKeys(got))
	}
}

// bigFile returns a page holding f, 600 KiB of random bytes seeded by seed,
// committed and synced, and its committer.
func bigFile(t *testing.T, seed uint64) (*env, *Committer, Op, []byte) {
	e := newEnv(t)
	big := randomBytes(seed, 600<<10)
	c := e.eng.CommitterFor(e.p)
	f0 := e.put("f", string(big))
	if err := c.Apply(true, f0); err != nil {
		t.Fatal(err)
	}
	return e, c, f0, big
}

// edit4k returns prev with 4 KiB of b at off, and the extent written.
func edit4k(prev []byte, off int, b byte) ([]byte, []store.Extent) {
	next := bytes.Clone(prev)
	return next, []store.Extent{patch4k(next, off, b)}
}

// patch4k writes 4 KiB of b into buf at off, in place, and returns the
// extent written.
func patch4k(buf []byte, off int, b byte) store.Extent {
	patch := bytes.Repeat([]byte{b}, 4096)
	copy(buf[off:], patch)
	return store.Extent{Off: uint64(off), Data: patch}
}

// TestCommitThroughIntentKeepsLaterIntents: a file's fsynced content is
// committed from a copy taken at an intent (Op.Through) while a later
// fsync logs an intent of its own, as a file committed without stopping
// its writes does. The commit lands, and a power loss — before the next
// checkpoint, and after it, with one more fsync — brings back the last
// fsync, not the copy.
func TestCommitThroughIntentKeepsLaterIntents(t *testing.T) {
	t.Parallel()
	e, c, f0, big := bigFile(t, 3)
	before := filepath.Join(t.TempDir(), "before")
	copyTree(t, e.dir, before)

	f1, x1 := edit4k(big, 100<<10, 'a')
	e.intent("f", f0.Entry, len(f1), &store.LogSource{Base: f0.Entry.Value.Digest, Keep: uint64(len(big)), Extents: x1}, false)
	f2, x2 := edit4k(f1, 200<<10, 'b')
	through := e.intent("f", f0.Entry, len(f2), &store.LogSource{Keep: uint64(len(f1)), Extents: x2}, true)
	// Fsynced while f2's value is computed.
	f3, x3 := edit4k(f2, 300<<10, 'c')
	e.intent("f", f0.Entry, len(f3), &store.LogSource{Keep: uint64(len(f2)), Extents: x3}, true)
	op := e.put("f", string(f2))
	op.Through = through
	if err := c.Queue(nil, op); err != nil {
		t.Fatal(err)
	}
	if err := c.Wait(); err != nil {
		t.Fatal(err)
	}
	if got := e.state()["f"]; got != string(f2) {
		t.Fatalf("the commit through an intent did not land: f has %d bytes, equal %v", len(got), got == string(f2))
	}
	d := e.p.Durability()
	if err := d.SyncLog(); err != nil {
		t.Fatal(err)
	}
	pageDir := e.p.Dir()
	rel, _ := filepath.Rel(e.dir, pageDir)
	copyLog := func(snap string) {
		copyTree(t, filepath.Join(pageDir, synclog.FileName), filepath.Join(snap, rel, synclog.FileName))
	}
	recovered := func(dir string, want []byte) {
		t.Helper()
		r := &env{t: t, dir: dir, eng: NewEngine()}
		r.open()
		defer r.repo.Close()
		r.acquire()
		if got := r.state()["f"]; got != string(want) {
			t.Fatalf("%s: after recovery f has %d bytes, equal %v; want the last fsync's %d bytes",
				filepath.Base(dir), len(got), got == string(want), len(want))
		}
		r.verify()
	}
	copyLog(before)
	recovered(before, f3)

	// A checkpoint carries the later intent, rebased on the committed
	// value (the intents before it are gone from the log); one more fsync
	// follows it.
	if err := d.Checkpoint(); err != nil {
		t.Fatal(err)
	}
	synced := filepath.Join(t.TempDir(), "synced")
	copyTree(t, e.dir, synced)
	f4, x4 := edit4k(f3, 400<<10, 'd')
	last := e.intent("f", op.Entry, len(f4), &store.LogSource{Keep: uint64(len(f3)), Extents: x4}, true)
	if err := d.SyncLog(); err != nil {
		t.Fatal(err)
	}
	copyLog(synced)
	recovered(synced, f4)

	// A commit through the last intent, none after it and no record of its
	// own, ends the key's intents: the next starts a chain on its value.
	op4 := e.put("f", string(f4))
	op4.Through = last
	if err := c.Queue(nil, op4); err != nil {
		t.Fatal(err)
	}
	f5, x5 := edit4k(f4, 500<<10, 'e')
	e.intent("f", op4.Entry, len(f5), &store.LogSource{Base: op4.Entry.Value.Digest, Keep: uint64(len(f4)), Extents: x5}, false)
	if err := d.SyncLog(); err != nil {
		t.Fatal(err)
	}
	e.repo.Close() // a crash of the process: the db as it was
	recovered(e.dir, f5)
}

// TestCommitSupersedingIntentsIsDurable: a change of a fsynced file that
// supersedes its intents without a record of its own (too big to log) is
// durable once written: the db is synced after it, not only before, when
// the intents leave the log.
func TestCommitSupersedingIntentsIsDurable(t *testing.T) {
	t.Parallel()
	e, c, f0, big := bigFile(t, 4)
	f1, x1 := edit4k(big, 100<<10, 'a')
	e.intent("f", f0.Entry, len(f1), &store.LogSource{Base: f0.Entry.Value.Digest, Keep: uint64(len(big)), Extents: x1}, false)
	if err := c.Queue(nil, e.put("f", string(f1))); err != nil {
		t.Fatal(err)
	}
	if !e.p.Durability().Durable("f") {
		t.Fatal("the commit superseding f's intents is not durable")
	}
}

// TestIntentInAFullLogCheckpoints: intents their commits superseded while
// later ones followed (commits from a copy) fill the log's epoch. The next
// intent checkpoints, carrying the live ones, rather than being refused,
// which left the fsync to commit the file under its lock; a crash after
// it loses nothing.
func TestIntentInAFullLogCheckpoints(t *testing.T) {
	t.Parallel()
	e, c, f0, big := bigFile(t, 5)
	start := e.repo.Stats().DBSyncs
	cur, prev := big, []byte(nil)
	var marks []store.Intent
	for i := 0; e.repo.Stats().DBSyncs == start; i++ {
		if i == 5000 {
			t.Fatalf("%d intents and no checkpoint", i)
		}
		next, x := edit4k(cur, (i*37%140)<<12, byte(i))
		src := &store.LogSource{Keep: uint64(len(cur)), Extents: x}
		if i == 0 {
			src.Base = f0.Entry.Value.Digest
		}
		marks = append(marks, e.intent("f", f0.Entry, len(next), src, i > 0))
		prev, cur = cur, next
		if i%50 == 49 {
			// Committed from a copy at the intent before, while this
			// one was logged.
			op := e.put("f", string(prev))
			op.Through = marks[i-1]
			if err := c.Queue(nil, op); err != nil {
				t.Fatal(err)
			}
		}
	}
	if err := e.p.Durability().SyncLog(); err != nil {
		t.Fatal(err)
	}
	e.repo.Close() // a crash of the process
	r := &env{t: t, dir: e.dir, eng: NewEngine()}
	r.open()
	defer r.repo.Close()
	r.acquire()
	if got := r.state()["f"]; got != string(cur) {
		t.Fatalf("after recovery f has %d bytes, equal %v; want the last intent's", len(got), got == string(cur))
	}
}

// TestLargeIntentGrowsTheLog: an fsync of megabytes of scattered edits (a
// database's checkpoint) is an intent too. The log grows to hold it,
// carrying the intents it holds into the larger file, and both come back
// after a power loss and after a crash of the process; an intent larger
// than the largest log takes is refused, for the caller to commit, and
// grows nothing.
func TestLargeIntentGrowsTheLog(t *testing.T) {
	t.Parallel()
	e, _, f0, big, snap := syncedBeforeIntents(t, 6, 6<<20)

	g := []byte("a new file, fsynced before the large one")
	e.intent("g", btree.Entry{}, len(g), &store.LogSource{Extents: []store.Extent{{Data: g}}}, false)
	// 1,200 pages of 4 KiB scattered over the 6 MiB file: 4.7 MiB, more than
	// a quarter of the default log.
	f1 := bytes.Clone(big)
	var x []store.Extent
	for i := range 1200 {
		// In place: edit4k would copy the file each time.
		x = append(x, patch4k(f1, (i*7919%1500)<<12+512, byte(i)))
	}
	e.intent("f", f0.Entry, len(f1), &store.LogSource{Base: f0.Entry.Value.Digest, Keep: uint64(len(big)), Extents: x}, false)
	if n := e.logSize(); n <= synclog.DefaultSize {
		t.Fatalf("the log has %d bytes after a 4.7 MiB intent, want more than %d", n, synclog.DefaultSize)
	}
	// One more edit follows it, in the grown log.
	f2, x2 := edit4k(f1, 5<<20, 'z')
	e.intent("f", f0.Entry, len(f2), &store.LogSource{Keep: uint64(len(f1)), Extents: x2}, true)
	grown := e.logSize()

	// Beyond what the largest log takes: refused, and nothing grows.
	huge := randomBytes(7, 17<<20)
	row := EncodeOp(Op{Key: "h", Entry: btree.Entry{Key: "h", Value: f0.Entry.Value, Meta: btree.Meta{Size: uint64(len(big) + len(huge))}}})
	mark, _, err := e.p.Durability().LogIntent("h", row, uint64(len(big)+len(huge)), &store.LogSource{Base: f0.Entry.Value.Digest,
		Keep: uint64(len(big)), Extents: []store.Extent{{Off: uint64(len(big)), Data: huge}}}, false)
	if err != nil || !mark.IsZero() {
		t.Fatalf("an intent of 17 MiB: %v, %v; want refused", mark, err)
	}
	if n := e.logSize(); n != grown {
		t.Fatalf("the log went from %d to %d bytes for an intent it refused", grown, n)
	}
	e.recovers(snap, map[string]string{"f": string(f2), "g": string(g), "kept": "unchanged"})
}

// An intent the log cannot grow for (the disk full, here a directory where
// the larger log's file is made) is refused without an error, for the
// caller to commit the change, and the log goes on as it was.
func TestIntentGrowthFailureFallsBack(t *testing.T) {
	t.Parallel()
	e, _, f0, big, _ := syncedBeforeIntents(t, 8, 4<<20)
	g := []byte("a small intent")
	e.intent("g", btree.Entry{}, len(g), &store.LogSource{Extents: []store.Extent{{Data: g}}}, false)
	logPath := filepath.Join(e.p.Dir(), synclog.FileName)
	if err := os.Mkdir(logPath+".new", 0o755); err != nil {
		t.Fatal(err)
	}
	before := e.logSize()
	patch := randomBytes(9, 3<<20)
	size := uint64(len(big))
	row := EncodeOp(Op{Key: "f", Entry: btree.Entry{Key: "f", Value: f0.Entry.Value, Meta: btree.Meta{Size: size}}})
	mark, _, err := e.p.Durability().LogIntent("f", row, size, &store.LogSource{Base: f0.Entry.Value.Digest,
		Keep: size, Extents: []store.Extent{{Off: 1 << 20, Data: patch}}}, false)
	if err != nil || !mark.IsZero() {
		t.Fatalf("an intent the log cannot grow for: %v, %v; want refused, no error", mark, err)
	}
	if n := e.logSize(); n != before {
		t.Fatalf("the log went from %d to %d bytes", before, n)
	}
	// The small intent is still what the log holds.
	e.intent("h", btree.Entry{}, 2, &store.LogSource{Extents: []store.Extent{{Data: []byte("hh")}}}, false)
	if err := e.p.Durability().SyncLog(); err != nil {
		t.Fatal(err)
	}
	e.repo.Close()
	r := &env{t: t, dir: e.dir, eng: NewEngine()}
	r.open()
	defer r.repo.Close()
	r.acquire()
	if got := r.state(); got["g"] != string(g) || got["h"] != "hh" || got["f"] != string(big) {
		t.Fatalf("after a crash: keys %v; want g and h from their intents, f as committed", slicesKeys(got))
	}
}
