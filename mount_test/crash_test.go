package mount_test

import (
	"bytes"
	"errors"
	"fmt"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/moby/sys/mountinfo"
	"golang.org/x/sys/unix"

	"github.com/ledgerfs/ledgerfs/store"
)

// A kill -9 while the server starts leaves a process that exits and a dead
// mount that can be detached: the server never touches its own mount. With
// go-fuse's poll hack (an open of a file on the new mount, from the server)
// a kill landing while that open was served left a process that could not
// finish exiting, and every process that touched the mount hung with it.
func TestKillAtStartup(t *testing.T) {
	t.Parallel()
	repo := t.TempDir()
	mnt := filepath.Join(t.TempDir(), "mnt")
	s := mountAt(t, repo, mnt, "--debug")
	pg := s.page("l", "p")
	must(t, os.WriteFile(filepath.Join(pg, "kept"), []byte("kept"), 0o644))
	s.stop()
	// Deterministic: the server's own requests show in its debug log,
	// with its pid (the test polls the mount once too: pollOnce).
	self := fmt.Sprintf(" p%d\"", s.cmd.Process.Pid)
	for _, line := range strings.Split(s.log.String(), "\n") {
		if strings.Contains(line, "go-fuse-epoll-hack") && strings.HasSuffix(line, self) {
			t.Fatalf("the server opened a file on its own mount:\n%s", s.log)
		}
	}

	kills := 20
	if *long {
		kills = 100
	}
	for i := range kills {
		cmd := exec.Command(binary, "mount", repo, mnt)
		var out output
		cmd.Stdout, cmd.Stderr = &out, &out
		must(t, cmd.Start())
		exited := make(chan error, 1)
		go func() { exited <- cmd.Wait() }()
		// The kills land at the events of a start in turn: as the
		// process begins (the repository opening), as the mount
		// appears, and once the server says it serves.
		startupEvent(t, i, mnt, &out, exited)
		cmd.Process.Kill()
		select {
		case <-exited:
		case <-time.After(10 * time.Second):
			if err := abort(mnt); err != nil {
				t.Log(err)
			}
			<-exited
			t.Fatalf("kill %d: the server did not exit within 10 s of kill -9; the mount had to be aborted", i)
		}
		if mounted(mnt) {
			detach(mnt)
		}
	}
	t.Logf("%d kills at startup", kills)
	s = mountAt(t, repo, mnt)
	if b, err := os.ReadFile(filepath.Join(pg, "kept")); err != nil || string(b) != "kept" {
		t.Fatalf("file after the kills: %q, %v", b, err)
	}
	s.stop()
	verifySchema(t, repo)
}

// startupEvent returns at start event k%3 of a server writing to out: at
// once, when its mount appears, or when it logs that it serves.
func startupEvent(t testing.TB, k int, mnt string, out *output, exited <-chan error) {
	t.Helper()
	switch k % 3 {
	case 1:
		for !mounted(mnt) { // no barrier: the mount table is polled
			select {
			case err := <-exited:
				t.Fatalf("server exited before mounting (%v):\n%s", err, out)
			default:
			}
		}
	case 2:
		out.await(t, "msg=serving")
	}
}

// abort ends the FUSE connection of the mount at mnt through fusectl, which
// frees processes stuck on a server that cannot answer, and detaches it.
func abort(mnt string) error {
	ms, err := mountinfo.GetMounts(mountinfo.SingleEntryFilter(mnt))
	if err != nil || len(ms) == 0 {
		return err
	}
	defer detach(mnt)
	const ctl = "/sys/fs/fuse/connections"
	if es, _ := os.ReadDir(ctl); len(es) == 0 {
		if err := syscall.Mount("fusectl", ctl, "fusectl", 0, ""); err != nil {
			return fmt.Errorf("mount fusectl: %w", err)
		}
	}
	path := filepath.Join(ctl, fmt.Sprint(ms[len(ms)-1].Minor), "abort")
	if err := os.WriteFile(path, []byte("1"), 0); err != nil {
		return fmt.Errorf("abort %s: %w", mnt, err)
	}
	return nil
}

