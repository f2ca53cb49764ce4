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
	"time"
)

// TestRandomOpsMatchNative runs the same random file operations in a page
// and in a native directory and fails at the first result, content or
// mode that differs: writes at offsets, truncations through a path and
// through descriptors, renames over files, unlinks of open files, chmod,
// reads, fstat and fchmod through descriptors opened before, and mkdir,
// rmdir and directory renames. It found
// a lookup that showed a file's last commit instead of what its open
// writer had written, an unlinked file's content dropped while a reader
// still had it open, and fchmod of an unlinked file failing.
func TestRandomOpsMatchNative(t *testing.T) {
	t.Parallel()
	s := mount(t, t.TempDir())
	seeds, steps := 6, 300
	switch {
	case testing.Short():
		seeds = 3
	case *long:
		seeds = 40
	}
	for seed := range seeds {
		t.Run(fmt.Sprint("seed", seed), func(t *testing.T) {
			t.Parallel() // each in a page of its own
			native := t.TempDir()
			page := s.page("diff", fmt.Sprint("p", seed))
			runOps(t, uint64(seed), steps, [2]string{native, page})
		})
	}
}

var (
	diffNames = []string{"a", "b", "c", "d/e", "d/f", "g/h", "d/x/y"}
	diffDirs  = []string{"d", "g", "d/x", "k"}
)

// opResult is what one operation returned: a value or an errno.
type opResult struct {
	val  string
	errn syscall.Errno
}

func result(val string, err error) opResult {
	if err == nil {
		return opResult{val: val}
	}
	if en := errno(err); en != 0 {
		return opResult{errn: en}
	}
	return opResult{val: "error " + err.Error()}
}

