package mount_test

import (
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/ledgerfs/ledgerfs/internal/btree"
	"github.com/ledgerfs/ledgerfs/internal/history"
	"github.com/ledgerfs/ledgerfs/internal/s3test"
	"github.com/ledgerfs/ledgerfs/journal"
	"github.com/ledgerfs/ledgerfs/store"
)

// journals commits the tests' changes: one engine for the package's
// repositories, each page with its own committer, indexing versions as
// they land, as a mount does.
var journals = func() *journal.Engine {
	e := journal.NewEngine()
	e.Observe(journal.Observers{Landed: history.IndexLanded})
	return e
}()

// buildPage fills page l/p of a new repository without a mount: first
// commits of entries keys (one commit), then commits more commits each
// changing one key. Values are short, so stored inline.
func buildPage(b testing.TB, keys, commits int) string {
	repoDir := b.TempDir()
	r, err := store.Open(repoDir, journals.Hooks(store.Options{}))
	if err != nil {
		b.Fatal(err)
	}
	defer func() { must(b, r.Close()) }()
	must(b, r.CreateLedger("l"))
	must(b, r.CreatePage("l", "p"))
	p, err := r.Acquire("l", "p")
	must(b, err)
	defer r.Release(p)
	val := func(s string) btree.Entry {
		w := p.NewValueWriter()
		if _, err := w.Write([]byte(s)); err != nil {
			b.Fatal(err)
		}
		id, size, err := w.Close()
		must(b, err)
		return btree.Entry{Value: id, Meta: btree.Meta{Size: size}}
	}
	commit := func(explicit bool, ops []journal.Op) {
		j, err := journals.Begin(p, explicit)
		must(b, err)
		must(b, j.Apply(ops...))
		_, err = j.Commit()
		must(b, err)
	}
	if keys > 0 {
		ops := make([]journal.Op, keys)
		v := val("v") // one value for every key: a writer each cost most of the build
		for i := range ops {
			ops[i] = journal.Op{Key: fmt.Sprintf("k%06d", i), Entry: v}
		}
		commit(true, ops)
	}
	for i := range commits {
		commit(false, []journal.Op{{Key: fmt.Sprintf("c%03d", i%500), Entry: val(fmt.Sprint(i))}})
	}
	return repoDir
}

// mountBuilt mounts a repository buildPage made and returns its page's
// path.
func mountBuilt(tb testing.TB, keys, commits int) string {
	tb.Helper()
	repo := buildPage(tb, keys, commits)
	s := mountWith(tb, plainBinary, repo, filepath.Join(tb.TempDir(), "mnt"))
	return filepath.Join(s.mnt, "l", "p")
}

// BenchmarkSnapshotOpen opens and lists a page of 100,000 entries at its
// head and at an earlier commit: a snapshot is the commit's tree, so both
// cost the same.
func BenchmarkSnapshotOpen(b *testing.B) {
	pg := mountBuilt(b, 100000, 1)
	log, err := os.ReadFile(filepath.Join(pg, ".ledger", "log"))
	must(b, err)
	older := strings.Fields(strings.Split(string(log), "\n")[1])[0]
	for name, dir := range map[string]string{"head": pg, "snapshot": filepath.Join(pg, ".ledger", "commits", older)} {
		b.Run(name, func(b *testing.B) {
			for b.Loop() {
				if _, err := os.Stat(filepath.Join(dir, "k050000")); err != nil {
					b.Fatal(err)
				}
				es, err := os.ReadDir(dir)
				if err != nil || len(es) < 100000 {
					b.Fatal(len(es), err)
				}
			}
		})
	}
}

// BenchmarkCommitsListing lists .ledger/commits of a page with 10,000
// commits.
func BenchmarkCommitsListing(b *testing.B) {
	dir := filepath.Join(mountBuilt(b, 0, 10000), ".ledger", "commits")
	for b.Loop() {
		es, err := os.ReadDir(dir)
		if err != nil || len(es) != 10001 {
			b.Fatal(len(es), err)
		}
	}
}

