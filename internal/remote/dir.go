package remote

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
)

// dirBackend keeps objects as files under a directory: a remote on a
// shared or removable disk, and the backend of tests that need no server.
type dirBackend struct{ root string }

// NewDir returns a backend whose objects are files under dir, which it
// creates if missing.
func NewDir(dir string) (Backend, error) {
	abs, err := filepath.Abs(dir)
	if err != nil {
		return nil, err
	}
	if err := os.MkdirAll(abs, 0o755); err != nil {
		return nil, fmt.Errorf("remote: %w", err)
	}
	return &dirBackend{root: abs}, nil
}

func (d *dirBackend) Location() string { return d.root }

func (d *dirBackend) path(name string) (string, error) {
	if err := checkName(name); err != nil {
		return "", err
	}
	return filepath.Join(d.root, filepath.FromSlash(name)), nil
}

// write writes body to a temporary file next to name and syncs it, then
// calls place to put it at name.
func (d *dirBackend) write(name string, body []byte, place func(tmp, p string) error) error {
	p, err := d.path(name)
	if err != nil {
		return err
	}
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		return fmt.Errorf("remote: %w", err)
	}
	f, err := os.CreateTemp(filepath.Dir(p), ".tmp-")
	if err != nil {
		return fmt.Errorf("remote: %w", err)
	}
	tmp := f.Name()
	defer os.Remove(tmp)
	_, err = f.Write(body)
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return fmt.Errorf("remote: write %s: %w", name, err)
	}
	return place(tmp, p)
}

func (d *dirBackend) Create(ctx context.Context, name string, body []byte) error {
	return d.write(name, body, func(tmp, p string) error {
		// A hard link fails if the name exists: an atomic create of a
		// whole file.
		err := os.Link(tmp, p)
		if errors.Is(err, fs.ErrExist) {
			return fmt.Errorf("%s: %w", name, ErrExists)
		}
		return err
	})
}

func (d *dirBackend) Put(ctx context.Context, name string, body []byte) error {
	return d.write(name, body, os.Rename)
}

func (d *dirBackend) Delete(ctx context.Context, name string) error {
	p, err := d.path(name)
	if err != nil {
		return err
	}
	if err := os.Remove(p); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("remote: delete %s: %w", name, err)
	}
	return nil
}

func (d *dirBackend) Get(ctx context.Context, name string) ([]byte, error) {
	p, err := d.path(name)
	if err != nil {
		return nil, err
	}
	b, err := os.ReadFile(p)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, fmt.Errorf("%s: %w", name, ErrNotFound)
	}
	return b, err
}

func (d *dirBackend) GetRange(ctx context.Context, name string, off, n int64) ([]byte, error) {
	p, err := d.path(name)
	if err != nil {
		return nil, err
	}
	f, err := os.Open(p)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, fmt.Errorf("%s: %w", name, ErrNotFound)
	}
	if err != nil {
		return nil, err
	}
	defer f.Close()
	b := make([]byte, n)
	m, err := f.ReadAt(b, off)
	if err == io.EOF && int64(m) < n {
		return nil, fmt.Errorf("remote: %s: %d bytes at %d past its end", name, n, off)
	}
	return b, nil
}

func (d *dirBackend) List(ctx context.Context, prefix, startAfter string, fn func(Object) error) error {
	var objs []Object
	err := filepath.WalkDir(d.root, func(p string, e fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if e.IsDir() || strings.HasPrefix(e.Name(), ".tmp-") {
			return nil
		}
		name := filepath.ToSlash(strings.TrimPrefix(p, d.root+string(filepath.Separator)))
		if !strings.HasPrefix(name, prefix) || name <= startAfter {
			return nil
		}
		info, err := e.Info()
		if err != nil {
			return err
		}
		objs = append(objs, Object{Name: name, Size: info.Size()})
		return nil
	})
	if err != nil {
		return fmt.Errorf("remote: list %s: %w", d.root, err)
	}
	// WalkDir's lexical order by path element is not key order ("a/b"
	// after "a-c" as keys, before it as paths).
	slices.SortFunc(objs, func(a, b Object) int { return strings.Compare(a.Name, b.Name) })
	for _, o := range objs {
		if err := ctx.Err(); err != nil {
			return err
		}
		if err := fn(o); err != nil {
			return err
		}
	}
	return nil
}

// checkName refuses names a Backend does not take.
func checkName(name string) error {
	if name == "" || strings.HasPrefix(name, "/") || strings.HasSuffix(name, "/") {
		return fmt.Errorf("remote: bad object name %q", name)
	}
	for _, part := range strings.Split(name, "/") {
		if part == "" || part == "." || part == ".." || strings.HasPrefix(part, ".tmp-") {
			return fmt.Errorf("remote: bad object name %q", name)
		}
	}
	for _, r := range name {
		ok := r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || strings.ContainsRune("-_./", r)
		if !ok {
			return fmt.Errorf("remote: bad object name %q", name)
		}
	}
	return nil
}
