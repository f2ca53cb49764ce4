package mount_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// TestCrash kills the server with SIGKILL in the middle of a workload: every
// file fsynced or closed before the kill is intact after remounting, and no
// file has partial content.
func TestCrash(t *testing.T) {
	t.Parallel()
	repo := t.TempDir()
	s := mount(t, repo)
	pg := s.page("crash", "p")
	type rec struct {
		name string
		data []byte
	}
	var mu sync.Mutex
	var synced, closed []rec
	all := map[string][]byte{}
	stop := make(chan struct{})
	// The kill comes once the writers have fsynced and closed enough
	// files, mid-write of more: the event, not a time.
	const enough = 40
	ready := make(chan struct{})
	var readyOnce sync.Once
	noteDone := func() {
		if len(synced) >= enough && len(closed) >= enough {
			readyOnce.Do(func() { close(ready) })
		}
	}
	var wg sync.WaitGroup
	for w := range 3 {
		wg.Go(func() {
			for i := 0; ; i++ {
				select {
				case <-stop:
					return
				default:
				}
				name := fmt.Sprintf("w%d-%04d", w, i)
				data := content(w*100000+i, 1000+(i%7)*150000)
				mu.Lock()
				all[name] = data
				mu.Unlock()
				f, err := os.Create(filepath.Join(pg, name))
				if err != nil {
					return // the mount is gone
				}
				_, err = f.Write(data)
				if err == nil && i%2 == 0 {
					err = f.Sync()
					if err == nil {
						mu.Lock()
						synced = append(synced, rec{name, data})
						noteDone()
						mu.Unlock()
					}
				}
				if f.Close() == nil && err == nil {
					mu.Lock()
					closed = append(closed, rec{name, data})
					noteDone()
					mu.Unlock()
				}
			}
		})
	}
	select {
	case <-ready:
	case <-time.After(2 * time.Minute):
		t.Error("the writers did not fsync and close enough files within 2 minutes")
	}
	s.kill()
	close(stop)
	wg.Wait()
	if len(synced) < 5 {
		t.Fatalf("only %d files fsynced before the kill", len(synced))
	}
	s = mountAt(t, repo, s.mnt)
	for _, r := range synced {
		b, err := os.ReadFile(filepath.Join(pg, r.name))
		if err != nil || !bytes.Equal(b, r.data) {
			t.Fatalf("fsynced file %s lost or changed after the crash (%v)", r.name, err)
		}
	}
	// A close returns once the file is in the page's journal, which
	// recovery commits: a process crash loses no closed file.
	for _, r := range closed {
		b, err := os.ReadFile(filepath.Join(pg, r.name))
		if err != nil || !bytes.Equal(b, r.data) {
			t.Fatalf("closed file %s lost or changed after the crash (%v)", r.name, err)
		}
	}
	found := 0
	err := filepath.WalkDir(pg, func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		found++
		b, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		want := all[d.Name()]
		if len(b) > 0 && !bytes.Equal(b, want) {
			return fmt.Errorf("%s has partial content: %d of %d bytes", d.Name(), len(b), len(want))
		}
		return nil
	})
	must(t, err)
	t.Logf("%d files fsynced, %d closed, %d present after the crash", len(synced), len(closed), found)
	s.stop()
	verifySchema(t, repo)
}