// Files closed just before a kill -9 are committed by recovery with the
// time their batch began: the page as of any time after a close returned
// shows the file, as it would have without the crash.
func TestCrashKeepsAcceptanceTimes(t *testing.T) {
	t.Parallel()
	repo := t.TempDir()
	mnt := filepath.Join(t.TempDir(), "mnt")
	recovered := false
	for attempt := 0; attempt < 5 && !recovered; attempt++ {
		s := mountAt(t, repo, mnt)
		pg := s.page("l", "p")
		var after []time.Time
		for i := range 10 {
			must(t, os.WriteFile(filepath.Join(pg, fmt.Sprintf("f%d-%d", attempt, i)), []byte(fmt.Sprint(i)), 0o644))
			after = append(after, time.Now())
		}
		s.kill()
		s = mountAt(t, repo, mnt)
		// A batch that landed before the kill has the time of its latest
		// change, one that recovery committed the time of its first: both
		// are before the last close returned.
		at := after[len(after)-1]
		for i := range after {
			name := fmt.Sprintf("f%d-%d", attempt, i)
			p := filepath.Join(pg, ".ledger", "at", at.UTC().Format(time.RFC3339Nano), name)
			if b, err := os.ReadFile(p); err != nil || string(b) != fmt.Sprint(i) {
				t.Fatalf("%s as of just after its close: %q, %v", name, b, err)
			}
		}
		// The page's first access ran recovery; did it commit a journal?
		s.stop() // its log is whole once it has exited
		recovered = strings.Contains(s.log.String(), "committed implicit journal left by a crash")
	}
	if !recovered {
		t.Fatal("in 5 tries no close was left for recovery to commit: the kill came too late")
	}
}

// After a kill -9 the repository reads without a writable mount: the
// command line and a read-only mount recover a page the crash left, as the
// next mount would, and show every file whose close had returned. Badger
// alone refuses ("Log truncate required").
func TestReadAfterKill(t *testing.T) {
	t.Parallel()
	for _, how := range []string{"cat", "log", "read-only mount"} {
		t.Run(how, func(t *testing.T) {
			repo := t.TempDir()
			s := mount(t, repo)
			pg := s.page("l", "p")
			must(t, os.WriteFile(filepath.Join(pg, "old"), []byte("old"), 0o644))
			syncDir(t, pg)
			must(t, os.WriteFile(filepath.Join(pg, "closed"), []byte("closed"), 0o644))
			s.kill()
			switch how {
			case "cat":
				for name, want := range map[string]string{"old": "old", "closed": "closed"} {
					out, err := exec.Command(binary, "cat", repo, "l", "p", name).Output()
					if err != nil || string(out) != want {
						t.Fatalf("ledgerfs cat %s after kill -9: %v, %q", name, err, out)
					}
				}
			case "log":
				out, err := exec.Command(binary, "log", repo, "l", "p", "closed").Output()
				// One version: its name, its size, its commit.
				if f := strings.Fields(string(out)); err != nil || len(f) != 3 || f[1] != "6" {
					t.Fatalf("ledgerfs log after kill -9: %v, %q", err, out)
				}
			default:
				s = mount(t, repo, "--read-only")
				pg = filepath.Join(s.mnt, "l", "p")
				for name, want := range map[string]string{"old": "old", "closed": "closed"} {
					if b, err := os.ReadFile(filepath.Join(pg, name)); err != nil || string(b) != want {
						t.Fatalf("%s on a read-only mount after kill -9: %q, %v", name, b, err)
					}
				}
				s.stop()
			}
			verifySchema(t, repo)
		})
	}
}