// ledgerfs bench runs its phases on a page and reports them as JSON.
func TestBenchCommand(t *testing.T) {
	s := mount(t, t.TempDir())
	pg := s.page("b", "p")
	out := run(t, pg, plainBinary, "bench", "--json", "--big-file-size", "8M", "--small-files", "5", "--tiny-files", "20", pg)
	var rep struct {
		Results []struct {
			Phase string  `json:"phase"`
			Bytes int64   `json:"bytes"`
			Ops   float64 `json:"ops_per_s"`
		} `json:"results"`
	}
	if err := json.Unmarshal([]byte(out[strings.Index(out, "{"):]), &rep); err != nil {
		t.Fatalf("%v:\n%s", err, out)
	}
	if len(rep.Results) != 10 || rep.Results[1].Bytes != 8<<20 {
		t.Fatalf("results: %+v", rep.Results)
	}
	if got := ls(t, pg); len(got) != 0 {
		t.Fatalf("bench left %v in the page", got)
	}
}

// TestLogIsWrittenAsRead: .ledger/log of a page with many commits is
// written as it is read: a stat writes none of it (size 0 until it is
// whole), head -3 gives its first lines, a whole read its every line, and
// then its size is the text's.
func TestLogIsWrittenAsRead(t *testing.T) {
	t.Parallel()
	const commits = 1500 // a log of ~250 KB, written in 60 KiB steps
	logPath := filepath.Join(mountBuilt(t, 0, commits), ".ledger", "log")
	st, err := os.Stat(logPath)
	must(t, err)
	if st.Size() != 0 {
		t.Fatalf("a stat of the log gave %d bytes: it wrote the log whole", st.Size())
	}
	head := run(t, "", "head", "-3", logPath)
	whole, err := os.ReadFile(logPath)
	must(t, err)
	lines := strings.SplitAfter(string(whole), "\n")
	t.Logf("the log of %d commits is %d bytes", commits, len(whole))
	if n := len(lines) - 1; n != commits+1 {
		t.Fatalf("the log has %d lines, want %d", n, commits+1)
	}
	if head != strings.Join(lines[:3], "") {
		t.Fatalf("head -3 of the log:\n%s\nits first lines read whole:\n%s", head, strings.Join(lines[:3], ""))
	}
	if st, err = os.Stat(logPath); err != nil || st.Size() != int64(len(whole)) {
		t.Fatalf("read whole, the log's size is %d (%v), want %d", st.Size(), err, len(whole))
	}
}

// BenchmarkLogHead reads the first three lines of .ledger/log of a page
// with 20,000 commits, a new head each time (the log is written anew).
func BenchmarkLogHead(b *testing.B) {
	pg := mountBuilt(b, 0, 20000)
	for i := 0; b.Loop(); i++ {
		newHead(b, pg, i)
		out, err := exec.Command("head", "-3", filepath.Join(pg, ".ledger", "log")).Output()
		if err != nil || strings.Count(string(out), "\n") != 3 {
			b.Fatalf("head -3: %q, %v", out, err)
		}
	}
}

// BenchmarkHistoryViews lists .ledger/versions/FILE/ and .ledger/at/TIME/
// (TIME that of the page's 100th commit) of a page with 20,000 commits, a
// new head before each; the first listing of each, the mount's first look
// at that history, is reported apart (first-ms).
func BenchmarkHistoryViews(b *testing.B) {
	pg := mountBuilt(b, 0, 20000)
	log, err := os.ReadFile(filepath.Join(pg, ".ledger", "log"))
	must(b, err)
	lines := strings.Split(strings.TrimSpace(string(log)), "\n")
	early := strings.Fields(lines[len(lines)-100])[2]
	for _, view := range []string{filepath.Join(".ledger", "versions", "c001"), filepath.Join(".ledger", "at", early)} {
		b.Run(strings.Split(view, "/")[1], func(b *testing.B) {
			start := time.Now()
			if _, err := os.ReadDir(filepath.Join(pg, view)); err != nil {
				b.Fatal(err)
			}
			first := time.Since(start)
			for i := 0; b.Loop(); i++ {
				newHead(b, pg, i)
				if es, err := os.ReadDir(filepath.Join(pg, view)); err != nil || len(es) == 0 {
					b.Fatalf("%s: %d entries, %v", view, len(es), err)
				}
			}
			b.ReportMetric(float64(first.Milliseconds()), "first-ms")
		})
	}
}

