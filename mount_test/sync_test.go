package mount_test

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/ledgerfs/ledgerfs/internal/remote"
	"github.com/ledgerfs/ledgerfs/internal/s3test"
	"github.com/ledgerfs/ledgerfs/store"
)

// syncCmd is `ledgerfs sync` of repo with the S3 server at endpoint,
// bucket "ledgerfs", prefix "home", with the test servers' credentials.
func syncCmd(endpoint, repo string) *exec.Cmd {
	cmd := exec.Command(binary, "sync", repo, "--remote", "s3://ledgerfs/home", "--endpoint", endpoint)
	cmd.Env = append(os.Environ(), s3Env...)
	return cmd
}

// s3Env is the environment of a ledgerfs process that reaches the test S3
// servers, with the passphrase its stores are encrypted under.
var s3Env = []string{"AWS_ACCESS_KEY_ID=" + s3test.AccessKey, "AWS_SECRET_ACCESS_KEY=" + s3test.SecretKey, "AWS_REGION=us-east-1",
	"LEDGERFS_PASSWORD=" + testPassphrase}

// testPassphrase is the passphrase of the tests' remote stores.
const testPassphrase = "a passphrase of the mount tests"

// syncRepo runs `ledgerfs sync` of an unmounted repository with the S3
// server srv, bucket "ledgerfs", prefix "home".
func syncRepo(t *testing.T, srv *s3test.Server, repo string) string {
	t.Helper()
	cmd := syncCmd(srv.Endpoint, repo)
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("ledgerfs sync %s: %v\n%s", repo, err, out)
	}
	return string(out)
}

// TestSyncTwoDevices: files written through one device's mount, synced
// through a real S3 server, read the same through another's; a git
// repository committed to on one device shows a clean status and the same
// log on the other; a file edited on both while apart ends with the later
// edit, the other kept as a conflict file, on both.
func TestSyncTwoDevices(t *testing.T) {
	t.Parallel()
	if _, err := exec.LookPath("git"); err != nil {
		t.Fatal("git is needed: apt-get install git")
	}
	srv := s3test.Start(t)
	repoA, repoB := t.TempDir(), t.TempDir()

	a := mount(t, repoA)
	pg := a.page("home", "work")
	must(t, os.WriteFile(filepath.Join(pg, "notes.txt"), []byte("from a\n"), 0o644))
	must(t, os.MkdirAll(filepath.Join(pg, "bin"), 0o755))
	must(t, os.WriteFile(filepath.Join(pg, "bin", "tool"), content(7, 3<<20), 0o755))
	project := filepath.Join(pg, "project")
	must(t, os.MkdirAll(project, 0o755))
	git := func(dir string, args ...string) string {
		t.Helper()
		return run(t, dir, "git", append([]string{"-c", "user.name=t", "-c", "user.email=t@example.com", "-c", "init.defaultBranch=main"}, args...)...)
	}
	git(project, "init", "-q")
	must(t, os.WriteFile(filepath.Join(project, "main.go"), []byte("package main\n"), 0o644))
	git(project, "add", ".")
	git(project, "commit", "-q", "-m", "first")
	wantLog := git(project, "log", "--format=%H %s")
	wantTool := sha(t, filepath.Join(pg, "bin", "tool"))
	a.stop()
	syncRepo(t, srv, repoA)
	out := syncRepo(t, srv, repoB)
	if !strings.Contains(out, "pulled") {
		t.Fatalf("sync of b: %s", out)
	}

	b := mountRemote(t, repoB) // its files' contents come from the remote when read
	pgB := filepath.Join(b.mnt, "home", "work")
	if got, err := os.ReadFile(filepath.Join(pgB, "notes.txt")); err != nil || string(got) != "from a\n" {
		t.Fatalf("notes.txt on b: %q, %v", got, err)
	}
	if fi, err := os.Stat(filepath.Join(pgB, "bin", "tool")); err != nil || fi.Mode().Perm() != 0o755 {
		t.Fatalf("bin/tool on b: %v, %v; want mode 0755", fi, err)
	}
	if got := sha(t, filepath.Join(pgB, "bin", "tool")); got != wantTool {
		t.Fatal("bin/tool differs on b")
	}
	projB := filepath.Join(pgB, "project")
	if got := git(projB, "log", "--format=%H %s"); got != wantLog {
		t.Fatalf("git log on b: %q, want %q", got, wantLog)
	}
	if st := git(projB, "status", "--porcelain"); st != "" {
		t.Fatalf("git status on b: %q, want clean", st)
	}

	// Apart: both edit notes.txt, b later.
	must(t, os.WriteFile(filepath.Join(pgB, "notes.txt"), []byte("b's edit\n"), 0o644))
	b.stop()
	a = mount(t, repoA)
	must(t, os.WriteFile(filepath.Join(a.mnt, "home", "work", "notes.txt"), []byte("a's edit\n"), 0o644))
	a.stop()
	syncRepo(t, srv, repoB)
	syncRepo(t, srv, repoA) // merges: a's edit is the later
	syncRepo(t, srv, repoB)
	for _, repo := range []string{repoA, repoB} {
		s := mountRemote(t, repo)
		dir := filepath.Join(s.mnt, "home", "work")
		if got, _ := os.ReadFile(filepath.Join(dir, "notes.txt")); string(got) != "a's edit\n" {
			t.Fatalf("%s: notes.txt %q, want the later edit", repo, got)
		}
		var conflict string
		for _, n := range ls(t, dir) {
			if strings.HasPrefix(n, "notes.sync-conflict-") && strings.HasSuffix(n, ".txt") {
				conflict = n
			}
		}
		if got, _ := os.ReadFile(filepath.Join(dir, conflict)); conflict == "" || string(got) != "b's edit\n" {
			t.Fatalf("%s: conflict file %q holds %q, want b's edit", repo, conflict, got)
		}
		s.stop()
	}
}

