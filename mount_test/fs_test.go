package mount_test

import (
	"bytes"
	"crypto/sha256"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"maps"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/moby/sys/mountinfo"
	"golang.org/x/sys/unix"
)

func TestTour(t *testing.T) {
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
	// Refused file types.
	if err := os.Link(filepath.Join(pg, "a"), filepath.Join(pg, "hard")); !errors.Is(err, syscall.EPERM) {
		t.Fatalf("link: %v", err)
	}
	if err := syscall.Mkfifo(filepath.Join(pg, "fifo"), 0o644); !errors.Is(err, syscall.EPERM) {
		t.Fatalf("mkfifo: %v", err)
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

func ls(t testing.TB, dir string) []string {
	t.Helper()
	es, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, e := range es {
		out = append(out, e.Name())
	}
	slices.Sort(out) // ReadDir sorts by name already; keep the test honest
	return out
}

func must(t testing.TB, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

func TestCopyGoSourceTree(t *testing.T) {
	src := filepath.Join(runtime.GOROOT(), "src")
	if testing.Short() {
		src = filepath.Join(runtime.GOROOT(), "src", "net")
	}
	s := mount(t, t.TempDir())
	pg := s.page("go", "src")
	start := time.Now()
	run(t, "/", "cp", "-a", src, pg+"/")
	t.Logf("cp -a %s: %v", src, time.Since(start))
	run(t, "/", "diff", "-r", "--no-dereference", src, filepath.Join(pg, filepath.Base(src)))
	s.stop()
	s = mountAt(t, s.repo, s.mnt)
	run(t, "/", "diff", "-r", "--no-dereference", src, filepath.Join(pg, filepath.Base(src)))
	s.stop()
	verifySchema(t, s.repo)
}

func TestTarRoundTrip(t *testing.T) {
	src := filepath.Join(runtime.GOROOT(), "src", "encoding")
	s := mount(t, t.TempDir())
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

// The page root shows its latest change's time from the moment the change
// is queued, the time its commit takes: a batch landing later must not move
// it, or tar run just after writing a page fails with "file changed as we
// read it".
func TestPageTimeStaysWhenBatchLands(t *testing.T) {
	s := mount(t, t.TempDir())
	pg := s.page("t", "p")
	times := func() (mtime, ctime int64) {
		t.Helper()
		var st syscall.Stat_t
		must(t, syscall.Stat(pg, &st))
		return st.Mtim.Nano(), st.Ctim.Nano()
	}
	must(t, os.WriteFile(filepath.Join(pg, "first"), nil, 0o644))
	syncDir(t, pg) // its batch lands
	start, _ := times()
	var last int64
	for i := range 20 {
		must(t, os.WriteFile(filepath.Join(pg, fmt.Sprint("f", i)), []byte("x"), 0o644))
		m, c := times()
		if m != c || m < last {
			t.Fatalf("after file %d: mtime %d ctime %d, earlier %d", i, m, c, last)
		}
		last = m
	}
	if last <= start {
		t.Fatalf("page time %d did not move on from %d", last, start)
	}
	// The batch must land when it is due, not hurried by a barrier, and
	// the kernel's attribute cache expire: both are times, so a sleep
	// past them.
	time.Sleep(1500 * time.Millisecond)
	if m, c := times(); m != last || c != last {
		t.Fatalf("page time moved from %d to mtime %d ctime %d when its batch landed", last, m, c)
	}
}

func sortLines(s string) string {
	var l []string
	for _, line := range strings.Split(strings.TrimSpace(s), "\n") {
		if !strings.HasSuffix(line, " ./") {
			l = append(l, line)
		}
	}
	slices.Sort(l)
	return strings.Join(l, "\n")
}

func TestGit(t *testing.T) {
	if _, err := exec.LookPath("git"); err != nil {
		t.Fatal("git is needed:", err)
	}
	s := mount(t, t.TempDir())
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

// The editors' save pattern: write a temporary file, fsync it, rename it
// over the original. Readers see the old or the new file, never a mix.
func TestEditorSave(t *testing.T) {
	s := mount(t, t.TempDir())
	pg := s.page("e", "p")
	path := filepath.Join(pg, "doc.txt")
	must(t, os.WriteFile(path, bytes.Repeat([]byte("old "), 10000), 0o644))
	stop := make(chan struct{})
	var bad error
	var wg sync.WaitGroup
	wg.Go(func() {
		for {
			select {
			case <-stop:
				return
			default:
			}
			b, err := os.ReadFile(path)
			if err == nil && !bytes.Equal(b, bytes.Repeat([]byte("old "), 10000)) && !bytes.HasPrefix(b, []byte("new ")) {
				bad = fmt.Errorf("reader saw %d bytes starting %q", len(b), b[:min(len(b), 8)])
			}
		}
	})
	for i := range 20 {
		tmp := filepath.Join(pg, ".doc.txt.swp")
		f, err := os.Create(tmp)
		must(t, err)
		fmt.Fprintf(f, "new %d ", i)
		f.Write(bytes.Repeat([]byte("x"), 50000))
		must(t, f.Sync())
		must(t, f.Close())
		must(t, os.Rename(tmp, path))
	}
	close(stop)
	wg.Wait()
	if bad != nil {
		t.Fatal(bad)
	}
	b, _ := os.ReadFile(path)
	if !bytes.HasPrefix(b, []byte("new 19 ")) || len(b) != len("new 19 ")+50000 {
		t.Fatalf("final content %q...", b[:min(len(b), 10)])
	}
	if got := ls(t, pg); !slices.Equal(got, []string{"doc.txt"}) {
		t.Fatalf("ls: %q", got)
	}
}

// A file unlinked or replaced by a rename while open stays what it was
// for its descriptors, as POSIX has it: fstat shows its size with no link,
// read returns its content, and a new file at its name is another inode.
func TestOpenFileOutlivesItsName(t *testing.T) {
	// No attribute cache: every fstat asks the mount.
	s := mount(t, t.TempDir(), "--cache-timeout", "0")
	pg := s.page("o", "p")
	path := filepath.Join(pg, "doc")
	check := func(what string, f *os.File, want []byte, other string) {
		t.Helper()
		var st, ost syscall.Stat_t
		if err := syscall.Fstat(int(f.Fd()), &st); err != nil {
			t.Fatalf("%s: fstat: %v", what, err)
		}
		if st.Size != int64(len(want)) || st.Nlink != 0 {
			t.Fatalf("%s: fstat size %d nlink %d, want %d and 0", what, st.Size, st.Nlink, len(want))
		}
		got, err := io.ReadAll(io.NewSectionReader(f, 0, 1<<20))
		if err != nil || !bytes.Equal(got, want) {
			t.Fatalf("%s: read %d bytes (%v), want the %d it had", what, len(got), err, len(want))
		}
		must(t, syscall.Stat(other, &ost))
		if ost.Ino == st.Ino || ost.Nlink != 1 {
			t.Fatalf("%s: the file now at the name has inode %d nlink %d; the open one %d", what, ost.Ino, ost.Nlink, st.Ino)
		}
	}

	old := bytes.Repeat([]byte("old "), 10000)
	must(t, os.WriteFile(path, old, 0o644))
	f, err := os.Open(path)
	must(t, err)
	defer f.Close()
	tmp := filepath.Join(pg, ".doc.swp")
	must(t, os.WriteFile(tmp, bytes.Repeat([]byte("new "), 12000), 0o644))
	must(t, os.Rename(tmp, path))
	check("replaced by rename", f, old, path)

	must(t, os.WriteFile(path, []byte("second"), 0o644))
	g, err := os.Open(path)
	must(t, err)
	defer g.Close()
	must(t, os.Remove(path))
	must(t, os.WriteFile(path, []byte("third"), 0o644))
	check("unlinked, name reused", g, []byte("second"), path)
	if b, err := os.ReadFile(path); err != nil || string(b) != "third" {
		t.Fatalf("new file: %q %v", b, err)
	}

	// Written after the unlink through one descriptor, then read through
	// another once the writer has closed: the writes are the file now.
	r, err := os.Open(path)
	must(t, err)
	defer r.Close()
	w, err := os.OpenFile(path, os.O_RDWR, 0)
	must(t, err)
	must(t, os.Remove(path))
	want := []byte("third")
	_, err = w.WriteAt([]byte("XY"), 1)
	must(t, err)
	copy(want[1:], "XY")
	must(t, w.Truncate(1))
	must(t, w.Truncate(100))
	want = append(want[:1], make([]byte, 99)...)
	must(t, w.Close())
	// The kernel releases a closed file after close returns.
	time.Sleep(300 * time.Millisecond)
	must(t, os.WriteFile(path, []byte("fourth"), 0o644))
	// Reads go to the mount, not to pages the writes left in the cache.
	must(t, unix.Fadvise(int(r.Fd()), 0, 0, unix.FADV_DONTNEED))
	check("unlinked, written, writer closed", r, want, path)
}

// A directory removed while open, by rmdir or by a rename over it, stays
// with no link for the descriptors on it (a shell's working directory), and
// a new directory at its name is another inode: the same steps in a page
// and in a native directory must see the same.
func TestRemovedDirectoryStaysOpen(t *testing.T) {
	s := mount(t, t.TempDir(), "--cache-timeout", "0")
	steps := func(base string) string {
		var out []string
		for _, how := range []string{"rmdir", "rename over"} {
			dir := filepath.Join(base, "x")
			must(t, os.Mkdir(dir, 0o750))
			d, err := os.Open(dir)
			must(t, err)
			defer d.Close()
			if how == "rmdir" {
				must(t, os.Remove(dir))
				must(t, os.Mkdir(dir, 0o755))
			} else {
				must(t, os.Mkdir(filepath.Join(base, "y"), 0o755))
				// os.Rename refuses to replace a directory; rename(2) does not.
				must(t, syscall.Rename(filepath.Join(base, "y"), dir))
			}
			var st, nst syscall.Stat_t
			fstatErr := syscall.Fstat(int(d.Fd()), &st)
			must(t, syscall.Stat(dir, &nst))
			_, listErr := d.Readdirnames(-1)
			fd, createErr := unix.Openat(int(d.Fd()), "f", unix.O_CREAT|unix.O_WRONLY, 0o644)
			if createErr == nil {
				unix.Close(fd)
			}
			out = append(out, fmt.Sprintf("%s: fstat %v, nlink %d, size %d, mode %o, same inode as the new one: %v; list: %v; create in it: %v",
				how, errno(fstatErr), st.Nlink, st.Size, st.Mode&0o7777, st.Ino == nst.Ino, errno(listErr), errno(createErr)))
			must(t, os.Remove(dir))
		}
		return strings.Join(out, "\n")
	}
	native, page := steps(t.TempDir()), steps(s.page("r", "p"))
	if native != page {
		t.Fatalf("removed directory\nnatively:\n%s\nin a page:\n%s", native, page)
	}
	t.Log(page)
}

// A file open for writing shows what is written to every lookup, not only
// to its writer: a stat by path or a listing after the kernel's caches
// expired took the size of the last commit, and reads stopped there.
func TestLookupShowsWhatIsWritten(t *testing.T) {
	// Names and attributes cached for 0.2 s: a lookup after that takes
	// its attributes for as long again (with none cached, a getattr of the
	// node follows every lookup and hides what the lookup said).
	s := mount(t, t.TempDir(), "--cache-timeout", "0.2")
	pg := s.page("w", "p")
	path := filepath.Join(pg, "log")
	must(t, os.WriteFile(path, []byte("first line\n"), 0o644))
	// Past its commit, so that lookups find the file in the page, not
	// among the files whose commit is queued.
	syncDir(t, pg)
	w, err := os.OpenFile(path, os.O_WRONLY|os.O_APPEND, 0)
	must(t, err)
	defer w.Close()
	want := []byte("first line\n")
	for i := range 3 {
		line := fmt.Appendf(nil, "line %d\n", i)
		_, err := w.Write(line)
		must(t, err)
		want = append(want, line...)
		time.Sleep(300 * time.Millisecond) // past the cached name
		fi, err := os.Stat(path)
		if err != nil || fi.Size() != int64(len(want)) {
			t.Fatalf("stat after %d appends: %v %v, want size %d", i+1, fi, err, len(want))
		}
		if b, err := os.ReadFile(path); err != nil || !bytes.Equal(b, want) {
			t.Fatalf("read after %d appends: %q %v, want %q", i+1, b, err, want)
		}
		if out := run(t, pg, "ls", "-l", "log"); !strings.Contains(out, fmt.Sprintf(" %d ", len(want))) {
			t.Fatalf("ls -l after %d appends: %q, want size %d", i+1, out, len(want))
		}
	}
}

func TestConcurrentWriters(t *testing.T) {
	s := mount(t, t.TempDir())
	pg := s.page("c", "p")
	const writers, files = 8, 40
	var wg sync.WaitGroup
	for w := range writers {
		wg.Go(func() {
			for i := range files {
				name := filepath.Join(pg, fmt.Sprintf("w%d-%03d", w, i))
				if err := os.WriteFile(name, content(w*1000+i, 1000+i*97), 0o644); err != nil {
					t.Error(err)
				}
			}
		})
	}
	wg.Wait()
	if got := len(ls(t, pg)); got != writers*files {
		t.Fatalf("%d files, want %d", got, writers*files)
	}
	for w := range writers {
		for i := range files {
			b, err := os.ReadFile(filepath.Join(pg, fmt.Sprintf("w%d-%03d", w, i)))
			if err != nil || !bytes.Equal(b, content(w*1000+i, 1000+i*97)) {
				t.Fatalf("w%d-%03d: wrong content (%v)", w, i, err)
			}
		}
	}
}

func content(seed, n int) []byte {
	r := rand.New(rand.NewPCG(uint64(seed), 7))
	b := make([]byte, n)
	for i := range b {
		b[i] = byte(r.Uint32())
	}
	return b
}

func TestAppendTruncateAndRandomWrites(t *testing.T) {
	s := mount(t, t.TempDir())
	pg := s.page("a", "p")
	path := filepath.Join(pg, "log")
	for i := range 5 {
		run(t, pg, "sh", "-c", fmt.Sprintf("echo line%d >> log", i))
	}
	if b, _ := os.ReadFile(path); string(b) != "line0\nline1\nline2\nline3\nline4\n" {
		t.Fatalf("after appends: %q", b)
	}
	run(t, pg, "truncate", "-s", "12", "log")
	if b, _ := os.ReadFile(path); string(b) != "line0\nline1\n" {
		t.Fatalf("after truncate: %q", b)
	}
	run(t, pg, "truncate", "-s", "20", "log")
	if b, _ := os.ReadFile(path); string(b) != "line0\nline1\n\x00\x00\x00\x00\x00\x00\x00\x00" {
		t.Fatalf("after growing: %q", b)
	}
	// Random writes into a large file, checked against the same writes to
	// a file on the native filesystem.
	native := filepath.Join(t.TempDir(), "native")
	big := content(1, 20<<20)
	must(t, os.WriteFile(native, big, 0o644))
	must(t, os.WriteFile(filepath.Join(pg, "big"), big, 0o644))
	fn, _ := os.OpenFile(native, os.O_RDWR, 0)
	fm, _ := os.OpenFile(filepath.Join(pg, "big"), os.O_RDWR, 0)
	r := rand.New(rand.NewPCG(2, 2))
	for i := range 300 {
		off := r.Int64N(22 << 20)
		data := content(i, 1+r.IntN(70000))
		fn.WriteAt(data, off)
		if _, err := fm.WriteAt(data, off); err != nil {
			t.Fatal(err)
		}
		if i%50 == 0 { // read back through the open file
			a, b := make([]byte, 5000), make([]byte, 5000)
			na, _ := fn.ReadAt(a, off-100)
			nb, _ := fm.ReadAt(b, off-100)
			if !bytes.Equal(a[:na], b[:nb]) {
				t.Fatalf("read back at %d differs", off)
			}
		}
	}
	must(t, fm.Truncate(21<<20))
	must(t, fn.Truncate(21<<20))
	must(t, fm.Close())
	fn.Close()
	if sha(t, native) != sha(t, filepath.Join(pg, "big")) {
		t.Fatal("random writes: content differs from native")
	}
}

func sha(t testing.TB, path string) string {
	f, err := os.Open(path)
	must(t, err)
	defer f.Close()
	h := sha256.New()
	io.Copy(h, f)
	return fmt.Sprintf("%x", h.Sum(nil))
}

// TestLargeFile writes 1 GiB through the mount, reads it back, and checks the
// server's memory stays bounded.
func TestLargeFile(t *testing.T) {
	size := int64(1 << 30)
	if testing.Short() {
		size = 256 << 20
	}
	// The race detector multiplies memory use: measure the plain build.
	s := mountWith(t, plainBinary, t.TempDir(), filepath.Join(t.TempDir(), "mnt"))
	pg := s.page("big", "p")
	path := filepath.Join(pg, "file")
	f, err := os.Create(path)
	must(t, err)
	h := sha256.New()
	buf := make([]byte, 1<<20)
	r := rand.New(rand.NewPCG(3, 3))
	start := time.Now()
	for off := int64(0); off < size; off += int64(len(buf)) {
		for i := 0; i < len(buf); i += 8 {
			v := r.Uint64()
			for k := range 8 {
				buf[i+k] = byte(v >> (8 * k))
			}
		}
		h.Write(buf)
		if _, err := f.Write(buf); err != nil {
			t.Fatal(err)
		}
	}
	must(t, f.Close())
	wrote := time.Since(start)
	peak, _ := s.rss()
	want := fmt.Sprintf("%x", h.Sum(nil))
	start = time.Now()
	got := sha(t, path)
	t.Logf("%d MiB: write %.0f MB/s, read %.0f MB/s, server peak RSS %d MiB", size>>20,
		float64(size)/wrote.Seconds()/1e6, float64(size)/time.Since(start).Seconds()/1e6, peak>>10)
	if got != want {
		t.Fatal("content read back differs")
	}
	if fi, _ := os.Stat(path); fi.Size() != size {
		t.Fatalf("size %d", fi.Size())
	}
	if limit := 512 << 10; peak > limit {
		t.Fatalf("server peak RSS %d MiB while writing %d MiB (limit %d MiB)", peak>>10, size>>20, limit>>10)
	}
	// A server run by root sets the mount's kernel read-ahead to four of its
	// largest reads: the kernel's 128 KiB default held sequential reads back.
	if os.Geteuid() == 0 {
		ms, err := mountinfo.GetMounts(mountinfo.SingleEntryFilter(s.mnt))
		if err != nil || len(ms) != 1 {
			t.Fatalf("mount %s not found: %v", s.mnt, err)
		}
		ra, err := os.ReadFile(fmt.Sprintf("/sys/class/bdi/%d:%d/read_ahead_kb", ms[0].Major, ms[0].Minor))
		must(t, err)
		if got := strings.TrimSpace(string(ra)); got != "4096" {
			t.Fatalf("kernel read-ahead of the mount is %s KiB, want 4096", got)
		}
	}
	// Reads return bytes, not a descriptor to splice from: go-fuse's splice
	// attempt failed for every 1 MiB reply and logged it.
	s.stop()
	if strings.Contains(s.log.String(), "splice") {
		t.Fatalf("server log mentions splice:\n%.2000s", s.log)
	}
}

// TestCrash kills the server with SIGKILL in the middle of a workload: every
// file fsynced or closed before the kill is intact after remounting, and no
// file has partial content.
func TestCrash(t *testing.T) {
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
						mu.Unlock()
					}
				}
				if f.Close() == nil && err == nil {
					mu.Lock()
					closed = append(closed, rec{name, data})
					mu.Unlock()
				}
			}
		})
	}
	time.Sleep(3 * time.Second)
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
	try("busy", "mount", t.TempDir(), s.mnt)
	file := filepath.Join(t.TempDir(), "f")
	os.WriteFile(file, nil, 0o644)
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

