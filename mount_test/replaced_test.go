package mount_test

import (
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"testing"
)

// TestOpenWhileReplacedBehind: a file that a change the mount did not make
// replaces (a transaction's commit here, another device's commit landed by
// sync) is dropped from the kernel's cache while a reader's path walk may
// already hold its old node; the reader's open, stat or read must then find
// the file anew, never fail with ENOENT, as the file was there all along.
func TestOpenWhileReplacedBehind(t *testing.T) {
	t.Parallel()
	s := mountPlain(t, t.TempDir(), "--cache-timeout", "60")
	pg := s.page("l", "p")
	f := filepath.Join(pg, "f")
	must(t, os.WriteFile(f, []byte("version 0\n"), 0o644))
	stop := make(chan struct{})
	var wg sync.WaitGroup
	var failed error
	var once sync.Once
	for range 2 {
		wg.Go(func() {
			for {
				select {
				case <-stop:
					return
				default:
				}
				if _, err := os.ReadFile(f); err != nil {
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
	if got := readFile(t, f); got != "version 200\n" {
		t.Fatalf("the file holds %q after 200 commits", got)
	}
}