// objectsUnder lists the objects srv holds under dir of bucket "ledgerfs",
// prefix "home", through S3.
func objectsUnder(t *testing.T, srv *s3test.Server, dir string) []string {
	t.Helper()
	be, err := remote.NewS3(context.Background(), srv.Config("ledgerfs", "home"))
	must(t, err)
	var out []string
	must(t, be.List(context.Background(), dir+"/", "", func(o remote.Object) error {
		out = append(out, o.Name)
		return nil
	}))
	return out
}

// syncProc is a `ledgerfs sync` running.
type syncProc struct {
	cmd  *exec.Cmd
	done chan error
	out  *output
}

func (p *syncProc) wait() error { return <-p.done }

// startSync starts `ledgerfs sync` of repo through the watcher w and
// returns once a pack more is in the store (the upload under way).
func startSync(t *testing.T, w *s3test.Watcher, repo string) *syncProc {
	t.Helper()
	cmd := syncCmd(w.Endpoint, repo)
	var out output
	cmd.Stdout, cmd.Stderr = &out, &out
	before := w.Count(s3test.PackPut)
	must(t, cmd.Start())
	done, exited := make(chan error, 1), make(chan struct{})
	go func() {
		done <- cmd.Wait()
		close(exited)
	}()
	t.Cleanup(func() { cmd.Process.Kill() })
	w.Await(t, "a pack of the sync in the store", before+1, s3test.PackPut, exited)
	return &syncProc{cmd: cmd, done: done, out: &out}
}

