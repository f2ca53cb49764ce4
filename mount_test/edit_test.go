package mount_test

import (
	"bytes"
	"crypto/sha256"
	"fmt"
	"hash/maphash"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// statsOf reads the mount's .stats file as name{labels} -> value.
func statsOf(t *testing.T, mnt string) map[string]float64 {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(mnt, ".stats"))
	must(t, err)
	return parseMetrics(t, b)
}

// 4 KiB writes and fdatasyncs into a large file commit by editing the
// file's value: the commits (fsyncs share them: each is durable through
// the sync log before it commits) chunk a few chunks per write, not the
// file, and every commit's version reads back as the file was then.
func TestSmallWritesCommitByEditing(t *testing.T) {
	t.Parallel()
	repo := t.TempDir()
	s := mountPlain(t, repo)
	pg := s.page("e", "p")
	path := filepath.Join(pg, "db")
	data := content(7, 48<<20)
	must(t, os.WriteFile(path, data, 0o644))
	syncDir(t, pg)
	before := statsOf(t, s.mnt)

	f, err := os.OpenFile(path, os.O_RDWR, 0)
	must(t, err)
	defer f.Close()
	r := rand.New(rand.NewPCG(3, 3))
	const writes = 40
	states := newStates(data)
	for i := range writes {
		off := r.Int64N(int64(len(data)) - 4096)
		if i == writes-1 {
			off = int64(len(data)) // the last one grows the file
		}
		block := content(100+i, 4096)
		_, err := f.WriteAt(block, off)
		must(t, err)
		must(t, unix.Fdatasync(int(f.Fd())))
		data = states.write(off, block)
		states.mark()
	}
	must(t, f.Close())
	if got, err := os.ReadFile(path); err != nil || !bytes.Equal(got, data) {
		t.Fatalf("the file after %d writes differs (%v)", writes, err)
	}

	after := statsOf(t, s.mnt)
	edits := after["ledgerfs_value_edits_total"] - before["ledgerfs_value_edits_total"]
	chunked := after[`ledgerfs_value_edit_bytes_total{what="chunked"}`] - before[`ledgerfs_value_edit_bytes_total{what="chunked"}`]
	probed := after[`ledgerfs_value_edit_bytes_total{what="probed"}`] - before[`ledgerfs_value_edit_bytes_total{what="probed"}`]
	if edits < 1 {
		t.Fatalf("no commit of %d writes edited the value", writes)
	}
	t.Logf("%v edits chunked %v bytes and probed %v: %.0f per write", edits, chunked, probed, (chunked+probed)/writes)
	if per := (chunked + probed) / writes; per > 256<<10 {
		t.Errorf("each write's commit chunked %.0f bytes of a %d-byte file", per, len(data))
	}

	// Each version is one of the file's states, the last its last. An
	// fsync does not wait for its commit (the sync log makes it durable),
	// so fsyncs in quick succession share commits, as closes do.
	vdir := filepath.Join(pg, ".ledger", "versions", "db")
	versions := ls(t, vdir)
	if len(versions) < 2 || len(versions) > writes+1 {
		t.Errorf("%d versions, want 2 to %d", len(versions), writes+1)
	}
	for _, v := range versions {
		b, err := os.ReadFile(filepath.Join(vdir, v))
		must(t, err)
		if !states.had(b) {
			t.Errorf("version %s is none of the file's states; %s", v, states.nearest(b))
		}
		if v == versions[len(versions)-1] && !bytes.Equal(b, data) {
			t.Errorf("the last version %s is not the file's last state", v)
		}
	}

	// Each commit marked the pieces it added local, and only those: none
	// is left transient, and every piece the versions reach is sound.
	s.stop()
	if out, code := fsck(t, repo); code != 0 || strings.Contains(out, "transient") {
		t.Errorf("fsck after the edits (exit %d):\n%s", code, out)
	}
}

