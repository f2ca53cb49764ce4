package mount_test

import (
	"os/exec"
	"path/filepath"
	"testing"
)

// fioJobs are fio jobs that write a pattern fio can check: random 4 KiB
// writes with an fsync every 8, laid out first as fio lays out every file
// (fallocate), and sequential 1 MiB writes that only their close commits.
var fioJobs = [][]string{
	{"--name=rand", "--rw=randwrite", "--bs=4k", "--size=32M", "--fsync=8", "--verify=crc32c"},
	{"--name=seq", "--rw=write", "--bs=1M", "--size=64M", "--verify=md5"},
}

// fio runs job in dir with the given extra arguments; its verify state
// stays outside the mount.
func fio(t *testing.T, dir string, job []string, extra ...string) {
	t.Helper()
	if _, err := exec.LookPath("fio"); err != nil {
		t.Fatalf("fio is needed (.ci/run installs it): %v", err)
	}
	args := append([]string{"--directory=" + dir, "--ioengine=psync", "--randrepeat=1",
		"--verify_fatal=1", "--verify_state_save=0", "--output-format=terse"}, job...)
	run(t, t.TempDir(), "fio", append(args, extra...)...)
}

// fio's own check of what it wrote: read back on the mount once written,
// then again after the server was killed (kill -9) once fio had closed
// its files, and after a clean unmount.
func TestFio(t *testing.T) {
	t.Parallel()
	repo := t.TempDir()
	s := mountPlain(t, repo)
	dir := s.page("l", "p")
	for _, job := range fioJobs {
		fio(t, dir, job, "--do_verify=1")
	}
	s.kill()
	s = mountWith(t, plainBinary, repo, s.mnt)
	for _, job := range fioJobs {
		fio(t, dir, job, "--verify_only=1")
	}
	s.stop()
	s = mountWith(t, plainBinary, repo, s.mnt)
	for _, job := range fioJobs {
		fio(t, filepath.Join(s.mnt, "l", "p"), job, "--verify_only=1")
	}
	s.stop()
}