// TestSyncFaults: the S3 server killed with -9 in the middle of an upload,
// and the sync process killed with -9 in the middle of another; after each
// the next sync finishes, no batch of the device's log is written twice,
// status shows the error while it stands, and the other device gets every
// byte.
func TestSyncFaults(t *testing.T) {
	t.Parallel()
	srv := s3test.Start(t)
	w := srv.Watch(t)
	repoA, repoB := t.TempDir(), t.TempDir()
	a := mountPlain(t, repoA)
	pg := a.page("home", "work")
	must(t, os.WriteFile(filepath.Join(pg, "one.bin"), content(11, 24<<20), 0o644))
	a.stop()

	// The server dies mid-upload.
	first := startSync(t, w, repoA)
	srv.Kill()
	if err := first.wait(); err == nil {
		t.Fatalf("sync succeeded with its server killed mid-upload:\n%s", first.out)
	}
	st := run(t, "", binary, "status", repoA)
	if !strings.Contains(st, "last error:  20") || !strings.Contains(st, "home/work  1 commit") {
		t.Fatalf("status after the failed sync:\n%s", st)
	}
	srv.Restart()
	syncRepo(t, srv, repoA)
	if st := run(t, "", binary, "status", repoA); !strings.Contains(st, "last error:  none") || !strings.Contains(st, "home/work  nothing") {
		t.Fatalf("status after the sync went through:\n%s", st)
	}

	// The sync process dies mid-upload.
	a = mountPlain(t, repoA)
	must(t, os.WriteFile(filepath.Join(a.mnt, "home", "work", "two.bin"), content(12, 24<<20), 0o644))
	a.stop()
	second := startSync(t, w, repoA)
	second.cmd.Process.Kill()
	second.wait()
	syncRepo(t, srv, repoA)
	syncRepo(t, srv, repoA)
	logs := objectsUnder(t, srv, "logs")
	if len(logs) != 2 {
		t.Fatalf("the device's log holds %d batches, want 2 (one per file's sync): %v", len(logs), logs)
	}

	syncRepo(t, srv, repoB)
	b := mountRemote(t, repoB)
	for i, name := range []string{"one.bin", "two.bin"} {
		want := content(11+i, 24<<20)
		got, err := os.ReadFile(filepath.Join(b.mnt, "home", "work", name))
		if err != nil || !bytes.Equal(got, want) {
			t.Fatalf("%s on b: %d bytes (%v), want a's %d", name, len(got), err, len(want))
		}
	}
}

// mountRemote mounts repo with the test S3 servers' credentials and
// passphrase, syncing with the remote it keeps: a repository whose pulls
// left contents in the remote reads them from there.
func mountRemote(t *testing.T, repo string) *server {
	t.Helper()
	return mountEnv(t, binary, s3Env, repo, filepath.Join(t.TempDir(), "mnt"))
}

// mountSyncedAt mounts repo syncing every 100 ms with the S3 server at
// endpoint (a Watcher's, say), args added.
func mountSyncedAt(t *testing.T, endpoint, repo string, args ...string) *server {
	t.Helper()
	return mountSyncedWith(t, binary, endpoint, repo, args...)
}

// mountSyncedWith mounts as mountSyncedAt does, serving with bin.
func mountSyncedWith(t *testing.T, bin, endpoint, repo string, args ...string) *server {
	t.Helper()
	// The kernel may cache names and attributes for a minute, longer than
	// any wait of these tests: what a sync changes shows only if the mount
	// invalidated it.
	return mountEnv(t, bin, s3Env, repo, filepath.Join(t.TempDir(), "mnt"), append([]string{"--remote", "s3://ledgerfs/home", "--endpoint", endpoint, "--sync-every", "100ms", "--cache-timeout", "60"}, args...)...)
}

func fileIs(path, want string) func() bool {
	return func() bool {
		b, err := os.ReadFile(path)
		return err == nil && string(b) == want
	}
}

