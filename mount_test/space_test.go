package mount_test

import (
	"bytes"
	"crypto/sha256"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/ledgerfs/ledgerfs/internal/testutil"
)

// smallDisk mounts a tmpfs of size bytes for the test.
func smallDisk(t *testing.T, size int) string {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("mounting a small filesystem needs root")
	}
	dir := filepath.Join(t.TempDir(), "disk")
	if err := os.Mkdir(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := unix.Mount("tmpfs", dir, "tmpfs", 0, fmt.Sprintf("size=%d", size)); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { unix.Unmount(dir, unix.MNT_DETACH) })
	return dir
}

// waitForContent waits until the file at name holds want: a failed
// rewrite leaves the file's committed content once the kernel releases
// the descriptor, after close returns.
func waitForContent(t *testing.T, name string, want []byte) {
	t.Helper()
	waitForRead(t, func() ([]byte, error) { return os.ReadFile(name) }, want)
}

// waitForRead waits up to 5 s for read to return want.
func waitForRead(t *testing.T, read func() ([]byte, error), want []byte) {
	t.Helper()
	for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		got, err := read()
		if err == nil && bytes.Equal(got, want) {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("after the failed rewrite: %d bytes (%v), want the %d committed before", len(got), err, len(want))
		}
	}
}

// fullDisk serves a repository on a tmpfs of size bytes that also holds a
// ballast file, to be removed to make room; it returns the repository,
// the ballast, the server (keeping 16 MiB free) and a page.
func fullDisk(t *testing.T, size, ballastSize int) (repo, ballast string, s *server, pg string) {
	disk := smallDisk(t, size)
	repo = filepath.Join(disk, "repo")
	ballast = filepath.Join(disk, "ballast")
	if err := os.WriteFile(ballast, make([]byte, ballastSize), 0o644); err != nil {
		t.Fatal(err)
	}
	s = mount(t, repo, "--reserve", "16M")
	return repo, ballast, s, s.page("l", "p")
}

// Badger writes through mapped files, and a write to a mapped file on a
// full filesystem kills the process with SIGBUS. The mount must refuse
// changes with ENOSPC before that, keep serving, keep what was committed,
// and take changes again once there is room.
func TestDiskFull(t *testing.T) {
	repo, ballast, s, pg := fullDisk(t, 96<<20, 32<<20)
	kept := map[string][]byte{}
	var failed string
	for i := 0; i < 30 && failed == ""; i++ {
		name := fmt.Sprintf("f%02d", i)
		data := content(i, 4<<20)
		switch err := os.WriteFile(filepath.Join(pg, name), data, 0o644); {
		case err == nil:
			kept[name] = data
		case errors.Is(err, syscall.ENOSPC):
			failed = name
		default:
			t.Fatalf("write %s: %v, want ENOSPC once full", name, err)
		}
	}
	if failed == "" {
		t.Fatalf("30 files of 4 MiB fit on a 96 MiB disk:\n%s", s.log)
	}
	if len(kept) < 5 {
		t.Fatalf("only %d files written before ENOSPC: the reserve is taken too early", len(kept))
	}
	if s.cmd.ProcessState != nil || !mounted(s.mnt) {
		t.Fatalf("server gone after ENOSPC:\n%s", s.log)
	}
	// The reserve held: the writes stopped with most of it still free
	// (piece batches that statfs could not see yet count too).
	var ds unix.Statfs_t
	if err := unix.Statfs(repo, &ds); err != nil {
		t.Fatal(err)
	}
	if free := ds.Bavail * uint64(ds.Bsize); free < 12<<20 {
		t.Errorf("%d bytes free on the disk when writes stopped, want most of the 16 MiB reserve", free)
	}

	// The mount says it is full; what failed never appeared; every name
	// listed can be looked up.
	var st unix.Statfs_t
	if err := unix.Statfs(pg, &st); err != nil {
		t.Fatal(err)
	}
	if avail := st.Bavail * uint64(st.Bsize); avail >= 4<<20 {
		t.Errorf("statfs of the full mount: %d bytes available", avail)
	}
	// The kernel releases the file after close returns; then it goes.
	for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		_, err := os.Lstat(filepath.Join(pg, failed))
		if errors.Is(err, os.ErrNotExist) {
			break
		}
		if time.Now().After(deadline) {
			fi, _ := os.Lstat(filepath.Join(pg, failed))
			t.Fatalf("file whose close failed: lstat %v %v 5 s later, want ENOENT\n%s", err, fi.Size(), s.log)
		}
	}
	ents, err := os.ReadDir(pg)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range ents {
		if _, err := os.Lstat(filepath.Join(pg, e.Name())); err != nil {
			t.Errorf("listed %s: %v", e.Name(), err)
		}
	}
	if len(ents) != len(kept) {
		t.Errorf("%d names listed, want the %d written", len(ents), len(kept))
	}

	// Changes that add no content still have room (half the reserve).
	if err := os.Mkdir(filepath.Join(pg, "dir"), 0o755); err != nil {
		t.Errorf("mkdir on a full disk: %v", err)
	}
	if err := os.Rename(filepath.Join(pg, "f00"), filepath.Join(pg, "dir", "f00")); err != nil {
		t.Errorf("rename on a full disk: %v", err)
	}
	kept["dir/f00"] = kept["f00"]
	delete(kept, "f00")

	// Room again once space is freed on the disk.
	if err := os.Remove(ballast); err != nil {
		t.Fatal(err)
	}
	data := content(100, 4<<20)
	if err := os.WriteFile(filepath.Join(pg, failed), data, 0o644); err != nil {
		t.Fatalf("write after freeing space: %v", err)
	}
	kept[failed] = data

	check := func(when string) {
		t.Helper()
		for name, want := range kept {
			got, err := os.ReadFile(filepath.Join(s.mnt, "l", "p", name))
			if err != nil || !bytes.Equal(got, want) {
				t.Errorf("%s: %s: %d bytes (%v), want the %d written", when, name, len(got), err, len(want))
			}
		}
	}
	check("mounted")
	s.stop()
	if !strings.Contains(s.log.String(), "nearly full") {
		t.Errorf("server did not log the full disk:\n%s", s.log)
	}
	s = mount(t, repo, "--reserve", "16M")
	check("remounted")
}

