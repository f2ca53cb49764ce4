package mount_test

import (
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// tree lists every file under dir with its owner, mode, type and mtime, the
// attributes tar, cp -a and rsync -a restore.
func tree(t *testing.T, dir string) string {
	t.Helper()
	return sortLines(run(t, dir, "find", ".", "-mindepth", "1", "-printf", "%P %u:%g %m %y %T@ [%l]\n"))
}

// ownedTree makes a tree of files owned by users other than root: a
// set-group-ID directory, a file, an executable, a symlink with an owner of
// its own, a fifo and an empty directory.
func ownedTree(t *testing.T) string {
	t.Helper()
	src := filepath.Join(t.TempDir(), "src")
	must(t, os.MkdirAll(filepath.Join(src, "d", "empty"), 0o755))
	must(t, os.WriteFile(filepath.Join(src, "d", "f"), []byte("owned by 1001\n"), 0o640))
	must(t, os.WriteFile(filepath.Join(src, "d", "x"), []byte("#!/bin/sh\n"), 0o755))
	must(t, os.Symlink("f", filepath.Join(src, "d", "ln")))
	must(t, unix.Mkfifo(filepath.Join(src, "d", "fifo"), 0o620))
	for _, c := range []struct {
		name     string
		uid, gid int
	}{{"d", 1001, 1002}, {"d/f", 1001, 1002}, {"d/x", 1005, 0}, {"d/fifo", 1001, 1002}, {"d/empty", 1006, 1007}} {
		must(t, os.Chown(filepath.Join(src, c.name), c.uid, c.gid))
	}
	must(t, os.Lchown(filepath.Join(src, "d", "ln"), 1003, 1004))
	must(t, os.Chmod(filepath.Join(src, "d"), 0o2750|os.ModeSetgid))
	past := time.Date(2001, 2, 3, 4, 5, 6, 0, time.UTC)
	for _, n := range []string{"d/f", "d/x", "d/fifo", "d/empty", "d"} {
		must(t, os.Chtimes(filepath.Join(src, n), past, past))
	}
	must(t, unix.Lutimes(filepath.Join(src, "d", "ln"), []unix.Timeval{unix.NsecToTimeval(past.UnixNano()), unix.NsecToTimeval(past.UnixNano())}))
	return src
}

// Restoring and copying files that other users own, as root, keeps their
// owners, modes and times, with each tool's exit status 0; the owners
// survive a remount and show in history.
func TestOwnersArePreserved(t *testing.T) {
	t.Parallel()
	for _, tool := range []string{"tar", "rsync"} {
		if _, err := exec.LookPath(tool); err != nil {
			t.Fatalf("%s is needed (.ci/run installs it): %v", tool, err)
		}
	}
	src := ownedTree(t)
	want := tree(t, src)
	repo := t.TempDir()
	s := mount(t, repo)
	pg := s.page("owners", "p")
	archive := filepath.Join(t.TempDir(), "d.tar")
	run(t, src, "tar", "cf", archive, ".")
	copies := map[string]func(dst string){
		"tar": func(dst string) { run(t, dst, "tar", "xpf", archive) },
		"cp":  func(dst string) { run(t, dst, "cp", "-a", filepath.Join(src, "d"), ".") },
		"rsync": func(dst string) {
			run(t, dst, "rsync", "-a", filepath.Join(src, "d"), ".")
		},
	}
	for name, copy := range copies {
		dst := filepath.Join(pg, name)
		must(t, os.Mkdir(dst, 0o755))
		copy(dst)
		if got := tree(t, dst); got != want {
			t.Errorf("after %s:\n%s\nwant:\n%s", name, got, want)
		}
	}
	syncDir(t, pg)
	s.stop()
	s = mount(t, repo)
	pg = filepath.Join(s.mnt, "owners", "p")
	for name := range copies {
		if got := tree(t, filepath.Join(pg, name)); got != want {
			t.Errorf("%s after remount:\n%s\nwant:\n%s", name, got, want)
		}
	}
	head := filepath.Join(pg, ".ledger", "latest")
	if got := tree(t, filepath.Join(head, "tar")); got != want {
		t.Errorf("tar copy in .ledger/latest:\n%s\nwant:\n%s", got, want)
	}
}

// chown and chgrp follow POSIX: root gives any owner; a user may give a file
// of theirs only to a group they are in, and no file to another user.
func TestChownRules(t *testing.T) {
	t.Parallel()
	s := mount(t, t.TempDir(), "--allow-other")
	pg := s.page("chown", "p")
	reachable(t, pg)
	f := filepath.Join(pg, "f")
	must(t, os.WriteFile(f, []byte("x"), 0o644))
	must(t, os.Chown(f, 1001, 1001))
	must(t, os.Chown(pg, 0, 0))
	st := stat(t, f)
	if st.Uid != 1001 || st.Gid != 1001 {
		t.Fatalf("after chown 1001:1001: %d:%d", st.Uid, st.Gid)
	}
	ctime := st.Ctim
	as := func(uid int, script string) error { return runAs(t, uid, uid, []int{1001, 2000}, pg, script) }
	mustFail := func(err error, want string) {
		t.Helper()
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("got %v, want %q", err, want)
		}
	}
	must(t, as(1001, "chgrp 2000 f"))
	mustFail(as(1001, "chgrp 3000 f"), "Operation not permitted")
	mustFail(as(1001, "chown 1002 f"), "Operation not permitted")
	mustFail(as(1002, "chgrp 1001 f"), "Operation not permitted")
	st = stat(t, f)
	if st.Uid != 1001 || st.Gid != 2000 {
		t.Errorf("after chgrp 2000 by the owner: %d:%d", st.Uid, st.Gid)
	}
	if !timeAfter(st.Ctim, ctime) {
		t.Errorf("ctime %v did not advance with chgrp (was %v)", st.Ctim, ctime)
	}
}

