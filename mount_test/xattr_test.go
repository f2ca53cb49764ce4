package mount_test

import (
	"bytes"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"golang.org/x/sys/unix"
)

// Extended attributes are kept with the entry like its mode: set, read,
// listed and removed with ext4's errors and limits, versioned, in a
// transaction until it commits, kept across a remount, and on directories
// too.
func TestXattrs(t *testing.T) {
	t.Parallel()
	repo := t.TempDir()
	s := mount(t, repo)
	pg := s.page("l", "p")
	f := filepath.Join(pg, "f")
	dir := filepath.Join(pg, "d")
	must(t, os.WriteFile(f, []byte("content"), 0o644))
	must(t, os.Mkdir(dir, 0o755))

	get := func(path, name string) (string, error) {
		buf := make([]byte, 128<<10)
		n, err := unix.Getxattr(path, name, buf)
		if err != nil {
			return "", err
		}
		return string(buf[:n]), nil
	}
	list := func(path string) string {
		buf := make([]byte, 128<<10)
		n, err := unix.Listxattr(path, buf)
		must(t, err)
		return strings.ReplaceAll(string(buf[:n]), "\x00", " ")
	}
	wantErr := func(what string, err, want error) {
		t.Helper()
		if !errors.Is(err, want) {
			t.Fatalf("%s: %v, want %v", what, err, want)
		}
	}

	must(t, unix.Setxattr(f, "user.mime_type", []byte("text/plain"), 0))
	must(t, unix.Setxattr(f, "user.empty", nil, 0))
	must(t, unix.Setxattr(f, "trusted.t", []byte("root's"), 0))
	must(t, unix.Setxattr(dir, "user.d", []byte("on a directory"), 0))
	if v, err := get(f, "user.mime_type"); err != nil || v != "text/plain" {
		t.Fatalf("getxattr user.mime_type: %q, %v", v, err)
	}
	if got := list(f); got != "trusted.t user.empty user.mime_type " {
		t.Fatalf("listxattr: %q", got)
	}
	if v, err := get(dir, "user.d"); err != nil || v != "on a directory" {
		t.Fatalf("getxattr of a directory: %q, %v", v, err)
	}
	// The size query, and a buffer too small.
	if n, err := unix.Getxattr(f, "user.mime_type", nil); err != nil || n != len("text/plain") {
		t.Fatalf("getxattr size: %d, %v", n, err)
	}
	_, err := unix.Getxattr(f, "user.mime_type", make([]byte, 3))
	wantErr("getxattr into 3 bytes", err, unix.ERANGE)
	_, err = get(f, "user.missing")
	wantErr("getxattr of a missing attribute", err, unix.ENODATA)
	wantErr("XATTR_CREATE of an existing one", unix.Setxattr(f, "user.empty", []byte("x"), unix.XATTR_CREATE), unix.EEXIST)
	wantErr("XATTR_REPLACE of a missing one", unix.Setxattr(f, "user.missing", []byte("x"), unix.XATTR_REPLACE), unix.ENODATA)
	wantErr("a name of 256 bytes", unix.Setxattr(f, "user."+strings.Repeat("n", 251), []byte("x"), 0), unix.ERANGE)
	wantErr("a value over 64 KiB", unix.Setxattr(f, "user.big", make([]byte, 64<<10+1), 0), unix.E2BIG)
	wantErr("an unknown namespace", unix.Setxattr(f, "other.x", []byte("x"), 0), unix.EOPNOTSUPP)
	must(t, unix.Setxattr(f, "user.large", bytes.Repeat([]byte("v"), 40<<10), 0))
	wantErr("more than 64 KiB in all", unix.Setxattr(f, "user.large2", bytes.Repeat([]byte("w"), 40<<10), 0), unix.ENOSPC)
	must(t, unix.Removexattr(f, "user.large"))
	wantErr("removexattr of a missing one", unix.Removexattr(f, "user.large"), unix.ENODATA)

	// Versioned: the commit before a change keeps the old value.
	syncDir(t, pg)
	must(t, unix.Setxattr(f, "user.mime_type", []byte("text/markdown"), 0))
	syncDir(t, pg)
	commits := ls(t, filepath.Join(pg, ".ledger", "commits"))
	var seen []string
	for _, c := range commits {
		v, _ := get(filepath.Join(pg, ".ledger", "commits", c, "f"), "user.mime_type")
		seen = append(seen, v)
	}
	if !slices.Contains(seen, "text/plain") || !slices.Contains(seen, "text/markdown") {
		t.Fatalf("user.mime_type of f in the page's commits: %q, want the old and the new value", seen)
	}

	// Set while the file is open for writing, it commits with the write.
	w, err := os.OpenFile(f, os.O_WRONLY|os.O_APPEND, 0)
	must(t, err)
	must(t, unix.Setxattr(f, "user.while_open", []byte("yes"), 0))
	_, err = w.WriteString(" more")
	must(t, err)
	must(t, w.Close())

	// In a transaction: seen there, not in the live page, until it
	// commits.
	tx := filepath.Join(pg, ".ledger", "transactions", "x")
	must(t, os.Mkdir(tx, 0o755))
	must(t, unix.Setxattr(filepath.Join(tx, "f"), "user.tx", []byte("in a transaction"), 0))
	if _, err := get(f, "user.tx"); !errors.Is(err, unix.ENODATA) {
		t.Fatalf("a transaction's attribute shows in the live page before its commit: %v", err)
	}
	must(t, os.Rename(tx, filepath.Join(pg, ".ledger", "commit", "x")))
	if v, err := get(f, "user.tx"); err != nil || v != "in a transaction" {
		t.Fatalf("after the transaction's commit: %q, %v", v, err)
	}

	// Kept across a remount, with the content.
	s.stop()
	s = mount(t, repo)
	pg = filepath.Join(s.mnt, "l", "p")
	f, dir = filepath.Join(pg, "f"), filepath.Join(pg, "d")
	if got := list(f); got != "trusted.t user.empty user.mime_type user.tx user.while_open " {
		t.Fatalf("listxattr after a remount: %q", got)
	}
	if b, err := os.ReadFile(f); err != nil || string(b) != "content more" {
		t.Fatalf("content after a remount: %q, %v", b, err)
	}
	if v, err := get(dir, "user.d"); err != nil || v != "on a directory" {
		t.Fatalf("a directory's attribute after a remount: %q, %v", v, err)
	}
	s.stop()
	verifySchema(t, s.repo)
}

