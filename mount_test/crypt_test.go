package mount_test

import (
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// TestEncryptedRemoteCommands: a new remote is not made without a
// passphrase (the message says how to give one, and the store stays
// empty); a device joins with the passphrase from a file and then syncs
// and checks the remote without it; a wrong passphrase, a short key file,
// and a passphrase where a key file keeps the key are refused with a clear
// message and exit status 1; a mount of a new repository that has no
// passphrase for its remote is refused, not served.
func TestEncryptedRemoteCommands(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	run := func(env []string, args ...string) (string, int) {
		t.Helper()
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		cmd := exec.CommandContext(ctx, binary, args...)
		cmd.Env = append(os.Environ(), env...)
		out, err := cmd.CombinedOutput()
		var exit *exec.ExitError
		if err != nil && !errors.As(err, &exit) {
			t.Fatal(err)
		}
		return string(out), cmd.ProcessState.ExitCode()
	}
	storeX := filepath.Join(dir, "x")
	remoteX := "file://" + storeX
	entries := func(store string) int {
		n := 0
		filepath.WalkDir(store, func(_ string, d os.DirEntry, err error) error {
			if err == nil && !d.IsDir() {
				n++
			}
			return nil
		})
		return n
	}
	repoA, repoB := filepath.Join(dir, "a"), filepath.Join(dir, "b")

	out, code := run(nil, "sync", repoA, "--remote", remoteX)
	if code != 1 || !strings.Contains(out, "LEDGERFS_PASSWORD") || !strings.Contains(out, "--no-encryption") {
		t.Fatalf("sync to a new remote without a passphrase: exit %d:\n%s", code, out)
	}
	if n := entries(storeX); n != 0 {
		t.Fatalf("a refused sync left %d objects in the store", n)
	}
	if out, code := run([]string{"LEDGERFS_PASSWORD=p1"}, "sync", repoA, "--remote", remoteX); code != 0 {
		t.Fatalf("sync making an encrypted remote: exit %d:\n%s", code, out)
	}
	if out, code := run([]string{"LEDGERFS_PASSWORD=p2"}, "sync", repoB, "--remote", remoteX); code != 1 || !strings.Contains(out, "wrong passphrase or key file") {
		t.Fatalf("sync with a wrong passphrase: exit %d:\n%s", code, out)
	}
	pw := filepath.Join(dir, "pw")
	must(t, os.WriteFile(pw, []byte("p1\n"), 0o600))
	if out, code := run(nil, "sync", repoB, "--remote", remoteX, "--password-file", pw); code != 0 {
		t.Fatalf("sync with the passphrase from a file: exit %d:\n%s", code, out)
	}
	if out, code := run(nil, "sync", repoB); code != 0 {
		t.Fatalf("sync of a device that joined, without the passphrase: exit %d:\n%s", code, out)
	}
	if out, code := run(nil, "fsck", "--remote", repoB); code != 0 || !strings.Contains(out, "holds every piece") {
		t.Fatalf("fsck --remote without the passphrase: exit %d:\n%s", code, out)
	}

	short, key := filepath.Join(dir, "short.key"), filepath.Join(dir, "good.key")
	must(t, os.WriteFile(short, []byte("12345"), 0o600))
	must(t, os.WriteFile(key, []byte("0123456789abcdef0123456789abcdef"), 0o600))
	remoteY := "file://" + filepath.Join(dir, "y")
	if out, code := run(nil, "sync", filepath.Join(dir, "c"), "--remote", remoteY, "--key-file", short); code != 1 || !strings.Contains(out, "at least 32") {
		t.Fatalf("sync with a 5-byte key file: exit %d:\n%s", code, out)
	}
	if out, code := run(nil, "sync", filepath.Join(dir, "d"), "--remote", remoteY, "--key-file", key); code != 0 {
		t.Fatalf("sync making a remote kept by a key file: exit %d:\n%s", code, out)
	}
	if out, code := run([]string{"LEDGERFS_PASSWORD=p1"}, "sync", filepath.Join(dir, "e"), "--remote", remoteY); code != 1 || !strings.Contains(out, "wrong passphrase or key file") {
		t.Fatalf("sync with a passphrase where a key file keeps the key: exit %d:\n%s", code, out)
	}

	mnt := filepath.Join(dir, "mnt")
	must(t, os.Mkdir(mnt, 0o755))
	daemonCleanup(t, mnt)
	out, code = run(nil, "mount", "--remote", remoteX, filepath.Join(dir, "f"), mnt)
	if code == 0 || !strings.Contains(out, "LEDGERFS_PASSWORD") {
		t.Fatalf("mount of a new repository with no passphrase for its remote: exit %d:\n%s", code, out)
	}
}