// With --allow-other the kernel checks each access against the owners and
// modes the mount shows: another user gets EACCES and EPERM where POSIX
// says so, and may do what the modes allow.
func TestPermissionsWithAllowOther(t *testing.T) {
	t.Parallel()
	s := mount(t, t.TempDir(), "--allow-other")
	pg := s.page("perm", "p")
	reachable(t, pg)
	must(t, os.Chmod(pg, 0o777)) // a page root keeps no mode: it is 0755
	must(t, os.WriteFile(filepath.Join(pg, "secret"), []byte("s"), 0o600))
	must(t, os.WriteFile(filepath.Join(pg, "public"), []byte("p"), 0o644))
	must(t, os.Mkdir(filepath.Join(pg, "mine"), 0o755))
	must(t, os.Chown(filepath.Join(pg, "mine"), 1001, 1001))
	must(t, os.Mkdir(filepath.Join(pg, "closed"), 0o700))
	as := func(script string) error { return runAs(t, 1001, 1001, nil, pg, script) }
	for _, c := range []struct{ script, want string }{
		{"cat secret", "Permission denied"},
		{"echo x >> public", "Permission denied"},
		{": > public", "Permission denied"},
		{"chmod 666 public", "Operation not permitted"},
		{"chown 1001 public", "Operation not permitted"},
		{"touch -c -d 2000-01-01 public", "Operation not permitted"},
		{"touch -c public", "Permission denied"},
		{"ls closed", "Permission denied"},
		{"touch closed/x", "Permission denied"},
		{"rm public", "Permission denied"}, // the page root is 0755, root's
	} {
		if err := as(c.script); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("as 1001: %s: %v, want %q", c.script, err, c.want)
		}
	}
	must(t, as("cat public && echo mine > mine/f && chmod 600 mine/f && touch -d 2000-01-01 mine/f && cat mine/f"))
	st := stat(t, filepath.Join(pg, "mine", "f"))
	if st.Uid != 1001 || st.Gid != 1001 || st.Mode&0o7777 != 0o600 {
		t.Errorf("a file 1001 made: %d:%d %o", st.Uid, st.Gid, st.Mode&0o7777)
	}
	if b, _ := os.ReadFile(filepath.Join(pg, "secret")); string(b) != "s" {
		t.Errorf("secret changed: %q", b)
	}
	if b, _ := os.ReadFile(filepath.Join(pg, "public")); string(b) != "p" {
		t.Errorf("public changed: %q", b)
	}
}

// Without --allow-other no other user enters the mount, whatever the modes.
func TestOtherUsersNeedAllowOther(t *testing.T) {
	t.Parallel()
	s := mount(t, t.TempDir())
	pg := s.page("perm", "p")
	reachable(t, pg)
	must(t, os.WriteFile(filepath.Join(pg, "public"), []byte("p"), 0o644))
	if err := runAs(t, 1001, 1001, nil, "", "cat "+filepath.Join(pg, "public")); err == nil || !strings.Contains(err.Error(), "Permission denied") {
		t.Errorf("another user in a mount without --allow-other: %v, want Permission denied", err)
	}
}