// A file laid out first (fallocate or a truncation up, as fio does) and
// then written from its start reads back as written, with zeros where
// nothing was, whether the writes cover it, stop short of its end or jump
// ahead.
func TestWritesIntoLaidOutFile(t *testing.T) {
	t.Parallel()
	s := mountPlain(t, t.TempDir())
	pg := s.page("e", "p")
	data := content(9, 6<<20)
	for _, c := range []struct {
		name   string
		layout func(f *os.File) error
		writes [][2]int // offset, length into data
		size   int
	}{
		{"fallocate, covered", func(f *os.File) error { return unix.Fallocate(int(f.Fd()), 0, 0, 6<<20) }, [][2]int{{0, 6 << 20}}, 6 << 20},
		{"truncate, short", func(f *os.File) error { return f.Truncate(10 << 20) }, [][2]int{{0, 3 << 20}}, 10 << 20},
		{"fallocate, jump", func(f *os.File) error { return unix.Fallocate(int(f.Fd()), 0, 0, 8<<20) }, [][2]int{{0, 1 << 20}, {5 << 20, 1 << 20}, {1 << 20, 1 << 20}}, 8 << 20},
	} {
		want := make([]byte, c.size)
		path := filepath.Join(pg, strings.ReplaceAll(c.name, ", ", "-"))
		f, err := os.Create(path)
		must(t, err)
		must(t, c.layout(f))
		for _, w := range c.writes {
			_, err := f.WriteAt(data[w[0]:w[0]+w[1]], int64(w[0]))
			must(t, err)
			copy(want[w[0]:], data[w[0]:w[0]+w[1]])
		}
		must(t, f.Close())
		if got, err := os.ReadFile(path); err != nil || !bytes.Equal(got, want) {
			t.Errorf("%s: %d bytes read back (%v), want %d as written", c.name, len(got), err, len(want))
		}
	}
}

// TestWriteThenRenameIsQueued: the write-to-a-temporary-then-rename of
// rsync and editors commits in batches, as closes do, not once per rename:
// 200 files so written make far fewer commits than files; each shows at
// its final name with its content at once, the temporary names are gone,
// and so it stays after the commits landed and after a remount.
func TestWriteThenRenameIsQueued(t *testing.T) {
	t.Parallel()
	repo := t.TempDir()
	s := mount(t, repo)
	pg := s.page("l", "p")
	meta := filepath.Join(pg, ".ledger")
	before := commitCount(t, meta)
	const n = 200
	for i := range n {
		tmp := filepath.Join(pg, fmt.Sprintf(".f%03d.tmp", i))
		must(t, os.WriteFile(tmp, []byte(fmt.Sprint("content ", i)), 0o644))
		final := filepath.Join(pg, fmt.Sprintf("f%03d", i))
		must(t, os.Rename(tmp, final))
		if b, err := os.ReadFile(final); err != nil || string(b) != fmt.Sprint("content ", i) {
			t.Fatalf("right after its rename, %s holds %q (%v)", final, b, err)
		}
		if _, err := os.Stat(tmp); !os.IsNotExist(err) {
			t.Fatalf("right after the rename, %s: %v", tmp, err)
		}
	}
	check := func(when string) {
		t.Helper()
		names := ls(t, pg)
		if len(names) != n {
			t.Fatalf("%s: %d names in the page, want %d: %v", when, len(names), n, names)
		}
		checkNumbered(t, when, pg, n)
	}
	syncDir(t, pg)
	check("after the commits landed")
	// A rename that waited for a commit of its own gives about n commits.
	// Batches end after 40 ms without a change, which a loaded machine's
	// loop can take: 53 were seen there, 10 on a quiet one.
	made := commitCount(t, meta) - before
	t.Logf("%d files written and renamed made %d commits", n, made)
	if made > n/2 {
		t.Fatalf("%d files written and renamed made %d commits: the renames waited for commits of their own", n, made)
	}
	s.stop()
	s = mountAt(t, repo, s.mnt)
	check("after a remount")
}