// A damaged page db is isolated: a cut table (which made Badger panic and
// took the server down) gives EIO in that page alone, with a log line
// naming the file; a value log with bytes flipped in its middle (which
// Badger cut to the bad entry) is served read-only and keeps its size.
// Every other page keeps working.
func TestDamagedPagesAreIsolated(t *testing.T) {
	t.Parallel()
	repo := t.TempDir()
	s := mount(t, repo)
	for _, p := range []string{"cut", "flipped", "fine"} {
		pg := s.page("l", p)
		for i := range 40 {
			must(t, os.WriteFile(filepath.Join(pg, fmt.Sprint(i)), content(i, 100_000), 0o644))
		}
		syncDir(t, pg)
	}
	s.stop()
	pageDir := func(p string) string {
		dirs, _ := filepath.Glob(filepath.Join(repo, store.SerializationVersion, "ledgers", "*", store.PageIDFor(p).String()))
		if len(dirs) != 1 {
			t.Fatalf("page db of %s: %v", p, dirs)
		}
		return dirs[0]
	}
	tables, _ := filepath.Glob(filepath.Join(pageDir("cut"), "*.sst"))
	if len(tables) == 0 {
		t.Fatal("no table in page cut")
	}
	must(t, os.Truncate(tables[0], 2000))
	vlogs, _ := filepath.Glob(filepath.Join(pageDir("flipped"), "*.vlog"))
	slices.Sort(vlogs)
	vlog := vlogs[len(vlogs)-1]
	fi, err := os.Stat(vlog)
	must(t, err)
	f, err := os.OpenFile(vlog, os.O_RDWR, 0)
	must(t, err)
	_, err = f.WriteAt([]byte("sixteen flipped!"), fi.Size()/2)
	must(t, err)
	must(t, f.Close())

	s = mountAt(t, repo, s.mnt)
	if _, err := os.ReadDir(filepath.Join(s.mnt, "l", "cut")); !errors.Is(err, syscall.EIO) {
		t.Errorf("page with a cut table: %v, want EIO", err)
	}
	pg := filepath.Join(s.mnt, "l", "flipped")
	if b, err := os.ReadFile(filepath.Join(pg, "0")); err != nil || !bytes.Equal(b, content(0, 100_000)) {
		t.Errorf("a file of the page with a damaged value log: %v", err)
	}
	if err := os.WriteFile(filepath.Join(pg, "new"), nil, 0o644); !errors.Is(err, syscall.EROFS) {
		t.Errorf("a create in the page with a damaged value log: %v, want EROFS", err)
	}
	for i := range 40 {
		if b, err := os.ReadFile(filepath.Join(s.mnt, "l", "fine", fmt.Sprint(i))); err != nil || !bytes.Equal(b, content(i, 100_000)) {
			t.Fatalf("a file of the intact page: %v", err)
		}
	}
	must(t, os.WriteFile(filepath.Join(s.mnt, "l", "fine", "new"), []byte("new"), 0o644))
	log := s.log.String()
	if !strings.Contains(log, tables[0]) || !strings.Contains(log, vlog) {
		t.Errorf("the log does not name both damaged files:\n%s", log)
	}
	s.kill() // its log has the errors stop would complain of
	if after, err := os.Stat(vlog); err != nil || after.Size() != fi.Size() {
		t.Fatalf("damaged value log after the mount: %v; was %d bytes", err, fi.Size())
	}
}

// A child that inherited a descriptor being written closes it at exec
// (any program that forks while writing does this); that close is not the
// writer's and commits nothing. Before, it committed the file as it was
// then, empty after open(O_TRUNC), and a crash before the writer's own
// close left the file empty: the kill loop saw it.
func TestInheritedCloseCommitsNothing(t *testing.T) {
	t.Parallel()
	repo := t.TempDir()
	s := mount(t, repo)
	pg := s.page("l", "p")
	old := content(1, 100_000)
	name := filepath.Join(pg, "f")
	must(t, os.WriteFile(name, old, 0o644))
	syncDir(t, pg)
	f, err := os.OpenFile(name, os.O_WRONLY|os.O_TRUNC, 0)
	must(t, err)
	defer f.Close()
	// The child gets a copy of f at fork and closes it at exec.
	if out, err := exec.Command("true").CombinedOutput(); err != nil {
		t.Fatalf("true: %v %s", err, out)
	}
	if _, err := f.Write([]byte("half")); err != nil {
		t.Fatal(err)
	}
	syncDir(t, pg) // what the child's close queued has landed
	s.kill()
	s = mount(t, repo)
	got, err := os.ReadFile(filepath.Join(s.mnt, "l", "p", "f"))
	must(t, err)
	if !bytes.Equal(got, old) {
		t.Fatalf("after a child's close and a kill the file is %d bytes, want its %d bytes before the writer's close", len(got), len(old))
	}
	vs := ls(t, filepath.Join(s.mnt, "l", "p", ".ledger", "versions", "f"))
	if len(vs) != 1 {
		t.Fatalf("versions %v: the child's close made one", vs)
	}
	s.stop()
}

