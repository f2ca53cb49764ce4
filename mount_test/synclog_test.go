package mount_test

import (
	"bytes"
	"fmt"
	"maps"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
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

// A change made after an fsync that only the sync log made durable is not
// undone by the log's replay after a kill -9: a rename, an unlink, a chmod
// and a close with more bytes, each of a file whose write the log holds.
func TestChangeAfterLoggedFsyncSurvivesKill(t *testing.T) {
	t.Parallel()
	repo := t.TempDir()
	s := mount(t, repo)
	s.page("l", "p")
	path := func(name string) string { return filepath.Join(s.mnt, "l", "p", name) }
	for _, c := range []struct {
		kind   string
		change func(name string)
		check  func(name string) error
	}{
		{"rename", func(name string) {
			must(t, os.Rename(path(name), path(name+".moved")))
		}, func(name string) error {
			if _, err := os.Lstat(path(name)); !os.IsNotExist(err) {
				return fmt.Errorf("the old name is back (%v)", err)
			}
			if b, err := os.ReadFile(path(name + ".moved")); err != nil || string(b) != "logged" {
				return fmt.Errorf("the new name holds %q (%v)", b, err)
			}
			return nil
		}},
		{"unlink", func(name string) {
			must(t, os.Remove(path(name)))
		}, func(name string) error {
			if _, err := os.Lstat(path(name)); !os.IsNotExist(err) {
				return fmt.Errorf("the file is back (%v)", err)
			}
			return nil
		}},
		{"chmod", func(name string) {
			must(t, os.Chmod(path(name), 0o600))
		}, func(name string) error {
			if fi, err := os.Stat(path(name)); err != nil || fi.Mode().Perm() != 0o600 {
				return fmt.Errorf("mode %v (%v)", fi.Mode(), err)
			}
			return nil
		}},
		{"close with more bytes", func(name string) {
			f, err := os.OpenFile(path(name), os.O_WRONLY|os.O_APPEND, 0)
			must(t, err)
			_, err = f.Write([]byte(" and closed"))
			must(t, err)
			must(t, f.Close())
		}, func(name string) error {
			if b, err := os.ReadFile(path(name)); err != nil || string(b) != "logged and closed" {
				return fmt.Errorf("holds %q (%v)", b, err)
			}
			return nil
		}},
	} {
		name := "f-" + c.kind[:5]
		pg := path("")
		must(t, os.WriteFile(path(name), []byte("old"), 0o644))
		syncDir(t, pg)
		f, err := os.OpenFile(path(name), os.O_RDWR|os.O_TRUNC, 0)
		must(t, err)
		_, err = f.Write([]byte("logged"))
		must(t, err)
		must(t, f.Sync())
		must(t, f.Close())
		c.change(name)
		// A view of history waits for the change to land without syncing
		// anything: the kill finds it in the db's unsynced writes.
		ls(t, filepath.Join(pg, ".ledger", "commits"))
		s.kill()
		s = mount(t, repo)
		if err := c.check(name); err != nil {
			t.Errorf("%s after a logged fsync, then kill -9: %v", c.kind, err)
		}
	}
	s.stop()
}

// After a kill -9, reading the repository without a mount recovers the
// page (replaying its sync log if need be) and leaves no log behind.
func TestReadAfterKillRemovesTheSyncLog(t *testing.T) {
	t.Parallel()
	repo := t.TempDir()
	s := mount(t, repo)
	pg := s.page("l", "p")
	f, err := os.Create(filepath.Join(pg, "f"))
	must(t, err)
	_, err = f.Write([]byte("hello world"))
	must(t, err)
	must(t, f.Sync())
	_, err = f.WriteAt([]byte("HELLO"), 0)
	must(t, err)
	must(t, unix.Fdatasync(int(f.Fd())))
	if logs := syncLogs(t, repo); len(logs) != 1 {
		t.Fatalf("sync logs after the fsyncs: %v", logs)
	}
	s.kill()
	f.Close()
	out, err := exec.Command(binary, "cat", repo, "l", "p", "f").Output()
	if err != nil || string(out) != "HELLO world" {
		t.Fatalf("ledgerfs cat after kill -9: %q, %v", out, err)
	}
	if logs := syncLogs(t, repo); len(logs) != 0 {
		t.Errorf("sync logs left after recovery: %v", logs)
	}
}

// A large file fsynced over and over is committed in the background from a
// copy of its fsynced changes, while its writes and fsyncs go on; the sync
// log, full of the intents those commits superseded, is checkpointed. None
// of it loses what an fsync covered: not the commits, not a checkpoint
// after them, not a kill -9 right after the last fsync.
func TestFsyncsBesideTheirCommitSurviveKill(t *testing.T) {
	t.Parallel()
	repo := t.TempDir()
	s := mountPlain(t, repo)
	pg := s.page("l", "p")
	path := filepath.Join(pg, "db")
	data := content(21, 64<<20) // the least a commit from a copy takes (fs.minCopyFile)
	must(t, os.WriteFile(path, data, 0o644))
	syncDir(t, pg)
	stat := func(name string) float64 { return statsOf(t, s.mnt)[name] }
	const copies, dbSyncs = "ledgerfs_fsynced_commits_from_copy_total", `ledgerfs_syncs_total{what="db"}`
	start := stat(copies)

	f, err := os.OpenFile(path, os.O_RDWR, 0)
	must(t, err)
	r := rand.New(rand.NewPCG(7, 7))
	synced := -1.0 // the db's syncs once two commits from a copy were made
	left := -1     // fsyncs to go, once the db was synced after those
	for i := 0; left != 0; i++ {
		if i == 20000 {
			t.Fatalf("%d fsyncs made %v commits from a copy; db synced %v times", i, stat(copies)-start, stat(dbSyncs))
		}
		off := r.Int64N(int64(len(data))/4096) * 4096
		block := content(1000+i, 4096)
		_, err := f.WriteAt(block, off)
		must(t, err)
		must(t, unix.Fdatasync(int(f.Fd())))
		copy(data[off:], block)
		switch {
		case left > 0:
			left--
		case i%64 != 63:
		case synced < 0 && stat(copies)-start >= 2:
			synced = stat(dbSyncs)
		case synced >= 0 && stat(dbSyncs) > synced:
			left = 100
		}
	}
	s.kill()
	f.Close() // fails: the mount is gone
	s = mountPlain(t, repo)
	if got, err := os.ReadFile(filepath.Join(s.page("l", "p"), "db")); err != nil || !bytes.Equal(got, data) {
		t.Fatalf("after fsyncs beside their commits and kill -9: %d bytes, equal %v (%v)", len(got), bytes.Equal(got, data), err)
	}
	s.stop()
}

// A file written and fsynced over and over is committed in the background
// (the timer of its intents), yet each of its versions is a state an fsync
// or a close left it in, never one a write was halfway through. Each write
// here comes in two parts with a request between them, as the kernel sends
// a write that starts inside a page it does not hold. A small file is
// committed under its lock, a large one from a copy.
func TestVersionsAreFsyncedStates(t *testing.T) {
	t.Parallel()
	for _, size := range []int{1 << 20, 64 << 20} {
		t.Run(fmt.Sprint(size), func(t *testing.T) {
			t.Parallel()
			s := mountPlain(t, t.TempDir())
			pg := s.page("l", "p")
			path := filepath.Join(pg, "f")
			data := content(31, size)
			must(t, os.WriteFile(path, data, 0o644))
			syncDir(t, pg)
			states := newStates(data)

			f, err := os.OpenFile(path, os.O_RDWR, 0)
			must(t, err)
			defer f.Close()
			vdir := filepath.Join(pg, ".ledger", "versions", "f")
			r := rand.New(rand.NewPCG(5, 5))
			const want = 4 // versions: the first, and three of the fsyncs' commits
			for i := 0; i%16 != 0 || len(ls(t, vdir)) < want; i++ {
				if i == 20000 {
					t.Fatalf("%d fsyncs made %d versions, want %d", i, len(ls(t, vdir)), want)
				}
				off := r.Int64N(int64(size - 4096))
				block := content(200+i, 4096)
				cut := int(4096 - off%4096) // where the kernel would cut it
				_, err := f.WriteAt(block[:cut], off)
				must(t, err)
				_, err = os.ReadFile(filepath.Join(s.mnt, ".stats"))
				must(t, err)
				_, err = f.WriteAt(block[cut:], off+int64(cut))
				must(t, err)
				must(t, unix.Fdatasync(int(f.Fd())))
				data = states.write(off, block)
				states.mark()
			}
			must(t, f.Close())

			versions := ls(t, vdir)
			for _, v := range versions {
				b, err := os.ReadFile(filepath.Join(vdir, v))
				must(t, err)
				if !states.had(b) {
					t.Errorf("version %s is no state an fsync left the file in; %s", v, states.nearest(b))
				}
			}
			if b, err := os.ReadFile(filepath.Join(vdir, versions[len(versions)-1])); err != nil || !bytes.Equal(b, data) {
				t.Errorf("the last version is not the file as closed (%v)", err)
			}
		})
	}
}

// A file fsynced and then written without an fsync, and left open, shows in
// its history once it rests: the timer of its intents commits what the
// file holds when no write changed it between two of its looks.
func TestRestingFileIsCommitted(t *testing.T) {
	t.Parallel()
	s := mountPlain(t, t.TempDir(), "--debug") // for the commit's log line
	pg := s.page("l", "p")
	path := filepath.Join(pg, "f")
	data := content(41, 1<<20)
	must(t, os.WriteFile(path, data, 0o644))
	syncDir(t, pg)
	f, err := os.OpenFile(path, os.O_RDWR, 0)
	must(t, err)
	defer f.Close()
	for i, off := range []int64{8192, 100_000} {
		block := content(42+i, 4096)
		_, err := f.WriteAt(block, off)
		must(t, err)
		copy(data[off:], block)
		if i == 0 {
			must(t, unix.Fdatasync(int(f.Fd()))) // the second write is not fsynced
		}
	}

	// The commit's moment is the timer's: wait for the server to say it
	// commits, then for the commit to land (an fsync of the page).
	s.log.await(t, "committed a file at rest")
	syncDir(t, pg)
	vdir := filepath.Join(pg, ".ledger", "versions", "f")
	versions := ls(t, vdir)
	if b, err := os.ReadFile(filepath.Join(vdir, versions[len(versions)-1])); err != nil || !bytes.Equal(b, data) {
		t.Errorf("the resting file's version is not what it holds (%v)", err)
	}
}

// An fsync of megabytes of 4 KiB writes scattered over a large file (a
// database's checkpoint) is an intent as a small one is, not a commit in
// the fsync: the sync log grows to hold it, which the log of a commit
// never does. A kill -9 right after the next such fsync loses none of it.
func TestLargeScatteredFsyncGoesThroughTheSyncLog(t *testing.T) {
	t.Parallel()
	repo := t.TempDir()
	s := mountPlain(t, repo)
	pg := s.page("s", "big")
	path := filepath.Join(pg, "db")
	data := content(31, 12<<20)
	must(t, os.WriteFile(path, data, 0o644))
	syncDir(t, pg)

	f, err := os.OpenFile(path, os.O_RDWR, 0)
	must(t, err)
	r := rand.New(rand.NewPCG(9, 9))
	scatter := func(round int) {
		// 700 pages, 2.7 MiB: more than the default log holds in one
		// record (a quarter of it).
		for i := range 700 {
			off := r.Int64N(int64(len(data))/4096) * 4096
			block := content(5000+round*1000+i, 4096)
			_, err := f.WriteAt(block, off)
			must(t, err)
			copy(data[off:], block)
		}
		must(t, unix.Fdatasync(int(f.Fd())))
	}
	scatter(0)
	logs := syncLogs(t, repo)
	if len(logs) != 1 {
		t.Fatalf("sync logs after a large fsync: %v", logs)
	}
	st, err := os.Stat(logs[0])
	must(t, err)
	if st.Size() <= 8<<20 {
		t.Errorf("the sync log has %d bytes after a 2.7 MiB fsync; want it grown past 8 MiB to hold it", st.Size())
	}
	// The next one follows it (or starts a new chain, if the file was
	// committed meanwhile), and is killed right after.
	scatter(1)
	s.kill()
	f.Close() // fails: the mount is gone
	s = mountPlain(t, repo)
	if got, err := os.ReadFile(filepath.Join(s.page("s", "big"), "db")); err != nil || !bytes.Equal(got, data) {
		t.Fatalf("after large fsyncs and kill -9: %d bytes, equal %v (%v)", len(got), bytes.Equal(got, data), err)
	}
	s.stop()
}

// The kernel sends a file's release after close returns, and only once
// no process holds the open file: a view of history right after the close
// of an fsynced new file must commit it all the same. A child holding the
// descriptor keeps the release from coming at all here, which a fast
// release would otherwise hide (one run in twenty of
// TestFsyncedNewFileCloseLeftToTimer missed the file so).
func TestFsyncedCloseShowsInHistoryBeforeItsRelease(t *testing.T) {
	t.Parallel()
	s := mount(t, t.TempDir())
	pg := s.page("l", "p")
	f, err := os.OpenFile(filepath.Join(pg, "f"), os.O_RDWR|os.O_CREATE|os.O_EXCL, 0o644)
	must(t, err)
	_, err = f.Write([]byte("fsynced, then closed"))
	must(t, err)
	must(t, f.Sync())
	child := exec.Command("cat")
	child.ExtraFiles = []*os.File{f}
	stdin, err := child.StdinPipe()
	must(t, err)
	must(t, child.Start())
	defer child.Wait()
	defer stdin.Close()
	must(t, f.Close()) // the opener's close: a flush, and no release
	if vs := ls(t, filepath.Join(pg, ".ledger", "versions", "f")); len(vs) != 1 {
		t.Errorf("versions of a file whose close returned: %v, want one", vs)
	}
	must(t, stdin.Close())
	must(t, child.Wait())
	if got, err := os.ReadFile(filepath.Join(pg, "f")); err != nil || string(got) != "fsynced, then closed" {
		t.Errorf("f reads %q (%v)", got, err)
	}
}

// A file created, written and fsynced, then closed, is durable by its
// intent: its close leaves the commit to the intents timer. It reads back
// at once, a view of history shows it, a kill -9 keeps it as the changes
// after its close left it (kept, renamed, deleted), a clean unmount
// commits it, and one deleted before the timer came (a rollback journal)
// has its content never stored as pieces.
func TestFsyncedNewFileCloseLeftToTimer(t *testing.T) {
	t.Parallel()
	repo := t.TempDir()
	s := mount(t, repo)
	pg := s.page("l", "p")
	syncDir(t, pg)
	write := func(name string) {
		t.Helper()
		f, err := os.OpenFile(filepath.Join(pg, name), os.O_RDWR|os.O_CREATE|os.O_EXCL, 0o644)
		must(t, err)
		_, err = f.Write([]byte("content of " + name))
		must(t, err)
		must(t, f.Sync())
		must(t, f.Close())
	}
	read := func(name string) string {
		t.Helper()
		b, err := os.ReadFile(filepath.Join(pg, name))
		if err != nil {
			return err.Error()
		}
		return string(b)
	}
	gone := func(name string) bool {
		_, err := os.Lstat(filepath.Join(pg, name))
		return os.IsNotExist(err)
	}

	// Kill -9 right after the closes and the changes after them.
	for _, name := range []string{"kept", "moved", "deleted"} {
		write(name)
	}
	must(t, os.Rename(filepath.Join(pg, "moved"), filepath.Join(pg, "moved.final")))
	must(t, os.Remove(filepath.Join(pg, "deleted")))
	if got := read("kept"); got != "content of kept" {
		t.Fatalf("kept reads %q right after its close", got)
	}
	s.kill()
	s = mount(t, repo)
	pg = s.page("l", "p")
	if got := read("kept"); got != "content of kept" {
		t.Errorf("after kill -9, kept reads %q", got)
	}
	if got := read("moved.final"); got != "content of moved" || !gone("moved") {
		t.Errorf("after kill -9, moved.final reads %q; the old name gone: %v", got, gone("moved"))
	}
	if !gone("deleted") {
		t.Errorf("after kill -9, the deleted file is back: %q", read("deleted"))
	}

	// A view of history right after the close shows it.
	write("viewed")
	if vs := ls(t, filepath.Join(pg, ".ledger", "versions", "viewed")); len(vs) != 1 {
		t.Errorf("versions of a file just closed: %v, want one", vs)
	}

	// A journal deleted before the timer came is never committed: its
	// content is stored nowhere but in the log.
	before := statsOf(t, s.mnt)
	const stored = `ledgerfs_piece_bytes_written_total{result="stored"}`
	j, err := os.OpenFile(filepath.Join(pg, "journal"), os.O_RDWR|os.O_CREATE|os.O_EXCL, 0o644)
	must(t, err)
	_, err = j.Write(content(31, 16<<10))
	must(t, err)
	must(t, j.Sync())
	must(t, j.Close())
	must(t, os.Remove(filepath.Join(pg, "journal")))
	ls(t, filepath.Join(pg, ".ledger", "commits")) // what was queued has landed
	if n := statsOf(t, s.mnt)[stored] - before[stored]; n >= 16<<10 {
		t.Errorf("a journal deleted right after its fsynced close: %v bytes of pieces stored", n)
	}

	// A clean unmount commits what the timer had still to.
	write("unmounted")
	s.stop()
	versions := func(name string) []string {
		out, err := exec.Command(binary, "log", repo, "l", "p", name).CombinedOutput()
		if err != nil {
			t.Logf("ledgerfs log %s: %v: %s", name, err, out)
			return nil
		}
		return strings.Split(strings.TrimSpace(string(out)), "\n")
	}
	if vs := versions("unmounted"); len(vs) != 1 {
		t.Errorf("versions of a file closed just before the unmount: %q, want one", vs)
	}
	verifySchema(t, repo)
}

// A directory's fsync after creates, renames and unlinks records those
// changes in the page's sync log and flushes it, rather than syncing the
// page's db (the changes are promoted); what the fsyncs made durable, and
// the renames and unlinks queued after them, read back after a kill -9.
// The patterns are those careful programs use: an empty file created and
// its directory fsynced; a file renamed and its directory fsynced; a file
// written under a temporary name, fsynced, renamed over the final name,
// its directory fsynced.
func TestDirectoryFsyncGoesThroughTheSyncLog(t *testing.T) {
	t.Parallel()
	repo := t.TempDir()
	s := mountPlain(t, repo)
	pg := s.page("s", "p")
	path := func(name string) string { return filepath.Join(pg, name) }
	must(t, os.Mkdir(path("d"), 0o755))
	syncDir(t, pg) // a page's first sync checkpoints
	before := statsOf(t, s.mnt)
	const rounds = 30
	want := map[string]string{}
	for i := range rounds {
		empty := path(fmt.Sprintf("d/empty-%d", i))
		must(t, os.WriteFile(empty, nil, 0o644))
		fsyncDir(t, path("d"))
		moved := path(fmt.Sprintf("d/moved-%d", i))
		must(t, os.Rename(empty, moved))
		fsyncDir(t, path("d"))
		tmp := path("d/final.tmp")
		body := fmt.Sprintf("version %d", i)
		f, err := os.Create(tmp)
		must(t, err)
		_, err = f.WriteString(body)
		must(t, err)
		must(t, f.Sync())
		must(t, f.Close())
		must(t, os.Rename(tmp, path("d/final")))
		fsyncDir(t, path("d"))
		want[fmt.Sprintf("moved-%d", i)] = ""
		want["final"] = body
	}
	after := statsOf(t, s.mnt)
	logSyncs := after[`ledgerfs_syncs_total{what="log"}`] - before[`ledgerfs_syncs_total{what="log"}`]
	dbSyncs := after[`ledgerfs_syncs_total{what="db"}`] - before[`ledgerfs_syncs_total{what="db"}`]
	promoted := after["ledgerfs_promoted_in_log_total"] - before["ledgerfs_promoted_in_log_total"]
	t.Logf("%d directory fsyncs: %v syncs of the log, %v of the db, %v changes promoted", 3*rounds, logSyncs, dbSyncs, promoted)
	// The first fsync promotes; from then on the directory's marker has
	// records, and each change in it is recorded whole as it is made.
	if logSyncs < 3*rounds || dbSyncs > 2 || promoted < 1 {
		t.Errorf("%d directory fsyncs synced the log %v times and the db %v times, promoting %v changes; want the log each time", 3*rounds, logSyncs, dbSyncs, promoted)
	}
	// Queued after the last fsync: a rename and an unlink, whose keys
	// have records.
	must(t, os.Rename(path("d/moved-0"), path("d/renamed")))
	must(t, os.Remove(path("d/moved-1")))
	delete(want, "moved-0")
	delete(want, "moved-1")
	want["renamed"] = ""
	s.kill()
	s = mountPlain(t, repo)
	got := map[string]string{}
	entries, err := os.ReadDir(filepath.Join(s.page("s", "p"), "d"))
	must(t, err)
	for _, e := range entries {
		b, err := os.ReadFile(filepath.Join(s.page("s", "p"), "d", e.Name()))
		must(t, err)
		got[e.Name()] = string(b)
	}
	if !maps.Equal(got, want) {
		t.Errorf("after a kill -9 the directory holds %v, want %v", got, want)
	}
	s.stop()
}

// fsyncDir fsyncs the directory dir, and waits for nothing more (see
// syncDir).
func fsyncDir(t testing.TB, dir string) {
	t.Helper()
	d, err := os.Open(dir)
	must(t, err)
	defer d.Close()
	must(t, d.Sync())
}