// TestMountsSync: two mounts of two repositories syncing through a real S3
// server in the background: a change closed on one is readable on the
// other (the latency is logged); a file open for writing on one is not
// disturbed by the other's change of it, and its close is the later change;
// both end on the same head.
func TestMountsSync(t *testing.T) {
	srv := s3test.Start(t)
	w := srv.Watch(t)
	a := mountSyncedAt(t, w.Endpoint, t.TempDir())
	b := mountSyncedAt(t, w.Endpoint, t.TempDir())
	// await checks cond again after each request either mount makes (each
	// syncs every 100 ms), and says how long cond took to hold.
	await := func(what string, cond func() bool) time.Duration {
		t.Helper()
		start := time.Now()
		w.Until(t, what, 30*time.Second, cond)
		return time.Since(start)
	}
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("mount a's log:\n%s\nmount b's log:\n%s", a.log, b.log)
		}
	})
	pa, pb := a.page("home", "work"), b.page("home", "work")
	var lat []time.Duration
	for i := range 10 {
		want := fmt.Sprintf("change %d\n", i)
		must(t, os.WriteFile(filepath.Join(pa, "notes.txt"), []byte(want), 0o644))
		lat = append(lat, await("a's change readable on b", fileIs(filepath.Join(pb, "notes.txt"), want)))
	}
	slices.Sort(lat)
	t.Logf("a change closed on a readable on b: p50 %v, max %v", lat[len(lat)/2], lat[len(lat)-1])

	// b writes notes.txt, holding it open, while a changes it: a's
	// change lands on b before b's close, which b never saw. b's close
	// is the later change; a's is kept beside it as a conflict file named
	// after a, on both.
	wf, err := os.OpenFile(filepath.Join(pb, "notes.txt"), os.O_WRONLY|os.O_TRUNC, 0)
	must(t, err)
	_, err = wf.WriteString("b's, written ")
	must(t, err)
	must(t, os.WriteFile(filepath.Join(pa, "notes.txt"), []byte("a's change\n"), 0o644))
	must(t, os.WriteFile(filepath.Join(pa, "other.txt"), []byte("marker\n"), 0o644))
	await("a's change on b", fileIs(filepath.Join(pb, "other.txt"), "marker\n"))
	_, err = wf.WriteString("while a changed it\n")
	must(t, err)
	must(t, wf.Close())
	want := "b's, written while a changed it\n"
	await("b's close on b", fileIs(filepath.Join(pb, "notes.txt"), want))
	await("b's close on a", fileIs(filepath.Join(pa, "notes.txt"), want))
	dev := regexp.MustCompile(`msg=syncing .* device=([0-9a-f]{7})`).FindStringSubmatch(a.log.String())
	if dev == nil {
		t.Fatalf("a's log names no device:\n%s", a.log)
	}
	for _, pg := range []string{pa, pb} {
		var kept []string
		for _, n := range ls(t, pg) {
			if strings.HasPrefix(n, "notes.sync-conflict-") {
				kept = append(kept, n)
			}
		}
		if len(kept) != 1 || !strings.HasSuffix(kept[0], "-"+strings.ToUpper(dev[1])+".txt") {
			t.Fatalf("%s: conflict files %v, want one named after a (%s)", pg, kept, dev[1])
		}
		if got, _ := os.ReadFile(filepath.Join(pg, kept[0])); string(got) != "a's change\n" {
			t.Fatalf("%s: %s holds %q, want a's change", pg, kept[0], got)
		}
	}
	latest := func(pg string) string {
		l, _ := os.Readlink(filepath.Join(pg, ".ledger", "latest"))
		return l
	}
	await("one head on both", func() bool { return latest(pa) == latest(pb) && latest(pa) != "" })
	status := filepath.Join(pa, ".ledger", "sync")
	await(".ledger/sync says nothing waits", func() bool {
		b, err := os.ReadFile(status)
		return err == nil && strings.Contains(string(b), "remote: s3://ledgerfs/home\n") &&
			strings.Contains(string(b), "waiting to upload: nothing\n") && strings.Contains(string(b), "last error: none\n")
	})
	// Names: a ledger made, a page made, a page renamed and one deleted
	// on a are so on b, its kernel's cached entries of the old names gone.
	exists := func(path string) func() bool {
		return func() bool { _, err := os.Stat(path); return err == nil }
	}
	gone := func(path string) func() bool {
		return func() bool { _, err := os.Stat(path); return os.IsNotExist(err) }
	}
	must(t, os.Mkdir(filepath.Join(a.mnt, "empty"), 0o755))
	must(t, os.Mkdir(filepath.Join(a.mnt, "home", "scratch"), 0o755))
	await("a's new page on b", exists(filepath.Join(b.mnt, "home", "scratch")))
	await("a's new ledger on b", exists(filepath.Join(b.mnt, "empty")))
	must(t, os.Rename(pa, filepath.Join(a.mnt, "home", "desk")))
	must(t, os.Remove(filepath.Join(a.mnt, "home", "scratch")))
	await("a's renamed page on b", fileIs(filepath.Join(b.mnt, "home", "desk", "notes.txt"), want))
	await("the page's old name gone on b", gone(pb))
	await("a's deleted page gone on b", gone(filepath.Join(b.mnt, "home", "scratch")))
	// A page moved to another ledger on a moves on b, history and all.
	moved := filepath.Join(a.mnt, "empty", "desk")
	commits := commitCount(t, filepath.Join(a.mnt, "home", "desk", ".ledger"))
	run(t, a.mnt, "mv", filepath.Join(a.mnt, "home", "desk"), moved)
	if n := commitCount(t, filepath.Join(moved, ".ledger")); n != commits {
		t.Errorf("the page moved on a lists %d commits, want %d", n, commits)
	}
	await("a's moved page on b", fileIs(filepath.Join(b.mnt, "empty", "desk", "notes.txt"), want))
	await("the moved page's old name gone on b", gone(filepath.Join(b.mnt, "home", "desk")))
	if n := commitCount(t, filepath.Join(b.mnt, "empty", "desk", ".ledger")); n != commits {
		t.Errorf("the page moved on b lists %d commits, want %d", n, commits)
	}

	stats, err := os.ReadFile(filepath.Join(a.mnt, ".stats"))
	must(t, err)
	for _, want := range []string{`ledgerfs_sync_requests_total{kind="put",result="ok"}`, `ledgerfs_sync_rounds_total{result="ok"}`,
		`ledgerfs_sync_commits_total{direction="up"}`, `ledgerfs_sync_commits_total{direction="down"}`, "ledgerfs_sync_seconds_since_success "} {
		if !strings.Contains(string(stats), want) {
			t.Errorf("a's .stats has no %s", want)
		}
	}
}