// Whatever fsync returned for survives a kill -9 that comes right after
// it: for each kind of change, made and fsynced (the file, or for a change
// of names its directory), the server is killed at once and the next mount
// must show the change. Files stay open until after the kill: a close
// would commit them too.
func TestKillRightAfterFsync(t *testing.T) {
	t.Parallel()
	repo := t.TempDir()
	s := mountPlain(t, repo)
	pg := s.page("l", "p")
	path := func(name string) string { return filepath.Join(s.mnt, "l", "p", name) }
	big := content(2, 3<<20)
	must(t, os.WriteFile(path("big"), big, 0o644))
	must(t, os.WriteFile(path("small"), []byte("small"), 0o644))
	must(t, os.WriteFile(path("old-name"), []byte("renamed"), 0o644))
	must(t, os.WriteFile(path("doomed"), []byte("doomed"), 0o644))
	must(t, os.Mkdir(path("dir"), 0o755))
	laid, err := os.Create(path("laid")) // laid out as fio and databases do
	must(t, err)
	must(t, unix.Fallocate(int(laid.Fd()), 0, 0, 8<<20))
	must(t, laid.Close())
	old := content(4, 12<<20)
	must(t, os.WriteFile(path("rewritten"), old, 0o644))
	syncDir(t, pg)

	var open []*os.File // closed after the kill
	fsyncFile := func(name string, change func(f *os.File) error) {
		t.Helper()
		f, err := os.OpenFile(path(name), os.O_RDWR, 0)
		must(t, err)
		open = append(open, f)
		must(t, change(f))
		must(t, f.Sync())
	}
	fsyncDir := func(dir string) {
		t.Helper()
		f, err := os.Open(dir)
		must(t, err)
		defer f.Close()
		must(t, f.Sync())
	}
	patch := content(3, 4096)
	for _, c := range []struct {
		kind   string
		change func()
		check  func() error
	}{
		{"write into a large file", func() {
			fsyncFile("big", func(f *os.File) error { _, err := f.WriteAt(patch, 1<<20+5); return err })
		}, func() error {
			want := append(append(bytes.Clone(big[:1<<20+5]), patch...), big[1<<20+5+4096:]...)
			if got, err := os.ReadFile(path("big")); err != nil || !bytes.Equal(got, want) {
				return fmt.Errorf("big: %d bytes, %v", len(got), err)
			}
			return nil
		}},
		{"write into a small file", func() {
			fsyncFile("small", func(f *os.File) error { _, err := f.WriteAt([]byte("SM"), 0); return err })
		}, func() error {
			if b, err := os.ReadFile(path("small")); err != nil || string(b) != "SMall" {
				return fmt.Errorf("small: %q, %v", b, err)
			}
			return nil
		}},
		{"create", func() {
			f, err := os.Create(path("new"))
			must(t, err)
			open = append(open, f)
			_, err = f.Write([]byte("new"))
			must(t, err)
			must(t, f.Sync())
		}, func() error {
			if b, err := os.ReadFile(path("new")); err != nil || string(b) != "new" {
				return fmt.Errorf("new: %q, %v", b, err)
			}
			return nil
		}},
		{"rename", func() {
			must(t, os.Rename(path("old-name"), path("dir/new-name")))
			fsyncDir(path("dir"))
			fsyncDir(path(""))
		}, func() error {
			if b, err := os.ReadFile(path("dir/new-name")); err != nil || string(b) != "renamed" {
				return fmt.Errorf("dir/new-name: %q, %v", b, err)
			}
			if _, err := os.Lstat(path("old-name")); !errors.Is(err, os.ErrNotExist) {
				return fmt.Errorf("old-name after the rename: %v", err)
			}
			return nil
		}},
		{"unlink", func() {
			must(t, os.Remove(path("doomed")))
			fsyncDir(path(""))
		}, func() error {
			if _, err := os.Lstat(path("doomed")); !errors.Is(err, os.ErrNotExist) {
				return fmt.Errorf("doomed after its unlink: %v", err)
			}
			return nil
		}},
		{"mkdir", func() {
			must(t, os.Mkdir(path("made"), 0o700))
			fsyncDir(path(""))
		}, func() error {
			if fi, err := os.Stat(path("made")); err != nil || !fi.IsDir() || fi.Mode().Perm() != 0o700 {
				return fmt.Errorf("made: %v, %v", fi, err)
			}
			return nil
		}},
		{"fsyncs of writes, an extension and a truncate, one after another", func() {
			fsyncFile("big", func(f *os.File) error {
				if _, err := f.WriteAt(patch, 100); err != nil {
					return err
				}
				if err := f.Sync(); err != nil {
					return err
				}
				if _, err := f.WriteAt(patch, 7<<19); err != nil { // past the end: a hole before it
					return err
				}
				if err := f.Sync(); err != nil {
					return err
				}
				if _, err := f.WriteAt([]byte("more"), 1<<20); err != nil {
					return err
				}
				if err := f.Sync(); err != nil {
					return err
				}
				if err := f.Truncate(3<<20 + 10); err != nil {
					return err
				}
				_, err := f.WriteAt([]byte("last"), 3<<20)
				return err
			})
		}, func() error {
			want := append(append(bytes.Clone(big[:1<<20+5]), patch...), big[1<<20+5+4096:]...) // the first case's
			copy(want[100:], patch)
			copy(want[1<<20:], "more")
			want = append(want, make([]byte, 10)...)
			copy(want[3<<20:], "last")
			if got, err := os.ReadFile(path("big")); err != nil || !bytes.Equal(got, want) {
				return fmt.Errorf("big: %d bytes, want %d, %v", len(got), len(want), err)
			}
			return nil
		}},
		{"rewrites in order from offset 0, streamed", func() {
			inOrder := func(n int) func(f *os.File) error {
				return func(f *os.File) error {
					for off := 0; off < n; off += 1 << 20 {
						if _, err := f.WriteAt(content(10+off>>20, 1<<20), int64(off)); err != nil {
							return err
						}
					}
					return nil
				}
			}
			fsyncFile("laid", inOrder(6<<20))      // the rest (zeros) follows the stream
			fsyncFile("rewritten", inOrder(5<<20)) // an edit keeps the rest
		}, func() error {
			for _, f := range []struct {
				name string
				was  []byte
				n    int
			}{{"laid", make([]byte, 8<<20), 6 << 20}, {"rewritten", old, 5 << 20}} {
				want := bytes.Clone(f.was)
				for off := 0; off < f.n; off += 1 << 20 {
					copy(want[off:], content(10+off>>20, 1<<20))
				}
				if got, err := os.ReadFile(path(f.name)); err != nil || !bytes.Equal(got, want) {
					return fmt.Errorf("%s: %d bytes, want %d, equal %v, %v", f.name, len(got), len(want), bytes.Equal(got, want), err)
				}
			}
			return nil
		}},
		{"create, fsync, unlink", func() {
			f, err := os.Create(path("temporary"))
			must(t, err)
			open = append(open, f)
			_, err = f.Write([]byte("fsynced, then unlinked"))
			must(t, err)
			must(t, f.Sync())
			must(t, os.Remove(path("temporary")))
			fsyncDir(path(""))
		}, func() error {
			if _, err := os.Lstat(path("temporary")); !errors.Is(err, os.ErrNotExist) {
				return fmt.Errorf("temporary after its unlink: %v", err)
			}
			return nil
		}},
		{"setattr", func() {
			fsyncFile("small", func(f *os.File) error {
				if err := f.Chmod(0o600); err != nil {
					return err
				}
				return f.Truncate(2)
			})
		}, func() error {
			fi, err := os.Stat(path("small"))
			if err != nil || fi.Mode().Perm() != 0o600 || fi.Size() != 2 {
				return fmt.Errorf("small after chmod and truncate: %v, %v", fi, err)
			}
			return nil
		}},
	} {
		c.change()
		s.kill()
		for _, f := range open {
			f.Close() // fails: the mount is gone
		}
		open = nil
		s = mountPlain(t, repo)
		if err := c.check(); err != nil {
			t.Errorf("after %s, fsync and kill -9: %v", c.kind, err)
		}
	}
	s.stop()
	verifySchema(t, repo)
}