// A file moved to another directory of its page is queued as a rename
// within one is: moves one after another share commits, each shows at
// once, both directories' times move, and all of it stays after a remount.
func TestMoveAcrossDirectoriesIsQueued(t *testing.T) {
	t.Parallel()
	repo := t.TempDir()
	s := mount(t, repo)
	pg := s.page("l", "p")
	meta := filepath.Join(pg, ".ledger")
	from, to := filepath.Join(pg, "from"), filepath.Join(pg, "to")
	must(t, os.Mkdir(from, 0o755))
	must(t, os.Mkdir(to, 0o755))
	const n = 200
	for i := range n {
		must(t, os.WriteFile(filepath.Join(from, fmt.Sprintf("f%03d", i)), []byte(fmt.Sprint("content ", i)), 0o644))
	}
	syncDir(t, pg)
	past := time.Unix(1, 0)
	must(t, os.Chtimes(from, past, past))
	must(t, os.Chtimes(to, past, past))
	syncDir(t, pg)
	before := commitCount(t, meta)
	for i := range n {
		name := fmt.Sprintf("f%03d", i)
		must(t, os.Rename(filepath.Join(from, name), filepath.Join(to, name)))
		if b, err := os.ReadFile(filepath.Join(to, name)); err != nil || string(b) != fmt.Sprint("content ", i) {
			t.Fatalf("right after its move, to/%s holds %q (%v)", name, b, err)
		}
	}
	check := func(when string) {
		t.Helper()
		if names := ls(t, from); len(names) != 0 {
			t.Fatalf("%s: from holds %v", when, names)
		}
		if names := ls(t, to); len(names) != n {
			t.Fatalf("%s: to holds %d names, want %d", when, len(names), n)
		}
		checkNumbered(t, when, to, n)
		for _, dir := range []string{from, to} {
			fi, err := os.Stat(dir)
			must(t, err)
			if !fi.ModTime().After(past) {
				t.Fatalf("%s: %s's mtime %v, want it moved by the moves", when, dir, fi.ModTime())
			}
		}
	}
	syncDir(t, pg)
	check("after the commits landed")
	// A rename that waited for a commit of its own gives about n commits.
	// Batches end after 40 ms without a change, which a loaded machine's
	// loop can take: 53 were seen there, 10 on a quiet one.
	made := commitCount(t, meta) - before
	t.Logf("%d files written and renamed made %d commits", n, made)
	if made > n/2 {
		t.Fatalf("%d moves made %d commits: they waited for commits of their own", n, made)
	}
	s.stop()
	s = mountAt(t, repo, s.mnt)
	check("after a remount")
}

// checkNumbered checks that dir holds f000 to f(n-1), each "content i".
func checkNumbered(t *testing.T, when, dir string, n int) {
	t.Helper()
	for i := range n {
		name := fmt.Sprintf("f%03d", i)
		if b, err := os.ReadFile(filepath.Join(dir, name)); err != nil || string(b) != fmt.Sprint("content ", i) {
			t.Fatalf("%s: %s holds %q (%v)", when, name, b, err)
		}
	}
}

// states follows a file as a test writes it, with a print of each state
// it marks: the XOR of a hash of each 4 KiB block and its index, which a
// write updates from the blocks it touches. Hashing a 64 MiB file whole
// after each of thousands of writes took most of a test's CPU.
type states struct {
	seed    maphash.Seed
	initial []byte
	data    []byte
	print   uint64
	prints  map[statePrint]bool
	writes  []wrote
}

// A statePrint tells a file's states apart.
type statePrint struct {
	size  int
	print uint64
}

// wrote is one WriteAt of a test.
type wrote struct {
	off  int64
	data []byte
}

// onto returns data after the write, grown if it ends past it.
func (w wrote) onto(data []byte) []byte {
	if end := w.off + int64(len(w.data)); end > int64(len(data)) {
		data = append(data, make([]byte, end-int64(len(data)))...)
	}
	copy(data[w.off:], w.data)
	return data
}

const printBlock = 4096

// newStates follows a file that holds data, its first state.
func newStates(data []byte) *states {
	s := &states{seed: maphash.MakeSeed(), initial: data, data: bytes.Clone(data), prints: map[statePrint]bool{}}
	s.print = s.printOf(data).print
	s.mark()
	return s
}

