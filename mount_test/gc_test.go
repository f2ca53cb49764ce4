package mount_test

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// duBytes is du -sb of dir: what a user sees the repository take.
func duBytes(t testing.TB, dir string) int64 {
	t.Helper()
	out, err := exec.Command("du", "-sb", dir).Output()
	if err != nil {
		t.Fatalf("du -sb %s: %v", dir, err)
	}
	n, err := strconv.ParseInt(strings.Fields(string(out))[0], 10, 64)
	if err != nil {
		t.Fatal(err)
	}
	return n
}

// fillPage writes size bytes of random content in 32 MiB files and copies
// a source tree (many small files) into page pg.
func fillPage(t testing.TB, pg string, size int, seed int) {
	t.Helper()
	for i := 0; size > 0; i++ {
		n := min(size, 32<<20)
		must(t, os.WriteFile(filepath.Join(pg, fmt.Sprintf("big%d", i)), content(seed*1000+i, n), 0o644))
		size -= n
	}
	src := filepath.Join(runtime.GOROOT(), "src")
	if !*long {
		src = filepath.Join(src, "net") // about 9 MiB in 700 files
	}
	run(t, pg, "cp", "-r", src, "src")
}

// TestCollectGivesSpaceBack: content written and deleted in a page, then
// collected by the mount with a policy that keeps only the head, leaves
// the repository (du -sb, after unmount) at 5 % of its peak or 32 MiB,
// whichever is larger; cycles of write, delete and collect do not grow
// it. -long: 1 GiB and all of GOROOT/src, five cycles.
func TestCollectGivesSpaceBack(t *testing.T) {
	t.Parallel()
	size, cycles := 128<<20, 2
	if *long {
		size, cycles = 1<<30, 5
	}
	repo := t.TempDir()
	mnt := filepath.Join(t.TempDir(), "mnt")
	var after []int64
	for c := range cycles {
		// A plain build: this test's point is space, and the race-built
		// server's CPU time for 256 MiB dominated it; the collection tests
		// below run the race build.
		s := mountWith(t, plainBinary, repo, mnt, "--collect-every", "0")
		pg := s.page("l", "p")
		if c == 0 {
			must(t, os.WriteFile(filepath.Join(pg, ".ledger", "retention"), []byte("keep-last=1\n"), 0))
		}
		fillPage(t, pg, size, c)
		syncDir(t, pg)
		s.stop()
		peak := duBytes(t, repo)

		s = mountWith(t, plainBinary, repo, mnt, "--collect-every", "0")
		pg = filepath.Join(mnt, "l", "p")
		run(t, pg, "sh", "-c", "rm -rf -- *")
		syncDir(t, pg)
		// .ledger/stats: all of it is history's now, none after.
		if st := pageStats(t, pg); st["history_bytes"] < int64(size) || st["head_content_bytes"] != 0 {
			t.Fatalf("cycle %d: stats after deleting everything: %v", c, st)
		}
		collect(t, mnt, pg, "l/p")
		status, err := os.ReadFile(filepath.Join(mnt, ".collect"))
		must(t, err)
		if st := pageStats(t, pg); st["history_bytes"] != 0 || st["commits"] != 1 {
			t.Fatalf("cycle %d: stats after collecting: %v", c, st)
		}
		s.stop()
		got := duBytes(t, repo)
		after = append(after, got)
		if out := run(t, repo, binary, "du", repo); !strings.Contains(out, "l/p") {
			t.Fatalf("ledgerfs du:\n%s", out)
		}
		bound := max(peak/20, 32<<20)
		t.Logf("cycle %d: peak %d MiB, after collection %d MiB (bound %d MiB); %s", c, peak>>20, got>>20, bound>>20, strings.TrimSpace(string(status)))
		if got > bound {
			t.Fatalf("cycle %d: the repository takes %d bytes after collection, more than %d (5 %% of its peak %d, or 32 MiB)", c, got, bound, peak)
		}
	}
	// No growth trend: the last cycle leaves no more than the first,
	// give or take a value log's header and a table.
	if last, first := after[len(after)-1], after[0]; last > first+(4<<20) {
		t.Fatalf("after %d cycles the repository takes %d bytes, %d after the first: it grows", cycles, last, first)
	}
	verifySchema(t, repo)
}