// A directory's new times survive a kill -9 with the change that made
// them: they ride with that change's journal rows, not after it. Another
// close just before each change keeps a commit in flight, so the times wait
// for a change to carry them rather than being queued at once.
func TestDirectoryTimesSurviveKill(t *testing.T) {
	t.Parallel()
	repo := t.TempDir()
	s := mount(t, repo)
	mnt := s.mnt
	s.page("l", "p")
	path := func(name string) string { return filepath.Join(mnt, "l", "p", name) }
	must(t, os.Mkdir(path("d"), 0o755))
	must(t, os.WriteFile(path("d/doomed"), []byte("x"), 0o644))
	syncDir(t, path(""))
	past := time.Date(2001, 2, 3, 4, 5, 6, 0, time.UTC)
	for _, c := range []struct {
		what  string
		do    func() error
		check func() error
	}{
		{"create", func() error { return os.WriteFile(path("d/new"), []byte("new"), 0o644) }, func() error {
			_, err := os.Stat(path("d/new"))
			return err
		}},
		{"mkdir", func() error { return os.Mkdir(path("d/sub"), 0o755) }, func() error {
			_, err := os.Stat(path("d/sub"))
			return err
		}},
		{"unlink", func() error { return os.Remove(path("d/doomed")) }, func() error {
			if _, err := os.Stat(path("d/doomed")); !errors.Is(err, os.ErrNotExist) {
				return fmt.Errorf("doomed after its unlink: %v", err)
			}
			return nil
		}},
	} {
		must(t, os.Chtimes(path("d"), past, past))
		syncDir(t, path(""))
		before := time.Now().Add(-time.Second) // ctime is the server's clock
		must(t, os.WriteFile(path("in-flight"), []byte(c.what), 0o644))
		must(t, c.do())
		s.kill()
		s = mountAt(t, repo, mnt)
		if err := c.check(); err != nil {
			t.Fatalf("%s after kill -9: %v", c.what, err)
		}
		st := stat(t, path("d"))
		if st.Mtim.Sec < before.Unix() || st.Ctim.Sec < before.Unix() {
			t.Errorf("%s: after kill -9 the directory has mtime %v ctime %v, want the change's", c.what,
				time.Unix(st.Mtim.Unix()), time.Unix(st.Ctim.Unix()))
		}
	}
	s.stop()
}