// A file whose first commit failed leaves no name, but the kernel keeps
// its inode while anything refers to it (here a descriptor opened with
// O_PATH, which sends nothing to the server), and its name until the
// server's notice lands. Writing the name again at once, as a retried cp
// does, must make a new file, not reach the failed one.
func TestCreateAgainAfterFailedClose(t *testing.T) {
	_, ballast, s, pg := fullDisk(t, 64<<20, 24<<20)
	var name string
	var held int
	for i := 0; name == ""; i++ {
		if i == 30 {
			t.Fatalf("30 files of 4 MiB fit on a 64 MiB disk:\n%s", s.log)
		}
		n := filepath.Join(pg, fmt.Sprintf("f%02d", i))
		f, err := os.Create(n)
		if err != nil {
			t.Fatal(err)
		}
		fd, err := unix.Open(n, unix.O_PATH, 0)
		if err != nil {
			f.Close()
			t.Fatal(err)
		}
		_, werr := f.Write(content(i, 4<<20))
		cerr := f.Close()
		switch err := errors.Join(werr, cerr); {
		case err == nil:
			unix.Close(fd)
		case errors.Is(err, syscall.ENOSPC):
			name, held = n, fd
		default:
			unix.Close(fd)
			t.Fatalf("write %s: %v, want ENOSPC once full", n, err)
		}
	}
	defer unix.Close(held)
	if err := os.Remove(ballast); err != nil {
		t.Fatal(err)
	}
	data := content(100, 1<<20)
	if err := os.WriteFile(name, data, 0o644); err != nil {
		t.Fatalf("write again once there is room: %v", err)
	}
	if got, err := os.ReadFile(name); err != nil || !bytes.Equal(got, data) {
		t.Fatalf("read back: %d bytes (%v), want the %d written", len(got), err, len(data))
	}
}