// twoSyncedMounts starts a test S3 server and two mounts syncing with it
// every 100 ms (their logs printed if the test fails), and returns them
// with an await that checks a condition after each request either makes,
// for up to a minute.
func twoSyncedMounts(t *testing.T) (*s3test.Server, *server, *server, func(string, func() bool)) {
	t.Helper()
	srv := s3test.Start(t)
	w := srv.Watch(t)
	a := mountSyncedAt(t, w.Endpoint, t.TempDir())
	b := mountSyncedAt(t, w.Endpoint, t.TempDir())
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("mount a's log:\n%s\nmount b's log:\n%s", a.log, b.log)
		}
	})
	return srv, a, b, func(what string, cond func() bool) {
		t.Helper()
		w.Until(t, what, time.Minute, cond)
	}
}

// deskSharedThenStoreDown starts two mounts syncing through one server
// (twoSyncedMounts), has a write home/desk/a.txt ("a's\n") and waits for it
// on b, then kills the server: what the mounts do next reaches the other
// once the test calls srv.Restart.
func deskSharedThenStoreDown(t *testing.T) (*s3test.Server, *server, *server, func(string, func() bool)) {
	t.Helper()
	srv, a, b, await := twoSyncedMounts(t)
	must(t, os.WriteFile(filepath.Join(a.page("home", "desk"), "a.txt"), []byte("a's\n"), 0o644))
	await("a's page on b", fileIs(filepath.Join(b.mnt, "home", "desk", "a.txt"), "a's\n"))
	srv.Kill()
	return srv, a, b, await
}

