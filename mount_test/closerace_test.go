package mount_test

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"
)

// A rename, an unlink, a link or a rename of the parent directory begun while
// another thread is still inside close(2) of the file behaves as if the
// close had finished or had not begun: never ENOENT for a name that exists
// (npm's cache writes a temp file on one thread and renames it on another),
// and the moved file holds everything written before the close.
func TestChangesRacingClose(t *testing.T) {
	t.Parallel()
	s := mount(t, t.TempDir())
	dir := s.page("l", "p")
	rounds := 30
	if *long {
		rounds = 300
	}
	// Large enough that the close's commit (chunking, a journal write) is
	// still running when the other thread's request arrives.
	const size = 700_000
	cases := []struct {
		name string
		// setup makes what one round needs and returns the file to write;
		// change races its close, and check says what must hold after.
		setup  func(round int) string
		change func(round int) error
		check  func(t *testing.T, round int, want []byte)
	}{{
		name: "rename within the directory",
		setup: func(i int) string {
			return filepath.Join(dir, "same", fmt.Sprint("tmp-", i))
		},
		change: func(i int) error {
			return os.Rename(filepath.Join(dir, "same", fmt.Sprint("tmp-", i)), filepath.Join(dir, "same", fmt.Sprint("final-", i)))
		},
		check: func(t *testing.T, i int, want []byte) {
			gone(t, filepath.Join(dir, "same", fmt.Sprint("tmp-", i)))
			holds(t, filepath.Join(dir, "same", fmt.Sprint("final-", i)), want)
		},
	}, {
		name: "rename into another directory",
		setup: func(i int) string {
			return filepath.Join(dir, "tmp", fmt.Sprint(i))
		},
		change: func(i int) error {
			return os.Rename(filepath.Join(dir, "tmp", fmt.Sprint(i)), filepath.Join(dir, "content", fmt.Sprint(i)))
		},
		check: func(t *testing.T, i int, want []byte) {
			gone(t, filepath.Join(dir, "tmp", fmt.Sprint(i)))
			holds(t, filepath.Join(dir, "content", fmt.Sprint(i)), want)
		},
	}, {
		name: "unlink",
		setup: func(i int) string {
			return filepath.Join(dir, "unlink", fmt.Sprint(i))
		},
		change: func(i int) error {
			return os.Remove(filepath.Join(dir, "unlink", fmt.Sprint(i)))
		},
		check: func(t *testing.T, i int, want []byte) {
			gone(t, filepath.Join(dir, "unlink", fmt.Sprint(i)))
		},
	}, {
		// A hard link made while the file closes names the file with
		// everything written before the close, under both names.
		name: "link",
		setup: func(i int) string {
			return filepath.Join(dir, "link", fmt.Sprint("a-", i))
		},
		change: func(i int) error {
			return os.Link(filepath.Join(dir, "link", fmt.Sprint("a-", i)), filepath.Join(dir, "link", fmt.Sprint("b-", i)))
		},
		check: func(t *testing.T, i int, want []byte) {
			holds(t, filepath.Join(dir, "link", fmt.Sprint("a-", i)), want)
			holds(t, filepath.Join(dir, "link", fmt.Sprint("b-", i)), want)
		},
	}, {
		// A file that exists, rewritten, in a directory renamed while
		// the rewrite closes: the new content is in the new place, and
		// nothing comes back at the old one.
		name: "rename of the parent directory",
		setup: func(i int) string {
			f := filepath.Join(dir, "parents", fmt.Sprint("d-", i), "f")
			must(t, os.MkdirAll(filepath.Dir(f), 0o755))
			must(t, os.WriteFile(f, []byte("old"), 0o644))
			return f
		},
		change: func(i int) error {
			return os.Rename(filepath.Join(dir, "parents", fmt.Sprint("d-", i)), filepath.Join(dir, "parents", fmt.Sprint("e-", i)))
		},
		check: func(t *testing.T, i int, want []byte) {
			gone(t, filepath.Join(dir, "parents", fmt.Sprint("d-", i)))
			holds(t, filepath.Join(dir, "parents", fmt.Sprint("e-", i), "f"), want)
		},
	}}
	for _, d := range []string{"same", "tmp", "content", "unlink", "link", "parents"} {
		must(t, os.Mkdir(filepath.Join(dir, d), 0o755))
	}
	for ci, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			var failed []string
			for i := range rounds {
				want := content(ci*rounds+i, size)
				f, err := os.OpenFile(c.setup(i), os.O_CREATE|os.O_WRONLY|os.O_TRUNC, 0o644)
				must(t, err)
				if _, err := f.Write(want); err != nil {
					t.Fatal(err)
				}
				closing := make(chan struct{})
				closed := make(chan error, 1)
				go func() {
					close(closing)
					closed <- f.Close()
				}()
				<-closing
				// Not a wait: a few microseconds more each round,
				// so that the change meets the close at each of its
				// steps.
				for spin := time.Now(); time.Since(spin) < time.Duration(i%8)*50*time.Microsecond; {
				}
				if err := c.change(i); err != nil {
					failed = append(failed, fmt.Sprintf("round %d: %v", i, err))
				}
				if err := <-closed; err != nil {
					t.Fatalf("round %d: close: %v", i, err)
				}
				if len(failed) == 0 {
					c.check(t, i, want)
				}
			}
			if len(failed) > 0 {
				t.Fatalf("%d of %d rounds failed, first: %s", len(failed), rounds, failed[0])
			}
			// What shows now is also what the page holds once every
			// queued change has landed.
			syncDir(t, dir)
			for i := range rounds {
				c.check(t, i, content(ci*rounds+i, size))
			}
		})
	}
}

// gone fails the test if path exists.
func gone(t *testing.T, path string) {
	t.Helper()
	if _, err := os.Lstat(path); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("%s: want it gone, got %v", path, err)
	}
}

// holds fails the test unless the file at path holds want.
func holds(t *testing.T, path string, want []byte) {
	t.Helper()
	got, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, want) {
		t.Fatalf("%s: %d bytes, not the %d written before the close", path, len(got), len(want))
	}
}