// A write that fails for want of space loses the bytes the file's stream
// had taken. Writing on through the same descriptor once there is room
// again must not commit the file with zeros in their place: the descriptor
// keeps failing, and the file keeps its last committed content.
func TestDiskFullMidFile(t *testing.T) {
	repo, ballast, s, pg := fullDisk(t, 64<<20, 24<<20)
	seed := 0
	block := func() []byte {
		seed++
		return content(seed, 1<<20)
	}
	old := block()
	name := filepath.Join(pg, "old")
	if err := os.WriteFile(name, old, 0o644); err != nil {
		t.Fatal(err)
	}
	// Read once it is committed: the kernel may keep its pages across the
	// next open, and must not keep those of the rewrite that fails.
	syncDir(t, pg)
	waitForContent(t, name, old)
	// A reader open across the rewrite reads the kernel's pages.
	reader, err := os.Open(name)
	if err != nil {
		t.Fatal(err)
	}
	defer reader.Close() // if the test ends early; closed before the remount

	f, err := os.OpenFile(name, os.O_WRONLY|os.O_TRUNC, 0)
	if err != nil {
		t.Fatal(err)
	}
	var werr error
	for i := 0; i < 64 && werr == nil; i++ {
		_, werr = f.Write(block())
	}
	if !errors.Is(werr, syscall.ENOSPC) {
		f.Close()
		t.Fatalf("rewriting a file on a full disk: %v, want ENOSPC", werr)
	}
	if err := os.Remove(ballast); err != nil {
		t.Fatal(err)
	}
	if _, err := f.Write(block()); err == nil {
		t.Errorf("write after a failed one, with room again: no error, though the bytes before it are lost")
	}
	if err := f.Close(); err == nil {
		t.Errorf("close after a failed write: no error")
	}
	// Once the descriptor is released, the change is dropped, and the
	// kernel's pages of it with it.
	s.log.await(t, "change dropped")
	// First through the descriptor held open (an open would drop the
	// pages for it too), then through a new one.
	waitForRead(t, func() ([]byte, error) {
		b := make([]byte, len(old))
		n, err := reader.ReadAt(b, 0)
		if err == io.EOF {
			err = nil
		}
		return b[:n], err
	}, old)
	reader.Close()
	if got, err := os.ReadFile(name); err != nil || !bytes.Equal(got, old) {
		t.Fatalf("after the failed rewrite: %d bytes (%v), want the %d committed before", len(got), err, len(old))
	}
	s.stop()
	s = mount(t, repo)
	if got, err := os.ReadFile(filepath.Join(s.mnt, "l", "p", "old")); err != nil || !bytes.Equal(got, old) {
		t.Errorf("remounted: %d bytes (%v), want the %d committed before", len(got), err, len(old))
	}
}

// A page opened while the disk is full cannot be opened for changes, which
// write: it is opened read-only, so its files stay readable, and for
// changes again once there is room.
func TestReadOnFullDisk(t *testing.T) {
	repo, ballast, s, pg := fullDisk(t, 64<<20, 1<<20)
	data := content(1, 4<<20)
	if err := os.WriteFile(filepath.Join(pg, "a"), data, 0o644); err != nil {
		t.Fatal(err)
	}
	s.stop()
	// Fill the disk up to its last MiB, below a quarter of the reserve.
	if err := os.Remove(ballast); err != nil {
		t.Fatal(err)
	}
	var st unix.Statfs_t
	if err := unix.Statfs(repo, &st); err != nil {
		t.Fatal(err)
	}
	fill := int(st.Bavail*uint64(st.Bsize)) - 1<<20
	if err := os.WriteFile(ballast, make([]byte, fill), 0o644); err != nil {
		t.Fatal(err)
	}

	s = mount(t, repo, "--reserve", "16M")
	pg = filepath.Join(s.mnt, "l", "p")
	if got, err := os.ReadFile(filepath.Join(pg, "a")); err != nil || !bytes.Equal(got, data) {
		t.Fatalf("read on a full disk: %d bytes (%v), want the %d written", len(got), err, len(data))
	}
	if err := os.WriteFile(filepath.Join(pg, "b"), []byte("b"), 0o644); !errors.Is(err, syscall.ENOSPC) {
		t.Errorf("write on a full disk: %v, want ENOSPC", err)
	}
	if err := os.Mkdir(filepath.Join(pg, "d"), 0o755); !errors.Is(err, syscall.ENOSPC) {
		t.Errorf("mkdir on a full disk: %v, want ENOSPC", err)
	}

	// A descriptor open when room comes back holds the page read-only; a
	// change waits for its users to leave (a descriptor just closed is
	// released after close returns), then reopens it for changes.
	reader, err := os.Open(filepath.Join(pg, "a"))
	if err != nil {
		t.Fatal(err)
	}
	defer reader.Close() // if the test ends early
	if err := os.Remove(ballast); err != nil {
		t.Fatal(err)
	}
	more := content(2, 2<<20)
	wrote, done := make(chan error, 1), make(chan struct{})
	go func() {
		wrote <- os.WriteFile(filepath.Join(pg, "c"), more, 0o644)
		close(done)
	}()
	// Closed once the change has seen the room (or has ended without).
	s.log.untilAfter(0, "has room again", done)
	reader.Close()
	if err := <-wrote; err != nil {
		t.Fatalf("write once there is room: %v", err)
	}
	s.stop()
	if !strings.Contains(s.log.String(), "opened read-only") {
		t.Errorf("server did not log the read-only open:\n%s", s.log)
	}
	s = mount(t, repo)
	for name, want := range map[string][]byte{"a": data, "c": more} {
		if got, err := os.ReadFile(filepath.Join(s.mnt, "l", "p", name)); err != nil || !bytes.Equal(got, want) {
			t.Errorf("remounted: %s: %d bytes (%v), want %d", name, len(got), err, len(want))
		}
	}
}