// pageStats reads a page's .ledger/stats: its numbers by name.
func pageStats(t testing.TB, pg string) map[string]int64 {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(pg, ".ledger", "stats"))
	must(t, err)
	out := map[string]int64{}
	for _, line := range strings.Split(strings.TrimSpace(string(b)), "\n") {
		f := strings.Fields(line)
		if n, err := strconv.ParseInt(f[len(f)-1], 10, 64); len(f) == 2 && err == nil {
			out[f[0]] = n
		}
	}
	if len(out) == 0 {
		t.Fatalf(".ledger/stats has no figures:\n%s", b)
	}
	return out
}

// TestCollectKeepsPolicy: through the mount, a collection keeps the
// commits the policy says and the history shows where it was cut; what
// a descriptor holds open is not collected under it, and does not keep
// the collection from the page.
func TestCollectKeepsPolicy(t *testing.T) {
	t.Parallel()
	s := mount(t, t.TempDir(), "--collect-every", "0")
	pg := s.page("l", "p")
	var versions [][]byte
	var held *os.File
	for i := range 5 {
		v := content(i, 100_000)
		versions = append(versions, v)
		// An editor's save: the new version replaces the file, and a
		// descriptor open on the old one goes on reading it.
		must(t, os.WriteFile(filepath.Join(pg, "tmp"), v, 0o644))
		must(t, os.Rename(filepath.Join(pg, "tmp"), filepath.Join(pg, "f")))
		syncDir(t, pg)
		if i == 0 {
			var err error
			held, err = os.Open(filepath.Join(pg, "f"))
			must(t, err)
			defer held.Close()
		}
	}
	must(t, os.WriteFile(filepath.Join(pg, ".ledger", "retention"), []byte("keep-last=2\n"), 0))
	got, err := os.ReadFile(filepath.Join(pg, ".ledger", "retention"))
	if err != nil || !strings.HasPrefix(string(got), "keep-last=2\n") {
		t.Fatalf(".ledger/retention reads %q, %v", got, err)
	}
	// The descriptor of version 0, whose commit the policy prunes, does
	// not make the page busy, and reads all of version 0 after.
	if err := os.WriteFile(filepath.Join(s.mnt, ".collect"), []byte("l/p\n"), 0); err != nil {
		t.Fatalf("collecting a page with a file open for reading: %v\n%s", err, s.log)
	}
	if b, err := io.ReadAll(held); err != nil || !bytes.Equal(b, versions[0]) {
		t.Fatalf("a descriptor open across the collection of its version read %d bytes (%v), want version 0's %d", len(b), err, len(versions[0]))
	}
	if st, err := os.ReadFile(filepath.Join(s.mnt, ".collect")); err != nil || !strings.Contains(string(st), "given back once the page's open files are closed") {
		t.Fatalf(".collect after collecting a page held open: %q, %v", st, err)
	}
	held.Close()
	collect(t, s.mnt, pg, "l/p")
	vs := ls(t, filepath.Join(pg, ".ledger", "versions", "f"))
	if len(vs) != 2 {
		t.Fatalf("versions after keep-last=2: %v", vs)
	}
	// Collecting a page left as it was, with the same policy, does nothing.
	status, err := os.ReadFile(filepath.Join(s.mnt, ".collect"))
	must(t, err)
	collect(t, s.mnt, pg, "l/p")
	if again, err := os.ReadFile(filepath.Join(s.mnt, ".collect")); err != nil || string(again) != string(status) {
		t.Fatalf("a second collection of an unchanged page ran: %q, then %q (%v)", status, again, err)
	}
	for i, name := range vs {
		b, err := os.ReadFile(filepath.Join(pg, ".ledger", "versions", "f", name))
		if err != nil || !bytes.Equal(b, versions[3+i]) {
			t.Fatalf("version %s: %d bytes, %v; want version %d", name, len(b), err, 3+i)
		}
	}
	log, err := os.ReadFile(filepath.Join(pg, ".ledger", "log"))
	must(t, err)
	if !strings.Contains(string(log), " pruned:") {
		t.Fatalf("the log does not say where history was cut:\n%s", log)
	}
	// A new policy is a reason to collect again, with no new commit.
	must(t, os.WriteFile(filepath.Join(pg, ".ledger", "retention"), []byte("keep-last=1\n"), 0))
	collect(t, s.mnt, pg, "l/p")
	if vs := ls(t, filepath.Join(pg, ".ledger", "versions", "f")); len(vs) != 1 {
		st, _ := os.ReadFile(filepath.Join(s.mnt, ".collect"))
		lg, _ := os.ReadFile(filepath.Join(pg, ".ledger", "log"))
		t.Fatalf("versions after keep-last=1: %v\n.collect: %s\nlog:\n%s", vs, st, lg)
	}
	s.stop()
	verifySchema(t, s.repo)
}

