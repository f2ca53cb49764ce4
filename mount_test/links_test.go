package mount_test

import (
	"crypto/sha256"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"

	"golang.org/x/sys/unix"
)

// linkOf returns a file's inode number and link count.
func linkOf(t *testing.T, name string) (ino uint64, nlink uint64) {
	t.Helper()
	var st unix.Stat_t
	if err := unix.Lstat(name, &st); err != nil {
		t.Fatalf("lstat %s: %v", name, err)
	}
	return st.Ino, uint64(st.Nlink)
}

// wantLinks checks that every name is one file with len(names) names.
func wantLinks(t *testing.T, names ...string) {
	t.Helper()
	ino0, _ := linkOf(t, names[0])
	for _, n := range names {
		ino, nlink := linkOf(t, n)
		if ino != ino0 || nlink != uint64(len(names)) {
			t.Errorf("%s: inode %d with %d links, want inode %d with %d", n, ino, nlink, ino0, len(names))
		}
	}
}

func readString(t *testing.T, name string) string {
	t.Helper()
	b, err := os.ReadFile(name)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

func TestHardLinks(t *testing.T) {
	t.Parallel()
	s := mount(t, t.TempDir())
	pg := s.page("l", "p")
	at := func(p string) string { return filepath.Join(pg, p) }
	must(t, os.WriteFile(at("a"), []byte("one"), 0o644))
	must(t, os.Mkdir(at("d"), 0o755))
	must(t, os.Link(at("a"), at("b")))
	must(t, os.Link(at("b"), at("d/c")))
	wantLinks(t, at("a"), at("b"), at("d/c"))
	if got := ls(t, pg); !slices.Equal(got, []string{"a", "b", "d"}) {
		t.Fatalf("the page lists %v, want its names only", got)
	}

	// One file: content, mode and attributes through any name.
	must(t, os.WriteFile(at("b"), []byte("two"), 0o644))
	must(t, os.Chmod(at("d/c"), 0o600))
	must(t, unix.Setxattr(at("a"), "user.k", []byte("v"), 0))
	for _, n := range []string{"a", "b", "d/c"} {
		fi, err := os.Stat(at(n))
		must(t, err)
		if got := readString(t, at(n)); got != "two" || fi.Mode().Perm() != 0o600 {
			t.Errorf("%s: %q mode %v, want \"two\" mode 0600", n, got, fi.Mode().Perm())
		}
		v := make([]byte, 8)
		if k, err := unix.Getxattr(at(n), "user.k", v); err != nil || string(v[:max(k, 0)]) != "v" {
			t.Errorf("%s: user.k %q %v, want v", n, v[:max(k, 0)], err)
		}
	}

	// A file open for writing gets a name; what it writes after shows there.
	w, err := os.OpenFile(at("a"), os.O_WRONLY|os.O_APPEND, 0)
	must(t, err)
	_, err = w.WriteString("+before")
	must(t, err)
	must(t, os.Link(at("a"), at("z")))
	_, err = w.WriteString("+after")
	must(t, err)
	must(t, w.Close())
	syncDir(t, pg)
	if got := readString(t, at("z")); got != "two+before+after" {
		t.Errorf("a name made while the file was open for writing reads %q", got)
	}
	wantLinks(t, at("a"), at("b"), at("d/c"), at("z"))

	// Any name goes; the others stay.
	must(t, os.Remove(at("a")))
	must(t, os.Remove(at("z")))
	wantLinks(t, at("b"), at("d/c"))
	must(t, os.Rename(at("b"), at("d/e")))
	wantLinks(t, at("d/c"), at("d/e"))
	// A rename between two names of one file does nothing (POSIX).
	must(t, os.Rename(at("d/c"), at("d/e")))
	wantLinks(t, at("d/c"), at("d/e"))
	// A rename over one name leaves the file its other.
	must(t, os.WriteFile(at("x"), []byte("x"), 0o644))
	must(t, os.Rename(at("x"), at("d/e")))
	if got := readString(t, at("d/e")); got != "x" {
		t.Errorf("the name a rename replaced reads %q", got)
	}
	if _, nlink := linkOf(t, at("d/c")); nlink != 1 || readString(t, at("d/c")) != "two+before+after" {
		t.Errorf("the file's other name: %d links, %q", nlink, readString(t, at("d/c")))
	}

	// The last name gone, a descriptor still reads the file.
	must(t, os.Link(at("d/c"), at("last")))
	r, err := os.Open(at("last"))
	must(t, err)
	must(t, os.Remove(at("d/c")))
	must(t, os.Remove(at("last")))
	b := make([]byte, 64)
	n, err := r.ReadAt(b, 0)
	if string(b[:n]) != "two+before+after" {
		t.Errorf("an open descriptor of a file with no names left reads %q (%v)", b[:n], err)
	}
	r.Close()

	// Links to every type of file, none to a directory, none across pages.
	must(t, os.Symlink("target", at("sym")))
	must(t, os.Link(at("sym"), at("sym2")))
	must(t, unix.Mkfifo(at("fifo"), 0o644))
	must(t, os.Link(at("fifo"), at("fifo2")))
	wantLinks(t, at("sym"), at("sym2"))
	wantLinks(t, at("fifo"), at("fifo2"))
	if got, err := os.Readlink(at("sym2")); err != nil || got != "target" {
		t.Errorf("readlink of a link of a symlink: %q %v", got, err)
	}
	if fi, err := os.Lstat(at("fifo2")); err != nil || fi.Mode()&os.ModeNamedPipe == 0 {
		t.Errorf("a link of a fifo: %v %v", fi, err)
	}
	for _, c := range []struct {
		from, to string
		want     syscall.Errno
	}{
		{at("d"), at("d2"), syscall.EPERM},
		{at("sym"), at("fifo"), syscall.EEXIST},
		{at("sym"), filepath.Join(s.page("l", "q"), "sym"), syscall.EXDEV},
		{at("missing"), at("m2"), syscall.ENOENT},
	} {
		if err := os.Link(c.from, c.to); !errors.Is(err, c.want) {
			t.Errorf("link %s %s: %v, want %v", c.from, c.to, err, c.want)
		}
	}

	// In a transaction: links made there show in the page at its commit.
	tx := filepath.Join(pg, ".ledger", "transactions", "tx")
	must(t, os.Mkdir(tx, 0o755))
	must(t, os.WriteFile(filepath.Join(tx, "t1"), []byte("in tx"), 0o644))
	must(t, os.Link(filepath.Join(tx, "t1"), filepath.Join(tx, "t2")))
	must(t, os.Link(filepath.Join(tx, "fifo"), filepath.Join(tx, "fifo3")))
	wantLinks(t, filepath.Join(tx, "t1"), filepath.Join(tx, "t2"))
	if _, err := os.Lstat(at("t2")); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("a link made in an open transaction shows in the page: %v", err)
	}
	must(t, os.Rename(tx, filepath.Join(pg, ".ledger", "commit", "tx")))
	wantLinks(t, at("t1"), at("t2"))
	wantLinks(t, at("fifo"), at("fifo2"), at("fifo3"))
	must(t, os.WriteFile(at("t2"), []byte("after"), 0o644))
	if got := readString(t, at("t1")); got != "after" {
		t.Errorf("after the transaction, a write through one name: the other reads %q", got)
	}

	// Kept across a remount, and in the history.
	stopAndCheck(t, s, pg)
	s = mount(t, s.repo)
	pg = filepath.Join(s.mnt, "l", "p")
	wantLinks(t, at("sym"), at("sym2"))
	wantLinks(t, at("fifo"), at("fifo2"), at("fifo3"))
	latest := filepath.Join(pg, ".ledger", "latest")
	wantLinks(t, filepath.Join(latest, "sym"), filepath.Join(latest, "sym2"))
	if got := readString(t, filepath.Join(pg, "d", "e")); got != "x" {
		t.Errorf("after the remount d/e reads %q", got)
	}
	// A name's versions are its file's while it named it.
	vs := ls(t, filepath.Join(pg, ".ledger", "versions", "t1"))
	if len(vs) < 2 || readString(t, filepath.Join(pg, ".ledger", "versions", "t1", vs[len(vs)-1])) != "after" {
		t.Errorf("versions of t1: %v, the newest not the write through t2", vs)
	}
}