// block hashes the ith block of data with its index.
func (s *states) block(data []byte, i int) uint64 {
	var h maphash.Hash
	h.SetSeed(s.seed)
	h.Write([]byte{byte(i), byte(i >> 8), byte(i >> 16), byte(i >> 24)})
	h.Write(data[i*printBlock : min((i+1)*printBlock, len(data))])
	return h.Sum64()
}

func (s *states) printOf(data []byte) statePrint {
	var x uint64
	for i := 0; i*printBlock < len(data); i++ {
		x ^= s.block(data, i)
	}
	return statePrint{len(data), x}
}

// blocks calls fn with the index of each block of data that [off, end)
// touches.
func blocks(data []byte, off, end int64, fn func(int)) {
	for i := off / printBlock; i*printBlock < min(end, int64(len(data))); i++ {
		fn(int(i))
	}
}

// write applies a write to the file and returns its content, grown if the
// write ends past it.
func (s *states) write(off int64, b []byte) []byte {
	end := off + int64(len(b))
	from := min(off, int64(len(s.data))) // a growth changes the last block
	blocks(s.data, from, end, func(i int) { s.print ^= s.block(s.data, i) })
	s.data = wrote{off, b}.onto(s.data)
	blocks(s.data, from, end, func(i int) { s.print ^= s.block(s.data, i) })
	s.writes = append(s.writes, wrote{off, bytes.Clone(b)})
	return s.data
}

// mark records the file's content now as one of its states.
func (s *states) mark() { s.prints[statePrint{len(s.data), s.print}] = true }

// had reports whether b is one of the states marked.
func (s *states) had(b []byte) bool { return s.prints[s.printOf(b)] }

// nearest describes the state after a prefix of the writes that got
// differs from least, and where they differ.
func (s *states) nearest(got []byte) string {
	diff := func(a, b []byte) (n int, ranges []string) {
		if len(a) != len(b) {
			return max(len(a), len(b)), []string{fmt.Sprintf("size %d, want %d", len(b), len(a))}
		}
		for i := 0; i < len(a); {
			if a[i] == b[i] {
				i++
				continue
			}
			j := i
			for j < len(a) && a[j] != b[j] {
				j++
			}
			n += j - i
			if len(ranges) < 8 {
				ranges = append(ranges, fmt.Sprintf("[%d,%d)", i, j))
			}
			i = j
		}
		return n, ranges
	}
	// The states differ from each other only where the writes went: the
	// nearest is the one got differs from least there.
	at := func(data []byte) (n int) {
		if len(data) != len(got) {
			return len(got) + len(data)
		}
		for _, w := range s.writes {
			for i := w.off; i < min(w.off+int64(len(w.data)), int64(len(data))); i++ {
				if data[i] != got[i] {
					n++
				}
			}
		}
		return n
	}
	data := bytes.Clone(s.initial)
	best, bestN := 0, -1
	for k := 0; ; k++ {
		if n := at(data); bestN < 0 || n < bestN {
			best, bestN = k, n
		}
		if k == len(s.writes) {
			break
		}
		data = s.writes[k].onto(data)
	}
	data = bytes.Clone(s.initial)
	for _, w := range s.writes[:best] {
		data = w.onto(data)
	}
	bestN, bestRanges := diff(data, got)
	var ws []string
	for _, w := range s.writes[:min(len(s.writes), 64)] {
		ws = append(ws, fmt.Sprintf("[%d,%d)", w.off, w.off+int64(len(w.data))))
	}
	return fmt.Sprintf("nearest: after %d writes, %d bytes differ at %s; writes: %s",
		best, bestN, strings.Join(bestRanges, " "), strings.Join(ws, " "))
}

