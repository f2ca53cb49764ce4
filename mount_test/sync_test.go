package mount_test

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/ledgerfs/ledgerfs/internal/s3test"
)

// syncRepo runs `ledgerfs sync` of an unmounted repository with the S3
// server srv, bucket "ledgerfs", prefix "home".
func syncRepo(t *testing.T, srv *s3test.Server, repo string) string {
	t.Helper()
	cmd := exec.Command(binary, "sync", repo, "--remote", "s3://ledgerfs/home", "--endpoint", srv.Endpoint)
	cmd.Env = append(os.Environ(), "AWS_ACCESS_KEY_ID="+s3test.AccessKey, "AWS_SECRET_ACCESS_KEY="+s3test.SecretKey, "AWS_REGION=us-east-1")
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

	b := mount(t, repoB)
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
		s := mount(t, repo)
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

// objectsUnder lists the objects a versitygw server holds under dir of
// its bucket "ledgerfs", prefix "home" (files of its posix store).
func objectsUnder(t *testing.T, srv *s3test.Server, dir string) []string {
	t.Helper()
	var out []string
	root := filepath.Join(srv.Dir(), "ledgerfs", "home", dir)
	filepath.WalkDir(root, func(p string, d os.DirEntry, err error) error {
		if err == nil && !d.IsDir() {
			out = append(out, strings.TrimPrefix(p, root+"/"))
		}
		return nil
	})
	return out
}

// syncProc is a `ledgerfs sync` running.
type syncProc struct {
	cmd  *exec.Cmd
	done chan error
	out  *output
}

func (p *syncProc) wait() error { return <-p.done }

// startSync starts `ledgerfs sync` of repo and returns once its first pack
// is in the store (the upload under way), polling with a deadline.
func startSync(t *testing.T, srv *s3test.Server, repo string) *syncProc {
	t.Helper()
	cmd := exec.Command(binary, "sync", repo, "--remote", "s3://ledgerfs/home", "--endpoint", srv.Endpoint)
	cmd.Env = append(os.Environ(), "AWS_ACCESS_KEY_ID="+s3test.AccessKey, "AWS_SECRET_ACCESS_KEY="+s3test.SecretKey, "AWS_REGION=us-east-1")
	var out output
	cmd.Stdout, cmd.Stderr = &out, &out
	must(t, cmd.Start())
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	for deadline := time.Now().Add(60 * time.Second); len(objectsUnder(t, srv, "packs")) == 0; time.Sleep(time.Millisecond) {
		select {
		case err := <-done:
			t.Fatalf("sync ended before its first pack was in the store (%v):\n%s", err, out.String())
		default:
		}
		if time.Now().After(deadline) {
			cmd.Process.Kill()
			t.Fatal("no pack in the store within 60 s")
		}
	}
	t.Cleanup(func() { cmd.Process.Kill() })
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
	repoA, repoB := t.TempDir(), t.TempDir()
	a := mount(t, repoA)
	pg := a.page("home", "work")
	must(t, os.WriteFile(filepath.Join(pg, "one.bin"), content(11, 48<<20), 0o644))
	a.stop()

	// The server dies mid-upload.
	first := startSync(t, srv, repoA)
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
	a = mount(t, repoA)
	must(t, os.WriteFile(filepath.Join(a.mnt, "home", "work", "two.bin"), content(12, 48<<20), 0o644))
	a.stop()
	packs := len(objectsUnder(t, srv, "packs"))
	second := exec.Command(binary, "sync", repoA, "--remote", "s3://ledgerfs/home", "--endpoint", srv.Endpoint)
	second.Env = append(os.Environ(), "AWS_ACCESS_KEY_ID="+s3test.AccessKey, "AWS_SECRET_ACCESS_KEY="+s3test.SecretKey, "AWS_REGION=us-east-1")
	must(t, second.Start())
	for deadline := time.Now().Add(60 * time.Second); len(objectsUnder(t, srv, "packs")) == packs; time.Sleep(time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("no new pack within 60 s")
		}
	}
	second.Process.Kill()
	second.Wait()
	syncRepo(t, srv, repoA)
	syncRepo(t, srv, repoA)
	logs := objectsUnder(t, srv, "logs")
	if len(logs) != 2 {
		t.Fatalf("the device's log holds %d batches, want 2 (one per file's sync): %v", len(logs), logs)
	}

	syncRepo(t, srv, repoB)
	b := mount(t, repoB)
	for i, name := range []string{"one.bin", "two.bin"} {
		want := content(11+i, 48<<20)
		got, err := os.ReadFile(filepath.Join(b.mnt, "home", "work", name))
		if err != nil || !bytes.Equal(got, want) {
			t.Fatalf("%s on b: %d bytes (%v), want a's %d", name, len(got), err, len(want))
		}
	}
}