// TestDirectoryLinkCount checks that a directory counts its subdirectories'
// "..": 2 plus one each, as ext4 shows.
func TestDirectoryLinkCount(t *testing.T) {
	t.Parallel()
	s := mount(t, t.TempDir())
	pg := s.page("l", "p")
	d := filepath.Join(pg, "d")
	must(t, os.Mkdir(d, 0o755))
	want := func(n uint64) {
		t.Helper()
		if _, got := linkOf(t, d); got != n {
			t.Fatalf("d has %d links, want %d", got, n)
		}
	}
	want(2)
	must(t, os.WriteFile(filepath.Join(d, "f"), nil, 0o644))
	want(2)
	for _, sub := range []string{"s1", "s2", "s3"} {
		must(t, os.Mkdir(filepath.Join(d, sub), 0o755))
	}
	want(5)
	must(t, os.Remove(filepath.Join(d, "s1")))
	want(4)
	must(t, os.Rename(filepath.Join(d, "s2"), filepath.Join(pg, "s2")))
	want(3)
	must(t, os.MkdirAll(filepath.Join(d, "s3", "deep", "er"), 0o755))
	want(3)
	syncDir(t, pg)
	want(3)
	// A directory just made counts none, then those made in it: the
	// counts a mkdir keeps (the parent's, the new directory's) are read
	// back, listed or not.
	s4 := filepath.Join(d, "s4")
	must(t, os.Mkdir(s4, 0o755))
	for i, sub := range []string{"a", "b"} {
		if _, got := linkOf(t, s4); got != uint64(2+i) {
			t.Fatalf("s4 has %d links with %d subdirectories", got, i)
		}
		if _, err := os.ReadDir(d); err != nil {
			t.Fatal(err)
		}
		must(t, os.Mkdir(filepath.Join(s4, sub), 0o755))
	}
	if _, got := linkOf(t, s4); got != 4 {
		t.Fatalf("s4 has %d links with 2 subdirectories, want 4", got)
	}
	want(4)
}

