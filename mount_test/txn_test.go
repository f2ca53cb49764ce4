package mount_test

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
)

// txn is a transaction directory of a page, driven by the documented
// commands.
type txn struct {
	t        testing.TB
	pg, name string
}

func begin(t testing.TB, pg, name string) txn {
	t.Helper()
	run(t, pg, "mkdir", filepath.Join(".ledger", "transactions", name))
	return txn{t: t, pg: pg, name: name}
}

func (x txn) dir() string { return filepath.Join(x.pg, ".ledger", "transactions", x.name) }

func (x txn) path(p string) string { return filepath.Join(x.dir(), p) }

// commit runs the documented commit command, returning its output and
// error.
func (x txn) commit() (string, error) {
	cmd := exec.Command("mv", filepath.Join(".ledger", "transactions", x.name), filepath.Join(".ledger", "commit")+"/")
	cmd.Dir = x.pg
	out, err := cmd.CombinedOutput()
	return string(out), err
}

func (x txn) mustCommit() {
	x.t.Helper()
	if out, err := x.commit(); err != nil {
		x.t.Fatalf("commit %s: %v\n%s", x.name, err, out)
	}
}

func (x txn) rollback() {
	x.t.Helper()
	run(x.t, x.pg, "rmdir", filepath.Join(".ledger", "transactions", x.name))
}

func readFile(t testing.TB, path string) string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

func logLines(t testing.TB, pg string) []string {
	t.Helper()
	return strings.Split(strings.TrimSuffix(readFile(t, filepath.Join(pg, ".ledger", "log")), "\n"), "\n")
}

func copyOf(t testing.TB, dir string) string {
	t.Helper()
	native := filepath.Join(t.TempDir(), "copy")
	run(t, dir, "cp", "-a", dir, native)
	return native
}

