package mount_test

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"maps"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/hanwen/go-fuse/v2/posixtest"
	"golang.org/x/sys/unix"
)

// posixRefused are the posixtest cases that need what docs/files.md lists as
// refused.
var posixRefused = map[string]string{
	// It expects a second descriptor of the same process to be refused a
	// lock the first holds; POSIX record locks belong to the process, and
	// the case fails on ext4 too.
	"FcntlFlockLocksFile": "POSIX locks are per process (fails natively too)",
}

// TestPosix runs go-fuse's own POSIX conformance cases, each in a page of
// its own.
func TestPosix(t *testing.T) {
	t.Parallel()
	s := mount(t, t.TempDir())
	for _, name := range slices.Sorted(maps.Keys(posixtest.All)) {
		if _, refused := posixRefused[name]; refused {
			continue
		}
		t.Run(name, func(t *testing.T) {
			posixtest.All[name](t, s.page("posix", name))
		})
	}
}

// The editors' save pattern: write a temporary file, fsync it, rename it
// over the original. Readers see the old or the new file, never a mix.
func TestEditorSave(t *testing.T) {
	t.Parallel()
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
		if _, err := f.Write(bytes.Repeat([]byte("x"), 50000)); err != nil {
			t.Fatal(err)
		}
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
	t.Parallel()
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
	t.Parallel()
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
	t.Parallel()
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

func TestAppendTruncateAndRandomWrites(t *testing.T) {
	t.Parallel()
	s := mountPlain(t, t.TempDir())
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
		if _, err := fn.WriteAt(data, off); err != nil {
			t.Fatal(err)
		}
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

// A descriptor opened for reading sees what another descriptor writes, as
// on a local filesystem (tail -f).
func TestReaderSeesLaterWrites(t *testing.T) {
	t.Parallel()
	s := mount(t, t.TempDir(), "--cache-timeout", "0")
	pg := s.page("r", "p")
	path := filepath.Join(pg, "log")
	must(t, os.WriteFile(path, []byte("one\n"), 0o644))
	r, err := os.Open(path)
	must(t, err)
	defer r.Close()
	w, err := os.OpenFile(path, os.O_WRONLY|os.O_APPEND, 0)
	must(t, err)
	if _, err := w.WriteString("two\n"); err != nil {
		t.Fatal(err)
	}
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
	t.Parallel()
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
	t.Parallel()
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
	t.Parallel()
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

// Programs that create or rename a file sync its directory (databases,
// git, editors); every directory of the mount takes fsync.
func TestFsyncDirectories(t *testing.T) {
	t.Parallel()
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

// Names longer than a directory entry's 255 bytes get ENAMETOOLONG, as on
// ext4; a ledger name whose folder name would not fit (over 189 bytes) is
// refused when made, and one that fits works in full. statfs answers in
// every directory.
func TestNameLimitsAndStatfs(t *testing.T) {
	t.Parallel()
	s := mount(t, t.TempDir())
	pg := s.page("l", "p")
	long := strings.Repeat("n", 256)
	for what, err := range map[string]error{
		"create":  os.WriteFile(filepath.Join(pg, long), nil, 0o644),
		"mkdir":   os.Mkdir(filepath.Join(pg, long), 0o755),
		"stat":    func() error { _, err := os.Stat(filepath.Join(pg, long)); return err }(),
		"ledger":  os.Mkdir(filepath.Join(s.mnt, strings.Repeat("l", 190)), 0o755),
		"page":    os.Mkdir(filepath.Join(s.mnt, "l", long), 0o755),
		"symlink": os.Symlink("x", filepath.Join(pg, long)),
		"unlink":  os.Remove(filepath.Join(pg, long)),
		"renameto": func() error {
			must(t, os.WriteFile(filepath.Join(pg, "f"), nil, 0o644))
			return os.Rename(filepath.Join(pg, "f"), filepath.Join(pg, long))
		}(),
	} {
		if !errors.Is(err, syscall.ENAMETOOLONG) {
			t.Errorf("%s with a long name: %v, want ENAMETOOLONG", what, err)
		}
	}
	name255 := strings.Repeat("x", 255)
	must(t, os.WriteFile(filepath.Join(pg, name255), []byte("ok"), 0o644))
	// A ledger of 189 bytes is renamed, gets a page and is removed.
	ledger := filepath.Join(s.mnt, strings.Repeat("l", 189))
	must(t, os.Mkdir(ledger, 0o755))
	if err := os.Rename(ledger, filepath.Join(s.mnt, strings.Repeat("m", 190))); !errors.Is(err, syscall.ENAMETOOLONG) {
		t.Errorf("rename of a ledger to 190 bytes: %v, want ENAMETOOLONG", err)
	}
	ledger2 := filepath.Join(s.mnt, strings.Repeat("m", 189))
	must(t, os.Rename(ledger, ledger2))
	must(t, os.Mkdir(filepath.Join(ledger2, "p"), 0o755))
	must(t, os.WriteFile(filepath.Join(ledger2, "p", "f"), []byte("f"), 0o644))
	if b, err := os.ReadFile(filepath.Join(ledger2, "p", "f")); err != nil || string(b) != "f" {
		t.Fatalf("file in the long-named ledger: %q, %v", b, err)
	}
	must(t, os.RemoveAll(filepath.Join(ledger2, "p")))
	must(t, os.Remove(ledger2))
	var root syscall.Statfs_t
	must(t, syscall.Statfs(s.mnt, &root))
	for _, dir := range []string{filepath.Join(s.mnt, "l"), pg, filepath.Join(pg, ".ledger")} {
		var st syscall.Statfs_t
		must(t, syscall.Statfs(dir, &st))
		if st.Blocks == 0 || st.Blocks != root.Blocks || st.Namelen != 255 {
			t.Errorf("statfs %s: %d blocks, name length %d; the root has %d blocks", dir, st.Blocks, st.Namelen, root.Blocks)
		}
	}
}

// Mode 0000 is a mode like any other: a file created with it and a
// directory made with it keep it, also after a remount.
func TestModeZeroIsKept(t *testing.T) {
	t.Parallel()
	repo := t.TempDir()
	s := mount(t, repo)
	pg := s.page("l", "p")
	fd, err := syscall.Open(filepath.Join(pg, "f"), syscall.O_CREAT|syscall.O_WRONLY, 0)
	must(t, err)
	must(t, syscall.Close(fd))
	must(t, syscall.Mkdir(filepath.Join(pg, "d"), 0))
	check := func(when string) {
		for name, want := range map[string]uint32{"f": syscall.S_IFREG, "d": syscall.S_IFDIR} {
			var st syscall.Stat_t
			must(t, syscall.Lstat(filepath.Join(pg, name), &st))
			if st.Mode != want {
				t.Errorf("%s %s: mode %o, want %o", when, name, st.Mode, want)
			}
		}
	}
	check("made")
	syncDir(t, pg)
	s.stop()
	s = mountAt(t, repo, s.mnt)
	check("after a remount")
}

// Times as POSIX keeps them: chmod and chown advance ctime and leave mtime;
// an access time that is set (touch -a, utimensat, tar and rsync keeping
// it) is kept apart from the mtime, also over a remount.
func TestTimesOfMetadataChanges(t *testing.T) {
	t.Parallel()
	repo := t.TempDir()
	s := mount(t, repo)
	pg := s.page("l", "p")
	f := filepath.Join(pg, "f")
	must(t, os.WriteFile(f, []byte("x"), 0o644))
	past := time.Date(2001, 2, 3, 4, 5, 6, 0, time.UTC)
	must(t, os.Chtimes(f, past, past))
	before := stat(t, f)
	if before.Ctim.Sec <= past.Unix() {
		t.Errorf("ctime %v after setting the times to 2001: utimes must set it to now", before.Ctim)
	}
	must(t, os.Chmod(f, 0o600))
	st := stat(t, f)
	if !timeAfter(st.Ctim, before.Ctim) || st.Mtim.Sec != past.Unix() {
		t.Errorf("chmod: ctime %v (was %v), mtime %v (want 2001)", st.Ctim, before.Ctim, st.Mtim)
	}
	atime := time.Date(2011, 1, 1, 0, 0, 0, 123, time.UTC)
	must(t, os.Chtimes(f, atime, past))
	d := filepath.Join(pg, "d")
	must(t, os.Mkdir(d, 0o755))
	must(t, os.Chtimes(d, atime, past))
	check := func(when string) {
		t.Helper()
		for _, p := range []string{f, d} {
			st := stat(t, p)
			if st.Atim.Sec != atime.Unix() || st.Atim.Nsec != 123 || st.Mtim.Sec != past.Unix() {
				t.Errorf("%s: %s: atime %v mtime %v, want 2011 and 2001", when, p, st.Atim, st.Mtim)
			}
		}
	}
	check("set")
	syncDir(t, pg)
	s.stop()
	s = mountAt(t, repo, s.mnt)
	check("after a remount")
}

// readdir lists "." and ".." first, and entries in key order whether their
// commit has landed or not.
func TestListing(t *testing.T) {
	t.Parallel()
	s := mount(t, t.TempDir())
	pg := s.page("l", "p")
	names := []string{"b", "c", "a0", "Z", "10", "9"}
	for _, n := range names {
		must(t, os.WriteFile(filepath.Join(pg, n), []byte(n), 0o644))
	}
	must(t, os.Mkdir(filepath.Join(pg, "a"), 0o755))
	want := append([]string{".", ".."}, slices.Sorted(slices.Values(append(names, "a")))...)
	list := func() []string {
		out := strings.Fields(run(t, pg, "ls", "-fa"))
		return out
	}
	if got := list(); !slices.Equal(got, want) {
		t.Errorf("ls -fa right after the creates: %v, want %v", got, want)
	}
	syncDir(t, pg)
	if got := list(); !slices.Equal(got, want) {
		t.Errorf("ls -fa once committed: %v, want %v", got, want)
	}
	for _, dir := range []string{s.mnt, filepath.Join(s.mnt, "l"), filepath.Join(pg, "a"), filepath.Join(pg, ".ledger")} {
		if got := strings.Fields(run(t, dir, "ls", "-fa")); len(got) < 2 || got[0] != "." || got[1] != ".." {
			t.Errorf("ls -fa %s: %v, want . and .. first", dir, got)
		}
	}
}

// The root holds only ledgers and a ledger only pages: making anything but
// a directory there is EPERM, as docs/files.md says, not EROFS.
func TestOnlyDirectoriesAboveAPage(t *testing.T) {
	t.Parallel()
	s := mount(t, t.TempDir())
	s.page("l", "p")
	for _, dir := range []string{s.mnt, filepath.Join(s.mnt, "l")} {
		for what, err := range map[string]error{
			"create":  os.WriteFile(filepath.Join(dir, "f"), nil, 0o644),
			"symlink": os.Symlink("x", filepath.Join(dir, "s")),
			"mkfifo":  unix.Mkfifo(filepath.Join(dir, "fifo"), 0o644),
		} {
			if !errors.Is(err, syscall.EPERM) {
				t.Errorf("%s in %s: %v, want EPERM", what, dir, err)
			}
		}
	}
}

// A file grows to MaxFileSize (1 TiB) and no further: past it, a
// truncation, a write or an fallocate is EFBIG at once, and the file is
// left as it was.
func TestFileSizeLimit(t *testing.T) {
	t.Parallel()
	s := mount(t, t.TempDir())
	pg := s.page("l", "p")
	path := filepath.Join(pg, "f")
	must(t, os.WriteFile(path, []byte("kept"), 0o644))
	f, err := os.OpenFile(path, os.O_RDWR, 0)
	must(t, err)
	defer f.Close()
	const max = 1 << 40
	for what, err := range map[string]error{
		"truncate":  f.Truncate(max + 1),
		"huge":      f.Truncate(999999999999999),
		"write":     func() error { _, err := f.WriteAt([]byte("x"), max); return err }(),
		"fallocate": unix.Fallocate(int(f.Fd()), 0, max, 1),
	} {
		if !errors.Is(err, syscall.EFBIG) {
			t.Errorf("%s past 1 TiB: %v, want EFBIG", what, err)
		}
	}
	must(t, f.Close())
	if b, err := os.ReadFile(path); err != nil || string(b) != "kept" {
		t.Errorf("after the refused changes: %q, %v", b, err)
	}
}

// In a set-group-ID directory new entries take the directory's group, and
// new directories the bit too, as on Linux.
func TestSetgidDirectories(t *testing.T) {
	t.Parallel()
	s := mount(t, t.TempDir())
	pg := s.page("l", "p")
	d := filepath.Join(pg, "shared")
	must(t, os.Mkdir(d, 0o775))
	must(t, os.Chown(d, 0, 1234))
	must(t, os.Chmod(d, 0o2775|os.ModeSetgid))
	must(t, os.WriteFile(filepath.Join(d, "f"), nil, 0o644))
	must(t, os.Mkdir(filepath.Join(d, "sub"), 0o755))
	if st := stat(t, filepath.Join(d, "f")); st.Gid != 1234 {
		t.Errorf("file in a setgid directory: group %d, want 1234", st.Gid)
	}
	if st := stat(t, filepath.Join(d, "sub")); st.Gid != 1234 || st.Mode&syscall.S_ISGID == 0 {
		t.Errorf("directory in a setgid directory: group %d mode %o, want 1234 and the setgid bit", st.Gid, st.Mode)
	}
}

// Adding, removing or renaming an entry advances its directory's mtime and
// ctime, as backup tools, find -newer and make expect; the times are kept
// over a remount.
func TestDirectoryTimes(t *testing.T) {
	t.Parallel()
	repo := t.TempDir()
	s := mount(t, repo)
	pg := s.page("l", "p")
	d, other := filepath.Join(pg, "d"), filepath.Join(pg, "other")
	must(t, os.Mkdir(d, 0o755))
	must(t, os.Mkdir(other, 0o755))
	past := time.Date(2001, 2, 3, 4, 5, 6, 0, time.UTC)
	for i, change := range []struct {
		what string
		do   func() error
		dirs []string
	}{
		{"create", func() error { return os.WriteFile(filepath.Join(d, "f"), []byte("x"), 0o644) }, []string{d}},
		{"mkdir", func() error { return os.Mkdir(filepath.Join(d, "sub"), 0o755) }, []string{d}},
		{"symlink", func() error { return os.Symlink("f", filepath.Join(d, "ln")) }, []string{d}},
		{"mkfifo", func() error { return unix.Mkfifo(filepath.Join(d, "fifo"), 0o644) }, []string{d}},
		{"rename", func() error { return os.Rename(filepath.Join(d, "f"), filepath.Join(other, "f")) }, []string{d, other}},
		{"unlink", func() error { return os.Remove(filepath.Join(other, "f")) }, []string{other}},
		{"rmdir", func() error { return os.Remove(filepath.Join(d, "sub")) }, []string{d}},
	} {
		for _, dir := range change.dirs {
			must(t, os.Chtimes(dir, past, past))
		}
		before := time.Now().Add(-time.Second) // ctime is the server's clock
		must(t, change.do())
		for _, dir := range change.dirs {
			st := stat(t, dir)
			if st.Mtim.Sec < before.Unix() || st.Ctim.Sec < before.Unix() {
				t.Errorf("%d %s: %s has mtime %v ctime %v, want now", i, change.what, dir, time.Unix(st.Mtim.Unix()), time.Unix(st.Ctim.Unix()))
			}
		}
	}
	want := stat(t, d).Mtim
	syncDir(t, pg)
	s.stop()
	s = mountAt(t, repo, s.mnt)
	if got := stat(t, d).Mtim; got != want {
		t.Errorf("mtime after a remount %v, want %v", got, want)
	}
}

// Reads advance the access time as Linux's relatime does: the first read
// after a change, then at most once a day. The new time shows at once (with
// no attribute caching: the kernel serves a read of cached pages and a stat
// from its caches) and survives a remount; reading makes no commit, before
// or at the unmount (an access time stays on the device: a commit would
// sync). Reading history changes nothing.
func TestRelatime(t *testing.T) {
	t.Parallel()
	repo := t.TempDir()
	s := mount(t, repo, "--cache-timeout", "0")
	pg := s.page("l", "p")
	f := filepath.Join(pg, "f")
	must(t, os.WriteFile(f, []byte("content"), 0o644))
	syncDir(t, pg)
	written := stat(t, f)
	if written.Atim != written.Mtim {
		t.Fatalf("a new file's atime %v, want its mtime %v", written.Atim, written.Mtim)
	}
	// An open is no read: Linux moves the access time when a descriptor
	// is read (go-fuse's FstatDeleted compares a stat with an fstat of a
	// descriptor opened after it).
	fd, err := os.Open(f)
	must(t, err)
	var opened unix.Stat_t
	must(t, unix.Fstat(int(fd.Fd()), &opened))
	fd.Close()
	if opened.Atim != written.Atim {
		t.Fatalf("an open without a read moved the atime from %v to %v", written.Atim, opened.Atim)
	}
	read := func() {
		t.Helper()
		if b, err := os.ReadFile(f); err != nil || string(b) != "content" {
			t.Fatalf("read: %q %v", b, err)
		}
	}
	read()
	first := stat(t, f)
	if !timeAfter(first.Atim, first.Mtim) {
		t.Fatalf("after the first read: atime %v, mtime %v: want a later atime", first.Atim, first.Mtim)
	}
	syncDir(t, pg)
	meta := filepath.Join(pg, ".ledger")
	commits := commitCount(t, meta)
	read() // not due: the atime is after the mtime and fresh
	syncDir(t, pg)
	if n := commitCount(t, meta); n != commits {
		t.Errorf("a read that was not due made %d commits", n-commits)
	}
	if st := stat(t, f); st.Atim != first.Atim {
		t.Errorf("atime moved from %v to %v on a read that was not due", first.Atim, st.Atim)
	}
	if vs := ls(t, filepath.Join(meta, "versions", "f")); len(vs) != 1 {
		t.Errorf("versions of f: %v, want one: an access time is no new version", vs)
	}
	if b, err := os.ReadFile(filepath.Join(meta, "latest", "f")); err != nil || string(b) != "content" {
		t.Fatalf("f in .ledger/latest: %q %v", b, err)
	}
	// An atime set before the mtime (touch -a) is due again.
	old := time.Date(2001, 1, 1, 0, 0, 0, 0, time.UTC)
	must(t, unix.UtimesNano(f, []unix.Timespec{unix.NsecToTimespec(old.UnixNano()), {Nsec: unix.UTIME_OMIT}}))
	read()
	if st := stat(t, f); st.Atim.Sec <= old.Unix() {
		t.Errorf("a read after touch -a to 2001 left atime at %v", st.Atim)
	}
	want := stat(t, f).Atim
	// More files read than one queued change holds: unmount commits them
	// all.
	many := filepath.Join(pg, "many")
	must(t, os.Mkdir(many, 0o755))
	for i := range 300 {
		must(t, os.WriteFile(filepath.Join(many, fmt.Sprint(i)), []byte("x"), 0o644))
	}
	syncDir(t, pg)
	commits = commitCount(t, meta)
	for i := range 300 {
		if _, err := os.ReadFile(filepath.Join(many, fmt.Sprint(i))); err != nil {
			t.Fatal(err)
		}
	}
	syncDir(t, pg)
	s.stop()
	s = mountAt(t, repo, s.mnt, "--cache-timeout", "0")
	if n := commitCount(t, meta); n != commits {
		t.Errorf("reading 300 files and an unmount made %d commits, want none", n-commits)
	}
	if st := stat(t, f); st.Atim != want {
		t.Errorf("atime after a remount %v, want %v", st.Atim, want)
	}
	for i := range 300 {
		if st := stat(t, filepath.Join(many, fmt.Sprint(i))); !timeAfter(st.Atim, st.Mtim) {
			t.Fatalf("many/%d after a remount: atime %v not after its mtime %v", i, st.Atim, st.Mtim)
		}
	}
}

// The root, a ledger and .ledger/latest show times of the repository and
// the page, not the epoch: ls -l and find -newer read them.
func TestTimesOfRootLedgersAndLatest(t *testing.T) {
	t.Parallel()
	start := time.Now().Add(-time.Second) // file times are whole seconds on some filesystems
	s := mount(t, t.TempDir())
	pg := s.page("l", "p")
	must(t, os.WriteFile(filepath.Join(pg, "f"), []byte("x"), 0o644))
	syncDir(t, pg)
	for _, path := range []string{s.mnt, filepath.Join(s.mnt, "l"), filepath.Join(pg, ".ledger", "latest")} {
		var st syscall.Stat_t
		must(t, syscall.Lstat(path, &st))
		for name, ts := range map[string]syscall.Timespec{"mtime": st.Mtim, "ctime": st.Ctim, "atime": st.Atim} {
			if when := time.Unix(ts.Unix()); when.Before(start) || when.After(time.Now().Add(time.Minute)) {
				t.Errorf("%s: %s %v, want a time since the test began (%v)", path, name, when, start)
			}
		}
	}
}

// Directories made and removed without a commit each (mkdir and rmdir are
// queued as closes and unlinks are) show as POSIX says at once and after a
// remount: a directory keeps the mode it was made with when its last file
// goes before its marker lands; rmdir refuses a directory holding a file
// or directory, pending or queued, takes one emptied by queued unlinks,
// and shares commits; link counts follow every change.
func TestQueuedDirectories(t *testing.T) {
	t.Parallel()
	repo := t.TempDir()
	s := mount(t, repo)
	pg := s.page("l", "p")
	p := func(n string) string { return filepath.Join(pg, n) }
	stat := func(n string) syscall.Stat_t {
		t.Helper()
		var st syscall.Stat_t
		must(t, syscall.Lstat(p(n), &st))
		return st
	}
	rmdirIs := func(n string, want error) {
		t.Helper()
		if err := syscall.Rmdir(p(n)); err != want {
			t.Fatalf("rmdir %s: %v, want %v", n, err, want)
		}
	}

	must(t, syscall.Mkdir(p("m"), 0o700))
	must(t, os.WriteFile(p("m/f"), nil, 0o644))
	must(t, os.Remove(p("m/f")))
	if got := stat("m").Mode & 0o7777; got != 0o700 {
		t.Errorf("a directory made 0700 whose only file went: mode %o", got)
	}

	must(t, os.Mkdir(p("a"), 0o755))
	f, err := os.Create(p("a/open"))
	must(t, err)
	rmdirIs("a", syscall.ENOTEMPTY) // a file open, not committed
	must(t, f.Close())
	rmdirIs("a", syscall.ENOTEMPTY) // its commit queued
	must(t, os.Remove(p("a/open")))
	must(t, os.Mkdir(p("a/sub"), 0o755))
	rmdirIs("a", syscall.ENOTEMPTY) // a directory's marker queued
	if n := stat("a").Nlink; n != 3 {
		t.Errorf("a with one subdirectory: %d links, want 3", n)
	}
	rmdirIs("a/sub", nil)
	if n := stat("a").Nlink; n != 2 {
		t.Errorf("a after rmdir a/sub: %d links, want 2", n)
	}
	rmdirIs("a", nil)
	if _, err := os.Lstat(p("a")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("a after rmdir: %v", err)
	}
	must(t, os.WriteFile(p("file"), nil, 0o644))
	rmdirIs("file", syscall.ENOTDIR)
	rmdirIs("none", syscall.ENOENT)

	// A storm of mkdir and rmdir in one directory, some names made again
	// with another mode, its link count read between.
	must(t, os.Mkdir(p("s"), 0o755))
	want := map[string]uint32{}
	const n = 300
	for i := range n {
		name := fmt.Sprintf("s/d%03d", i)
		must(t, syscall.Mkdir(p(name), 0o700))
		want[name] = 0o700
	}
	before := commitCount(t, filepath.Join(pg, ".ledger"))
	for i := 0; i < n; i += 2 {
		name := fmt.Sprintf("s/d%03d", i)
		rmdirIs(name, nil)
		delete(want, name)
		if i%6 == 0 {
			must(t, syscall.Mkdir(p(name), 0o750))
			want[name] = 0o750
		}
		if got := stat("s").Nlink; got != uint64(2+len(want)) {
			t.Fatalf("s after %s: %d links, want %d", name, got, 2+len(want))
		}
	}
	syncDir(t, pg)
	commits := commitCount(t, filepath.Join(pg, ".ledger")) - before
	t.Logf("%d rmdirs and %d mkdirs landed in %d commits", n/2, n/6, commits)
	if commits >= n/2 {
		t.Errorf("%d rmdirs made %d commits: they waited for one each", n/2, commits)
	}
	check := func(when string) {
		t.Helper()
		es, err := os.ReadDir(p("s"))
		must(t, err)
		if len(es) != len(want) {
			t.Errorf("%s: s lists %d entries, want %d", when, len(es), len(want))
		}
		for _, e := range es {
			name := "s/" + e.Name()
			if m, ok := want[name]; !ok {
				t.Errorf("%s: %s listed, removed", when, name)
			} else if got := stat(name).Mode & 0o7777; got != m {
				t.Errorf("%s: %s mode %o, want %o", when, name, got, m)
			}
		}
		if got := stat("s").Nlink; got != uint64(2+len(want)) {
			t.Errorf("%s: s has %d links, want %d", when, got, 2+len(want))
		}
		if got := stat("m").Mode & 0o7777; got != 0o700 {
			t.Errorf("%s: m mode %o, want 0700", when, got)
		}
	}
	check("served")
	s.stop()
	s = mountAt(t, repo, s.mnt)
	check("after a remount")
}

// A file's rename keeps every directory's count of subdirectories: the
// count walks the directory's names, and the kernel asks for the
// directory's attributes after every rename, so recounting after each made
// renaming in a directory of n names cost n steps (rsync, editors and
// package managers rename every file they write). The links stay right.
func TestFileRenamesKeepSubdirectoryCounts(t *testing.T) {
	t.Parallel()
	pg := mountBuilt(t, 50000, 1)
	mnt := filepath.Dir(filepath.Dir(pg))
	p := func(n string) string { return filepath.Join(pg, n) }
	lookups := func() float64 {
		s := statsOf(t, mnt)
		return s[`ledgerfs_cache_lookups_total{cache="node",result="hit"}`] + s[`ledgerfs_cache_lookups_total{cache="node",result="miss"}`]
	}
	links := func(when string) {
		t.Helper()
		var st syscall.Stat_t
		must(t, syscall.Stat(pg, &st))
		if st.Nlink != 3 {
			t.Fatalf("%s: the page's directory has %d links, want 3", when, st.Nlink)
		}
	}
	must(t, os.Mkdir(p("sub"), 0o755))
	links("after mkdir")
	// A directory's rename changes counts: the next stat counts again.
	before := lookups()
	must(t, os.Rename(p("sub"), p("sub2")))
	links("after the directory's rename")
	recount := lookups() - before

	const n = 20
	before = lookups()
	for i := range n {
		must(t, os.Rename(p("k000001"), p("moved")))
		links(fmt.Sprint("after rename ", i))
		must(t, os.Rename(p("moved"), p("k000001")))
		links(fmt.Sprint("after rename back ", i))
	}
	per := (lookups() - before) / (2 * n)
	t.Logf("node lookups: %v for a directory's rename and a stat that counts, %.1f for a file's rename and a stat", recount, per)
	if per > recount/3 {
		t.Errorf("a file's rename and a stat cost %.1f node lookups, a count of the directory's subdirectories %v: the rename made the stat count again", per, recount)
	}
}

// A file renamed again before its last rename landed is renamed as a
// queued change too (stress-ng --rename, mv a b; mv b c): each such rename
// waited for a commit of the one before. The chain leaves the file, its
// content and mode at the last name and nothing at the others, served and
// after a remount, in far fewer commits than renames.
func TestRenameChainsQueue(t *testing.T) {
	t.Parallel()
	repo := t.TempDir()
	s := mount(t, repo)
	pg := s.page("l", "p")
	p := func(n string) string { return filepath.Join(pg, n) }
	data := content(3, 10000)
	must(t, os.WriteFile(p("f0"), data, 0o640))
	// Served anew, the file is in the tree, and the node renamed has
	// committed nothing.
	s.stop()
	s = mountAt(t, repo, s.mnt)
	before := commitCount(t, filepath.Join(pg, ".ledger"))
	const n = 50
	for i := range n {
		must(t, os.Rename(p(fmt.Sprint("f", i)), p(fmt.Sprint("f", i+1))))
	}
	must(t, os.Rename(p(fmt.Sprint("f", n)), p("last")))
	check := func(when string) {
		t.Helper()
		es, err := os.ReadDir(pg)
		must(t, err)
		var names []string
		for _, e := range es {
			names = append(names, e.Name())
		}
		if !slices.Equal(names, []string{"last"}) {
			t.Fatalf("%s: the page lists %v, want [last]", when, names)
		}
		for i := 0; i <= n; i++ {
			if _, err := os.Lstat(p(fmt.Sprint("f", i))); !errors.Is(err, os.ErrNotExist) {
				t.Fatalf("%s: f%d: %v, want it gone", when, i, err)
			}
		}
		b, err := os.ReadFile(p("last"))
		must(t, err)
		st, err := os.Lstat(p("last"))
		must(t, err)
		if !bytes.Equal(b, data) || st.Mode().Perm() != 0o640 {
			t.Fatalf("%s: last holds %d bytes (equal: %v), mode %v", when, len(b), bytes.Equal(b, data), st.Mode())
		}
	}
	check("served")
	syncDir(t, pg)
	commits := commitCount(t, filepath.Join(pg, ".ledger")) - before
	t.Logf("%d renames landed in %d commits", n+1, commits)
	if commits >= n/2 {
		t.Errorf("%d renames made %d commits: each waited for the one before", n+1, commits)
	}
	check("landed")
	s.stop()
	s = mountAt(t, repo, s.mnt)
	check("after a remount")
}

// Sparse files: the holes a truncate or a write past the end leaves are
// stored as counts of zeros (cas.Writer.WriteZeros), and every byte reads
// back as the same steps leave a native file, served and after a remount:
// a file grown from nothing, one grown from content already committed,
// writes that start and end in holes, and a hole at the end.
func TestSparseFiles(t *testing.T) {
	t.Parallel()
	repo := t.TempDir()
	s := mountPlain(t, repo)
	pg := s.page("l", "p")
	native := t.TempDir()
	r := rand.New(rand.NewPCG(5, 8))
	both := func(name string, step func(f *os.File) error) {
		t.Helper()
		for _, dir := range []string{pg, native} {
			f, err := os.OpenFile(filepath.Join(dir, name), os.O_RDWR|os.O_CREATE, 0o644)
			must(t, err)
			must(t, step(f))
			must(t, f.Close())
		}
	}
	writes := func(f *os.File, size int64, seed int) error {
		w := rand.New(rand.NewPCG(uint64(seed), 1))
		for i := range 4 {
			if _, err := f.WriteAt(content(seed*10+i, 1+w.IntN(3<<20)), w.Int64N(size)); err != nil {
				return err
			}
		}
		return nil
	}
	const mib = 1 << 20
	names := []string{"grown", "based", "tail"}
	both("grown", func(f *os.File) error {
		if err := f.Truncate(40 * mib); err != nil {
			return err
		}
		return writes(f, 40*mib, 1)
	})
	base := content(2, 3*mib+r.IntN(mib))
	both("based", func(f *os.File) error { _, err := f.Write(base); return err })
	both("based", func(f *os.File) error {
		if err := f.Truncate(48 * mib); err != nil {
			return err
		}
		return writes(f, 48*mib, 3)
	})
	both("tail", func(f *os.File) error {
		if _, err := f.WriteAt(content(4, 5000), 7*mib+3); err != nil {
			return err
		}
		return f.Truncate(30*mib + 17)
	})
	check := func(when string) {
		t.Helper()
		for _, n := range names {
			if got, want := sha(t, filepath.Join(pg, n)), sha(t, filepath.Join(native, n)); got != want {
				t.Errorf("%s: %s reads other bytes than the native file", when, n)
			}
		}
	}
	check("served")
	syncDir(t, pg)
	s.stop()
	s = mountAt(t, repo, s.mnt)
	check("after a remount")
}