// Writes at random offsets into an existing file go to a spool on the
// repository's filesystem until the close merges them. The spool must
// leave the reserve too: a full disk under it would crash the mount at
// Badger's next write.
func TestDiskFullRandomWrites(t *testing.T) {
	repo, ballast, s, pg := fullDisk(t, 64<<20, 8<<20)
	name := filepath.Join(pg, "old")
	defer func() {
		if s.cmd.ProcessState != nil || !mounted(s.mnt) {
			t.Errorf("server gone:\n%s", s.log)
		}
	}()
	old := content(1, 1<<20)
	if err := os.WriteFile(name, old, 0o644); err != nil {
		t.Fatal(err)
	}
	f, err := os.OpenFile(name, os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	var werr error
	for i := 0; i < 100 && werr == nil; i++ {
		_, werr = f.WriteAt(content(i+2, 1<<20), int64(2*i+2)<<20)
	}
	if !errors.Is(werr, syscall.ENOSPC) {
		f.Close()
		t.Fatalf("writes at offsets on a full disk: %v, want ENOSPC", werr)
	}
	var ds unix.Statfs_t
	if err := unix.Statfs(repo, &ds); err != nil {
		t.Fatal(err)
	}
	if free := ds.Bavail * uint64(ds.Bsize); free < 12<<20 {
		t.Errorf("%d bytes free on the disk when the spool stopped, want most of the 16 MiB reserve", free)
	}
	if err := f.Close(); err == nil {
		t.Errorf("close of a file whose changes cannot be stored: no error")
	}
	// The spool is gone with the last descriptor, and the file is as it
	// was committed.
	if err := os.Remove(ballast); err != nil {
		t.Fatal(err)
	}
	waitForContent(t, name, old)
	if err := os.WriteFile(filepath.Join(pg, "new"), content(200, 4<<20), 0o644); err != nil {
		t.Errorf("write once the spool is gone: %v", err)
	}
}

// History yields to live data: on a 400 MiB filesystem, overwriting a
// 60 MiB file 12 times (30 with -long) fills it with history by the 7th
// write unless the oldest history goes first. Every write succeeds, the
// last content is whole, the newest versions are still browsable, and the
// log says once what went and why.
func TestHistoryYieldsToLiveData(t *testing.T) {
	t.Parallel()
	disk := smallDisk(t, 400<<20)
	// A background collection is due after every write: the pruning for
	// space must stop it and keep it off the page until the space is
	// given back.
	s := mountPlain(t, filepath.Join(disk, "repo"), "--collect-after", "1MiB")
	pg := s.page("l", "p")
	const size = 60 << 20
	buf := make([]byte, size)
	var last [32]byte
	writes := 12
	if *long {
		writes = 30
	}
	for i := range writes {
		testutil.FillRandom(buf, uint64(i), 11)
		if err := os.WriteFile(filepath.Join(pg, "f"), buf, 0o644); err != nil {
			var st unix.Statfs_t
			unix.Statfs(disk, &st)
			t.Fatalf("write %d of %d: %v (%d MiB free)\n%s", i+1, writes, err, st.Bavail*uint64(st.Bsize)>>20, s.log)
		}
		last = sha256.Sum256(buf)
	}
	syncDir(t, pg)
	if got := sha(t, filepath.Join(pg, "f")); got != fmt.Sprintf("%x", last) {
		t.Fatalf("the last write reads back as %s, want %x", got, last)
	}
	vs := ls(t, filepath.Join(pg, ".ledger", "versions", "f"))
	if len(vs) < 2 {
		t.Fatalf("versions of f after the writes: %v, want the newest ones kept", vs)
	}
	if got := sha(t, filepath.Join(pg, ".ledger", "versions", "f", vs[len(vs)-1])); got != fmt.Sprintf("%x", last) {
		t.Fatalf("the newest version %s is %s, want the last write's %x", vs[len(vs)-1], got, last)
	}
	if n := strings.Count(s.log.String(), "pruned history beyond the newest commits"); n != 1 {
		t.Fatalf("the log says %d times that history was pruned for space, want once:\n%s", n, s.log)
	}
}

// On a disk that stays short of space, a page pruned for it is not pruned
// again at every create, and creates do not wait for the commits before
// them: closes share commits as on a roomy disk. (Each create settled the
// page while the disk was short, so every file took a commit of its own.)
func TestCreatesShareCommitsOnAShortDisk(t *testing.T) {
	t.Parallel()
	disk := smallDisk(t, 400<<20)
	// 300 MiB of ballast leave ~100 MiB free, below --prune-below.
	must(t, os.WriteFile(filepath.Join(disk, "ballast"), make([]byte, 300<<20), 0o644))
	s := mountPlain(t, filepath.Join(disk, "repo"), "--reserve", "16M", "--prune-below", "200M")
	pg := s.page("l", "p")
	for i := range 4 { // history to prune, a step of free space apart
		must(t, os.WriteFile(filepath.Join(pg, "f"), content(i, 12<<20), 0o644))
	}
	syncDir(t, pg)
	must(t, os.WriteFile(filepath.Join(pg, "g"), nil, 0o644))
	syncDir(t, pg)
	meta := filepath.Join(pg, ".ledger")
	before := commitCount(t, meta)
	const n = 300
	for i := range n {
		must(t, os.WriteFile(filepath.Join(pg, fmt.Sprintf("s%03d", i)), content(100+i, 4<<10), 0o644))
	}
	syncDir(t, pg)
	commits := commitCount(t, meta) - before
	t.Logf("%d creates on a short disk landed in %d commits", n, commits)
	if commits >= n/2 {
		t.Errorf("%d creates on a short disk made %d commits: each waited for the one before", n, commits)
	}
	if !strings.Contains(s.log.String(), "pruned history beyond the newest commits") {
		t.Errorf("the disk was short, yet nothing was pruned for space:\n%s", s.log)
	}
}

// Deleting files frees room for new ones on a full disk: on a 300 MiB
// filesystem, 4 files of 60 MiB written and deleted, then 4 new ones
// written, all succeed; and after a disk filled to ENOSPC with files of
// 20 MiB, 4 of them deleted, 3 new ones of 20 MiB fit (a fourth may not:
// the fill stops at the reserve, and the deleted files' 80 MiB come back
// less what tree nodes, index pieces and Badger's own files took). The
// history that held the deleted files yields, and the log says once what
// went.
//
// The filled disk failed once in three CI runs: the first new file got
// ENOSPC with 19 MiB free. The fill had pruned the page, and stopped
// within a Step of that pruning; the deletes took nothing more of the
// disk, so no pruning was due. A page that removed a Step of content since
// its last pruning is now due (gc.Pressure.Removed).
func TestDeletesMakeRoomOnAFullDisk(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		name string
		size int
		fill bool
	}{{"60 MiB files", 60 << 20, false}, {"filled to ENOSPC", 20 << 20, true}} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			disk := smallDisk(t, 300<<20)
			s := mountPlain(t, filepath.Join(disk, "repo"))
			pg := s.page("l", "p")
			free := func() uint64 {
				var st unix.Statfs_t
				must(t, unix.Statfs(disk, &st))
				return st.Bavail * uint64(st.Bsize) >> 20
			}
			write := func(name string, seed int) error {
				return os.WriteFile(filepath.Join(pg, name), content(seed, c.size), 0o644)
			}
			var written []string
			for i := 0; ; i++ {
				name := fmt.Sprintf("old%02d", i)
				err := write(name, i)
				if err != nil && c.fill && errors.Is(err, syscall.ENOSPC) && i >= 5 {
					os.Remove(filepath.Join(pg, name))
					break
				}
				if err != nil {
					t.Fatalf("write %s: %v (%d MiB free)\n%s", name, err, free(), s.log)
				}
				written = append(written, name)
				if !c.fill && i == 3 {
					break
				}
			}
			syncDir(t, pg)
			t.Logf("%d files written, %d MiB free", len(written), free())
			for _, name := range written[:4] {
				must(t, os.Remove(filepath.Join(pg, name)))
			}
			syncDir(t, pg)
			t.Logf("4 deleted, %d MiB free", free())
			fresh := 4
			if c.fill {
				fresh = 3
			}
			for i := range fresh {
				name := fmt.Sprintf("new%02d", i)
				if err := write(name, 100+i); err != nil {
					t.Fatalf("write %s after the deletes: %v (%d MiB free)\n%s", name, err, free(), s.log)
				}
			}
			syncDir(t, pg)
			for i := range fresh {
				name := fmt.Sprintf("new%02d", i)
				if got, want := sha(t, filepath.Join(pg, name)), fmt.Sprintf("%x", sha256.Sum256(content(100+i, c.size))); got != want {
					t.Fatalf("%s reads back wrong", name)
				}
			}
			// Said once as a warning; later prunings log at debug level,
			// which a mount with --debug (to find a failure) shows.
			if n := strings.Count(s.log.String(), `level=WARN msg="filesystem nearly full: pruned history beyond the newest commits"`); n != 1 {
				t.Errorf("the log warns %d times that history was pruned for space, want once:\n%s", n, s.log)
			}
		})
	}
}