// Unlinks, rmdirs and mkdirs go to the page's sync log in place of a row
// in its db until their commit lands; a kill -9 right after they return
// loses none of them: recovery writes them into their journal and commits
// it. Each round ends with a burst of them and a kill before its commit
// can land (it waits for 40 ms without changes); a round's remount that
// found them in the log says so in its log.
func TestQueuedChangesSurviveKill(t *testing.T) {
	t.Parallel()
	repo := t.TempDir()
	s := mount(t, repo)
	mnt := s.mnt
	pg := s.page("l", "p")
	path := func(name string) string { return filepath.Join(pg, name) }
	want := map[string]bool{} // name -> a directory
	wrote := 0
	for round := range 5 {
		for i := range 40 {
			name := fmt.Sprintf("f%d-%d", round, i)
			must(t, os.WriteFile(path(name), []byte(name), 0o644))
			want[name] = false
			dir := fmt.Sprintf("d%d-%d", round, i)
			must(t, os.Mkdir(path(dir), 0o755))
			want[dir] = true
		}
		syncDir(t, pg)
		before := statsOf(t, mnt)["ledgerfs_queued_in_log_total"]
		for i := range 40 {
			if i%2 == 0 {
				name := fmt.Sprintf("f%d-%d", round, i)
				must(t, os.Remove(path(name)))
				delete(want, name)
				dir := fmt.Sprintf("d%d-%d", round, i)
				must(t, os.Remove(path(dir)))
				delete(want, dir)
			}
			dir := fmt.Sprintf("n%d-%d", round, i)
			must(t, os.Mkdir(path(dir), 0o700))
			want[dir] = true
		}
		if after := statsOf(t, mnt)["ledgerfs_queued_in_log_total"]; after-before < 80 {
			t.Fatalf("round %d: %v changes queued in the sync log, want the 80 unlinks and directories at least", round, after-before)
		}
		s.kill()
		s = mountAt(t, repo, mnt)
		es, err := os.ReadDir(pg)
		must(t, err)
		got := map[string]bool{}
		for _, e := range es {
			got[e.Name()] = e.IsDir()
		}
		if !maps.Equal(got, want) {
			var missing, extra []string
			for n := range want {
				if _, ok := got[n]; !ok {
					missing = append(missing, n)
				}
			}
			for n := range got {
				if _, ok := want[n]; !ok {
					extra = append(extra, n)
				}
			}
			t.Fatalf("round %d, after kill -9: missing %v, unexpected %v", round, missing, extra)
		}
		if st := stat(t, path(fmt.Sprintf("n%d-0", round))); st.Mode&0o777 != 0o700 {
			t.Fatalf("round %d: a directory made before the kill has mode %o", round, st.Mode&0o777)
		}
		if strings.Contains(s.log.String(), "wrote changes the sync log held into their journal") {
			wrote++
		}
	}
	if wrote == 0 {
		t.Fatal("no remount found changes in the sync log that the db lacked: the kills all came after the commits")
	}
	t.Logf("%d of 5 remounts wrote queued changes from the sync log into their journal", wrote)
	s.stop()
	verifySchema(t, repo)
}