// TestKillCollection kills ledgerfs gc with SIGKILL at its steps (a batch
// of commits pruned or of pieces deleted, the compaction, a value log
// rewritten), with more history added before each run: after each kill
// fsck finds every stored commit whole, the files read, and the next full
// collection leaves nothing no commit reaches.
func TestKillCollection(t *testing.T) {
	t.Parallel()
	kills := 6
	if *long {
		kills = 40
	}
	repo := t.TempDir()
	want := map[string][]byte{}
	policies := [][]string{{"--keep-last", "1"}, {"--keep-last", "3"}, {"--keep-within", "1h"}, {"--keep-hourly", "1"}}
	for k := range kills {
		s := mountPlain(t, repo, "--collect-every", "0")
		pg := s.page("l", "p")
		for i := range 6 {
			name := fmt.Sprintf("f%d", rand.IntN(5))
			v := content(k*100+i, 1+rand.IntN(600_000))
			must(t, os.WriteFile(filepath.Join(pg, name), v, 0o644))
			want[name] = v
			if rand.IntN(3) == 0 {
				del := fmt.Sprintf("f%d", rand.IntN(5))
				os.Remove(filepath.Join(pg, del))
				delete(want, del)
			}
		}
		syncDir(t, pg)
		s.stop()

		args := append([]string{"--debug", "gc"}, policies[k%len(policies)]...)
		cmd := exec.Command(binary, append(args, repo)...)
		var out output
		cmd.Stdout, cmd.Stderr = &out, &out
		must(t, cmd.Start())
		exited := make(chan error, 1)
		go func() { exited <- cmd.Wait() }()
		at := 1 + rand.IntN(4)
		reached := out.awaitCount("collection step", at, exited)
		cmd.Process.Kill()
		<-exited
		t.Logf("kill %d: after step %d of the collection: %v", k, at, reached)

		// The checks run the plain build: the collection is what is tested.
		fsck, err := exec.Command(plainBinary, "fsck", repo).CombinedOutput()
		if err != nil {
			t.Fatalf("kill %d: fsck after a collection was killed: %v\n%s\ncollection:\n%s", k, err, fsck, &out)
		}
		for name, v := range want {
			b, err := exec.Command(plainBinary, "cat", repo, "l", "p", name).Output()
			if err != nil || !bytes.Equal(b, v) {
				t.Fatalf("kill %d: %s reads %d bytes (%v), want %d", k, name, len(b), err, len(v))
			}
		}
	}
	if out, err := exec.Command(binary, "gc", "--keep-last", "1", repo).CombinedOutput(); err != nil {
		t.Fatalf("gc: %v\n%s", err, out)
	}
	fsck, err := exec.Command(binary, "fsck", repo).CombinedOutput()
	if err != nil || strings.Contains(string(fsck), "no commit reaches") {
		t.Fatalf("fsck after a full collection: %v\n%s", err, fsck)
	}
	verifySchema(t, repo)
}

// TestCollectAfterRemoving: once a page's changes removed --collect-after
// bytes, the mount collects it on its own (no schedule, no request).
func TestCollectAfterRemoving(t *testing.T) {
	t.Parallel()
	s := mount(t, t.TempDir(), "--collect-every", "0", "--collect-after", "1M")
	pg := s.page("l", "p")
	must(t, os.WriteFile(filepath.Join(pg, ".ledger", "retention"), []byte("keep-last=1\n"), 0))
	must(t, os.WriteFile(filepath.Join(pg, "f"), content(1, 3<<20), 0o644))
	syncDir(t, pg)
	if st := pageStats(t, pg); st["history_bytes"] != 0 {
		t.Fatalf("stats before removing: %v", st)
	}
	must(t, os.Remove(filepath.Join(pg, "f")))
	syncDir(t, pg)
	s.log.await(t, "msg=collected page=l/p")
	if st := pageStats(t, pg); st["history_bytes"] != 0 || st["commits"] != 1 {
		t.Fatalf("stats after the mount collected: %v", st)
	}
	s.stop()
}