// --uid and --gid show every file as one owner's, for a single-user mount
// of files other users own; what is stored does not change.
func TestShownOwner(t *testing.T) {
	t.Parallel()
	repo := t.TempDir()
	s := mount(t, repo)
	f := filepath.Join(s.page("show", "p"), "f")
	must(t, os.WriteFile(f, []byte("x"), 0o600))
	must(t, os.Chown(f, 1001, 1002))
	syncDir(t, filepath.Dir(f))
	s.stop()
	s = mount(t, repo, "--uid", "4242", "--gid", "4343")
	f = filepath.Join(s.mnt, "show", "p", "f")
	if st := stat(t, f); st.Uid != 4242 || st.Gid != 4343 {
		t.Errorf("with --uid 4242 --gid 4343: %d:%d", st.Uid, st.Gid)
	}
	if st := stat(t, s.mnt); st.Uid != 4242 || st.Gid != 4343 {
		t.Errorf("the root with --uid 4242 --gid 4343: %d:%d", st.Uid, st.Gid)
	}
	s.stop()
	s = mount(t, repo)
	if st := stat(t, filepath.Join(s.mnt, "show", "p", "f")); st.Uid != 1001 || st.Gid != 1002 {
		t.Errorf("stored owner after a --uid mount: %d:%d, want 1001:1002", st.Uid, st.Gid)
	}
	if err := exec.Command(binary, "mount", "--uid", "-5", repo, filepath.Join(t.TempDir(), "m")).Run(); err == nil {
		t.Error("--uid -5 was accepted")
	}
}

// fifos, sockets and device nodes are entries with their type, mode, owner
// and device number: made, listed, renamed, removed, kept over a remount
// and in history; a fifo carries data between two processes.
func TestSpecialFiles(t *testing.T) {
	t.Parallel()
	repo := t.TempDir()
	s := mount(t, repo)
	pg := s.page("special", "p")
	must(t, unix.Mkfifo(filepath.Join(pg, "fifo"), 0o640))
	must(t, unix.Mknod(filepath.Join(pg, "null"), unix.S_IFCHR|0o604, int(unix.Mkdev(1, 3))))
	must(t, unix.Mknod(filepath.Join(pg, "loop"), unix.S_IFBLK|0o640, int(unix.Mkdev(7, 200))))
	must(t, unix.Mknod(filepath.Join(pg, "plain"), unix.S_IFREG|0o600, 0))
	sock, err := bindUnix(filepath.Join(pg, "sock"))
	must(t, err)
	unix.Close(sock)
	want := map[string]struct {
		typ  uint32
		perm uint32
		rdev uint64
	}{
		"fifo":  {unix.S_IFIFO, 0o640, 0},
		"null":  {unix.S_IFCHR, 0o604, unix.Mkdev(1, 3)},
		"loop":  {unix.S_IFBLK, 0o640, unix.Mkdev(7, 200)},
		"plain": {unix.S_IFREG, 0o600, 0},
		"sock":  {unix.S_IFSOCK, 0, 0},
	}
	check := func(dir, when string) {
		t.Helper()
		es, err := os.ReadDir(dir)
		must(t, err)
		types := map[string]os.FileMode{}
		for _, e := range es {
			types[e.Name()] = e.Type()
		}
		for name, w := range want {
			var st unix.Stat_t
			if err := unix.Lstat(filepath.Join(dir, name), &st); err != nil {
				t.Errorf("%s: %s: %v", when, name, err)
				continue
			}
			if st.Mode&unix.S_IFMT != w.typ || (w.typ != unix.S_IFSOCK && st.Mode&0o7777 != w.perm) || st.Rdev != w.rdev {
				t.Errorf("%s: %s: mode %o rdev %#x, want type %o perm %o rdev %#x", when, name, st.Mode, st.Rdev, w.typ, w.perm, w.rdev)
			}
			if _, ok := types[name]; !ok {
				t.Errorf("%s: %s not listed", when, name)
			}
		}
		if types["fifo"] != os.ModeNamedPipe || types["null"] != os.ModeDevice|os.ModeCharDevice || types["sock"] != os.ModeSocket {
			t.Errorf("%s: listed types %v", when, types)
		}
	}
	check(pg, "made")

	// A fifo in a page carries data between two processes.
	cmd := exec.Command("sh", "-c", "(echo through the fifo > fifo &) ; cat fifo")
	cmd.Dir = pg
	if out, err := cmd.CombinedOutput(); err != nil || string(out) != "through the fifo\n" {
		t.Errorf("through the fifo: %q %v", out, err)
	}

	must(t, os.Rename(filepath.Join(pg, "loop"), filepath.Join(pg, "loop2")))
	must(t, os.Rename(filepath.Join(pg, "loop2"), filepath.Join(pg, "loop")))
	must(t, os.Chmod(filepath.Join(pg, "fifo"), 0o600))
	must(t, os.Chmod(filepath.Join(pg, "fifo"), 0o640))
	must(t, os.Mkdir(filepath.Join(pg, "gone"), 0o755))
	must(t, unix.Mkfifo(filepath.Join(pg, "gone", "f"), 0o600))
	must(t, os.Remove(filepath.Join(pg, "gone", "f")))
	must(t, os.Remove(filepath.Join(pg, "gone")))
	syncDir(t, pg)
	s.stop()
	s = mount(t, repo)
	pg = filepath.Join(s.mnt, "special", "p")
	check(pg, "after remount")
	check(filepath.Join(pg, ".ledger", "latest"), "in .ledger/latest")
}