func TestCommandErrors(t *testing.T) {
	t.Parallel()
	repo := t.TempDir()
	s := mount(t, repo)
	try := func(want string, args ...string) {
		t.Helper()
		out, err := exec.Command(binary, args...).CombinedOutput()
		if err == nil || !strings.Contains(string(out), want) {
			t.Fatalf("ledgerfs %q: %v, output %q; want an error saying %q", args, err, out, want)
		}
	}
	try("already served by another process", "mount", repo, filepath.Join(t.TempDir(), "m2"))
	// In the foreground or with -d, the same status: 3, in use.
	for _, args := range [][]string{{"mount", repo}, {"mount", "-d", "--log-file", filepath.Join(t.TempDir(), "log"), repo}} {
		cmd := exec.Command(binary, append(args, filepath.Join(t.TempDir(), "m2"))...)
		if out, err := cmd.CombinedOutput(); cmd.ProcessState == nil || cmd.ProcessState.ExitCode() != 3 {
			t.Fatalf("ledgerfs %q of a served repository: %v, want exit status 3:\n%s", args, err, out)
		}
	}
	try("busy", "mount", t.TempDir(), s.mnt)
	try("scrubs in the background", "scrub", repo)
	file := filepath.Join(t.TempDir(), "f")
	if err := os.WriteFile(file, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	try("not a directory", "mount", t.TempDir(), file)
	try("accepts between 1 and 2 arg", "mount")
	fresh := filepath.Join(t.TempDir(), "repo")
	try("--gc-percent 0: must be positive", "mount", "--gc-percent", "0", fresh, t.TempDir())
	try("--node-cache -1: must be positive", "mount", "--node-cache", "-1", fresh, t.TempDir())
	if _, err := os.Stat(fresh); !os.IsNotExist(err) {
		t.Fatalf("a refused mount created its repository: %v", err)
	}
	if out, err := exec.Command(binary, "mount", "--help").CombinedOutput(); err != nil || !strings.Contains(string(out), "Usage") {
		t.Fatalf("--help: %v %s", err, out)
	}
}

// Mistakes a user makes naming directories are refused with a message and
// change nothing: a repository mounted onto itself, a mount point inside
// the repository or the other way round (statfs on such a mount calls back
// into the server until it dies), a mount point with files in it, and a
// non-empty directory that is no repository. A new repository is said to be
// created.
func TestMountRefusesMistakes(t *testing.T) {
	t.Parallel()
	try := func(want string, args ...string) {
		t.Helper()
		// A mount that is not refused serves until killed.
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		out, err := exec.CommandContext(ctx, binary, args...).CombinedOutput()
		if mnt := args[len(args)-1]; mounted(mnt) {
			detach(mnt)
		}
		if err == nil || !strings.Contains(string(out), want) {
			t.Fatalf("ledgerfs %q: %v, output %q; want an error saying %q", args, err, out, want)
		}
	}
	repo := filepath.Join(t.TempDir(), "repo")
	try("overlap", "mount", repo, repo)
	try("overlap", "mount", repo, filepath.Join(repo, "mnt"))
	mnt := t.TempDir()
	try("overlap", "mount", filepath.Join(mnt, "repo"), mnt)
	// Through a symlink, the same directory.
	link := filepath.Join(t.TempDir(), "link")
	must(t, os.Symlink(mnt, link))
	try("overlap", "mount", filepath.Join(link, "r"), mnt)
	if _, err := os.Stat(repo); !os.IsNotExist(err) {
		t.Fatalf("a refused mount created its repository: %v", err)
	}

	full := t.TempDir()
	must(t, os.WriteFile(filepath.Join(full, "mine"), []byte("keep"), 0o644))
	try("not empty", "mount", repo, full)
	try("not a ledgerfs repository", "mount", full, t.TempDir())
	if es, _ := os.ReadDir(full); len(es) != 1 {
		t.Fatalf("a refused mount wrote into %s: %v", full, es)
	}

	s := mount(t, repo, "--allow-non-empty")
	if !strings.Contains(s.log.String(), "created a new repository") {
		t.Errorf("no word of the new repository in the log:\n%s", s.log)
	}
	s.stop()
	s = mountAt(t, repo, full, "--allow-non-empty")
	if _, err := os.Stat(filepath.Join(full, "mine")); !os.IsNotExist(err) {
		t.Errorf("the mount does not cover the directory's files: %v", err)
	}
	s.stop()
	if strings.Contains(s.log.String(), "created a new repository") {
		t.Errorf("an existing repository was said to be created:\n%s", s.log)
	}
	if got, err := os.ReadFile(filepath.Join(full, "mine")); err != nil || string(got) != "keep" {
		t.Fatalf("file under the mount point after unmount: %q, %v", got, err)
	}
}

func TestReadOnly(t *testing.T) {
	t.Parallel()
	repo := t.TempDir()
	s := mount(t, repo)
	pg := s.page("r", "p")
	must(t, os.WriteFile(filepath.Join(pg, "f"), []byte("data"), 0o644))
	s.stop()
	s = mountAt(t, repo, s.mnt, "--read-only")
	if b, err := os.ReadFile(filepath.Join(pg, "f")); err != nil || string(b) != "data" {
		t.Fatalf("read: %q %v", b, err)
	}
	if err := os.WriteFile(filepath.Join(pg, "g"), nil, 0o644); !errors.Is(err, syscall.EROFS) {
		t.Fatalf("write on a read-only mount: %v", err)
	}
}

// An unmount from outside ends the server cleanly, and it does not then try
// to unmount again (it logged "unmounting" after "unmounted").
func TestUnmountFromOutside(t *testing.T) {
	t.Parallel()
	s := mount(t, t.TempDir())
	must(t, os.WriteFile(filepath.Join(s.page("u", "p"), "f"), []byte("kept"), 0o644))
	must(t, syscall.Unmount(s.mnt, 0))
	select {
	case err := <-s.done:
		if err != nil {
			t.Fatalf("server exited with %v:\n%s", err, s.log)
		}
	case <-time.After(60 * time.Second):
		t.Fatalf("server still running 60s after the unmount:\n%s", s.log)
	}
	if log := s.log.String(); strings.Contains(log, "unmounting") || !strings.Contains(log, "unmounted") {
		t.Fatalf("server log after an unmount from outside:\n%s", log)
	}
	s2 := mount(t, s.repo)
	if b, err := os.ReadFile(filepath.Join(s2.mnt, "u", "p", "f")); err != nil || string(b) != "kept" {
		t.Fatalf("after remount: %q, %v", b, err)
	}
}

// A db that cannot be written at unmount (its repository deleted under the
// mount; a full disk looks the same to Badger, which retries the flush of
// its memtable for ever inside Close) ends the server within the close
// timeout, with an error that names the db and a non-zero exit, instead of
// a process that never exits.
func TestStopWhenDBCannotClose(t *testing.T) {
	t.Parallel()
	repo := t.TempDir()
	mnt := filepath.Join(t.TempDir(), "mnt")
	s := mountAt(t, repo, mnt, "--close-timeout", "2s")
	must(t, os.WriteFile(filepath.Join(s.page("c", "p"), "f"), []byte("data"), 0o644))
	must(t, os.RemoveAll(repo))
	start := time.Now()
	s.cmd.Process.Signal(syscall.SIGTERM)
	var err error
	select {
	case err = <-s.done:
	case <-time.After(60 * time.Second):
		s.cmd.Process.Kill()
		<-s.done
		t.Fatalf("server still running 60s after SIGTERM:\n%s", s.log)
	}
	log := s.log.String()
	var exit *exec.ExitError
	if !errors.As(err, &exit) || exit.ExitCode() == 0 {
		t.Fatalf("server exited with %v, want a non-zero exit:\n%s", err, log)
	}
	if !strings.Contains(log, "did not close within 2s") {
		t.Fatalf("server log does not say which db did not close:\n%s", log)
	}
	if mounted(mnt) {
		detach(mnt)
		t.Fatal("still mounted after the server exited")
	}
	t.Logf("exited %v after SIGTERM", time.Since(start).Round(time.Millisecond))
}

// SIGTERM as soon as the mount shows ends the server cleanly: no dead mount
// left behind. 8 rounds, 40 with -long.
func TestStopRightAfterMount(t *testing.T) {
	t.Parallel()
	repo := t.TempDir()
	mnt := filepath.Join(t.TempDir(), "mnt")
	rounds := 8
	if *long {
		rounds = 40
	}
	for i := range rounds {
		var log bytes.Buffer
		cmd := exec.Command(binary, "mount", repo, mnt)
		cmd.Stdout, cmd.Stderr = &log, &log
		must(t, cmd.Start())
		for deadline := time.Now().Add(20 * time.Second); !mounted(mnt); time.Sleep(50 * time.Microsecond) {
			if time.Now().After(deadline) {
				cmd.Process.Kill()
				t.Fatalf("not mounted after 20s:\n%s", &log)
			}
		}
		cmd.Process.Signal(syscall.SIGTERM)
		err := cmd.Wait()
		if mounted(mnt) {
			detach(mnt)
			t.Fatalf("round %d: still mounted after the server exited (%v):\n%s", i, err, &log)
		}
		if err != nil {
			t.Fatalf("round %d: server exited with %v:\n%s", i, err, &log)
		}
	}
}

// A SIGTERM while a process works in the mount says which process holds
// it, and keeps serving; a second signal detaches the mount, which then
// serves the process until it lets go, and the server ends cleanly.
func TestBusyUnmount(t *testing.T) {
	t.Parallel()
	s := mount(t, t.TempDir())
	pg := s.page("l", "p")
	must(t, os.WriteFile(filepath.Join(pg, "f"), []byte("data"), 0o644))
	holder := exec.Command("sleep", "600")
	holder.Dir = pg
	must(t, holder.Start())
	defer holder.Process.Kill()
	must(t, s.cmd.Process.Signal(syscall.SIGTERM))
	s.log.await(t, fmt.Sprintf("%d (sleep, cwd)", holder.Process.Pid))
	if !mounted(s.mnt) {
		t.Fatal("the mount went away while in use")
	}
	must(t, s.cmd.Process.Signal(syscall.SIGTERM))
	s.log.await(t, "detached: the mount is gone")
	if mounted(s.mnt) {
		t.Fatal("still mounted after the detach")
	}
	// The holder still works in the detached mount.
	if b, err := os.ReadFile(fmt.Sprintf("/proc/%d/cwd/f", holder.Process.Pid)); err != nil || string(b) != "data" {
		t.Fatalf("read in the detached mount: %q, %v", b, err)
	}
	select {
	case err := <-s.done:
		t.Fatalf("the server ended while the detached mount was in use: %v", err)
	default:
	}
	must(t, holder.Process.Kill())
	holder.Wait()
	select {
	case err := <-s.done:
		s.done <- err // for stop, which checks the exit and the log
	case <-time.After(30 * time.Second):
		t.Fatalf("the server did not end after the last user left:\n%s", s.log)
	}
	s.stop()
	if !strings.Contains(s.log.String(), "detached") {
		t.Errorf("no word of the detach:\n%s", s.log)
	}
}

// Mounting over a mount whose server died says so, and how to clear it,
// even while the kernel still answers stat there from its cache.
func TestRemountOverDeadMount(t *testing.T) {
	t.Parallel()
	repo := t.TempDir()
	s := mount(t, repo, "--cache-timeout", "60")
	s.page("l", "p")
	if _, err := os.Stat(s.mnt); err != nil {
		t.Fatal(err)
	}
	s.cmd.Process.Kill()
	<-s.done
	defer detach(s.mnt)
	out, err := exec.Command(binary, "mount", repo, s.mnt).CombinedOutput()
	if err == nil || !strings.Contains(string(out), "dead FUSE mount: unmount it first") {
		t.Fatalf("mount over a dead mount: %v, %q", err, out)
	}
}

// A test run cut short by its timeout stops its servers, detaches their
// mounts and removes its files before Go's timeout panic. This test runs
// itself in a child with a 10 s timeout that mounts and then hangs.
func TestCleanupOnTimeout(t *testing.T) {
	if os.Getenv("LEDGERFS_TEST_HANG") != "" {
		s := mount(t, t.TempDir())
		must(t, os.WriteFile(filepath.Join(s.page("l", "p"), "f"), make([]byte, 1<<20), 0o644))
		fmt.Println("mounted", s.mnt)
		select {}
	}
	parent := t.TempDir()
	cmd := exec.Command(os.Args[0], "-test.run=^TestCleanupOnTimeout$", "-test.timeout=10s", "-test.v")
	cmd.Env = append(os.Environ(), "LEDGERFS_TEST_HANG=1", "TMPDIR="+parent,
		"LEDGERFS_TEST_BINARIES="+binary+":"+plainBinary)
	out, err := cmd.CombinedOutput()
	if err == nil || !strings.Contains(string(out), "test timed out") || !strings.Contains(string(out), "mounted ") {
		t.Fatalf("the child did not mount and time out: %v\n%s", err, out)
	}
	mnt := strings.Fields(string(out)[strings.Index(string(out), "mounted "):])[1]
	if mounted(mnt) {
		detach(mnt)
		t.Fatalf("%s still mounted after the child timed out:\n%s", mnt, out)
	}
	if es, err := os.ReadDir(parent); err != nil || len(es) != 0 {
		t.Fatalf("files left after the child timed out: %v %v\n%s", es, err, out)
	}
}