// TestMountsMergeAPageRenamedOntoATakenName: while the store is down, a
// renames a page onto a name b makes a page of its own under, and b writes
// into the page a renamed. Once the store is back, both mounts show one
// page under the new name with all three files and none under the old:
// b merged its page of the old name, with the change a never saw, into
// its page of the new name, as a landed b's batches of the old name in the
// page it renamed.
func TestMountsMergeAPageRenamedOntoATakenName(t *testing.T) {
	t.Parallel()
	srv, a, b, await := deskSharedThenStoreDown(t)
	must(t, os.Rename(filepath.Join(a.mnt, "home", "desk"), filepath.Join(a.mnt, "home", "notes")))
	must(t, os.WriteFile(filepath.Join(b.mnt, "home", "desk", "b.txt"), []byte("b's, into the page a renamed\n"), 0o644))
	must(t, os.WriteFile(filepath.Join(b.page("home", "notes"), "own.txt"), []byte("b's own notes\n"), 0o644))
	srv.Restart()

	want := map[string]string{"a.txt": "a's\n", "b.txt": "b's, into the page a renamed\n", "own.txt": "b's own notes\n"}
	for _, m := range []*server{a, b} {
		for name, content := range want {
			await(name+" in the renamed page on "+m.mnt, fileIs(filepath.Join(m.mnt, "home", "notes", name), content))
		}
		await("no page of the old name on "+m.mnt, func() bool {
			_, err := os.Stat(filepath.Join(m.mnt, "home", "desk"))
			return os.IsNotExist(err)
		})
	}
	for _, m := range []*server{a, b} {
		var files []string
		for _, n := range ls(t, filepath.Join(m.mnt, "home", "notes")) {
			if !strings.HasPrefix(n, ".") {
				files = append(files, n)
			}
		}
		if len(files) != len(want) {
			t.Errorf("%s/home/notes holds %v, want %d files", m.mnt, files, len(want))
		}
	}
}

// TestMountsHoldBackOnlyABusyPage: a's rename of a page that b has a file
// open in waits on b until the file closes, and a's changes of another page
// reach b meanwhile (they waited with it before).
func TestMountsHoldBackOnlyABusyPage(t *testing.T) {
	t.Parallel()
	_, a, b, await := twoSyncedMounts(t)
	must(t, os.WriteFile(filepath.Join(a.page("home", "work"), "f.txt"), []byte("f\n"), 0o644))
	must(t, os.WriteFile(filepath.Join(a.page("home", "other"), "x.txt"), []byte("first\n"), 0o644))
	await("a's pages on b", fileIs(filepath.Join(b.mnt, "home", "other", "x.txt"), "first\n"))
	await("a's pages on b", fileIs(filepath.Join(b.mnt, "home", "work", "f.txt"), "f\n"))

	open, err := os.Open(filepath.Join(b.mnt, "home", "work", "f.txt"))
	must(t, err)
	defer open.Close()
	must(t, os.Rename(filepath.Join(a.mnt, "home", "work"), filepath.Join(a.mnt, "home", "desk")))
	must(t, os.WriteFile(filepath.Join(a.mnt, "home", "other", "x.txt"), []byte("after the rename\n"), 0o644))
	await("a's change of another page on b while the renamed one is in use", fileIs(filepath.Join(b.mnt, "home", "other", "x.txt"), "after the rename\n"))
	if _, err := os.Stat(filepath.Join(b.mnt, "home", "desk")); err == nil {
		t.Fatal("b renamed home/work with a file open in it")
	}
	must(t, open.Close())
	await("the rename on b once the file closed", fileIs(filepath.Join(b.mnt, "home", "desk", "f.txt"), "f\n"))
	await("the old name gone on b", func() bool {
		_, err := os.Stat(filepath.Join(b.mnt, "home", "work"))
		return os.IsNotExist(err)
	})
}