func TestTransactions(t *testing.T) {
	t.Parallel()
	repo := t.TempDir()
	s := mount(t, repo)
	pg := s.page("t", "p")
	for _, f := range []string{"a", "b", "c", "dir/x"} {
		must(t, os.MkdirAll(filepath.Dir(filepath.Join(pg, f)), 0o755))
		write(t, filepath.Join(pg, f), f+"=1")
	}
	before := copyOf(t, pg)

	t1 := begin(t, pg, "t1")
	t2 := begin(t, pg, "t2")
	if got := ls(t, filepath.Join(pg, ".ledger", "transactions")); !slices.Equal(got, []string{"t1", "t2"}) {
		t.Fatalf("transactions/ lists %v", got)
	}
	sameTree(t, t1.dir(), pg) // a transaction starts as the page
	write(t, t1.path("a"), "a=t1")
	write(t, t1.path("b"), "b=t1")
	must(t, os.Rename(t1.path("c"), t1.path("c2")))
	must(t, os.Remove(t1.path("dir/x")))
	must(t, os.Mkdir(t1.path("n"), 0o700))
	write(t, t1.path("n/y"), "y=t1")
	if got := ls(t, t1.dir()); !slices.Equal(got, []string{"a", "b", "c2", "dir", "n"}) {
		t.Fatalf("t1 lists %v", got)
	}

	// Nobody else sees a transaction before its commit.
	sameTree(t, pg, before)
	sameTree(t, t2.dir(), before)

	// The commit makes all of it visible in one commit.
	headsBefore := len(logLines(t, pg))
	t1.mustCommit()
	if got := ls(t, filepath.Join(pg, ".ledger", "transactions")); !slices.Equal(got, []string{"t2"}) {
		t.Fatalf("after commit, transactions/ lists %v", got)
	}
	if n := len(logLines(t, pg)); n != headsBefore+1 {
		t.Fatalf("the commit added %d commits, want 1", n-headsBefore)
	}
	for f, want := range map[string]string{"a": "a=t1", "b": "b=t1", "c2": "c=1", "n/y": "y=t1"} {
		if got := readFile(t, filepath.Join(pg, f)); got != want {
			t.Errorf("%s = %q after commit, want %q", f, got, want)
		}
	}
	for _, gone := range []string{"c", "dir/x"} {
		if _, err := os.Lstat(filepath.Join(pg, gone)); !os.IsNotExist(err) {
			t.Errorf("%s survived the commit: %v", gone, err)
		}
	}
	if fi, err := os.Stat(filepath.Join(pg, "n")); err != nil || fi.Mode().Perm() != 0o700 {
		t.Errorf("n after commit: %v %v", fi, err)
	}

	// t2 still sees its base. Its commit merges entry by entry with what
	// t1 committed: a different entry keeps both changes, the same entry
	// takes t2's, the later commit.
	sameTree(t, t2.dir(), before)
	write(t, t2.path("b"), "b=t2")
	write(t, t2.path("d"), "d=t2")
	t2.mustCommit()
	for f, want := range map[string]string{"a": "a=t1", "b": "b=t2", "c2": "c=1", "d": "d=t2", "n/y": "y=t1"} {
		if got := readFile(t, filepath.Join(pg, f)); got != want {
			t.Errorf("%s = %q after the merge, want %q", f, got, want)
		}
	}
	if head := strings.Fields(logLines(t, pg)[0]); !strings.Contains(head[3], ",") {
		t.Errorf("the head after a moved-on commit is not a merge: %v", head)
	}

	// Rollback drops everything, with rmdir or rm -r.
	after := copyOf(t, pg)
	t3 := begin(t, pg, "t3")
	write(t, t3.path("a"), "a=t3")
	must(t, os.Remove(t3.path("b")))
	t3.rollback()
	t4 := begin(t, pg, "t4")
	write(t, t4.path("z"), "z")
	run(t, pg, "rm", "-rf", t4.dir())
	sameTree(t, pg, after)
	if got := ls(t, filepath.Join(pg, ".ledger", "transactions")); len(got) != 0 {
		t.Fatalf("transactions/ lists %v after rollbacks", got)
	}

	// A transaction with a file still open does not commit.
	t5 := begin(t, pg, "t5")
	f, err := os.Create(t5.path("open"))
	must(t, err)
	_, err = f.WriteString("late")
	must(t, err)
	if out, err := t5.commit(); err == nil || !strings.Contains(out, "busy") {
		t.Fatalf("commit with an open file: %v %s", err, out)
	}
	must(t, f.Close())
	t5.mustCommit()
	if got := readFile(t, filepath.Join(pg, "open")); got != "late" {
		t.Fatalf("open = %q", got)
	}

	// Bad names and operations get clear errors.
	if err := os.Mkdir(filepath.Join(pg, ".ledger", "transactions", "t5"), 0o755); err != nil {
		t.Fatalf("reusing a committed transaction's name: %v", err)
	}
	if err := os.Mkdir(filepath.Join(pg, ".ledger", "transactions", "t5"), 0o755); !errors.Is(err, syscall.EEXIST) {
		t.Fatalf("mkdir of an open transaction: %v, want EEXIST", err)
	}
	if err := os.Remove(filepath.Join(pg, ".ledger", "transactions", "none")); err == nil {
		t.Fatal("rolled back a transaction that does not exist")
	}
	run(t, pg, "rmdir", filepath.Join(".ledger", "transactions", "t5"))
	s.stop()
	verifySchema(t, repo)
}

// Concurrent transactions each set a and b to one value while plain writes
// move the head: no commit of the page, merges included, ever has a and b
// differ.
func TestTransactionsAreAtomic(t *testing.T) {
	t.Parallel()
	repo := t.TempDir()
	s := mount(t, repo)
	pg := s.page("t", "p")
	setup := begin(t, pg, "setup")
	write(t, setup.path("a"), "0")
	write(t, setup.path("b"), "0")
	setup.mustCommit()
	stop := make(chan struct{})
	var live, txns sync.WaitGroup
	live.Go(func() {
		for i := 0; ; i++ {
			select {
			case <-stop:
				return
			default:
			}
			if err := os.WriteFile(filepath.Join(pg, fmt.Sprintf("live-%d", i%20)), []byte(fmt.Sprint(i)), 0o644); err != nil {
				t.Error(err)
				return
			}
		}
	})
	for w := range 2 {
		txns.Go(func() {
			for i := range 8 {
				name := fmt.Sprintf("w%d-%d", w, i)
				x := txn{t: t, pg: pg, name: name}
				v := []byte(fmt.Sprintf("%d-%d", w, i))
				err := os.Mkdir(x.dir(), 0o755)
				if err == nil {
					err = os.WriteFile(x.path("a"), v, 0o644)
				}
				if err == nil {
					err = os.WriteFile(x.path("b"), v, 0o644)
				}
				if err == nil {
					var out string
					if out, err = x.commit(); err != nil {
						err = fmt.Errorf("%w: %s", err, out)
					}
				}
				if err != nil {
					t.Errorf("transaction %s: %v", name, err)
					return
				}
			}
		})
	}
	txns.Wait()
	close(stop)
	live.Wait()
	commits := ls(t, filepath.Join(pg, ".ledger", "commits"))
	merges := 0
	for _, l := range logLines(t, pg) {
		if strings.Contains(strings.Fields(l)[3], ",") {
			merges++
		}
	}
	for _, c := range commits {
		dir := filepath.Join(pg, ".ledger", "commits", c)
		a, errA := os.ReadFile(filepath.Join(dir, "a"))
		b, errB := os.ReadFile(filepath.Join(dir, "b"))
		if string(a) != string(b) || (errA == nil) != (errB == nil) {
			t.Fatalf("commit %s has a=%q (%v) b=%q (%v)", c, a, errA, b, errB)
		}
	}
	t.Logf("%d commits, %d merges, all with a = b", len(commits), merges)
	if merges == 0 {
		t.Fatal("no transaction had to merge: the test did not move the head")
	}
}