// linkTree describes a tree's files: each one's content digest and the
// first name (in path order) of the file it is a link of.
func linkTree(t *testing.T, root string) string {
	t.Helper()
	first := map[uint64]string{}
	var lines []string
	err := filepath.Walk(root, func(path string, fi os.FileInfo, err error) error {
		if err != nil || fi.IsDir() {
			return err
		}
		rel, _ := filepath.Rel(root, path)
		st := fi.Sys().(*syscall.Stat_t)
		if _, ok := first[st.Ino]; !ok {
			first[st.Ino] = rel
		}
		b, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		lines = append(lines, fmt.Sprintf("%s %x links=%d same-as=%s", rel, sha256.Sum256(b), st.Nlink, first[st.Ino]))
		return nil
	})
	must(t, err)
	return strings.Join(lines, "\n")
}

// TestHardLinksWithTools round-trips a tree with hard links through a page
// with tar, cp -al and rsync -aH.
func TestHardLinksWithTools(t *testing.T) {
	t.Parallel()
	src := filepath.Join(t.TempDir(), "src")
	must(t, os.MkdirAll(filepath.Join(src, "sub", "deeper"), 0o755))
	must(t, os.WriteFile(filepath.Join(src, "f1"), content(1, 100_000), 0o644))
	must(t, os.Link(filepath.Join(src, "f1"), filepath.Join(src, "f2")))
	must(t, os.Link(filepath.Join(src, "f1"), filepath.Join(src, "sub", "deeper", "f3")))
	must(t, os.WriteFile(filepath.Join(src, "g"), []byte("alone"), 0o644))
	must(t, os.WriteFile(filepath.Join(src, "sub", "h"), []byte("pair"), 0o600))
	must(t, os.Link(filepath.Join(src, "sub", "h"), filepath.Join(src, "h2")))
	want := linkTree(t, src)
	if !strings.Contains(want, "links=3") {
		t.Fatalf("the source tree has no links:\n%s", want)
	}
	s := mount(t, t.TempDir())
	pg := s.page("l", "p")
	out := t.TempDir()
	sh := func(script string, args ...string) {
		t.Helper()
		if b, err := exec.Command("sh", append([]string{"-c", script, "sh"}, args...)...).CombinedOutput(); err != nil {
			t.Fatalf("%s: %v\n%s", script, err, b)
		}
	}
	check := func(what, dir string) {
		t.Helper()
		if got := linkTree(t, dir); got != want {
			t.Errorf("%s:\n%s\nwant\n%s", what, got, want)
		}
	}
	sh(`mkdir "$2" && tar -C "$1" -cf - . | tar -C "$2" -xf -`, src, filepath.Join(pg, "tar"))
	check("tar x into the page", filepath.Join(pg, "tar"))
	sh(`mkdir "$2" && tar -C "$1" -cf - . | tar -C "$2" -xf -`, filepath.Join(pg, "tar"), filepath.Join(out, "tar"))
	check("tar out of the page", filepath.Join(out, "tar"))

	sh(`rsync -aH "$1/" "$2"`, src, filepath.Join(pg, "rsync"))
	check("rsync -aH into the page", filepath.Join(pg, "rsync"))
	sh(`rsync -aH "$1/" "$2"`, filepath.Join(pg, "rsync"), filepath.Join(out, "rsync"))
	check("rsync -aH out of the page", filepath.Join(out, "rsync"))

	// cp -al links every file of the copy to the original's.
	sh(`cp -al "$1" "$2"`, filepath.Join(pg, "tar"), filepath.Join(pg, "backup"))
	err := filepath.Walk(filepath.Join(pg, "backup"), func(path string, fi os.FileInfo, err error) error {
		if err != nil || fi.IsDir() {
			return err
		}
		rel, _ := filepath.Rel(filepath.Join(pg, "backup"), path)
		orig := filepath.Join(pg, "tar", rel)
		oi, _ := linkOf(t, orig)
		ino, nlink := linkOf(t, path)
		_, before := linkOf(t, filepath.Join(src, rel))
		if ino != oi || nlink != 2*before {
			t.Errorf("cp -al: %s is inode %d with %d links, want %s's inode %d with %d", rel, ino, nlink, orig, oi, 2*before)
		}
		return nil
	})
	must(t, err)
	// Changing the copy's file changes the original's: they are one.
	must(t, os.WriteFile(filepath.Join(pg, "backup", "g"), []byte("changed"), 0o644))
	if got := readString(t, filepath.Join(pg, "tar", "g")); got != "changed" {
		t.Errorf("after a write through cp -al's link, the original reads %q", got)
	}
	stopAndCheck(t, s, pg)
}

// stopAndCheck waits for the page's changes to land, unmounts, and checks
// every row of the repository and, with fsck, every head's links.
func stopAndCheck(t *testing.T, s *server, pg string) {
	t.Helper()
	syncDir(t, pg)
	s.stop()
	verifySchema(t, s.repo)
	if out, code := fsck(t, s.repo); code != 0 {
		t.Fatalf("fsck (exit %d):\n%s", code, out)
	}
}
