package mount_test

import (
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"sync"
	"sync/atomic"
	"testing"
)

// TestOpenWhileReplacedBehind: a file that a change the mount did not make
// replaces (a transaction's commit here, another device's commit landed by
// sync) is dropped from the kernel's cache while a reader's path walk may
// already hold its old node; the reader's open, stat or read must then find
// the old file or the new one, never fail with ENOENT or ESTALE, as a file
// was there all along, and read a whole version.
func TestOpenWhileReplacedBehind(t *testing.T) {
	t.Parallel()
	s := mountPlain(t, t.TempDir(), "--cache-timeout", "60")
	pg := s.page("l", "p")
	f := filepath.Join(pg, "f")
	must(t, os.WriteFile(f, []byte("version 0\n"), 0o644))
	stop := make(chan struct{})
	var wg sync.WaitGroup
	version := regexp.MustCompile(`^version [0-9]+\n$`)
	var failed error
	var once sync.Once
	var torn atomic.Int64
	for range 2 {
		wg.Go(func() {
			for {
				select {
				case <-stop:
					return
				default:
				}
				b, err := os.ReadFile(f)
				if err == nil && !version.Match(b) {
					torn.Add(1)
				}
				if err != nil {
					once.Do(func() { failed = err })
					return
				}
				if _, err := os.Stat(f); err != nil {
					once.Do(func() { failed = err })
					return
				}
			}
		})
	}
	for i := range 200 {
		x := begin(t, pg, fmt.Sprint("t", i))
		must(t, os.WriteFile(x.path("f"), []byte(fmt.Sprintf("version %d\n", i+1)), 0o644))
		x.mustCommit()
	}
	close(stop)
	wg.Wait()
	if failed != nil {
		t.Fatalf("a reader of a file that a transaction's commit replaced: %v", failed)
	}
	if n := torn.Load(); n > 0 {
		t.Fatalf("%d reads returned no version written: cut or padded to another version's size", n)
	}
	if got := readFile(t, f); got != "version 200\n" {
		t.Fatalf("the file holds %q after 200 commits", got)
	}
}