// Uncommitted transactions do not survive a crash: after SIGKILL and a new
// mount, the page is as it was before them and their journal rows are gone.
func TestTransactionsDiscardedByCrash(t *testing.T) {
	t.Parallel()
	repo := t.TempDir()
	s := mount(t, repo)
	pg := s.page("t", "p")
	write(t, filepath.Join(pg, "a"), "a=1")
	f, err := os.OpenFile(filepath.Join(pg, "a"), os.O_RDONLY, 0)
	must(t, err)
	must(t, f.Sync())
	f.Close()
	before := copyOf(t, pg)
	x := begin(t, pg, "doomed")
	write(t, x.path("a"), "a=doomed")
	must(t, os.Mkdir(x.path("new"), 0o755))
	for i := range 50 {
		write(t, x.path(fmt.Sprintf("new/%d", i)), strings.Repeat("x", 10000+i))
	}
	s.kill()

	rows := verifyRows(t, repo, false)
	if rows["journals/{id}/entry/"] < 51 {
		t.Fatalf("the killed mount left %d journal rows, want the transaction's 51", rows["journals/{id}/entry/"])
	}
	s = mountAt(t, repo, s.mnt)
	sameTree(t, pg, before)
	if got := ls(t, filepath.Join(pg, ".ledger", "transactions")); len(got) != 0 {
		t.Fatalf("transactions/ lists %v after the crash", got)
	}
	s.stop()
	rows = verifySchema(t, repo)
	if rows["journals/{id}/entry/"] != 0 {
		t.Fatalf("%d journal rows left after recovery", rows["journals/{id}/entry/"])
	}
}

