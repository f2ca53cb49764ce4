package mount_test

import (
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/ledgerfs/ledgerfs/internal/s3test"
)

// TestKeyCommands, against a real S3 server: a device that joined adds a
// passphrase without its own; ledgerfs key list marks the key object the
// passphrase given opens; passwd replaces the old passphrase, which then
// no longer joins (exit 1, a clear message) while the new one does and the
// device that joined syncs on without any; the last key object is not
// removed; a mounted repository is refused with a hint, and --remote works
// beside the mount.
func TestKeyCommands(t *testing.T) {
	t.Parallel()
	srv := s3test.Start(t)
	dir := t.TempDir()
	remoteArgs := []string{"--remote", "s3://ledgerfs/home", "--endpoint", srv.Endpoint}
	creds := []string{"AWS_ACCESS_KEY_ID=" + s3test.AccessKey, "AWS_SECRET_ACCESS_KEY=" + s3test.SecretKey, "AWS_REGION=us-east-1"}
	ledgerfs := func(env []string, args ...string) (string, int) {
		t.Helper()
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		// The plain build: Argon2id under the race detector takes
		// seconds a passphrase, and the commands run one at a time.
		cmd := exec.CommandContext(ctx, plainBinary, args...)
		cmd.Env = append(append(os.Environ(), creds...), env...)
		out, err := cmd.CombinedOutput()
		var exit *exec.ExitError
		if err != nil && !errors.As(err, &exit) {
			t.Fatal(err)
		}
		return string(out), cmd.ProcessState.ExitCode()
	}
	file := func(name, body string) string {
		p := filepath.Join(dir, name)
		must(t, os.WriteFile(p, []byte(body), 0o600))
		return p
	}
	old, added, changed := file("old", "old passphrase\n"), file("added", "added passphrase\n"), file("changed", "changed passphrase\n")
	repoA := filepath.Join(dir, "a")
	if out, code := ledgerfs(nil, append([]string{"sync", repoA, "--password-file", old}, remoteArgs...)...); code != 0 {
		t.Fatalf("sync making the remote: exit %d:\n%s", code, out)
	}
	if out, code := ledgerfs(nil, "key", "add", repoA, "--new-password-file", added); code != 0 || !strings.Contains(out, "added key object") {
		t.Fatalf("key add by a device that joined, without a passphrase: exit %d:\n%s", code, out)
	}
	listed := func(args ...string) map[string]bool { // id → marked
		t.Helper()
		out, code := ledgerfs(nil, append([]string{"key", "list"}, args...)...)
		if code != 0 {
			t.Fatalf("key list %v: exit %d:\n%s", args, code, out)
		}
		ids := map[string]bool{}
		for _, m := range regexp.MustCompile(`(?m)^([0-9a-f]{32})\s+argon2id\s+\S+ \S+\s*(\*?)$`).FindAllStringSubmatch(out, -1) {
			ids[m[1]] = m[2] == "*"
		}
		return ids
	}
	ids := listed(append([]string{"--password-file", added}, remoteArgs...)...)
	if len(ids) != 2 || countTrue(ids) != 1 {
		t.Fatalf("key list with the added passphrase: %v", ids)
	}

	out, code := ledgerfs(nil, append([]string{"key", "passwd", "--password-file", old, "--new-password-file", changed}, remoteArgs...)...)
	if code != 0 || !strings.Contains(out, "removed") {
		t.Fatalf("key passwd: exit %d:\n%s", code, out)
	}
	if out, code := ledgerfs(nil, append([]string{"sync", filepath.Join(dir, "b"), "--password-file", old}, remoteArgs...)...); code != 1 || !strings.Contains(out, "wrong passphrase or key file") {
		t.Fatalf("sync of a new device with the replaced passphrase: exit %d:\n%s", code, out)
	}
	if out, code := ledgerfs(nil, append([]string{"sync", filepath.Join(dir, "c"), "--password-file", changed}, remoteArgs...)...); code != 0 {
		t.Fatalf("sync of a new device with the new passphrase: exit %d:\n%s", code, out)
	}
	if out, code := ledgerfs(nil, "sync", repoA); code != 0 {
		t.Fatalf("sync of the device that joined, after the change: exit %d:\n%s", code, out)
	}
	ids = listed(repoA, "--password-file", changed)
	if len(ids) != 2 || countTrue(ids) != 1 {
		t.Fatalf("key list after passwd: %v", ids)
	}

	// Down to one key object, which stays.
	var addedID, changedID string
	for id, marked := range ids {
		if marked {
			changedID = id
		} else {
			addedID = id
		}
	}
	if out, code := ledgerfs(nil, "key", "remove", repoA, addedID[:8]); code != 0 || !strings.Contains(out, addedID) {
		t.Fatalf("key remove by a prefix of the id: exit %d:\n%s", code, out)
	}
	if out, code := ledgerfs(nil, "key", "remove", repoA, changedID); code != 1 || !strings.Contains(out, "only key object") {
		t.Fatalf("key remove of the last key object: exit %d:\n%s", code, out)
	}
	if ids := listed(repoA); len(ids) != 1 {
		t.Fatalf("key objects after the refused removal: %v", ids)
	}

	// Mounted: the repository is refused with a hint; --remote works.
	s := mountPlain(t, repoA)
	if out, code := ledgerfs(nil, "key", "list", repoA); code == 0 || !strings.Contains(out, "--remote") {
		t.Fatalf("key list of a mounted repository: exit %d:\n%s", code, out)
	}
	if ids := listed(append([]string{"--password-file", changed}, remoteArgs...)...); len(ids) != 1 {
		t.Fatalf("key list --remote beside the mount: %v", ids)
	}
	s.stop()
}

func countTrue(m map[string]bool) int {
	n := 0
	for _, v := range m {
		if v {
			n++
		}
	}
	return n
}