// The versions a pull brings are recorded in the page's version file as
// the pull lands, as a mount's own commits are: a device's first listing
// of a name's versions reads them rather than walk the whole history it
// pulled. What the file holds is what a walk finds.
func TestPulledVersionsAreIndexed(t *testing.T) {
	srv := s3test.Start(t)
	w := srv.Watch(t)
	a := mountSyncedAt(t, w.Endpoint, t.TempDir())
	pa := a.page("l", "p")
	const n = 12
	for i := range n {
		must(t, os.WriteFile(filepath.Join(pa, "f"), []byte(fmt.Sprint("version ", i)), 0o644))
	}
	must(t, os.WriteFile(filepath.Join(pa, "g"), []byte("other"), 0o644))

	repo := t.TempDir()
	b := mountSyncedAt(t, w.Endpoint, repo)
	pb := filepath.Join(b.mnt, "l", "p")
	// Nothing on b lists versions: what the file holds, the pull wrote.
	w.Until(t, "a's commits on b", 30*time.Second, fileIs(filepath.Join(pb, "g"), "other"))
	w.Until(t, "b's version file", 30*time.Second, func() bool {
		files, _ := filepath.Glob(filepath.Join(repo, store.SerializationVersion, "ledgers", "*", "*", store.VersionsFileName))
		if len(files) != 1 {
			return false
		}
		fi, err := os.Stat(files[0])
		return err == nil && fi.Size() > 0
	})
	b.stop()
	a.stop()

	for i, vs := range indexedAsWalked(t, "after b's pull", repo, "l", "p", "f", "g") {
		if len(vs) == 0 {
			t.Errorf("b's version file holds no version of key %d", i)
		}
	}
}

// TestSyncCommandIndexesPulledVersions: `ledgerfs sync` pulling a page's
// history into a repository no mount serves leaves the version file a
// mount's pull would, equal to a walk of what it pulled: a mount's first
// listing of versions there reads it rather than walk the history.
func TestSyncCommandIndexesPulledVersions(t *testing.T) {
	t.Parallel()
	srv := s3test.Start(t)
	repoA, repoB := t.TempDir(), t.TempDir()
	a := mount(t, repoA)
	pg := a.page("l", "p")
	const n = 6
	for i := range n {
		must(t, os.WriteFile(filepath.Join(pg, "f"), []byte(fmt.Sprint("version ", i)), 0o644))
		syncDir(t, pg)
	}
	must(t, os.WriteFile(filepath.Join(pg, "g"), []byte("other"), 0o644))
	a.stop()
	syncRepo(t, srv, repoA)
	syncRepo(t, srv, repoB)
	vs := indexedAsWalked(t, "after ledgerfs sync pulled the page", repoB, "l", "p", "f", "g")
	if len(vs[0]) != n || len(vs[1]) != 1 {
		t.Fatalf("the pulled page's version file holds %d versions of f and %d of g, want %d and 1", len(vs[0]), len(vs[1]), n)
	}
}

// TestAMountInUseSyncsSoon: a mount that moved something in its last
// rounds syncs twice a second, whatever its --sync-every, so a change on
// one device shows on another in use within moments; an idle mount keeps to
// --sync-every. b's first round pulls a's file, which keeps it syncing
// often; a's next change then shows on b long before b's --sync-every of
// 30 s comes round.
func TestAMountInUseSyncsSoon(t *testing.T) {
	t.Parallel()
	srv := s3test.Start(t)
	w := srv.Watch(t)
	a := mountSyncedAt(t, w.Endpoint, t.TempDir(), "--sync-every", "30s")
	f := filepath.Join(a.page("home", "desk"), "f")
	must(t, os.WriteFile(f, []byte("one\n"), 0o644))
	w.Until(t, "a pushed its file", time.Minute, func() bool {
		st, _ := os.ReadFile(filepath.Join(filepath.Dir(f), ".ledger", "sync"))
		return strings.Contains(string(st), "waiting to upload: nothing\n")
	})
	b := mountSyncedAt(t, w.Endpoint, t.TempDir(), "--sync-every", "30s")
	fb := filepath.Join(b.mnt, "home", "desk", "f")
	w.Until(t, "a's file on b", time.Minute, fileIs(fb, "one\n"))
	must(t, os.WriteFile(f, []byte("two\n"), 0o644))
	start := time.Now()
	w.Until(t, "a's change on b", time.Minute, fileIs(fb, "two\n"))
	if took := time.Since(start); took > 10*time.Second {
		t.Fatalf("a's change showed on b after %v: b, in use, waited for its --sync-every of 30 s", took)
	} else {
		t.Logf("a's change showed on b after %v", took)
	}
}