func TestReadOnly(t *testing.T) {
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

// Renaming a directory of many files is one atomic commit, larger than one
// db transaction.
func TestRenameLargeDirectory(t *testing.T) {
	s := mount(t, t.TempDir())
	pg := s.page("r", "p")
	src := filepath.Join(pg, "src")
	must(t, os.Mkdir(src, 0o755))
	const n = 1500
	for i := range n {
		must(t, os.WriteFile(filepath.Join(src, fmt.Sprintf("f%04d", i)), fmt.Appendf(nil, "file %d", i), 0o644))
	}
	must(t, os.Rename(src, filepath.Join(pg, "dst")))
	check := func() {
		t.Helper()
		if got := len(ls(t, filepath.Join(pg, "dst"))); got != n {
			t.Fatalf("%d files after rename, want %d", got, n)
		}
		if _, err := os.Stat(src); !os.IsNotExist(err) {
			t.Fatalf("source still there: %v", err)
		}
		for _, i := range []int{0, 777, n - 1} {
			b, err := os.ReadFile(filepath.Join(pg, "dst", fmt.Sprintf("f%04d", i)))
			if err != nil || string(b) != fmt.Sprintf("file %d", i) {
				t.Fatalf("f%04d: %q %v", i, b, err)
			}
		}
	}
	check()
	s.stop()
	s = mountAt(t, s.repo, s.mnt)
	check()
}

// A descriptor opened for reading sees what another descriptor writes, as
// on a local filesystem (tail -f).
func TestReaderSeesLaterWrites(t *testing.T) {
	s := mount(t, t.TempDir(), "--cache-timeout", "0")
	pg := s.page("r", "p")
	path := filepath.Join(pg, "log")
	must(t, os.WriteFile(path, []byte("one\n"), 0o644))
	r, err := os.Open(path)
	must(t, err)
	defer r.Close()
	w, err := os.OpenFile(path, os.O_WRONLY|os.O_APPEND, 0)
	must(t, err)
	w.WriteString("two\n")
	buf := make([]byte, 100)
	if n, _ := r.ReadAt(buf, 0); string(buf[:n]) != "one\ntwo\n" {
		t.Fatalf("while written: %q", buf[:n])
	}
	must(t, w.Close())
	run(t, pg, "sh", "-c", "echo three >> log")
	if n, _ := r.ReadAt(buf, 0); string(buf[:n]) != "one\ntwo\nthree\n" {
		t.Fatalf("after other writers closed: %q", buf[:n])
	}
}

// A change by path right after a writer closed (truncate, chmod, utimens:
// tar and cp -a set times after close) must commit even though FUSE may
// release the writer's descriptor only later.
func TestSetattrRightAfterClose(t *testing.T) {
	s := mount(t, t.TempDir())
	pg := s.page("s", "p")
	path := filepath.Join(pg, "f")
	for i := range 100 {
		must(t, os.WriteFile(path, bytes.Repeat([]byte("x"), 1000+i), 0o644))
		must(t, os.Truncate(path, int64(10+i)))
		mt := time.Unix(int64(1_000_000+i), 0)
		must(t, os.Chtimes(path, mt, mt))
		must(t, os.Chmod(path, os.FileMode(0o600+i%64)))
		fi, err := os.Stat(path)
		must(t, err)
		if fi.Size() != int64(10+i) || !fi.ModTime().Equal(mt) || fi.Mode().Perm() != os.FileMode(0o600+i%64) {
			t.Fatalf("round %d: size %d mtime %v mode %v", i, fi.Size(), fi.ModTime(), fi.Mode())
		}
	}
	s.stop()
	s = mountAt(t, s.repo, s.mnt)
	fi, err := os.Stat(path)
	if err != nil || fi.Size() != 109 || !fi.ModTime().Equal(time.Unix(1_000_099, 0)) || fi.Mode().Perm() != 0o600+99%64 {
		t.Fatalf("after remount: %v %v", fi, err)
	}
}

// A change by path to a file whose writes are all committed lands before
// chmod returns, even while a descriptor is open for writing: the kernel
// sends the release of a closed descriptor asynchronously, so the server
// may still count a writer that has gone. A change while bytes are written
// but not flushed waits for them (cp -a: write, fchmod, futimens, close).
func TestSetattrWhileOpenCommitsClean(t *testing.T) {
	s := mount(t, t.TempDir())
	pg := s.page("s", "p")
	path := filepath.Join(pg, "f")
	write(t, path, "data")
	held, err := os.OpenFile(path, os.O_WRONLY, 0) // a release not yet arrived
	must(t, err)
	defer held.Close()
	mt := time.Unix(1_000_000, 0)
	must(t, os.Chmod(path, 0o600))
	must(t, os.Chtimes(path, mt, mt))
	latest := func() (os.FileInfo, string) {
		t.Helper()
		head := readlink(t, filepath.Join(pg, ".ledger", "latest"))
		p := filepath.Join(pg, ".ledger", head, "f")
		fi, err := os.Stat(p)
		must(t, err)
		b, err := os.ReadFile(p)
		must(t, err)
		return fi, string(b)
	}
	if fi, data := latest(); fi.Mode().Perm() != 0o600 || !fi.ModTime().Equal(mt) || data != "data" {
		t.Fatalf("head after chmod and utimes: %v %v %q, want -rw------- %v \"data\"", fi.Mode(), fi.ModTime(), data, mt)
	}
	_, err = held.Write([]byte("more"))
	must(t, err)
	must(t, os.Chmod(path, 0o640))
	if fi, data := latest(); fi.Mode().Perm() != 0o600 || data != "data" {
		t.Fatalf("head with writes unflushed: %v %q, want the last commit's -rw------- \"data\"", fi.Mode(), data)
	}
	must(t, held.Close())
	if fi, data := latest(); fi.Mode().Perm() != 0o640 || data != "more" {
		t.Fatalf("head after close: %v %q, want -rw-r----- \"more\"", fi.Mode(), data)
	}
}

// A descriptor that writes, commits with fsync, truncates and writes again
// from offset 0 starts a new stream on the same open content.
func TestRewriteAfterFsync(t *testing.T) {
	s := mount(t, t.TempDir())
	path := filepath.Join(s.page("r", "p"), "f")
	f, err := os.Create(path)
	must(t, err)
	defer f.Close()
	for i := range 5 {
		if i > 0 {
			must(t, f.Truncate(0))
		}
		data := content(i, 1000+i*70000)
		_, err := f.WriteAt(data, 0)
		must(t, err)
		must(t, f.Sync())
		got, err := os.ReadFile(path)
		must(t, err)
		if !bytes.Equal(got, data) {
			t.Fatalf("round %d: read %d bytes, want %d", i, len(got), len(data))
		}
	}
	must(t, f.Close())
}

// Every name listed right after a burst of creates can be looked up, also
// when the kernel dropped its caches while releases were still queued.
func TestListRightAfterCreates(t *testing.T) {
	s := mount(t, t.TempDir())
	dir := filepath.Join(s.page("c", "p"), "many")
	must(t, os.Mkdir(dir, 0o755))
	for i := range 2000 {
		f, err := os.Create(filepath.Join(dir, fmt.Sprintf("e%05d", i)))
		must(t, err)
		must(t, f.Close())
	}
	syscall.Sync()
	os.WriteFile("/proc/sys/vm/drop_caches", []byte("3"), 0) // root only; best effort
	names := ls(t, dir)
	if len(names) != 2000 {
		t.Fatalf("listed %d names, want 2000", len(names))
	}
	for _, n := range names {
		if _, err := os.Lstat(filepath.Join(dir, n)); err != nil {
			t.Fatalf("listed, then: %v", err)
		}
	}
}

// A closed file whose commit is still queued keeps its name when the kernel
// forgets it and the page's directories, then looks them up again as new
// nodes: the file's node, kept while its commit is queued, is found again
// under the new directories and must still find its key there once the
// commit lands. It did not: fstat and chmod failed with ENOENT, and so did
// a read that made the kernel check the file's size.
func TestForgottenPageRoot(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root: only root can make the kernel forget inodes (drop_caches)")
	}
	// No kernel attribute cache: every fstat below reaches the server.
	s := mount(t, t.TempDir(), "--cache-timeout", "0")
	pg := s.page("g", "p")
	must(t, os.Mkdir(filepath.Join(pg, "d"), 0o755))
	names := []string{"d/big", "d/small", "small"}
	data := [][]byte{content(1, 3<<20), content(2, 4096), content(3, 4096)}
	for i, name := range names {
		must(t, os.WriteFile(filepath.Join(pg, name), data[i], 0o644))
	}
	// Right after the last close, within the committer's wait: the kernel
	// forgets every dentry and inode it does not hold.
	must(t, os.WriteFile("/proc/sys/vm/drop_caches", []byte("2"), 0))
	var files []*os.File
	for _, name := range names {
		f, err := os.Open(filepath.Join(pg, name))
		must(t, err)
		defer f.Close()
		files = append(files, f)
	}
	commitCount(t, filepath.Join(pg, ".ledger")) // waits for queued commits
	for i, name := range names {
		fi, err := files[i].Stat()
		if err != nil {
			t.Fatalf("fstat %s: %v", name, err)
		}
		if fi.Size() != int64(len(data[i])) {
			t.Fatalf("fstat %s: size %d, want %d", name, fi.Size(), len(data[i]))
		}
		got, err := io.ReadAll(files[i])
		must(t, err)
		if !bytes.Equal(got, data[i]) {
			t.Fatalf("%s: read %d bytes, want %d", name, len(got), len(data[i]))
		}
		path := filepath.Join(pg, name)
		must(t, os.Chmod(path, 0o600))
		if fi, err := os.Stat(path); err != nil || fi.Mode().Perm() != 0o600 {
			t.Fatalf("%s after chmod: %v %v", name, fi, err)
		}
	}
}

