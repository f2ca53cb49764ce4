package mount_test

import (
	"os"
	"os/exec"
	"strings"
	"testing"
)

// stressors are stress-ng's filesystem stressors run against a page, all at
// once, with sizes small enough for a few seconds. Left out: link (hard
// links are refused, as docs/files.md says),
// fiemap, chattr, inode-flags, verity, file-ioctl's relatives and
// bind-mount (ioctls and mounts of other filesystems), procfs, ioprio, dup
// and eventfd (nothing of a filesystem's).
var stressors = []string{
	"access", "chdir", "chmod", "chown", "copy-file", "dentry", "dir", "dirdeep", "dirmany",
	"dnotify", "fallocate", "fcntl", "file-ioctl", "filename", "flock", "fpunch", "fsize", "fstat",
	"getdent", "handle", "hdd", "inotify", "io", "iomix", "lease", "locka", "lockf", "lockofd",
	"mknod", "open", "readahead", "rename", "seek", "symlink", "sync-file", "touch", "utime", "xattr",
}

// TestStressNG runs stress-ng's filesystem stressors with --verify in a
// page: each must complete and verify what it wrote, with exit status 0.
func TestStressNG(t *testing.T) {
	t.Parallel()
	if _, err := exec.LookPath("stress-ng"); err != nil {
		t.Fatalf("stress-ng is needed (.ci/run installs it): %v", err)
	}
	s := mountPlain(t, t.TempDir())
	pg := s.page("stress", "p")
	args := []string{"--temp-path", pg, "--verify", "--timeout", "5s", "--metrics-brief",
		"--fallocate-bytes", "8M", "--hdd-bytes", "8M", "--readahead-bytes", "8M", "--iomix-bytes", "8M",
		"--seek-size", "8M", "--sync-file-bytes", "8M"}
	list := stressors
	if only := os.Getenv("LEDGERFS_STRESSORS"); only != "" {
		list = strings.Split(only, ",")
	}
	for _, st := range list {
		args = append(args, "--"+st, "1")
	}
	cmd := exec.Command("stress-ng", args...)
	cmd.Dir = pg
	out, err := cmd.CombinedOutput()
	if err != nil || !strings.Contains(string(out), "successful run completed") {
		t.Fatalf("stress-ng: %v\n%s", err, out)
	}
	for _, line := range strings.Split(string(out), "\n") {
		if strings.Contains(line, "fail") || strings.Contains(line, "error") {
			t.Errorf("stress-ng: %s", line)
		}
	}
	t.Logf("stress-ng:\n%s", out)
	s.stop()
	verifySchema(t, s.repo)
}
