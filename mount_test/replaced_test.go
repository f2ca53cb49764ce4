package mount_test

import (
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ledgerfs/ledgerfs/internal/s3test"
)

// TestOpenWhileReplacedBehind: a file that a change the mount did not make
// replaces (a transaction's commit here, another device's commit landed by
// sync) is dropped from the kernel's cache while a reader's path walk may
// already hold its old node; the reader's open, stat or read must then find
// the old file or the new one, never fail with ENOENT or ESTALE, as a file
// was there all along, and read a whole version. Versions differ in size
// (version 9, version 10): a read with another version's size is cut short
// or padded.
func TestOpenWhileReplacedBehind(t *testing.T) {
	t.Parallel()
	t.Run("transaction", func(t *testing.T) {
		t.Parallel()
		s := mountPlain(t, t.TempDir(), "--cache-timeout", "60")
		pg := s.page("l", "p")
		f := filepath.Join(pg, "f")
		must(t, os.WriteFile(f, []byte("version 0\n"), 0o644))
		readWhile(t, f, func(i int) {
			x := begin(t, pg, fmt.Sprint("t", i))
			must(t, os.WriteFile(x.path("f"), []byte(fmt.Sprintf("version %d\n", i)), 0o644))
			x.mustCommit()
		}, 200)
	})
	t.Run("sync", func(t *testing.T) {
		t.Parallel()
		srv := s3test.Start(t)
		w := srv.Watch(t)
		a := mountSyncedAt(t, w.Endpoint, t.TempDir())
		fa := filepath.Join(a.page("l", "p"), "f")
		must(t, os.WriteFile(fa, []byte("version 0\n"), 0o644))
		b := mountSyncedAt(t, w.Endpoint, t.TempDir())
		f := filepath.Join(b.mnt, "l", "p", "f")
		w.Until(t, "the file on b", time.Minute, fileIs(f, "version 0\n"))
		readWhile(t, f, func(i int) {
			want := fmt.Sprintf("version %d\n", i)
			must(t, os.WriteFile(fa, []byte(want), 0o644))
			// Each version lands on b by itself, replacing the last.
			w.Until(t, "a's version on b", time.Minute, fileIs(f, want))
		}, 30)
	})
}

// readWhile reads f in two goroutines while replace(1..n) runs, and fails
// on any error or any read that is not a version written whole.
func readWhile(t *testing.T, f string, replace func(i int), n int) {
	t.Helper()
	version := regexp.MustCompile(`^version [0-9]+\n$`)
	stop := make(chan struct{})
	var wg sync.WaitGroup
	var failed error
	var once sync.Once
	var reads, torn atomic.Int64
	for range 2 {
		wg.Go(func() {
			for {
				select {
				case <-stop:
					return
				default:
				}
				b, err := os.ReadFile(f)
				if err == nil {
					reads.Add(1)
					if !version.Match(b) {
						torn.Add(1)
					}
					_, err = os.Stat(f)
				}
				if err != nil {
					once.Do(func() { failed = err })
					return
				}
			}
		})
	}
	for i := 1; i <= n; i++ {
		replace(i)
	}
	close(stop)
	wg.Wait()
	if failed != nil {
		t.Fatalf("a reader of a file replaced behind the mount: %v", failed)
	}
	if k := torn.Load(); k > 0 {
		t.Fatalf("%d of %d reads returned no version written: cut or padded to another version's size", k, reads.Load())
	}
	if got := readFile(t, f); got != fmt.Sprintf("version %d\n", n) {
		t.Fatalf("the file holds %q after %d versions", got, n)
	}
}
