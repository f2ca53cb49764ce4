package mount_test

import (
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/ledgerfs/ledgerfs/internal/s3test"
)

// latest is the head of the page at pg, as its .ledger/latest names it.
func latest(pg string) string {
	l, _ := os.Readlink(filepath.Join(pg, ".ledger", "latest"))
	return l
}

// conflicts returns the contents of the conflict files of name in dir.
func conflicts(dir, name string) map[string]bool {
	out := map[string]bool{}
	ext := filepath.Ext(name)
	matches, _ := filepath.Glob(filepath.Join(dir, strings.TrimSuffix(name, ext)+".sync-conflict-*"+ext))
	for _, m := range matches {
		if b, err := os.ReadFile(m); err == nil {
			out[string(b)] = true
		}
	}
	return out
}

// TestSyncMountFaults: three mounts of three repositories syncing through a
// real S3 server. The server is killed while all three keep writing (each
// many failed rounds, each logged once) and comes back; a mount is killed
// with -9 in the middle of an upload, another in the middle of a pull it
// must merge, and both are mounted again. After each, all three reach the
// same head, every write closed before the kill is on all three, the same
// file written on all three while apart keeps the latest and the others
// as conflict files, and fsck --remote finds every synced piece and
// commit in the bucket.
func TestSyncMountFaults(t *testing.T) {
	t.Parallel()
	srv := s3test.Start(t)
	w := srv.Watch(t)
	repos := []string{t.TempDir(), t.TempDir(), t.TempDir()}
	ms := make([]*server, 3)
	for i, r := range repos {
		ms[i] = mountSyncedWith(t, plainBinary, w.Endpoint, r)
	}
	t.Cleanup(func() {
		if t.Failed() {
			for i, m := range ms {
				t.Logf("mount %d's log:\n%s", i, m.log)
			}
		}
	})
	pages := func() []string {
		out := make([]string, len(ms))
		for i, m := range ms {
			out[i] = filepath.Join(m.mnt, "home", "work")
		}
		return out
	}
	must(t, os.MkdirAll(pages()[0], 0o755))
	must(t, os.WriteFile(filepath.Join(pages()[0], "base.txt"), []byte("base\n"), 0o644))
	for _, pg := range pages() {
		w.Until(t, "the first file on every mount", time.Minute, fileIs(filepath.Join(pg, "base.txt"), "base\n"))
	}
	converged := func(what string) {
		t.Helper()
		w.Until(t, what+": one head on all three", time.Minute, func() bool {
			h := latest(pages()[0])
			for _, pg := range pages()[1:] {
				if latest(pg) != h {
					return false
				}
			}
			return h != ""
		})
	}

	// The server goes down; every mount keeps writing, and the same file
	// on each.
	srv.Kill()
	for i, pg := range pages() {
		for j := range 20 {
			must(t, os.WriteFile(filepath.Join(pg, fmt.Sprintf("apart-%d-%02d.txt", i, j)), []byte(fmt.Sprintf("%d %d\n", i, j)), 0o644))
		}
		must(t, os.WriteFile(filepath.Join(pg, "shared.txt"), []byte(fmt.Sprintf("mount %d's\n", i)), 0o644))
		syncDir(t, pg)
	}
	for i, pg := range pages() {
		w.Until(t, fmt.Sprintf("mount %d's .ledger/sync tells of the error", i), time.Minute, func() bool {
			b, _ := os.ReadFile(filepath.Join(pg, ".ledger", "sync"))
			return strings.Contains(string(b), "last error: 20")
		})
	}
	failed := w.Count(func(r s3test.Request) bool { return r.Status >= 500 })
	srv.Restart()
	converged("after the server came back")
	if failed < 6 {
		t.Fatalf("%d requests failed while the server was down: fewer than two rounds per mount", failed)
	}
	for i, m := range ms {
		if n := strings.Count(m.log.String(), "sync failed"); n != 1 {
			t.Errorf("mount %d logged the failing sync %d times, want once:\n%s", i, n, m.log)
		}
		m.log.await(t, "sync works again")
	}
	for _, pg := range pages() {
		for i := range ms {
			for j := range 20 {
				name := filepath.Join(pg, fmt.Sprintf("apart-%d-%02d.txt", i, j))
				if b, err := os.ReadFile(name); err != nil || string(b) != fmt.Sprintf("%d %d\n", i, j) {
					t.Fatalf("%s: %q, %v", name, b, err)
				}
			}
		}
		if b, _ := os.ReadFile(filepath.Join(pg, "shared.txt")); string(b) != "mount 2's\n" {
			t.Fatalf("shared.txt in %s is %q, want the latest write, mount 2's", pg, b)
		}
		if c := conflicts(pg, "shared.txt"); !c["mount 0's\n"] || !c["mount 1's\n"] || len(c) != 2 {
			t.Fatalf("conflict files of shared.txt in %s hold %v, want mounts 0's and 1's", pg, c)
		}
	}

	// Mount 0 is killed in the middle of an upload and mounted again.
	big := content(21, 24<<20)
	before := w.Count(s3test.PackPut)
	must(t, os.WriteFile(filepath.Join(pages()[0], "big.bin"), big, 0o644))
	w.Await(t, "a pack of big.bin in the store", before+1, s3test.PackPut, ms[0].exited)
	ms[0].kill()
	ms[0] = mountSyncedWith(t, plainBinary, w.Endpoint, repos[0])
	for _, pg := range pages() {
		w.Until(t, "big.bin on every mount", time.Minute, func() bool {
			b, err := os.ReadFile(filepath.Join(pg, "big.bin"))
			return err == nil && bytes.Equal(b, big)
		})
	}

	// Mount 1, syncing only after its own commits, changes the page while
	// mount 2 writes another big file; mount 1's round after its change
	// pulls mount 2's to merge it, and is killed in the middle.
	ms[1].stop()
	ms[1] = mountSyncedWith(t, plainBinary, w.Endpoint, repos[1], "--sync-every", "1h")
	big2 := content(22, 24<<20)
	must(t, os.WriteFile(filepath.Join(pages()[2], "big2.bin"), big2, 0o644))
	w.Until(t, "mount 2 pushed big2.bin", time.Minute, func() bool {
		b, _ := os.ReadFile(filepath.Join(pages()[2], ".ledger", "sync"))
		return strings.Contains(string(b), "waiting to upload: nothing\n")
	})
	before = w.Count(s3test.PackGet)
	must(t, os.WriteFile(filepath.Join(pages()[1], "local.txt"), []byte("mount 1's own\n"), 0o644))
	w.Await(t, "mount 1 reads a pack of big2.bin", before+1, s3test.PackGet, ms[1].exited)
	ms[1].kill()
	ms[1] = mountSyncedWith(t, plainBinary, w.Endpoint, repos[1])
	converged("after the kill mid-merge")
	for _, pg := range pages() {
		if b, err := os.ReadFile(filepath.Join(pg, "big2.bin")); err != nil || !bytes.Equal(b, big2) {
			t.Fatalf("big2.bin in %s: %d bytes, %v", pg, len(b), err)
		}
		if b, _ := os.ReadFile(filepath.Join(pg, "local.txt")); string(b) != "mount 1's own\n" {
			t.Fatalf("local.txt in %s: %q", pg, b)
		}
	}
	for i, m := range ms {
		m.stop()
		cmd := exec.Command(binary, "fsck", "--remote", repos[i]) // the remote and endpoint the mount kept
		cmd.Env = append(os.Environ(), s3Env...)
		b, err := cmd.CombinedOutput()
		out := string(b)
		if err != nil || !strings.Contains(out, "holds every piece and commit marked synced") {
			t.Fatalf("fsck --remote of repository %d:\n%s", i, out)
		}
	}
}
