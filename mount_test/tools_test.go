package mount_test

import (
	"errors"
	"fmt"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

func TestTour(t *testing.T) {
	t.Parallel()
	s := mount(t, t.TempDir())
	pg := s.page("notes", "inbox")
	for _, k := range []string{"b", "a", "B", "a-1", "a.txt"} {
		if err := os.WriteFile(filepath.Join(pg, k), []byte("x"+k), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	names := ls(t, pg)
	want := []string{"B", "a", "a-1", "a.txt", "b"} // byte order
	if !slices.Equal(names, want) {
		t.Fatalf("ls: %q, want %q", names, want)
	}
	if b, err := os.ReadFile(filepath.Join(pg, "a-1")); err != nil || string(b) != "xa-1" {
		t.Fatalf("read: %q %v", b, err)
	}
	// Keys with '/' are directories; empty directories persist.
	must(t, os.MkdirAll(filepath.Join(pg, "d/e/f"), 0o755))
	must(t, os.WriteFile(filepath.Join(pg, "d/e/g"), []byte("g"), 0o600))
	if got := ls(t, filepath.Join(pg, "d/e")); !slices.Equal(got, []string{"f", "g"}) {
		t.Fatalf("ls d/e: %q", got)
	}
	must(t, os.Remove(filepath.Join(pg, "d/e/g")))
	must(t, os.Remove(filepath.Join(pg, "d/e/f")))
	if fi, err := os.Stat(filepath.Join(pg, "d/e")); err != nil || !fi.IsDir() {
		t.Fatalf("directory gone with its last entry: %v", err)
	}
	if err := os.Remove(filepath.Join(pg, "d")); !errors.Is(err, syscall.ENOTEMPTY) {
		t.Fatalf("rmdir non-empty: %v", err)
	}
	// The reserved name cannot be created.
	if err := os.Mkdir(filepath.Join(pg, ".ledger"), 0o755); err == nil {
		t.Fatal("created .ledger")
	}
	// A directory gets no hard link (files do: TestHardLinks).
	if err := os.Link(filepath.Join(pg, "d"), filepath.Join(pg, "hard")); !errors.Is(err, syscall.EPERM) {
		t.Fatalf("link of a directory: %v", err)
	}
	// Symlinks, permission bits and times persist.
	must(t, os.Symlink("a", filepath.Join(pg, "l")))
	must(t, os.Chmod(filepath.Join(pg, "b"), 0o640))
	mt := time.Date(2001, 2, 3, 4, 5, 6, 7000, time.UTC)
	must(t, os.Chtimes(filepath.Join(pg, "B"), mt, mt))
	// Renames: within a page, over an existing file, and across pages.
	must(t, os.Rename(filepath.Join(pg, "a.txt"), filepath.Join(pg, "b")))
	other := s.page("notes", "other")
	if err := os.Rename(filepath.Join(pg, "a"), filepath.Join(other, "a")); !errors.Is(err, syscall.EXDEV) {
		t.Fatalf("rename across pages: %v", err)
	}
	run(t, pg, "mv", "a", filepath.Join(other, "moved"))
	must(t, os.Rename(filepath.Join(pg, "d"), filepath.Join(pg, "d2")))

	check := func() {
		t.Helper()
		if got, _ := os.Readlink(filepath.Join(pg, "l")); got != "a" {
			t.Fatalf("readlink: %q", got)
		}
		fi, err := os.Stat(filepath.Join(pg, "b"))
		if err != nil || fi.Mode().Perm() != 0o644 { // a.txt's mode came with it
			t.Fatalf("b after rename: %v %v", fi.Mode(), err)
		}
		if b, _ := os.ReadFile(filepath.Join(pg, "b")); string(b) != "xa.txt" {
			t.Fatalf("b content %q", b)
		}
		fi, err = os.Stat(filepath.Join(pg, "B"))
		if err != nil || !fi.ModTime().Equal(mt) {
			t.Fatalf("mtime %v, want %v (%v)", fi.ModTime(), mt, err)
		}
		if b, _ := os.ReadFile(filepath.Join(other, "moved")); string(b) != "xa" {
			t.Fatalf("moved content %q", b)
		}
		if _, err := os.Stat(filepath.Join(pg, "a")); !os.IsNotExist(err) {
			t.Fatalf("a still there: %v", err)
		}
		if fi, err := os.Stat(filepath.Join(pg, "d2/e")); err != nil || !fi.IsDir() {
			t.Fatalf("renamed directory: %v", err)
		}
	}
	check()
	var st syscall.Stat_t
	must(t, syscall.Stat(filepath.Join(pg, "B"), &st))
	ino := st.Ino
	s.stop()
	s = mountAt(t, s.repo, s.mnt)
	check()
	must(t, syscall.Stat(filepath.Join(pg, "B"), &st))
	if st.Ino != ino {
		t.Fatalf("inode number changed across remount: %d -> %d", ino, st.Ino)
	}
	// rmdir of a non-empty page fails; of an empty one works.
	if err := os.Remove(pg); !errors.Is(err, syscall.ENOTEMPTY) {
		t.Fatalf("rmdir page: %v", err)
	}
	must(t, os.Remove(filepath.Join(other, "moved")))
	must(t, os.Remove(other))
}

// cp -a of a tree of Go sources: src/net by default (about 700 files, 60
// directories, symlinks among its testdata), all of GOROOT/src (17,000
// files) with -long.
func TestCopyGoSourceTree(t *testing.T) {
	t.Parallel()
	src := filepath.Join(runtime.GOROOT(), "src", "net")
	if *long {
		src = filepath.Join(runtime.GOROOT(), "src")
	}
	s := mountPlain(t, t.TempDir())
	pg := s.page("go", "src")
	start := time.Now()
	run(t, "/", "cp", "-a", src, pg+"/")
	t.Logf("cp -a %s: %v", src, time.Since(start))
	run(t, "/", "diff", "-r", "--no-dereference", src, filepath.Join(pg, filepath.Base(src)))
	s.stop()
	s = mountWith(t, plainBinary, s.repo, s.mnt)
	run(t, "/", "diff", "-r", "--no-dereference", src, filepath.Join(pg, filepath.Base(src)))
	s.stop()
	verifySchema(t, s.repo)
}

func TestTarRoundTrip(t *testing.T) {
	t.Parallel()
	src := filepath.Join(runtime.GOROOT(), "src", "encoding")
	s := mountPlain(t, t.TempDir())
	pg := s.page("t", "p")
	tarball := filepath.Join(t.TempDir(), "a.tar")
	run(t, src, "tar", "cf", tarball, ".")
	run(t, pg, "tar", "xf", tarball)
	// Archived straight after, while the extraction's last changes are still
	// queued: tar fails if the page's time moves as they land.
	out := filepath.Join(t.TempDir(), "b.tar")
	run(t, pg, "tar", "cf", out, ".")
	run(t, "/", "diff", "-r", src, pg)
	back := filepath.Join(t.TempDir(), "back")
	must(t, os.Mkdir(back, 0o755))
	run(t, back, "tar", "xf", out)
	run(t, "/", "diff", "-r", src, back)
	// The page root is the page, not a key: its mtime is its last commit's,
	// so the "./" line is left out.
	a, b := run(t, "/", "tar", "tvf", tarball), run(t, "/", "tar", "tvf", out)
	if sortLines(a) != sortLines(b) {
		t.Fatalf("tar listings differ:\n%s\n---\n%s", a, b)
	}
}

func TestGit(t *testing.T) {
	t.Parallel()
	if _, err := exec.LookPath("git"); err != nil {
		t.Fatal("git is needed:", err)
	}
	s := mountPlain(t, t.TempDir())
	pg := s.page("code", "repo")
	env := []string{"GIT_AUTHOR_NAME=t", "GIT_AUTHOR_EMAIL=t@e", "GIT_COMMITTER_NAME=t", "GIT_COMMITTER_EMAIL=t@e"}
	git := func(args ...string) string {
		t.Helper()
		cmd := exec.Command("git", args...)
		cmd.Dir = pg
		cmd.Env = append(os.Environ(), env...)
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("git %s: %v\n%s", strings.Join(args, " "), err, out)
		}
		return string(out)
	}
	git("init", "-q", "-b", "main")
	run(t, pg, "cp", "-r", filepath.Join(runtime.GOROOT(), "src", "sort"), ".")
	git("add", ".")
	git("commit", "-q", "-m", "first")
	must(t, os.WriteFile(filepath.Join(pg, "sort", "sort.go"), []byte("package sort\n"), 0o644))
	git("commit", "-q", "-am", "second")
	git("fsck", "--strict")
	if log := git("log", "--oneline"); strings.Count(log, "\n") != 2 {
		t.Fatalf("git log: %s", log)
	}
	git("gc", "-q")
	git("fsck", "--strict")
}

// cp -a, tar x and rsync set a symlink's owner and times (lchown,
// lutimes); both failed with EINVAL, so cp -a and tar x of any tree with a
// symlink exited with an error.
func TestSymlinksKeepTheirTimes(t *testing.T) {
	t.Parallel()
	src := t.TempDir()
	must(t, os.MkdirAll(filepath.Join(src, "sub"), 0o755))
	must(t, os.WriteFile(filepath.Join(src, "f"), []byte("f"), 0o644))
	links := map[string]string{"link": "f", "sub/up": "../f", "dangling": "nowhere", "dirlink": "sub"}
	for i, name := range slices.Sorted(maps.Keys(links)) {
		p := filepath.Join(src, name)
		must(t, os.Symlink(links[name], p))
		when := time.Date(2001, 2, 3, 4, 5, 6+i, 0, time.UTC) // whole seconds: what tar keeps
		ts := []unix.Timespec{unix.NsecToTimespec(when.UnixNano()), unix.NsecToTimespec(when.UnixNano())}
		must(t, unix.UtimesNanoAt(unix.AT_FDCWD, p, ts, unix.AT_SYMLINK_NOFOLLOW))
	}
	s := mount(t, t.TempDir())
	pg := s.page("t", "p")
	run(t, "/", "cp", "-a", src, filepath.Join(pg, "cp"))
	tarball := filepath.Join(t.TempDir(), "a.tar")
	run(t, src, "tar", "cf", tarball, ".")
	must(t, os.Mkdir(filepath.Join(pg, "tar"), 0o755))
	run(t, filepath.Join(pg, "tar"), "tar", "xf", tarball)
	check := func(when string) {
		t.Helper()
		for _, copy := range []string{"cp", "tar"} {
			for name, target := range links {
				p := filepath.Join(s.mnt, "t", "p", copy, name)
				got, err := os.Readlink(p)
				if err != nil || got != target {
					t.Errorf("%s: %s/%s -> %q (%v), want %q", when, copy, name, got, err, target)
				}
				var a, b unix.Stat_t
				must(t, unix.Lstat(filepath.Join(src, name), &a))
				must(t, unix.Lstat(p, &b))
				if a.Mtim != b.Mtim {
					t.Errorf("%s: %s/%s mtime %v, want %v", when, copy, name, b.Mtim, a.Mtim)
				}
			}
		}
	}
	check("mounted")
	s.stop()
	s = mount(t, s.repo)
	check("remounted")
}

// A page moved to another ledger with mv keeps every commit of its history
// and its files, across a remount; a page cannot move into a page.
func TestPageMovesBetweenLedgers(t *testing.T) {
	t.Parallel()
	repo := t.TempDir()
	s := mount(t, repo)
	pg := s.page("l1", "p")
	for i := range 6 {
		must(t, os.WriteFile(filepath.Join(pg, "f"), []byte(fmt.Sprint("version ", i)), 0o644))
		syncDir(t, pg)
	}
	must(t, os.Mkdir(filepath.Join(s.mnt, "l2"), 0o755))
	before := commitCount(t, filepath.Join(pg, ".ledger"))
	if before < 7 {
		t.Fatalf("the page lists %d commits, want 7 or more", before)
	}
	moved := filepath.Join(s.mnt, "l2", "p")
	run(t, s.mnt, "mv", pg, moved)
	check := func(when string) {
		t.Helper()
		if n := commitCount(t, filepath.Join(moved, ".ledger")); n != before {
			t.Errorf("%s: the moved page lists %d commits, want %d", when, n, before)
		}
		if b, err := os.ReadFile(filepath.Join(moved, "f")); err != nil || string(b) != "version 5" {
			t.Errorf("%s: f reads %q %v", when, b, err)
		}
		if vs := ls(t, filepath.Join(moved, ".ledger", "versions", "f")); len(vs) != 6 {
			t.Errorf("%s: versions of f %v, want 6", when, vs)
		}
		if _, err := os.Stat(pg); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("%s: the old name: %v, want ENOENT", when, err)
		}
	}
	check("after mv")
	must(t, os.WriteFile(filepath.Join(moved, "g"), []byte("after the move"), 0o644))
	syncDir(t, moved)
	before++
	s.stop()
	s = mountAt(t, repo, s.mnt)
	check("after a remount")
	if err := os.Rename(moved, filepath.Join(s.page("l2", "other"), "p")); !errors.Is(err, syscall.EXDEV) {
		t.Fatalf("a page moved into a page: %v, want EXDEV", err)
	}
}

// A page renamed over a page that never held anything replaces it, as
// Linux replaces an empty directory; over a page with history, ENOTEMPTY;
// with RENAME_NOREPLACE, EEXIST.
func TestPageRenamedOverAnEmptyPage(t *testing.T) {
	t.Parallel()
	s := mount(t, t.TempDir())
	a := s.page("l", "a")
	must(t, os.WriteFile(filepath.Join(a, "f"), []byte("a's"), 0o644))
	bare := s.page("l", "bare")
	if err := unix.Renameat2(unix.AT_FDCWD, a, unix.AT_FDCWD, bare, unix.RENAME_NOREPLACE); !errors.Is(err, syscall.EEXIST) {
		t.Fatalf("rename with RENAME_NOREPLACE onto a bare page: %v, want EEXIST", err)
	}
	// rename(2) itself: Go's os.Rename refuses a directory as the target.
	must(t, unix.Rename(a, bare))
	if b, err := os.ReadFile(filepath.Join(bare, "f")); err != nil || string(b) != "a's" {
		t.Fatalf("the page renamed over a bare one: f reads %q %v", b, err)
	}
	if _, err := os.Stat(a); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("the old name: %v, want ENOENT", err)
	}
	emptied := s.page("l", "emptied")
	must(t, os.WriteFile(filepath.Join(emptied, "g"), nil, 0o644))
	syncDir(t, emptied) // a commit of its own, or the delete cancels it
	must(t, os.Remove(filepath.Join(emptied, "g")))
	syncDir(t, emptied)
	if err := unix.Rename(bare, emptied); !errors.Is(err, syscall.ENOTEMPTY) {
		t.Fatalf("rename over a page with history: %v, want ENOTEMPTY", err)
	}
}