func runOps(t *testing.T, seed uint64, steps int, dirs [2]string) {
	t.Helper()
	rng := rand.New(rand.NewPCG(seed, 1))
	// Descriptors by the name they were opened at, one list per side.
	fds := [2]map[string][]*os.File{{}, {}}
	t.Cleanup(func() {
		for _, m := range fds {
			for _, l := range m {
				for _, f := range l {
					f.Close()
				}
			}
		}
	})
	for _, d := range dirs {
		must(t, os.MkdirAll(filepath.Join(d, "d"), 0o755))
	}
	ops := []string{"write", "pwrite", "append", "truncate", "rename", "unlink", "open", "close", "read", "fstat", "ftruncate", "fwrite", "chmod", "fchmod", "mkdir", "rmdir", "renamedir",
		"symlink", "readlink", "utimes", "excl", "opentrunc", "fsync", "crossrename"}
	for step := range steps {
		op := ops[rng.IntN(len(ops))]
		name, name2 := diffNames[rng.IntN(len(diffNames))], diffNames[rng.IntN(len(diffNames))]
		if strings.HasSuffix(op, "dir") {
			name, name2 = diffDirs[rng.IntN(len(diffDirs))], diffDirs[rng.IntN(len(diffDirs))]
		}
		if op == "crossrename" { // a file over a directory, or the other way
			name, name2 = diffNames[rng.IntN(len(diffNames))], diffDirs[rng.IntN(len(diffDirs))]
			if rng.IntN(2) == 0 {
				name, name2 = name2, name
			}
		}
		target := []string{"a", "g/../a", "d/e", "missing", "d"}[rng.IntN(5)]
		when := time.Unix(1_600_000_000+rng.Int64N(1_000_000), rng.Int64N(1e9))
		off := []int64{0, 1, 4095, 4096, 70000, 200000}[rng.IntN(6)]
		data := bytes.Repeat([]byte{byte(rng.IntN(256))}, []int{1, 100, 5000, 70000}[rng.IntN(4)])
		which, rdwr := rng.IntN(3), rng.IntN(2) == 1
		mode := []os.FileMode{0o600, 0o640, 0o644, 0o755}[rng.IntN(4)]
		var res [2]opResult
		for i, d := range dirs {
			p, p2 := filepath.Join(d, name), filepath.Join(d, name2)
			open := fds[i][name]
			var fd *os.File
			if len(open) > 0 {
				fd = open[which%len(open)]
			}
			switch op {
			case "write":
				res[i] = result("", os.WriteFile(p, data, 0o644))
			case "pwrite", "append":
				flag := os.O_WRONLY | os.O_CREATE
				if op == "append" {
					flag |= os.O_APPEND
				}
				f, err := os.OpenFile(p, flag, 0o644)
				if err == nil {
					if op == "append" {
						_, err = f.Write(data)
					} else {
						_, err = f.WriteAt(data, off)
					}
					err = errors.Join(err, f.Close())
				}
				res[i] = result("", err)
			case "truncate":
				res[i] = result("", os.Truncate(p, off))
			case "rename":
				res[i] = result("", os.Rename(p, p2))
			case "unlink":
				res[i] = result("", os.Remove(p))
			case "open":
				flag := os.O_RDONLY
				if rdwr {
					flag = os.O_RDWR
				}
				f, err := os.OpenFile(p, flag, 0)
				if err == nil {
					fds[i][name] = append(open, f)
				}
				res[i] = result("", err)
			case "close":
				if fd != nil {
					fds[i][name] = append(open[:which%len(open)], open[which%len(open)+1:]...)
					res[i] = result("", fd.Close())
				}
			case "read":
				if fd != nil {
					b := make([]byte, 300000)
					n, err := fd.ReadAt(b, 0)
					if err != nil && n > 0 {
						err = nil // io.EOF at the end
					}
					res[i] = result(string(b[:n]), err)
				}
			case "fstat":
				if fd != nil {
					var st syscall.Stat_t
					err := syscall.Fstat(int(fd.Fd()), &st)
					if st.Mode&syscall.S_IFMT == syscall.S_IFDIR {
						// A directory (through a symlink): ledgerfs does
						// not count subdirectories in its links.
						st.Nlink = 0
					}
					res[i] = result(fmt.Sprintf("%d bytes, %d links, mode %o", st.Size, st.Nlink, st.Mode), err)
				}
			case "mkdir":
				res[i] = result("", os.Mkdir(p, 0o755))
			case "rmdir":
				res[i] = result("", syscall.Rmdir(p))
			case "renamedir", "crossrename":
				// rename(2): os.Rename refuses to replace a directory.
				res[i] = result("", syscall.Rename(p, p2))
			case "symlink":
				res[i] = result("", os.Symlink(target, p))
			case "readlink":
				res[i] = result(os.Readlink(p))
			case "utimes":
				err := os.Chtimes(p, when, when)
				var mtime string
				if err == nil {
					var fi os.FileInfo
					if fi, err = os.Stat(p); err == nil {
						mtime = fi.ModTime().UTC().String()
					}
				}
				res[i] = result(mtime, err)
			case "excl":
				f, err := os.OpenFile(p, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o640)
				if err == nil {
					_, err = f.Write(data)
					err = errors.Join(err, f.Close())
				}
				res[i] = result("", err)
			case "opentrunc":
				f, err := os.OpenFile(p, os.O_RDWR|os.O_TRUNC, 0)
				if err == nil {
					fds[i][name] = append(open, f)
				}
				res[i] = result("", err)
			case "fsync":
				if fd != nil {
					res[i] = result("", fd.Sync())
				}
			case "chmod":
				res[i] = result("", os.Chmod(p, mode))
			case "fchmod":
				if fd != nil {
					res[i] = result("", fd.Chmod(mode))
				}
			case "ftruncate":
				if fd != nil {
					res[i] = result("", fd.Truncate(off))
				}
			case "fwrite":
				if fd != nil {
					_, err := fd.WriteAt(data, off)
					res[i] = result("", err)
				}
			}
		}
		if res[0] != res[1] {
			t.Fatalf("seed %d step %d: %s %s %s off %d len %d: native %s, ledgerfs %s", seed, step, op, name, name2, off, len(data), brief(res[0]), brief(res[1]))
		}
		for _, nm := range diffDirs {
			a, errA := os.ReadDir(filepath.Join(dirs[0], nm))
			b, errB := os.ReadDir(filepath.Join(dirs[1], nm))
			if dirNames(a) != dirNames(b) || errno(errA) != errno(errB) {
				t.Fatalf("seed %d step %d, after %s %s %s: directory %s holds %s (%v) natively, %s (%v) in the page", seed, step, op, name, name2, nm, dirNames(a), errA, dirNames(b), errB)
			}
		}
		for _, nm := range diffNames {
			a, errA := os.ReadFile(filepath.Join(dirs[0], nm))
			b, errB := os.ReadFile(filepath.Join(dirs[1], nm))
			if !bytes.Equal(a, b) || errno(errA) != errno(errB) {
				t.Fatalf("seed %d step %d, after %s %s %s: %s is %d bytes (%v) natively, %d bytes (%v) in the page", seed, step, op, name, name2, nm, len(a), errA, len(b), errB)
			}
			if errA == nil {
				fa, errA := os.Stat(filepath.Join(dirs[0], nm))
				fb, errB := os.Stat(filepath.Join(dirs[1], nm))
				if errA != nil || errB != nil || fa.Mode() != fb.Mode() {
					t.Fatalf("seed %d step %d, after %s %s %s: %s natively %v (%v), in the page %v (%v)", seed, step, op, name, name2, nm, fa, errA, fb, errB)
				}
			}
		}
	}
}

func dirNames(es []os.DirEntry) string {
	var b strings.Builder
	for _, e := range es {
		fmt.Fprintf(&b, "%s:%v ", e.Name(), e.IsDir())
	}
	return b.String()
}

func errno(err error) syscall.Errno {
	var en syscall.Errno
	errors.As(err, &en)
	return en
}

func brief(r opResult) string {
	if r.errn != 0 {
		return r.errn.Error()
	}
	if len(r.val) > 40 {
		return fmt.Sprintf("%d bytes", len(r.val))
	}
	return fmt.Sprintf("%q", r.val)
}