// bindUnix binds a unix socket at path, as a server program does in its
// working directory.
func bindUnix(path string) (int, error) {
	fd, err := unix.Socket(unix.AF_UNIX, unix.SOCK_STREAM, 0)
	if err != nil {
		return -1, err
	}
	if err := unix.Bind(fd, &unix.SockaddrUnix{Name: path}); err != nil {
		unix.Close(fd)
		return -1, fmt.Errorf("bind %s: %w", path, err)
	}
	return fd, nil
}

// reachable lets other users reach dir's mount: test directories are 0700.
func reachable(t *testing.T, dir string) {
	t.Helper()
	for d := filepath.Dir(dir); d != "/"; d = filepath.Dir(d) {
		fi, err := os.Stat(d)
		if err != nil {
			t.Fatal(err)
		}
		if fi.Mode().Perm()&0o001 == 0 && !strings.HasPrefix(d, filepath.Dir(dir)+"/") {
			must(t, os.Chmod(d, fi.Mode().Perm()|0o011))
		}
	}
}

// runAs runs a shell script in dir (if not empty) as uid and gid with the
// extra groups; its error carries the script's stderr.
func runAs(t *testing.T, uid, gid int, groups []int, dir, script string) error {
	t.Helper()
	if dir != "" {
		script = "cd '" + dir + "' && " + script
	}
	cmd := exec.Command("sh", "-c", script)
	gs := make([]uint32, len(groups))
	for i, g := range groups {
		gs[i] = uint32(g)
	}
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: uint32(uid), Gid: uint32(gid), Groups: gs}}
	var stderr strings.Builder
	cmd.Stderr = &stderr
	cmd.Stdout = io.Discard
	if err := cmd.Run(); err != nil {
		return fmt.Errorf("%w: %s", err, stderr.String())
	}
	return nil
}

func stat(t *testing.T, path string) unix.Stat_t {
	t.Helper()
	var st unix.Stat_t
	if err := unix.Lstat(path, &st); err != nil {
		t.Fatal(err)
	}
	return st
}

func timeAfter(a, b unix.Timespec) bool {
	return a.Sec > b.Sec || a.Sec == b.Sec && a.Nsec > b.Nsec
}

// Writing to, truncating or chowning a set-user-ID file drops the bit (and
// a group-executable file's set-group-ID bit) unless root does it, as on
// Linux: the mount does it itself, the kernel having left it to the
// filesystem so that writes need no request for security.capability.
func TestChangesDropSetID(t *testing.T) {
	t.Parallel()
	s := mount(t, t.TempDir(), "--allow-other")
	pg := s.page("setid", "p")
	reachable(t, pg)
	mode := func(name string) uint32 { return stat(t, filepath.Join(pg, name)).Mode & 0o7777 }
	for _, c := range []struct{ name, script string }{
		{"written", "echo x >> written"},
		{"truncated", "truncate -s 0 truncated"},
		{"rewritten", "echo x > rewritten"},
	} {
		must(t, os.WriteFile(filepath.Join(pg, c.name), []byte("data"), 0o644))
		must(t, unix.Chmod(filepath.Join(pg, c.name), 0o6777))
		if got := mode(c.name); got != 0o6777 {
			t.Fatalf("chmod 6777: mode %o", got)
		}
		if err := runAs(t, 1001, 1001, nil, pg, c.script); err != nil {
			t.Fatalf("as 1001: %s: %v", c.script, err)
		}
		if got := mode(c.name); got != 0o777 {
			t.Errorf("%s by another user: mode %o, want 777", c.script, got)
		}
	}
	// Root keeps them.
	must(t, os.WriteFile(filepath.Join(pg, "root"), []byte("data"), 0o644))
	must(t, unix.Chmod(filepath.Join(pg, "root"), 0o6755))
	f, err := os.OpenFile(filepath.Join(pg, "root"), os.O_WRONLY|os.O_APPEND, 0)
	must(t, err)
	_, err = f.WriteString("more")
	must(t, err)
	must(t, f.Close())
	if got := mode("root"); got != 0o6755 {
		t.Errorf("a write by root: mode %o, want 6755", got)
	}
}