// TestTransactionCommitReachesLiveFiles: what a transaction commits is what
// the live page shows at once, to descriptors opened after the commit, to
// the kernel's caches of names, attributes and pages, and to appends,
// writes at offsets and truncations, whether or not the file was read
// before. The names and attributes are cached for a minute, and a second
// lookup of the page (a mkdir of it) comes first, as after the page's own
// cache entry expired: the commit must reach the node the kernel holds.
func TestTransactionCommitReachesLiveFiles(t *testing.T) {
	t.Parallel()
	s := mount(t, t.TempDir(), "--cache-timeout", "60")
	pg := s.page("t", "p")
	old := strings.Repeat("o", 100_000)
	type step struct {
		name string
		// change is what the transaction does to the file, then what
		// follows in the live page; want is the live content after.
		change func(x txn, f string)
		after  func(f string) error
		want   string
		mode   os.FileMode
	}
	rewrite := func(x txn, f string) { write(t, x.path(f), "new") }
	steps := []step{
		{"append", rewrite, func(f string) error {
			h, err := os.OpenFile(f, os.O_WRONLY|os.O_APPEND, 0)
			if err != nil {
				return err
			}
			if _, err := h.WriteString("APP"); err != nil {
				h.Close()
				return err
			}
			return h.Close()
		}, "newAPP", 0o644},
		{"pwrite", rewrite, func(f string) error {
			h, err := os.OpenFile(f, os.O_WRONLY, 0)
			if err != nil {
				return err
			}
			if _, err := h.WriteAt([]byte("XYZW"), 1); err != nil {
				h.Close()
				return err
			}
			return h.Close()
		}, "nXYZW", 0o644},
		{"truncate", rewrite, func(f string) error { return os.Truncate(f, 2) }, "ne", 0o644},
		{"stat", rewrite, func(string) error { return nil }, "new", 0o644},
		{"chmod", func(x txn, f string) { must(t, os.Chmod(x.path(f), 0o600)) }, func(string) error { return nil }, old, 0o600},
		{"chmod-append", func(x txn, f string) { must(t, os.Chmod(x.path(f), 0o640)) }, func(f string) error {
			h, err := os.OpenFile(f, os.O_WRONLY|os.O_APPEND, 0)
			if err != nil {
				return err
			}
			if _, err := h.WriteString("+"); err != nil {
				t.Fatal(err)
			}
			return h.Close()
		}, old + "+", 0o640},
	}
	for _, readFirst := range []bool{false, true} {
		for i, st := range steps {
			f := fmt.Sprintf("%s-%v-%d", st.name, readFirst, i)
			write(t, filepath.Join(pg, f), old)
			if readFirst {
				if got := readFile(t, filepath.Join(pg, f)); got != old {
					t.Fatalf("%s: read %d bytes before the transaction", f, len(got))
				}
			}
			if err := os.Mkdir(pg, 0o755); !errors.Is(err, os.ErrExist) {
				t.Fatalf("mkdir of the page: %v, want EEXIST", err)
			}
			if fi, err := os.Stat(filepath.Join(pg, f)); err != nil || fi.Size() != int64(len(old)) {
				t.Fatalf("%s before the transaction: %v, %v", f, fi, err)
			}
			x := begin(t, pg, "t-"+f)
			st.change(x, f)
			x.mustCommit()
			must(t, st.after(filepath.Join(pg, f)))
			fi, err := os.Stat(filepath.Join(pg, f))
			if err != nil {
				t.Fatal(err)
			}
			got := readFile(t, filepath.Join(pg, f))
			if got != st.want || fi.Size() != int64(len(st.want)) || fi.Mode().Perm() != st.mode {
				t.Errorf("%s: %d bytes (%.12q…), stat size %d mode %v; want %d bytes (%.12q…) mode %v",
					f, len(got), got, fi.Size(), fi.Mode().Perm(), len(st.want), st.want, st.mode)
			}
		}
	}

	// Deletions: of files, and of a directory with its files, looked up
	// before; a name the transaction creates where a lookup found none.
	for _, f := range []string{"gone1", "gone2", "dir/x", "dir/y"} {
		must(t, os.MkdirAll(filepath.Dir(filepath.Join(pg, f)), 0o755))
		write(t, filepath.Join(pg, f), f)
		must(t, statErr(filepath.Join(pg, f)))
	}
	if err := statErr(filepath.Join(pg, "born")); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("born before the transaction: %v", err)
	}
	open, err := os.Open(filepath.Join(pg, "gone1"))
	must(t, err)
	defer open.Close()
	if err := os.Mkdir(pg, 0o755); !errors.Is(err, os.ErrExist) {
		t.Fatalf("mkdir of the page: %v, want EEXIST", err)
	}
	x := begin(t, pg, "deletes")
	must(t, os.Remove(x.path("gone1")))
	must(t, os.Remove(x.path("gone2")))
	must(t, os.RemoveAll(x.path("dir")))
	write(t, x.path("born"), "born")
	x.mustCommit()
	for _, f := range []string{"gone1", "gone2", "dir/x", "dir"} {
		if err := statErr(filepath.Join(pg, f)); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("%s after the transaction deleted it: %v, want ENOENT", f, err)
		}
	}
	if got := readFile(t, filepath.Join(pg, "born")); got != "born" {
		t.Errorf("born reads %q", got)
	}
	// A descriptor open on a file the transaction deleted keeps it, as one
	// open on a file a rename replaced does.
	var st syscall.Stat_t
	must(t, syscall.Fstat(int(open.Fd()), &st))
	b := make([]byte, 16)
	n, _ := open.ReadAt(b, 0)
	if string(b[:n]) != "gone1" || st.Nlink != 0 {
		t.Errorf("descriptor on the deleted file reads %q with nlink %d, want %q and 0", b[:n], st.Nlink, "gone1")
	}
	// A new file at a deleted name is a new inode.
	write(t, filepath.Join(pg, "gone1"), "again")
	var again syscall.Stat_t
	must(t, syscall.Stat(filepath.Join(pg, "gone1"), &again))
	if again.Ino == st.Ino {
		t.Errorf("new file at the deleted name has the open file's inode number %d", st.Ino)
	}
}

func statErr(path string) error {
	_, err := os.Stat(path)
	return err
}
