package testutil

import (
	"os"
	"testing"

	"golang.org/x/sys/unix"
)

// memFS is where MemDir makes its directories: Linux's shared-memory tmpfs.
const memFS = "/dev/shm"

// memFree is the free space MemDir wants on memFS: a container's /dev/shm
// may be 64 MiB. A run of the sync simulation peaked at 6 MiB there.
const memFree = 256 << 20

// MemDir returns a new directory on a tmpfs, removed when t ends, or
// t.TempDir() where there is no tmpfs with memFree bytes free. It is for
// tests of logic that open and close many dbs and whose assertions do not
// depend on the disk (the sync simulation): on ext4 a page db's open and
// close cost about 23 ms of ftruncates, fsyncs and first touches of new
// mapped logs, against 7 ms on tmpfs. Tests of durability stay on
// t.TempDir().
func MemDir(t testing.TB) string {
	var st unix.Statfs_t
	if err := unix.Statfs(memFS, &st); err != nil || st.Type != unix.TMPFS_MAGIC || st.Bavail*uint64(st.Bsize) < memFree {
		return t.TempDir()
	}
	dir, err := os.MkdirTemp(memFS, "ledgerfs-test-")
	if err != nil {
		return t.TempDir() // not writable here
	}
	t.Cleanup(func() {
		if err := os.RemoveAll(dir); err != nil {
			t.Errorf("remove %s: %v", dir, err)
		}
	})
	return dir
}