// newHead commits a change to the page at pg, untimed: a benchmark's next
// step finds nothing cached for the head it reads.
func newHead(b *testing.B, pg string, i int) {
	b.StopTimer()
	defer b.StartTimer()
	must(b, os.WriteFile(filepath.Join(pg, "new"), []byte(fmt.Sprint(i)), 0o644))
	syncDir(b, pg)
}

// BenchmarkPulledVersions times a device's first listing of a name's
// versions in a page of 20,000 commits it pulled through a real S3 server
// (first-ms: from the version file its sync wrote as the pull landed), the
// listings after it (ns/op), and the first listing once that file is gone
// (walk-ms: the whole history walked, as for a page pulled before pulls
// were indexed).
func BenchmarkPulledVersions(b *testing.B) {
	srv := s3test.Start(b)
	w := srv.Watch(b)
	src := buildPage(b, 500, 20000)
	remote := []string{"--remote", "s3://ledgerfs/home", "--endpoint", w.Endpoint}
	push := exec.Command(plainBinary, append([]string{"sync", src}, remote...)...)
	push.Env = append(os.Environ(), s3Env...)
	if out, err := push.CombinedOutput(); err != nil {
		b.Fatalf("ledgerfs sync: %v\n%s", err, out)
	}

	repo := b.TempDir()
	s := mountEnv(b, plainBinary, s3Env, repo, filepath.Join(b.TempDir(), "mnt"), append(remote, "--sync-every", "100ms")...)
	pulling := s
	b.Cleanup(func() {
		if b.Failed() {
			b.Logf("the pulling mount's log:\n%s", pulling.log)
		}
	})
	vfile := func() string {
		files, _ := filepath.Glob(filepath.Join(repo, store.SerializationVersion, "ledgers", "*", "*", store.VersionsFileName))
		if len(files) != 1 {
			return ""
		}
		return files[0]
	}
	// The pull's round writes the file in one append, after its walk.
	w.Until(b, "the pulled page's version file", 3*time.Minute, func() bool {
		fi, err := os.Stat(vfile())
		return err == nil && fi.Size() > 0
	})
	list := func(mnt string) time.Duration {
		start := time.Now()
		es, err := os.ReadDir(filepath.Join(mnt, "l", "p", ".ledger", "versions", "c001"))
		if err != nil || len(es) == 0 {
			b.Fatalf("versions of c001: %d, %v", len(es), err)
		}
		return time.Since(start)
	}
	first := list(s.mnt)
	for b.Loop() { // the next listings: ns/op
		list(s.mnt)
	}
	b.StopTimer()
	s.stop()
	must(b, os.Remove(vfile()))
	s = mountWith(b, plainBinary, repo, filepath.Join(b.TempDir(), "mnt"))
	walk := list(s.mnt)
	s.stop()
	b.ReportMetric(float64(first.Milliseconds()), "first-ms")
	b.ReportMetric(float64(walk.Milliseconds()), "walk-ms")
}

// Reading .ledger/log twice gives the same bytes, though the kernel still
// holds the size a stat gave before the log was whole (0, or the last
// head's log's): a second wc -l of the log gave 0 lines, or the lines of
// the log before.
func TestLogReadsAlikeTwice(t *testing.T) {
	t.Parallel()
	s := mount(t, t.TempDir())
	pg := s.page("l", "p")
	logPath := filepath.Join(pg, ".ledger", "log")
	for i := range 6 {
		must(t, os.WriteFile(filepath.Join(pg, "f"), []byte(fmt.Sprint(i)), 0o644))
		syncDir(t, pg)
		_, err := os.Stat(logPath)
		must(t, err)
		var counts []string
		for range 3 {
			counts = append(counts, strings.TrimSpace(run(t, "", "sh", "-c", "wc -l < "+logPath)))
		}
		want := fmt.Sprint(commitCount(t, filepath.Join(pg, ".ledger")))
		for j, c := range counts {
			if c != want {
				t.Fatalf("head %d: read %d of the log: %s lines, want %s (reads: %v)", i, j+1, c, want, counts)
			}
		}
	}
}
