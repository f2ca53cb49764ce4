package mount_test

import (
	"bytes"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"golang.org/x/sys/unix"
)

// smallDisk mounts a tmpfs of size bytes for the test.
func smallDisk(t *testing.T, size int) string {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("mounting a small filesystem needs root")
	}
	dir := filepath.Join(t.TempDir(), "disk")
	if err := os.Mkdir(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := unix.Mount("tmpfs", dir, "tmpfs", 0, fmt.Sprintf("size=%d", size)); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { unix.Unmount(dir, unix.MNT_DETACH) })
	return dir
}

// writeFile writes data to path and closes it, returning the first error.
func writeFile(path string, data []byte) error {
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	_, werr := f.Write(data)
	return errors.Join(werr, f.Close())
}

// Badger writes through mapped files, and a write to a mapped file on a
// full filesystem kills the process with SIGBUS. The mount must refuse
// changes with ENOSPC before that, keep serving, keep what was committed,
// and take changes again once there is room.
func TestDiskFull(t *testing.T) {
	disk := smallDisk(t, 96<<20)
	repo := filepath.Join(disk, "repo")
	ballast := filepath.Join(disk, "ballast")
	if err := os.WriteFile(ballast, make([]byte, 32<<20), 0o644); err != nil {
		t.Fatal(err)
	}
	s := mount(t, repo, "--reserve", "16M")
	pg := s.page("l", "p")

	rng := rand.New(rand.NewPCG(1, 2))
	content := func(n int) []byte {
		b := make([]byte, n)
		for i := range b {
			b[i] = byte(rng.Uint32())
		}
		return b
	}
	kept := map[string][]byte{}
	var failed string
	for i := 0; i < 30 && failed == ""; i++ {
		name := fmt.Sprintf("f%02d", i)
		data := content(4 << 20)
		switch err := writeFile(filepath.Join(pg, name), data); {
		case err == nil:
			kept[name] = data
		case errors.Is(err, syscall.ENOSPC):
			failed = name
		default:
			t.Fatalf("write %s: %v, want ENOSPC once full", name, err)
		}
	}
	if failed == "" {
		t.Fatalf("30 files of 4 MiB fit on a 96 MiB disk:\n%s", s.log)
	}
	if len(kept) < 5 {
		t.Fatalf("only %d files written before ENOSPC: the reserve is taken too early", len(kept))
	}
	if s.cmd.ProcessState != nil || !mounted(s.mnt) {
		t.Fatalf("server gone after ENOSPC:\n%s", s.log)
	}

	// The mount says it is full; what failed never appeared; every name
	// listed can be looked up.
	var st unix.Statfs_t
	if err := unix.Statfs(pg, &st); err != nil {
		t.Fatal(err)
	}
	if avail := st.Bavail * uint64(st.Bsize); avail >= 4<<20 {
		t.Errorf("statfs of the full mount: %d bytes available", avail)
	}
	if _, err := os.Lstat(filepath.Join(pg, failed)); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("file whose writes failed: lstat %v, want ENOENT", err)
	}
	ents, err := os.ReadDir(pg)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range ents {
		if _, err := os.Lstat(filepath.Join(pg, e.Name())); err != nil {
			t.Errorf("listed %s: %v", e.Name(), err)
		}
	}
	if len(ents) != len(kept) {
		t.Errorf("%d names listed, want the %d written", len(ents), len(kept))
	}

	// Changes that add no content still have room (half the reserve).
	if err := os.Mkdir(filepath.Join(pg, "dir"), 0o755); err != nil {
		t.Errorf("mkdir on a full disk: %v", err)
	}
	if err := os.Rename(filepath.Join(pg, "f00"), filepath.Join(pg, "dir", "f00")); err != nil {
		t.Errorf("rename on a full disk: %v", err)
	}
	kept["dir/f00"] = kept["f00"]
	delete(kept, "f00")

	// Room again once space is freed on the disk.
	if err := os.Remove(ballast); err != nil {
		t.Fatal(err)
	}
	data := content(4 << 20)
	if err := writeFile(filepath.Join(pg, failed), data); err != nil {
		t.Fatalf("write after freeing space: %v", err)
	}
	kept[failed] = data

	check := func(when string) {
		t.Helper()
		for name, want := range kept {
			got, err := os.ReadFile(filepath.Join(s.mnt, "l", "p", name))
			if err != nil || !bytes.Equal(got, want) {
				t.Errorf("%s: %s: %d bytes (%v), want the %d written", when, name, len(got), err, len(want))
			}
		}
	}
	check("mounted")
	s.stop()
	if !strings.Contains(s.log.String(), "nearly full") {
		t.Errorf("server did not log the full disk:\n%s", s.log)
	}
	s = mount(t, repo, "--reserve", "16M")
	check("remounted")
}