// TestMountsFollowALedgerRename: while the store is down, a renames a
// ledger and b writes into a page of it. Once the store is back, both
// mounts show the page under the new ledger with both files, and nothing
// under the old: b renamed its ledger as a did, and pushed its change from
// there. (The simulation's seed 161, -sim.ledgers, is the case where such a
// change stayed unpushed; a mount's pushes found it here before too.)
func TestMountsFollowALedgerRename(t *testing.T) {
	t.Parallel()
	srv, a, b, await := deskSharedThenStoreDown(t)
	must(t, os.Rename(filepath.Join(a.mnt, "home"), filepath.Join(a.mnt, "house")))
	must(t, os.WriteFile(filepath.Join(b.mnt, "home", "desk", "b.txt"), []byte("b's, into the ledger a renamed\n"), 0o644))
	srv.Restart()

	for _, m := range []*server{a, b} {
		await("a's file under the new ledger on "+m.mnt, fileIs(filepath.Join(m.mnt, "house", "desk", "a.txt"), "a's\n"))
		await("b's file under the new ledger on "+m.mnt, fileIs(filepath.Join(m.mnt, "house", "desk", "b.txt"), "b's, into the ledger a renamed\n"))
		await("no ledger of the old name on "+m.mnt, func() bool {
			_, err := os.Stat(filepath.Join(m.mnt, "home"))
			return os.IsNotExist(err)
		})
	}
}

// TestMountWrittenBeforeItsRemoteJoins: a repository used for a while
// without a remote, and so chunked with a polynomial of its own, is
// mounted with a store another machine made: it joins, its pages reach
// the other machine and the other's reach it, and a file the other
// machine writes into one of its pages reads back on it (before, the
// mount refused the store: "devices that share a remote must chunk
// alike").
func TestMountWrittenBeforeItsRemoteJoins(t *testing.T) {
	t.Parallel()
	srv := s3test.Start(t)
	w := srv.Watch(t)
	repoA := t.TempDir()
	a := mountPlain(t, repoA)
	big := content(3, 2<<20)
	must(t, os.WriteFile(filepath.Join(a.page("home", "notes"), "a.txt"), []byte("written before a remote\n"), 0o644))
	must(t, os.WriteFile(filepath.Join(a.mnt, "home", "notes", "big.bin"), big, 0o644))
	a.stop()

	b := mountSyncedAt(t, w.Endpoint, t.TempDir())
	must(t, os.WriteFile(filepath.Join(b.page("home", "desk"), "b.txt"), []byte("b's\n"), 0o644))
	a = mountSyncedAt(t, w.Endpoint, repoA)
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("mount a's log:\n%s\nmount b's log:\n%s", a.log, b.log)
		}
	})
	await := func(what string, cond func() bool) {
		t.Helper()
		w.Until(t, what, time.Minute, cond)
	}
	await("a's page on b", fileIs(filepath.Join(b.mnt, "home", "notes", "a.txt"), "written before a remote\n"))
	await("a's large file on b", func() bool {
		got, err := os.ReadFile(filepath.Join(b.mnt, "home", "notes", "big.bin"))
		return err == nil && bytes.Equal(got, big)
	})
	await("b's page on a", fileIs(filepath.Join(a.mnt, "home", "desk", "b.txt"), "b's\n"))
	must(t, os.WriteFile(filepath.Join(b.mnt, "home", "notes", "from-b.txt"), []byte("b's, in a's page\n"), 0o644))
	await("b's file in a's page on a", fileIs(filepath.Join(a.mnt, "home", "notes", "from-b.txt"), "b's, in a's page\n"))
	a.log.await(t, "keep their own")
}