// Rewriting a file with a shell's "> f", dd, or any program that opens
// with O_TRUNC, dups the descriptor and closes the original before
// writing, adds one version, never an empty one first; a kill -9 before
// the rewrite's close leaves the version before it, as ext4's
// auto_da_alloc aims for. Emptying a file (": > f") is still a version,
// once its descriptor is released.
func TestRewriteIsOneVersion(t *testing.T) {
	t.Parallel()
	repo := t.TempDir()
	s := mountPlain(t, repo)
	pg := s.page("l", "p")
	f := filepath.Join(pg, "f")
	versions := filepath.Join(pg, ".ledger", "versions", "f")
	checkVersions := func(when string, want int) {
		t.Helper()
		syncDir(t, pg)
		vs := ls(t, versions)
		for _, v := range vs {
			st, err := os.Stat(filepath.Join(versions, v))
			must(t, err)
			if st.Size() == 0 {
				t.Errorf("%s: version %s is empty (versions %v)", when, v, vs)
			}
		}
		if len(vs) != want {
			t.Fatalf("%s: %d versions %v, want %d", when, len(vs), vs, want)
		}
	}
	must(t, os.WriteFile(f, content(1, 2<<20), 0o644))
	checkVersions("written", 1)

	run(t, pg, "sh", "-c", "head -c 2000000 /dev/urandom > f")
	checkVersions("after sh's > f", 2)
	run(t, pg, "dd", "if=/dev/urandom", "of=f", "bs=1000000", "count=2", "status=none")
	checkVersions("after dd", 3)

	// What sh and dd do, by hand: the flush of the original descriptor's
	// close reaches the server before the first write.
	rewrite := func(data []byte, kill bool) {
		t.Helper()
		fd, err := unix.Open(f, unix.O_WRONLY|unix.O_TRUNC, 0)
		must(t, err)
		dup, err := unix.Dup(fd)
		must(t, err)
		must(t, unix.Close(fd))
		syncDir(t, pg) // anything that close queued has landed
		_, err = unix.Write(dup, data[:len(data)/2])
		must(t, err)
		if kill {
			s.kill()
			unix.Close(dup)
			return
		}
		_, err = unix.Write(dup, data[len(data)/2:])
		must(t, err)
		must(t, unix.Close(dup))
	}
	third := content(3, 1<<20)
	rewrite(third, false)
	checkVersions("after a dup and close", 4)
	if got := sha(t, f); got != fmt.Sprintf("%x", sha256.Sum256(third)) {
		t.Fatal("the rewritten file does not read back")
	}

	rewrite(content(4, 1<<20), true)
	s = mountWith(t, plainBinary, repo, s.mnt)
	checkVersions("after a kill -9 in the middle of a rewrite", 4)
	if got := sha(t, f); got != fmt.Sprintf("%x", sha256.Sum256(third)) {
		t.Fatal("after a kill -9 in the middle of a rewrite, the file is not its last version")
	}

	// Emptying a file is a version of its own.
	run(t, pg, "sh", "-c", ": > f")
	s.stop()
	s = mountWith(t, plainBinary, repo, s.mnt)
	syncDir(t, pg)
	vs := ls(t, versions)
	if len(vs) != 5 {
		t.Fatalf("after : > f and a remount: versions %v, want 5", vs)
	}
	if st, err := os.Stat(f); err != nil || st.Size() != 0 {
		t.Fatalf("after : > f and a remount: %v %v, want an empty file", st, err)
	}
}

// TestEmptiedRightBeforeUnmount: ": > f" commits at the release the
// kernel sends after close returns, asynchronously; an unmount right after
// can drop it. The unmount commits what such a release would have: the
// file is empty after a remount, every time.
func TestEmptiedRightBeforeUnmount(t *testing.T) {
	t.Parallel()
	repo := t.TempDir()
	s := mountPlain(t, repo)
	for i := range 30 {
		f := filepath.Join(s.page("l", "p"), "f")
		must(t, os.WriteFile(f, []byte("content to empty"), 0o644))
		run(t, filepath.Dir(f), "sh", "-c", ": > f")
		s.stop()
		s = mountWith(t, plainBinary, repo, s.mnt)
		st, err := os.Stat(f)
		must(t, err)
		if st.Size() != 0 {
			t.Fatalf("round %d: after ': > f' and an unmount, f holds %d bytes, want 0", i, st.Size())
		}
	}
}