// commitCount is the number of commits .ledger/log lists.
func commitCount(t *testing.T, meta string) int {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(meta, "log"))
	must(t, err)
	return strings.Count(string(b), "\n")
}

// A close returns before its commit, which it shares with the closes that
// follow it. Everything done right after a close sees the closed file:
// reads, stat, rename, unlink, a listing, a transaction and the history;
// and a stream of closes makes fewer commits than closes.
func TestClosesShareCommits(t *testing.T) {
	repo := t.TempDir()
	s := mount(t, repo)
	pg := s.page("q", "p")
	meta := filepath.Join(pg, ".ledger")
	const closes = 300
	before := commitCount(t, meta)
	for i := range closes {
		must(t, os.WriteFile(filepath.Join(pg, fmt.Sprintf("s%03d", i)), content(i, 100+i), 0o644))
	}
	commits := commitCount(t, meta) - before
	t.Logf("%d closes made %d commits", closes, commits)
	if commits >= closes {
		t.Fatalf("%d closes made %d commits: none shared", closes, commits)
	}
	if got := len(ls(t, pg)); got != closes {
		t.Fatalf("listed %d files after %d closes", got, closes)
	}

	want := map[string][]byte{}
	for i := range 120 {
		name := fmt.Sprintf("f%03d", i)
		path := filepath.Join(pg, name)
		data := content(1000+i, 3000+i)
		must(t, os.WriteFile(path, data, 0o644))
		switch i % 4 {
		case 0:
			b, err := os.ReadFile(path)
			fi, serr := os.Stat(path)
			if err != nil || serr != nil || !bytes.Equal(b, data) || fi.Size() != int64(len(data)) {
				t.Fatalf("%s read right after close: %d bytes, %v %v", name, len(b), err, serr)
			}
			want[name] = data
		case 1:
			must(t, os.Rename(path, path+".moved"))
			if _, err := os.Lstat(path); !os.IsNotExist(err) {
				t.Fatalf("%s still there after rename: %v", name, err)
			}
			want[name+".moved"] = data
		case 2:
			must(t, os.Remove(path))
			if _, err := os.Lstat(path); !os.IsNotExist(err) {
				t.Fatalf("%s still there after unlink: %v", name, err)
			}
		case 3:
			// A transaction begun right after the close has it in its base.
			tx := filepath.Join(meta, "transactions", name)
			must(t, os.Mkdir(tx, 0o755))
			b, err := os.ReadFile(filepath.Join(tx, name))
			if err != nil || !bytes.Equal(b, data) {
				t.Fatalf("%s in a transaction begun right after its close: %d bytes, %v", name, len(b), err)
			}
			must(t, os.Remove(tx))
			want[name] = data
		}
	}
	// A directory's chmod and utimes are queued too, and show at once.
	dirs := map[string]time.Time{}
	for i := range 20 {
		d := filepath.Join(pg, fmt.Sprintf("d%02d", i))
		must(t, os.Mkdir(d, 0o755))
		must(t, os.WriteFile(filepath.Join(d, "x"), []byte("x"), 0o644))
		must(t, os.Chmod(d, 0o700))
		mt := time.Date(2021, 1, 1, 0, 0, i, 0, time.UTC)
		must(t, os.Chtimes(d, mt, mt))
		dirs[filepath.Base(d)] = mt
	}
	checkDirs := func(dir string) {
		t.Helper()
		for name, mt := range dirs {
			fi, err := os.Stat(filepath.Join(dir, name))
			if err != nil || fi.Mode() != os.ModeDir|0o700 || !fi.ModTime().Equal(mt) {
				t.Fatalf("%s in %s: %v %v, want drwx------ %v", name, dir, fi.Mode(), fi.ModTime(), mt)
			}
		}
	}
	checkDirs(pg)
	// The head, as history shows it right away, has every closed file.
	head := filepath.Join(meta, readlink(t, filepath.Join(meta, "latest")))
	check := func(dir string) {
		t.Helper()
		for name, data := range want {
			b, err := os.ReadFile(filepath.Join(dir, name))
			if err != nil || !bytes.Equal(b, data) {
				t.Fatalf("%s in %s: %d bytes, %v", name, dir, len(b), err)
			}
		}
		var fs []string
		for _, n := range ls(t, dir) {
			if strings.HasPrefix(n, "f") {
				fs = append(fs, n)
			}
		}
		if len(fs) != len(want) {
			t.Fatalf("%s lists %d f* files, want %d", dir, len(fs), len(want))
		}
	}
	check(head)
	check(pg)
	checkDirs(head)
	s.stop()
	s = mountAt(t, repo, s.mnt)
	check(pg)
	checkDirs(pg)
	s.stop()
	verifySchema(t, repo)
}

