package mount_test

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

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