// TestCompressionByCollection: source code copied into a page is stored as
// written, and compressed by the page's next collection; it then reads the
// same (diff -r) and takes well under its size.
func TestCompressionByCollection(t *testing.T) {
	t.Parallel()
	s := mount(t, t.TempDir(), "--collect-every", "0")
	pg := s.page("l", "p")
	src := filepath.Join(runtime.GOROOT(), "src", "net", "http")
	run(t, pg, "cp", "-r", src, "http")
	syncDir(t, pg)
	if st := pageStats(t, pg); st["head_stored_bytes"] < st["head_content_bytes"] {
		t.Fatalf("stored before any collection: %v, want as written", st)
	}
	collect(t, s.mnt, pg, "l/p")
	st := pageStats(t, pg)
	if ratio := float64(st["head_stored_bytes"]) / float64(st["head_content_bytes"]); ratio > 0.5 {
		t.Fatalf("after collection the head takes %.2f of its content (%v)", ratio, st)
	}
	run(t, pg, "diff", "-r", src, "http")
	s.stop()
	verifySchema(t, s.repo)
}

// collect has the mount collect target through its .collect file, again
// while the page is busy: the release of a descriptor closed just before
// (the test's own reads of .ledger files included) reaches the server
// after close returns.
func collect(t *testing.T, mnt, pg, target string) {
	t.Helper()
	var err error
	for range 100 {
		err = os.WriteFile(filepath.Join(mnt, ".collect"), []byte(target+"\n"), 0)
		if !errors.Is(err, syscall.EBUSY) {
			break
		}
		syncDir(t, pg)
	}
	must(t, err)
}

// While the mount collects a page, other pages serve: a listing, a write
// and an fsync in another page complete while the collection is still
// running (.collect says which page it collects).
func TestCollectionLeavesOtherPagesServing(t *testing.T) {
	t.Parallel()
	s := mountPlain(t, t.TempDir(), "--collect-every", "0")
	old := s.page("l", "old")
	// History for the collection to prune and sweep: many small files
	// and a few large ones, written and removed.
	dir := filepath.Join(old, "many")
	must(t, os.MkdirAll(dir, 0o755))
	for i := range 4000 {
		must(t, os.WriteFile(filepath.Join(dir, fmt.Sprint(i)), content(i, 2000), 0o644))
	}
	for i := range 4 {
		must(t, os.WriteFile(filepath.Join(old, fmt.Sprint("big", i)), content(10000+i, 32<<20), 0o644))
	}
	syncDir(t, old)
	run(t, old, "sh", "-c", "rm -rf -- *")
	syncDir(t, old)
	must(t, os.WriteFile(filepath.Join(old, ".ledger", "retention"), []byte("keep-last=1\n"), 0))
	other := s.page("l", "other")
	must(t, os.WriteFile(filepath.Join(other, "before"), []byte("x"), 0o644))

	done := make(chan error, 1)
	go func() { done <- os.WriteFile(filepath.Join(s.mnt, ".collect"), []byte("l/old\n"), 0) }()
	// The event: the server says it begins, and .collect names the page.
	s.log.await(t, "msg=collecting page=l/old")
	if st, err := os.ReadFile(filepath.Join(s.mnt, ".collect")); err != nil || !strings.Contains(string(st), "l/old: collecting since") {
		select {
		case err := <-done:
			t.Fatalf("the collection ended (%v) before the other page was used; .collect:\n%s", err, st)
		default:
		}
		t.Fatalf(".collect does not show the collection running (%v):\n%s", err, st)
	}
	if got := ls(t, other); !slices.Equal(got, []string{"before"}) {
		t.Fatalf("ls of another page during a collection: %v", got)
	}
	must(t, os.WriteFile(filepath.Join(other, "during"), []byte("written during a collection"), 0o644))
	syncDir(t, other)
	select {
	case err := <-done:
		t.Fatalf("a listing, a write and an fsync in another page waited for the collection (it ended first: %v)", err)
	default:
	}
	must(t, <-done)
	if b, err := os.ReadFile(filepath.Join(other, "during")); err != nil || string(b) != "written during a collection" {
		t.Fatalf("the file written during the collection: %q, %v", b, err)
	}
}