// An unlink in a directory that keeps other entries returns before its
// commit, which it shares with the unlinks that follow: a sequential rm
// makes fewer commits than files. Everything right after an unlink misses
// the file: stat, a listing, the history; a name removed and created again
// at once has its new content; the last file's removal keeps the directory;
// and a crash right after the unlinks loses none of them.
func TestUnlinksShareCommits(t *testing.T) {
	repo := t.TempDir()
	s := mount(t, repo)
	pg := s.page("u", "p")
	meta := filepath.Join(pg, ".ledger")
	dir := filepath.Join(pg, "d")
	must(t, os.Mkdir(dir, 0o755))
	const files = 400
	for i := range files {
		must(t, os.WriteFile(filepath.Join(dir, fmt.Sprintf("f%03d", i)), content(i, 10+i), 0o644))
	}
	settle := func(name string) { // fsync waits for the queued commits
		f, err := os.Open(filepath.Join(dir, name))
		must(t, err)
		must(t, f.Sync())
		f.Close()
	}
	settle("f000")

	before := commitCount(t, meta)
	for i := range files - 1 {
		path := filepath.Join(dir, fmt.Sprintf("f%03d", i))
		must(t, os.Remove(path))
		if _, err := os.Lstat(path); !os.IsNotExist(err) {
			t.Fatalf("f%03d still there after unlink: %v", i, err)
		}
		switch i % 50 {
		case 7:
			again := (i + 41) / 50 // created again below, at 9, 59, ...
			if got := len(ls(t, dir)); got != files-1-i+again {
				t.Fatalf("listed %d files after removing %d of %d and creating %d again", got, i+1, files, again)
			}
		case 9:
			// Created again at once: the queued delete does not take it.
			must(t, os.WriteFile(path, []byte("again"), 0o644))
		case 11:
			if err := os.Remove(path); !os.IsNotExist(err) {
				t.Fatalf("second unlink of f%03d: %v, want ENOENT", i, err)
			}
		}
	}
	commits := commitCount(t, meta) - before
	t.Logf("%d unlinks made %d commits", files-1, commits)
	if commits >= (files-1)/2 {
		t.Fatalf("%d unlinks made %d commits: few shared", files-1, commits)
	}
	want := []string{fmt.Sprintf("f%03d", files-1)}
	for i := range files - 1 {
		if i%50 == 9 {
			want = append(want, fmt.Sprintf("f%03d", i))
		}
	}
	slices.Sort(want)
	check := func(dir string) {
		t.Helper()
		if got := ls(t, dir); !slices.Equal(got, want) {
			t.Fatalf("%s lists %v, want %v", dir, got, want)
		}
		for _, name := range want[:len(want)-1] {
			if b, err := os.ReadFile(filepath.Join(dir, name)); err != nil || string(b) != "again" {
				t.Fatalf("%s/%s: %q, %v; want its new content", dir, name, b, err)
			}
		}
	}
	check(dir)
	check(filepath.Join(meta, readlink(t, filepath.Join(meta, "latest")), "d"))

	// Removing every file keeps the directory, empty.
	for _, name := range want {
		must(t, os.Remove(filepath.Join(dir, name)))
	}
	if fi, err := os.Stat(dir); err != nil || !fi.IsDir() || len(ls(t, dir)) != 0 {
		t.Fatalf("directory after its last file went: %v, %v", fi, err)
	}

	// A crash right after queued unlinks keeps them.
	for i := range 50 {
		must(t, os.WriteFile(filepath.Join(dir, fmt.Sprintf("g%02d", i)), []byte("g"), 0o644))
	}
	settle("g49")
	for i := range 49 {
		must(t, os.Remove(filepath.Join(dir, fmt.Sprintf("g%02d", i))))
	}
	s.kill()
	s = mountAt(t, repo, s.mnt)
	if got := ls(t, dir); !slices.Equal(got, []string{"g49"}) {
		t.Fatalf("after a crash right after 49 unlinks: %v, want [g49]", got)
	}
	s.stop()
	verifySchema(t, repo)
}