// cp -a, rsync -aX and tar --xattrs carry extended attributes into a page
// and out of it again: the trees and their attributes come back identical.
func TestXattrsWithTools(t *testing.T) {
	t.Parallel()
	src := filepath.Join(t.TempDir(), "src")
	must(t, os.MkdirAll(filepath.Join(src, "sub"), 0o755))
	files := map[string]string{"a": "user.origin=https://example.invalid/a", "sub/b": "user.tag=b", "sub": "user.dir=yes"}
	for path, attr := range files {
		full := filepath.Join(src, path)
		if path != "sub" {
			must(t, os.WriteFile(full, []byte("file "+path), 0o644))
		}
		name, value, _ := strings.Cut(attr, "=")
		must(t, unix.Setxattr(full, name, []byte(value), 0))
	}
	// getfattr's blocks, one a file, in name order: a page lists in
	// byte order, ext4 in its hash's.
	dump := func(dir string) string {
		t.Helper()
		blocks := strings.Split(strings.TrimSpace(run(t, dir, "getfattr", "-R", "-d", "-m", "^user\\.", ".")), "\n\n")
		slices.Sort(blocks)
		return strings.Join(blocks, "\n\n")
	}
	want := dump(src)
	if !strings.Contains(want, "user.tag") {
		t.Fatalf("the source tree has no attributes (does %s keep user.*?):\n%s", src, want)
	}
	s := mount(t, t.TempDir())
	pg := s.page("l", "p")
	out := t.TempDir()
	for _, c := range []struct {
		name     string
		in, back func(from, to string) *exec.Cmd
	}{
		{"cp -a",
			func(from, to string) *exec.Cmd { return exec.Command("cp", "-a", from, to) },
			func(from, to string) *exec.Cmd { return exec.Command("cp", "-a", from, to) }},
		{"rsync -aX",
			func(from, to string) *exec.Cmd { return exec.Command("rsync", "-aX", from+"/", to) },
			func(from, to string) *exec.Cmd { return exec.Command("rsync", "-aX", from+"/", to) }},
		{"tar --xattrs",
			func(from, to string) *exec.Cmd {
				must(t, os.MkdirAll(to, 0o755))
				return exec.Command("sh", "-c", "tar --xattrs --xattrs-include='user.*' -C \"$0\" -cf - . | tar --xattrs --xattrs-include='user.*' -C \"$1\" -xf -", from, to)
			},
			func(from, to string) *exec.Cmd {
				must(t, os.MkdirAll(to, 0o755))
				return exec.Command("sh", "-c", "tar --xattrs --xattrs-include='user.*' -C \"$0\" -cf - . | tar --xattrs --xattrs-include='user.*' -C \"$1\" -xf -", from, to)
			}},
	} {
		in := filepath.Join(pg, strings.Fields(c.name)[0])
		back := filepath.Join(out, strings.Fields(c.name)[0])
		for _, cmd := range []*exec.Cmd{c.in(src, in), c.back(in, back)} {
			if b, err := cmd.CombinedOutput(); err != nil {
				t.Fatalf("%s: %v\n%s", c.name, err, b)
			}
		}
		if got := dump(in); got != want {
			t.Errorf("%s into the page: attributes\n%s\nwant\n%s", c.name, got, want)
		}
		if got := dump(back); got != want {
			t.Errorf("%s out of the page: attributes\n%s\nwant\n%s", c.name, got, want)
		}
	}
	s.stop()
	verifySchema(t, s.repo)
}