// A pruning for space runs in the background while there is room for the
// rewrite that found the disk short: the writer goes on, and the page is
// pruned once nobody uses it. (It ran in the writer's open: a write waited
// 21 s while fio wrote.) Only a write that would otherwise come within a
// reserve of failing, or of a new file, whose size is not known, waits for
// it (TestDeletesMakeRoomOnAFullDisk).
func TestPruningForSpaceDoesNotHoldTheWriter(t *testing.T) {
	t.Parallel()
	disk := smallDisk(t, 400<<20)
	// --prune-below auto: 4 reserves, 64 MiB; a writer waits below 2.
	s := mountPlain(t, filepath.Join(disk, "repo"), "--reserve", "16M")
	pg := s.page("l", "p")
	for i := range 3 {
		must(t, os.WriteFile(filepath.Join(pg, "big"), content(i, 60<<20), 0o644))
	}
	must(t, os.WriteFile(filepath.Join(pg, "small"), []byte("a small file\n"), 0o644))
	syncDir(t, pg)
	free := func() int64 {
		var st unix.Statfs_t
		must(t, unix.Statfs(disk, &st))
		return int64(st.Bavail) * st.Bsize
	}
	// Ballast beside the repository leaves 48 MiB free: short (below
	// 64 MiB), with room for a small write (above 32 MiB).
	ballast, err := os.Create(filepath.Join(disk, "ballast"))
	must(t, err)
	must(t, unix.Fallocate(int(ballast.Fd()), 0, 0, free()-48<<20))
	must(t, ballast.Close())
	before := free()
	start := time.Now()
	must(t, os.WriteFile(filepath.Join(pg, "small"), []byte("a small rewrite on a short disk\n"), 0o644))
	t.Logf("a small rewrite with %d MiB free took %v", before>>20, time.Since(start))
	// The pruning comes after the write, from the collector: the log says
	// its writer did not wait.
	s.log.await(t, `"writer waited"=false`)
	if after := free(); after < before+100<<20 {
		t.Fatalf("%d MiB free after the pruning, %d before: the two old versions of big (120 MiB) stayed", after>>20, before>>20)
	}
	if got := sha(t, filepath.Join(pg, "big")); got != fmt.Sprintf("%x", sha256.Sum256(content(2, 60<<20))) {
		t.Fatal("big reads back other than its last write")
	}
}