// An unmount from outside ends the server cleanly, and it does not then try
// to unmount again (it logged "unmounting" after "unmounted").
func TestUnmountFromOutside(t *testing.T) {
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
// left behind.
func TestStopRightAfterMount(t *testing.T) {
	repo := t.TempDir()
	mnt := filepath.Join(t.TempDir(), "mnt")
	for i := range 20 {
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

// A directory's chmod queued while the commit of its mkdir is being
// written still shows after that commit lands: a landing change stops
// showing its queued marker only if no later change of the same key
// replaced it. An fsync hurries the batch with the mkdir and keeps it from
// landing until the db is synced (milliseconds); the chmod, queued in the
// meantime, goes to the next batch.
func TestLaterMarkerOutlivesEarlierCommit(t *testing.T) {
	s := mount(t, t.TempDir(), "--cache-timeout", "0")
	pg := s.page("m", "p")
	f, err := os.Create(filepath.Join(pg, "synced"))
	must(t, err)
	defer f.Close()
	for i := range 20 {
		d := filepath.Join(pg, fmt.Sprintf("d%02d", i))
		must(t, os.Mkdir(d, 0o755))
		var wg sync.WaitGroup
		wg.Go(func() {
			if _, err := f.WriteAt([]byte{byte(i)}, 0); err != nil {
				t.Error(err)
			}
			if err := f.Sync(); err != nil {
				t.Error(err)
			}
		})
		time.Sleep(500 * time.Microsecond)
		must(t, os.Chmod(d, 0o700))
		// Past the group commit's quiet time (40 ms): the mkdir's batch
		// lands after the sync, the chmod's after it.
		for end := time.Now().Add(100 * time.Millisecond); time.Now().Before(end); {
			fi, err := os.Stat(d)
			if err != nil {
				t.Fatalf("round %d: stat after chmod: %v", i, err)
			}
			if fi.Mode().Perm() != 0o700 {
				t.Fatalf("round %d: %s shows %v after chmod 0700", i, d, fi.Mode())
			}
		}
		wg.Wait()
	}
}

// Mkdir returns before its marker is committed (cp -a and tar x make one
// directory per directory they copy); until the commit lands, lookups,
// listings and name checks see the queued marker, and a crash leaves it in
// the journal for recovery. With no kernel caching every step asks the
// mount, and each one runs within the committer's batch delay of the mkdir.
func TestMkdirShowsBeforeItsCommit(t *testing.T) {
	repo := t.TempDir()
	s := mount(t, repo, "--cache-timeout", "0")
	pg := s.page("m", "p")
	const n = 100
	for i := range n {
		name := fmt.Sprintf("d%03d", i)
		d := filepath.Join(pg, name)
		must(t, os.Mkdir(d, 0o750))
		if got := ls(t, pg); !slices.Contains(got, name) {
			t.Fatalf("%s missing from the listing right after mkdir: %v", name, got)
		}
		if fi, err := os.Stat(d); err != nil || !fi.IsDir() || fi.Mode().Perm() != 0o750 {
			t.Fatalf("stat of %s right after mkdir: %v %v", name, fi, err)
		}
		if err := os.Mkdir(d, 0o755); !errors.Is(err, fs.ErrExist) {
			t.Fatalf("second mkdir of %s: %v, want EEXIST", name, err)
		}
		must(t, os.Mkdir(filepath.Join(d, "e"), 0o700))
		if got := ls(t, d); !slices.Equal(got, []string{"e"}) {
			t.Fatalf("%s right after mkdir of e in it: %v", name, got)
		}
		must(t, os.WriteFile(filepath.Join(d, "e", "f"), []byte(name), 0o644))
	}
	must(t, os.Mkdir(filepath.Join(pg, "last"), 0o711))
	s.kill()
	s = mountAt(t, repo, s.mnt)
	for i := range n {
		name := fmt.Sprintf("d%03d", i)
		fi, err := os.Stat(filepath.Join(pg, name, "e"))
		if err != nil || !fi.IsDir() || fi.Mode().Perm() != 0o700 {
			t.Fatalf("%s/e after the crash: %v %v", name, fi, err)
		}
		if b, err := os.ReadFile(filepath.Join(pg, name, "e", "f")); err != nil || string(b) != name {
			t.Fatalf("%s/e/f after the crash: %q %v", name, b, err)
		}
	}
	if fi, err := os.Stat(filepath.Join(pg, "last")); err != nil || fi.Mode().Perm() != 0o711 {
		t.Fatalf("directory made right before the crash: %v %v", fi, err)
	}
	s.stop()
	verifySchema(t, repo)
}

// cp -a, tar x and rsync set a symlink's owner and times (lchown,
// lutimes); both failed with EINVAL, so cp -a and tar x of any tree with a
// symlink exited with an error.
func TestSymlinksKeepTheirTimes(t *testing.T) {
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

// Programs that create or rename a file sync its directory (databases,
// git, editors); every directory of the mount takes fsync.
func TestFsyncDirectories(t *testing.T) {
	s := mount(t, t.TempDir())
	pg := s.page("l", "p")
	must(t, os.MkdirAll(filepath.Join(pg, "d", "e"), 0o755))
	must(t, os.WriteFile(filepath.Join(pg, "d", "f"), []byte("f"), 0o644))
	for _, dir := range []string{s.mnt, filepath.Join(s.mnt, "l"), pg, filepath.Join(pg, "d"), filepath.Join(pg, "d", "e"),
		filepath.Join(pg, ".ledger"), filepath.Join(pg, ".ledger", "commits")} {
		d, err := os.Open(dir)
		must(t, err)
		if err := d.Sync(); err != nil {
			t.Errorf("fsync %s: %v", dir, err)
		}
		d.Close()
	}
}
