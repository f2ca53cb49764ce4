package mount_test

import (
	"bytes"
	"errors"
	"fmt"
	iofs "io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/ledgerfs/ledgerfs/internal/history"
	"github.com/ledgerfs/ledgerfs/store"
)

// snapshotRecord is the page as it was after one step: its head, a time
// after the commit, and a native copy made then.
type snapshotRecord struct {
	head   string
	at     time.Time
	native string
}

func readlink(t testing.TB, path string) string {
	t.Helper()
	s, err := os.Readlink(path)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func write(t testing.TB, path, data string) {
	t.Helper()
	must(t, os.WriteFile(path, []byte(data), 0o644))
}

// sameTree fails unless dirs a and b hold the same names, types,
// permission bits, contents, link targets and file mtimes.
func sameTree(t testing.TB, a, b string) {
	t.Helper()
	list := func(root string) map[string]string {
		out := map[string]string{}
		err := filepath.WalkDir(root, func(p string, d iofs.DirEntry, err error) error {
			if err != nil {
				return err
			}
			rel, _ := filepath.Rel(root, p)
			fi, err := os.Lstat(p)
			if err != nil {
				return err
			}
			desc := fmt.Sprintf("%v", fi.Mode())
			switch {
			case fi.Mode()&os.ModeSymlink != 0:
				target, err := os.Readlink(p)
				if err != nil {
					return err
				}
				desc += " -> " + target
			case fi.Mode().IsRegular():
				b, err := os.ReadFile(p)
				if err != nil {
					return err
				}
				desc += fmt.Sprintf(" %q mtime %d", b, fi.ModTime().UnixNano())
			}
			out[rel] = desc
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
		return out
	}
	la, lb := list(a), list(b)
	for k, v := range la {
		if lb[k] != v {
			t.Errorf("%s: %s has %q, %s has %q", k, a, v, b, lb[k])
		}
	}
	for k, v := range lb {
		if _, ok := la[k]; !ok {
			t.Errorf("%s: only in %s (%q)", k, b, v)
		}
	}
}

func TestHistoryViews(t *testing.T) {
	t.Parallel()
	repo := t.TempDir()
	s := mount(t, repo)
	pg := s.page("h", "p")
	meta := filepath.Join(pg, ".ledger")

	var snaps []snapshotRecord
	record := func() {
		t.Helper()
		native := filepath.Join(t.TempDir(), "copy")
		run(t, pg, "cp", "-a", pg, native)
		head := strings.TrimPrefix(readlink(t, filepath.Join(meta, "latest")), "commits/")
		snaps = append(snaps, snapshotRecord{head: head, at: time.Now(), native: native})
		time.Sleep(2 * time.Millisecond)
	}
	write(t, filepath.Join(pg, "a"), "v1")
	record()
	must(t, os.Mkdir(filepath.Join(pg, "d"), 0o755))
	write(t, filepath.Join(pg, "d", "f"), "f1")
	must(t, os.Chmod(filepath.Join(pg, "d", "f"), 0o600))
	record()
	write(t, filepath.Join(pg, "a"), "v2")
	must(t, os.Symlink("a", filepath.Join(pg, "link")))
	old := time.Date(2020, 1, 2, 3, 4, 5, 0, time.UTC)
	must(t, os.Chtimes(filepath.Join(pg, "d", "f"), old, old))
	record()
	must(t, os.Remove(filepath.Join(pg, "a")))
	must(t, os.Chmod(filepath.Join(pg, "d"), 0o700))
	record()
	write(t, filepath.Join(pg, "a"), "v3")
	must(t, os.Rename(filepath.Join(pg, "d"), filepath.Join(pg, "e")))
	record()

	// .ledger is hidden from readdir and reachable by path.
	if slices.Contains(ls(t, pg), ".ledger") {
		t.Fatal(".ledger is listed in the page")
	}
	want := []string{"at", "commit", "commits", "heads", "latest", "local", "log", "retention", "stats", "sync", "transactions", "versions"}
	if got := ls(t, meta); !slices.Equal(got, want) {
		t.Fatalf(".ledger lists %v, want %v", got, want)
	}

	// Every recorded state is a snapshot equal to the copy made then, and
	// the page as of the time just after it.
	for i, sn := range snaps {
		sameTree(t, filepath.Join(meta, "commits", sn.head), sn.native)
		at := filepath.Join(meta, "at", sn.at.UTC().Format(time.RFC3339Nano))
		if got := readlink(t, at); got != "../commits/"+sn.head {
			t.Errorf("step %d: at/%s -> %s, want the commit %s", i, sn.at, got, sn.head)
		}
		sameTree(t, at+"/", sn.native)
	}
	if got := readlink(t, filepath.Join(meta, "at", "946684800")); got != "../commits/"+strings.Repeat("0", 64) {
		t.Errorf("at/946684800 (2000) -> %s, want the first, empty commit", got)
	}
	if _, err := os.Lstat(filepath.Join(meta, "at", "yesterday")); !errors.Is(err, syscall.ENOENT) {
		t.Errorf("at/yesterday: %v, want ENOENT", err)
	}

	// The log: newest first, one line per commit, each one a snapshot.
	logText, err := os.ReadFile(filepath.Join(meta, "log"))
	must(t, err)
	lines := strings.Split(strings.TrimSuffix(string(logText), "\n"), "\n")
	commits := ls(t, filepath.Join(meta, "commits"))
	if len(lines) != len(commits) {
		t.Fatalf("log has %d lines, commits/ %d entries", len(lines), len(commits))
	}
	var logIDs []string
	for _, l := range lines {
		f := strings.Fields(l)
		if len(f) != 5 {
			t.Fatalf("log line %q: want id, generation, time, parents, changed", l)
		}
		logIDs = append(logIDs, f[0])
	}
	if logIDs[0] != snaps[len(snaps)-1].head {
		t.Fatalf("first log line is %s, want the head %s", logIDs[0], snaps[len(snaps)-1].head)
	}
	for _, sn := range snaps {
		if !slices.Contains(logIDs, sn.head) || !slices.Contains(commits, sn.head) {
			t.Fatalf("commit %s missing from the log or commits/", sn.head)
		}
	}
	if heads := ls(t, filepath.Join(meta, "heads")); len(heads) != 1 || heads[0] != logIDs[0] {
		t.Fatalf("heads/ lists %v, want the head %s", heads, logIDs[0])
	}

	// versions/: one file per distinct content, oldest first.
	vdir := filepath.Join(meta, "versions", "a")
	names := ls(t, vdir)
	if !slices.IsSorted(names) {
		t.Fatalf("versions are not sorted: %v", names)
	}
	var got []string
	for _, n := range names {
		b, err := os.ReadFile(filepath.Join(vdir, n))
		must(t, err)
		got = append(got, string(b))
	}
	if strings.Join(got, ",") != "v1,v2,v3" {
		t.Fatalf("versions of a: %v (%v)", got, names)
	}
	fv := ls(t, filepath.Join(meta, "versions", "e", "f"))
	if len(fv) != 1 {
		t.Fatalf("versions of e/f: %v, want one", fv)
	}
	fi, err := os.Stat(filepath.Join(meta, "versions", "e", "f", fv[0]))
	must(t, err)
	if fi.Mode().Perm() != 0o600 || !fi.ModTime().Equal(old) {
		t.Fatalf("version of e/f: mode %v mtime %v, want 0600 and %v", fi.Mode(), fi.ModTime(), old)
	}

	// Read-only: every kind of change is EROFS.
	snapDir := filepath.Join(meta, "commits", snaps[1].head)
	for name, err := range map[string]error{
		"write log":         os.WriteFile(filepath.Join(meta, "log"), nil, 0o644),
		"create in .ledger": os.WriteFile(filepath.Join(meta, "x"), nil, 0o644),
		"write snapshot":    os.WriteFile(filepath.Join(snapDir, "a"), []byte("x"), 0o644),
		"mkdir snapshot":    os.Mkdir(filepath.Join(snapDir, "n"), 0o755),
		"remove snapshot":   os.Remove(filepath.Join(snapDir, "d", "f")),
		"chmod snapshot":    os.Chmod(filepath.Join(snapDir, "a"), 0o600),
		"remove version":    os.Remove(filepath.Join(vdir, names[0])),
		"mkdir commits":     os.Mkdir(filepath.Join(meta, "commits", "x"), 0o755),
	} {
		if !errors.Is(err, syscall.EROFS) {
			t.Errorf("%s: %v, want EROFS", name, err)
		}
	}

	// Restore is cp out of a snapshot.
	run(t, pg, "cp", filepath.Join(meta, "commits", snaps[0].head, "a"), filepath.Join(pg, "a"))
	run(t, pg, "cp", "-a", filepath.Join(meta, "commits", snaps[2].head, "d"), filepath.Join(pg, "d"))
	if b, err := os.ReadFile(filepath.Join(pg, "a")); err != nil || string(b) != "v1" {
		t.Fatalf("restored a: %q, %v", b, err)
	}
	sameTree(t, filepath.Join(pg, "d"), filepath.Join(snaps[2].native, "d"))

	// The command line refuses a mounted repository and says where to look.
	cmd := exec.Command(plainBinary, "log", repo, "h", "p")
	out, err := cmd.CombinedOutput()
	var exit *exec.ExitError
	if !errors.As(err, &exit) || exit.ExitCode() != 3 || !strings.Contains(string(out), s.mnt) {
		t.Fatalf("ledgerfs log on a mounted repository: %v\n%s", err, out)
	}
	logText, err = os.ReadFile(filepath.Join(meta, "log"))
	must(t, err)
	s.stop()

	// Without the mount, the command line shows the same history, with
	// the commit of access times the unmount made if reads left some.
	logOut := run(t, repo, plainBinary, "log", repo, "h", "p")
	if first, rest, _ := strings.Cut(logOut, "\n"); logOut != string(logText) && (rest != string(logText) || !strings.Contains(first, strings.Fields(string(logText))[0])) {
		t.Fatalf("ledgerfs log is not .ledger/log and the unmount's commit of access times:\n%s\n---\n%s", logOut, logText)
	}
	versions := run(t, repo, plainBinary, "log", repo, "h", "p", "a")
	if vl := strings.Split(strings.TrimSpace(versions), "\n"); len(vl) != 4 || !strings.HasPrefix(vl[0], names[0]+" ") {
		t.Fatalf("ledgerfs log PATH:\n%s\nwant 4 versions starting %s", versions, names[0])
	}
	for at, want := range map[string]string{
		snaps[0].head:      "v1",
		snaps[2].head[:10]: "v2",
		snaps[2].at.UTC().Format(time.RFC3339Nano): "v2",
		"": "v1",
	} {
		args := []string{"cat", repo, "h", "p", "a"}
		if at != "" {
			args = append(args, "--at", at)
		}
		if out := run(t, repo, plainBinary, args...); out != want {
			t.Errorf("ledgerfs cat --at %q: %q, want %q", at, out, want)
		}
	}
	out, err = exec.Command(plainBinary, "cat", repo, "h", "p", "a", "--at", snaps[3].head).CombinedOutput()
	if err == nil || !bytes.Contains(out, []byte("no such entry")) {
		t.Fatalf("cat of a deleted entry: %v\n%s", err, out)
	}
	verifySchema(t, repo)
}

// TestVersionsFollowTheHead: versions/FILE/, listed and looked up once,
// lists and looks up the versions committed after that, with the content
// each had, and its earlier names still look up; a bad name is ENOENT.
func TestVersionsFollowTheHead(t *testing.T) {
	t.Parallel()
	s := mount(t, t.TempDir())
	pg := s.page("l", "p")
	vdir := filepath.Join(pg, ".ledger", "versions", "f")
	var names []string
	for i := range 3 {
		must(t, os.WriteFile(filepath.Join(pg, "f"), []byte(fmt.Sprintf("version %d", i)), 0o644))
		syncDir(t, pg)
		names = ls(t, vdir)
		if len(names) != i+1 {
			t.Fatalf("after %d commits of f, versions/f lists %v", i+1, names)
		}
		for j, n := range names {
			if st, err := os.Stat(filepath.Join(vdir, n)); err != nil || st.Size() != int64(len(fmt.Sprintf("version %d", j))) {
				t.Fatalf("after %d commits, version %s: %v, %v", i+1, n, st, err)
			}
			if got, err := os.ReadFile(filepath.Join(vdir, n)); err != nil || string(got) != fmt.Sprintf("version %d", j) {
				t.Fatalf("after %d commits, version %s reads %q, %v; want version %d", i+1, n, got, err, j)
			}
		}
	}
	for _, bad := range []string{"nonsense", "0000000001_x_y", names[0] + "x"} {
		if _, err := os.Stat(filepath.Join(vdir, bad)); !errors.Is(err, os.ErrNotExist) {
			t.Fatalf("stat of versions/f/%s: %v, want ENOENT", bad, err)
		}
	}
}

// TestVersionIndexOutlivesTheMount: what a mount learns of a page's
// versions stays beside the page (history's version file): the versions
// its commits made as they landed, and, in a page nobody indexed, those
// its first listing walked. A new mount reads them there instead of
// walking the history. A collection that prunes commits removes the file,
// and the next listing makes it anew from what is kept.
func TestVersionIndexOutlivesTheMount(t *testing.T) {
	t.Parallel()
	repo := t.TempDir()
	fromFile := func(what string) []history.Version { return indexedAsWalked(t, what, repo, "l", "p", "f")[0] }
	listed := func(s *server) []string {
		t.Helper()
		names := ls(t, filepath.Join(s.mnt, "l", "p", ".ledger", "versions", "f"))
		s.stop()
		return names
	}

	s := mount(t, repo)
	pg := s.page("l", "p")
	for i := range 4 {
		must(t, os.WriteFile(filepath.Join(pg, "f"), []byte(fmt.Sprint("version ", i)), 0o644))
		syncDir(t, pg)
	}
	s.stop()
	if vs := fromFile("after 4 commits"); len(vs) != 4 {
		t.Fatalf("the version file holds %d versions of f after 4 commits", len(vs))
	}

	// A page nobody indexed, as an earlier ledgerfs left it.
	files, err := filepath.Glob(filepath.Join(repo, store.SerializationVersion, "ledgers", "*", "*", store.VersionsFileName))
	must(t, err)
	if len(files) != 1 {
		t.Fatalf("version files: %v", files)
	}
	must(t, os.Remove(files[0]))
	if names := listed(mount(t, repo)); len(names) != 4 {
		t.Fatalf("versions/f lists %v, want 4", names)
	}
	fromFile("after a listing of a page without one")

	out, err := exec.Command(plainBinary, "gc", "--keep-last", "2", repo).CombinedOutput()
	if err != nil {
		t.Fatalf("ledgerfs gc: %v\n%s", err, out)
	}
	if _, err := os.Stat(files[0]); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("a collection pruned commits and left the version file (%v)", err)
	}
	names := listed(mount(t, repo))
	if vs := fromFile("after a collection and a listing"); len(vs) != len(names) || len(vs) < 2 || len(vs) >= 4 {
		t.Fatalf("after keep-last=2, versions/f lists %v and the version file holds %d", names, len(vs))
	}
}

// indexedAsWalked fails unless what the page's version file alone holds of
// each key's versions (no walk of the history) is what a walk from scratch
// finds; it returns those versions. The repository must not be mounted.
func indexedAsWalked(t *testing.T, what, repo, ledger, page string, keys ...string) [][]history.Version {
	t.Helper()
	p, release := readPage(t, repo, ledger, page)
	defer release()
	x, err := history.OpenVersionIndex(p)
	must(t, err)
	var out [][]history.Version
	for _, key := range keys {
		got, err := x.Of(key)
		must(t, err)
		walked, err := history.Versions(p, key)
		must(t, err)
		if !slices.EqualFunc(got, walked, func(a, b history.Version) bool { return a.Commit.ID == b.Commit.ID && a.Entry == b.Entry }) {
			t.Fatalf("%s: the version file holds %d versions of %s, a walk finds %d", what, len(got), key, len(walked))
		}
		out = append(out, got)
	}
	return out
}

// readPage opens a page of a repository no mount serves, read-only;
// release closes it.
func readPage(t *testing.T, repo, ledger, page string) (p *store.Page, release func()) {
	t.Helper()
	r, err := store.Open(repo, journals.Hooks(store.Options{ReadOnly: true}))
	must(t, err)
	p, err = r.Acquire(ledger, page)
	if err != nil {
		r.Close()
		t.Fatal(err)
	}
	return p, func() { r.Release(p); r.Close() }
}
