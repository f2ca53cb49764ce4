package mount_test

import (
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// A command line that names no command is an error with cobra's
// suggestion and exit status 2: it creates nothing and mounts nothing,
// whatever its words (a typo of a command, shell completion's requests).
func TestCommandLineMistakes(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	ledgerfs := func(args ...string) (string, int) {
		t.Helper()
		cmd := exec.Command(binary, args...)
		cmd.Dir = dir
		out, err := cmd.CombinedOutput()
		var exit *exec.ExitError
		if err != nil && !errors.As(err, &exit) {
			t.Fatal(err)
		}
		return string(out), cmd.ProcessState.ExitCode()
	}
	nothingMade := func(what string) {
		t.Helper()
		if es, _ := os.ReadDir(dir); len(es) > 0 {
			t.Fatalf("%s made %s in the working directory", what, es[0].Name())
		}
	}

	out, code := ledgerfs("stas", "mnt")
	if code != 2 || !strings.Contains(out, `unknown command "stas"`) || !strings.Contains(out, "Did you mean this?\n\tstats") {
		t.Fatalf("ledgerfs stas mnt: exit %d, want 2 with a suggestion of stats:\n%s", code, out)
	}
	nothingMade("ledgerfs stas mnt")

	out, code = ledgerfs("mount", "--bogus", "r", "m")
	if code != 2 || !strings.Contains(out, "unknown flag: --bogus") {
		t.Fatalf("ledgerfs mount --bogus: exit %d, want 2:\n%s", code, out)
	}
	nothingMade("ledgerfs mount --bogus")

	// What bash's completion script asks at each TAB.
	out, code = ledgerfs("__complete", "m")
	if code != 0 || !strings.Contains(out, "mount\t") {
		t.Fatalf("ledgerfs __complete m: exit %d, want the mount command offered:\n%s", code, out)
	}
	nothingMade("ledgerfs __complete m")
	if out, code := ledgerfs("completion", "bash"); code != 0 || !strings.Contains(out, "__complete") {
		t.Fatalf("ledgerfs completion bash: exit %d:\n%.300s", code, out)
	}

	v1, code1 := ledgerfs("--version")
	v2, code2 := ledgerfs("version")
	if code1 != 0 || code2 != 0 || !strings.HasPrefix(v1, "ledgerfs version ") || v1 != v2 {
		t.Fatalf("--version (exit %d): %q; version (exit %d): %q", code1, v1, code2, v2)
	}
	nothingMade("ledgerfs version")
}

// A mount that fails removes the mount point it created, and leaves one it
// did not create; each background mount logs to a file of its own by
// default, named after its mount point.
func TestMountPointAndLogOfEachMount(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	notRepo := filepath.Join(dir, "not-a-repo")
	must(t, os.MkdirAll(notRepo, 0o755))
	must(t, os.WriteFile(filepath.Join(notRepo, "notes.txt"), []byte("mine"), 0o644))
	made := filepath.Join(dir, "new", "deeper", "mnt")
	out, err := exec.Command(plainBinary, "mount", "-d", "--log-file", filepath.Join(dir, "log"), notRepo, made).CombinedOutput()
	if err == nil || !strings.Contains(string(out), "not a ledgerfs repository") {
		t.Fatalf("mount -d of a directory with other files: %v\n%s", err, out)
	}
	if _, err := os.Stat(filepath.Join(dir, "new")); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("a failed mount left the mount point it made: %v", err)
	}
	existing := filepath.Join(dir, "existing")
	must(t, os.Mkdir(existing, 0o755))
	if exec.Command(plainBinary, "mount", "-d", "--log-file", filepath.Join(dir, "log"), notRepo, existing).Run() == nil {
		t.Fatal("mount -d of a directory with other files succeeded")
	}
	if _, err := os.Stat(existing); err != nil {
		t.Fatalf("a failed mount removed a mount point it did not make: %v", err)
	}

	// Two mounts, two logs.
	state := filepath.Join(dir, "state")
	var logs []string
	for _, name := range []string{"a", "b"} {
		mnt := filepath.Join(dir, "mounts", name)
		daemonCleanup(t, mnt)
		cmd := exec.Command(plainBinary, "mount", "-d", filepath.Join(dir, "repo-"+name), mnt)
		// Where a user who is not root has the logs; root's go to
		// /var/log/ledgerfs, which a test should not fill.
		cmd.Env = append(os.Environ(), "XDG_STATE_HOME="+state)
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("mount -d %s: %v\n%s", mnt, err, out)
		}
		logs = append(logs, strings.ReplaceAll(strings.Trim(mnt, "/"), "/", "-")+".log")
	}
	for _, name := range []string{"a", "b"} {
		if out, err := exec.Command(plainBinary, "umount", filepath.Join(dir, "mounts", name)).CombinedOutput(); err != nil {
			t.Fatalf("umount: %v\n%s", err, out)
		}
	}
	logDir := "/var/log/ledgerfs"
	if os.Geteuid() != 0 {
		logDir = filepath.Join(state, "ledgerfs")
	}
	for i, l := range logs {
		path := filepath.Join(logDir, l)
		b, err := os.ReadFile(path)
		os.Remove(path)
		if err != nil || !strings.Contains(string(b), "msg=serving") || !strings.Contains(string(b), "repo-"+[]string{"a", "b"}[i]) {
			t.Errorf("log of mount %d (%s): %v\n%s", i, path, err, b)
		}
	}
}

// ledgerfs retention of a ledger or page that does not exist is an error,
// not the repository's policy shown as if it were theirs.
func TestRetentionOfAMissingScope(t *testing.T) {
	t.Parallel()
	repo := t.TempDir()
	s := mount(t, repo)
	s.page("l", "p")
	s.stop()
	for _, c := range []struct {
		args []string
		code int
		want string
	}{
		{[]string{"l", "p"}, 0, "(the default)"},
		{[]string{"l", "nosuch"}, 1, `no page "nosuch"`},
		{[]string{"nosuch"}, 1, `no ledger "nosuch"`},
		{[]string{"l", "nosuch", "--keep-last", "3"}, 1, `no page "nosuch"`},
	} {
		out, err := exec.Command(binary, append([]string{"retention", repo}, c.args...)...).CombinedOutput()
		code := 0
		var exit *exec.ExitError
		if errors.As(err, &exit) {
			code = exit.ExitCode()
		} else if err != nil {
			t.Fatal(err)
		}
		if code != c.code || !strings.Contains(string(out), c.want) {
			t.Errorf("ledgerfs retention %v: exit %d, %q; want exit %d and %q", c.args, code, out, c.code, c.want)
		}
	}
}