// A writer of a page goes on while the page is collected: its closes
// complete while an explicit collection prunes, marks and sweeps (it
// gives way to them, and leaves giving the space back for when they
// pause), and while the page's tables are compacted to give the space
// back, each of which takes long enough here (many commits and small rows
// deleted) that a writer held for it would have waited over a tenth of a
// second.
func TestWritesGoOnThroughACollection(t *testing.T) {
	t.Parallel()
	s := mountPlain(t, t.TempDir(), "--collect-every", "0", "--debug")
	pg := s.page("l", "p")
	must(t, os.WriteFile(filepath.Join(pg, ".ledger", "retention"), []byte("keep-last=1\n"), 0))
	// Contents below Badger's value threshold live in the tables: three
	// rounds of 6,000 leave 10 MiB of deleted rows there.
	for round := range 3 {
		for i := range 6000 {
			must(t, os.WriteFile(filepath.Join(pg, fmt.Sprint(i)), content(round*10000+i, 600), 0o644))
		}
	}
	syncDir(t, pg)
	type write struct{ start, end time.Time }
	// writeWhile rewrites a file of the page in a loop from when begin
	// returns true until stop is closed.
	writeWhile := func(begin func() bool, stop <-chan struct{}) func() []write {
		var writes []write
		stopped := make(chan struct{})
		go func() {
			defer close(stopped)
			if !begin() {
				return
			}
			for i := 0; ; i++ {
				select {
				case <-stop:
					return
				default:
				}
				start := time.Now()
				if err := os.WriteFile(filepath.Join(pg, "w"), content(i, 100), 0o644); err != nil {
					t.Errorf("a write during the collection: %v", err)
					return
				}
				writes = append(writes, write{start, time.Now()})
			}
		}()
		return func() []write { <-stopped; return writes }
	}
	// during counts the writes that ended between the last log lines of
	// the two collection steps, which must be long enough to say
	// something.
	during := func(writes []write, first, last string) {
		t.Helper()
		from, to := stepTime(t, s, first), stepTime(t, s, last)
		n := 0
		for _, w := range writes {
			if w.end.After(from) && w.end.Before(to) {
				n++
			}
		}
		t.Logf("%s to %s took %v; %d of %d writes ended during it", first, last, to.Sub(from), n, len(writes))
		// Writes that ended inside the step prove it let them through,
		// however short it was. None ending says they were held only
		// when the step was long enough for several to end (a write
		// takes a few milliseconds here).
		switch {
		case n > 0:
		case to.Sub(from) < 50*time.Millisecond:
			t.Fatalf("%s to %s took %v and no write ended in it: too short for this test to say anything; give the page more rows", first, last, to.Sub(from))
		default:
			t.Fatalf("no write ended from %s to %s (%v): writers waited for it", first, last, to.Sub(from))
		}
	}

	// A writer who never stops while .collect runs: the collection takes
	// the page from it for moments.
	stop := make(chan struct{})
	done := writeWhile(func() bool { return true }, stop)
	collect(t, s.mnt, pg, "l/p")
	close(stop)
	writes := done()
	var longest time.Duration
	for _, w := range writes {
		longest = max(longest, w.end.Sub(w.start))
	}
	t.Logf("the longest write took %v, of which %v waiting for the collection", longest, longestWait(t, s))
	during(writes, "pruning", "swept")
	status, err := os.ReadFile(filepath.Join(s.mnt, ".collect"))
	must(t, err)
	if !strings.Contains(string(status), "giving way to writers") || !strings.Contains(string(status), "once its writers pause") {
		t.Fatalf(".collect says %q: want the collection to have given way, and the space to come back later", status)
	}

	// The space comes back by a collection with the page left alone; a
	// writer who comes meanwhile goes on through its compaction.
	stop = make(chan struct{})
	mark := s.log.size()
	done = writeWhile(func() bool { return s.log.untilAfter(mark, "step=compacting", stop) }, stop)
	collect(t, s.mnt, pg, "l/p")
	close(stop)
	during(done(), "compacting", "compacted")
}

// longestWait returns the longest a user of a page waited for a collection
// that held it, as the server logged.
func longestWait(t *testing.T, s *server) time.Duration {
	t.Helper()
	var longest time.Duration
	for _, line := range strings.Split(s.log.String(), "\n") {
		if !strings.Contains(line, "msg=\"waited for a collection\"") {
			continue
		}
		_, took, _ := strings.Cut(line, " took=")
		took, _, _ = strings.Cut(took, " ")
		d, err := time.ParseDuration(took)
		must(t, err)
		longest = max(longest, d)
	}
	return longest
}

// stepTime returns when the server last logged the collection step named.
func stepTime(t *testing.T, s *server, step string) time.Time {
	t.Helper()
	lines := strings.Split(s.log.String(), "\n")
	slices.Reverse(lines)
	for _, line := range lines {
		if !strings.Contains(line, "step="+step+" ") && !strings.HasSuffix(line, "step="+step) {
			continue
		}
		f := strings.Fields(line)
		if len(f) == 0 || !strings.HasPrefix(f[0], "time=") {
			continue
		}
		at, err := time.Parse(time.RFC3339Nano, strings.TrimPrefix(f[0], "time="))
		must(t, err)
		return at
	}
	t.Fatalf("the log has no collection step %q", step)
	return time.Time{}
}
