package mount_test

import (
	"bytes"
	"crypto/sha256"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/moby/sys/mountinfo"

	"github.com/ledgerfs/ledgerfs/internal/testutil"
)

func TestConcurrentWriters(t *testing.T) {
	t.Parallel()
	s := mount(t, t.TempDir())
	pg := s.page("c", "p")
	const writers, files = 8, 40
	var wg sync.WaitGroup
	for w := range writers {
		wg.Go(func() {
			for i := range files {
				name := filepath.Join(pg, fmt.Sprintf("w%d-%03d", w, i))
				if err := os.WriteFile(name, content(w*1000+i, 1000+i*97), 0o644); err != nil {
					t.Error(err)
				}
			}
		})
	}
	wg.Wait()
	if got := len(ls(t, pg)); got != writers*files {
		t.Fatalf("%d files, want %d", got, writers*files)
	}
	for w := range writers {
		for i := range files {
			b, err := os.ReadFile(filepath.Join(pg, fmt.Sprintf("w%d-%03d", w, i)))
			if err != nil || !bytes.Equal(b, content(w*1000+i, 1000+i*97)) {
				t.Fatalf("w%d-%03d: wrong content (%v)", w, i, err)
			}
		}
	}
}

// TestLargeFile writes 256 MiB through the mount (128 MiB with -short, 4 GiB
// with -long), reads it back, and checks the server's anonymous memory
// (RssAnon: its heap and Badger's; mapped file pages are page cache) stays
// under 256 MiB, and under half the file's size.
func TestLargeFile(t *testing.T) {
	t.Parallel()
	size := int64(256 << 20)
	switch {
	case testing.Short():
		size = 128 << 20
	case *long:
		size = 4 << 30
	}
	// The race detector multiplies memory use: measure the plain build.
	s := mountWith(t, plainBinary, t.TempDir(), filepath.Join(t.TempDir(), "mnt"))
	pg := s.page("big", "p")
	path := filepath.Join(pg, "file")
	f, err := os.Create(path)
	must(t, err)
	h := sha256.New()
	buf := make([]byte, 1<<20)
	anon := s.peakAnon()
	start := time.Now()
	for off := int64(0); off < size; off += int64(len(buf)) {
		testutil.FillRandom(buf, 3, uint64(off))
		h.Write(buf)
		if _, err := f.Write(buf); err != nil {
			t.Fatal(err)
		}
	}
	must(t, f.Close())
	wrote := time.Since(start)
	want := fmt.Sprintf("%x", h.Sum(nil))
	start = time.Now()
	got := sha(t, path)
	peak, _ := s.rss()
	peakAnon := anon()
	t.Logf("%d MiB: write %.0f MB/s, read %.0f MB/s, server peak RSS %d MiB, of it anonymous %d MiB at most", size>>20,
		float64(size)/wrote.Seconds()/1e6, float64(size)/time.Since(start).Seconds()/1e6, peak>>10, peakAnon>>10)
	if got != want {
		t.Fatal("content read back differs")
	}
	if fi, _ := os.Stat(path); fi.Size() != size {
		t.Fatalf("size %d", fi.Size())
	}
	if limit := int(min(size/2, 256<<20) >> 10); peakAnon > limit {
		t.Fatalf("server anonymous RSS %d MiB at its peak while writing and reading %d MiB (limit %d MiB)", peakAnon>>10, size>>20, limit>>10)
	}
	// A server run by root sets the mount's kernel read-ahead to four of its
	// largest reads: the kernel's 128 KiB default held sequential reads back.
	if os.Geteuid() == 0 {
		ms, err := mountinfo.GetMounts(mountinfo.SingleEntryFilter(s.mnt))
		if err != nil || len(ms) != 1 {
			t.Fatalf("mount %s not found: %v", s.mnt, err)
		}
		ra, err := os.ReadFile(fmt.Sprintf("/sys/class/bdi/%d:%d/read_ahead_kb", ms[0].Major, ms[0].Minor))
		must(t, err)
		if got := strings.TrimSpace(string(ra)); got != "4096" {
			t.Fatalf("kernel read-ahead of the mount is %s KiB, want 4096", got)
		}
	}
	// Reads return bytes, not a descriptor to splice from: go-fuse's splice
	// attempt failed for every 1 MiB reply and logged it.
	s.stop()
	if strings.Contains(s.log.String(), "splice") {
		t.Fatalf("server log mentions splice:\n%.2000s", s.log)
	}
}

// Renaming a directory of many files is one atomic commit, larger than one
// db transaction.
func TestRenameLargeDirectory(t *testing.T) {
	t.Parallel()
	s := mountPlain(t, t.TempDir())
	pg := s.page("r", "p")
	src := filepath.Join(pg, "src")
	must(t, os.Mkdir(src, 0o755))
	const n = 1500
	for i := range n {
		must(t, os.WriteFile(filepath.Join(src, fmt.Sprintf("f%04d", i)), fmt.Appendf(nil, "file %d", i), 0o644))
	}
	must(t, os.Rename(src, filepath.Join(pg, "dst")))
	check := func() {
		t.Helper()
		if got := len(ls(t, filepath.Join(pg, "dst"))); got != n {
			t.Fatalf("%d files after rename, want %d", got, n)
		}
		if _, err := os.Stat(src); !os.IsNotExist(err) {
			t.Fatalf("source still there: %v", err)
		}
		for _, i := range []int{0, 777, n - 1} {
			b, err := os.ReadFile(filepath.Join(pg, "dst", fmt.Sprintf("f%04d", i)))
			if err != nil || string(b) != fmt.Sprintf("file %d", i) {
				t.Fatalf("f%04d: %q %v", i, b, err)
			}
		}
	}
	check()
	s.stop()
	s = mountWith(t, plainBinary, s.repo, s.mnt)
	check()
}
