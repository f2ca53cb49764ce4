package remote_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/minio/minio-go/v7/pkg/credentials"

	"github.com/ledgerfs/ledgerfs/internal/remote"
	"github.com/ledgerfs/ledgerfs/internal/s3test"
)

// backends returns one backend of each kind, each on its own empty store:
// a directory, gofakes3 in this process, and a real S3 server process.
func backends(t *testing.T) map[string]remote.Backend {
	t.Helper()
	ctx := context.Background()
	dir, err := remote.NewDir(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]remote.Backend{"dir": dir}
	for _, srv := range []*s3test.Server{s3test.Fake(t), s3test.Start(t)} {
		be, err := remote.NewS3(ctx, s3Config(srv, "bucket-"+strings.ToLower(srv.Kind), "repo/one"))
		if err != nil {
			t.Fatalf("%s: %v", srv, err)
		}
		out[srv.Kind] = be
	}
	return out
}

func s3Config(srv *s3test.Server, bucket, prefix string) remote.S3Config {
	return srv.Config(bucket, prefix)
}

func names(t *testing.T, be remote.Backend, prefix, after string) []string {
	t.Helper()
	var out []string
	if err := be.List(context.Background(), prefix, after, func(o remote.Object) error {
		out = append(out, o.Name)
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	return out
}

// TestBackends checks what every backend promises, on each kind.
func TestBackends(t *testing.T) {
	ctx := context.Background()
	for kind, be := range backends(t) {
		t.Run(kind, func(t *testing.T) {
			if err := be.Create(ctx, "devices/a", []byte("first")); err != nil {
				t.Fatal(err)
			}
			if err := be.Create(ctx, "devices/a", []byte("second")); !errors.Is(err, remote.ErrExists) {
				t.Fatalf("second create of a name: %v, want ErrExists", err)
			}
			if b, err := be.Get(ctx, "devices/a"); err != nil || string(b) != "first" {
				t.Fatalf("get after a refused create: %q, %v; want the first body", b, err)
			}
			body := bytes.Repeat([]byte("0123456789"), 1000)
			for range 2 { // a retried put is harmless
				if err := be.Put(ctx, "packs/ab/abcdef", body); err != nil {
					t.Fatal(err)
				}
			}
			if b, err := be.GetRange(ctx, "packs/ab/abcdef", 1234, 100); err != nil || !bytes.Equal(b, body[1234:1334]) {
				t.Fatalf("range: %q, %v", b, err)
			}
			if _, err := be.Get(ctx, "packs/ab/missing"); !errors.Is(err, remote.ErrNotFound) {
				t.Fatalf("get of a missing object: %v, want ErrNotFound", err)
			}
			for _, n := range []string{"logs/d1/0002", "logs/d1/0001", "logs/d1-x/0001", "logs/d2/0001"} {
				if err := be.Create(ctx, n, []byte(n)); err != nil {
					t.Fatal(err)
				}
			}
			want := []string{"logs/d1-x/0001", "logs/d1/0001", "logs/d1/0002", "logs/d2/0001"}
			if got := names(t, be, "logs/", ""); !slices.Equal(got, want) {
				t.Fatalf("listing of logs/: %v, want key order %v", got, want)
			}
			if got := names(t, be, "logs/", "logs/d1/0001"); !slices.Equal(got, want[2:]) {
				t.Fatalf("listing after logs/d1/0001: %v, want %v", got, want[2:])
			}
			if got := names(t, be, "logs/d1/", ""); !slices.Equal(got, want[1:3]) {
				t.Fatalf("listing of logs/d1/: %v", got)
			}
			stop := errors.New("enough")
			n := 0
			err := be.List(ctx, "", "", func(remote.Object) error { n++; return stop })
			if !errors.Is(err, stop) || n != 1 {
				t.Fatalf("listing stopped by its callback: %v after %d, want the callback's error after 1", err, n)
			}
			for range 2 { // a delete of a missing object is no error
				if err := be.Delete(ctx, "logs/d1/0001"); err != nil {
					t.Fatal(err)
				}
			}
			if _, err := be.Get(ctx, "logs/d1/0001"); !errors.Is(err, remote.ErrNotFound) {
				t.Fatalf("get of a deleted object: %v, want ErrNotFound", err)
			}
			if err := be.Create(ctx, "logs/d1/0001", []byte("again")); err != nil {
				t.Fatalf("create of a deleted name: %v", err)
			}
			for _, bad := range []string{"", "/abs", "a/", "a//b", "a/../b", "a b", ".tmp-x"} {
				if err := be.Put(ctx, bad, nil); err == nil {
					t.Errorf("put of bad name %q taken", bad)
				}
			}
		})
	}
}

// TestOpen: an empty store gets ledgerfs's configuration; a second device
// reads the same; a store that holds something else, or another format,
// is refused with a message that says so.
func TestOpen(t *testing.T) {
	ctx := context.Background()
	for kind, be := range backends(t) {
		t.Run(kind, func(t *testing.T) {
			cfg, err := remote.Open(ctx, be, plain("3da3358b4dc173"))
			if err != nil {
				t.Fatal(err)
			}
			again, err := remote.Open(ctx, be, plain("2f0d3f6b33a6e5"))
			if err != nil || again.Polynomial != "3da3358b4dc173" || !again.Created.Equal(cfg.Created) {
				t.Fatalf("second open: %+v, %v; want the first's configuration %+v", again, err, cfg)
			}
		})
	}
	dir := t.TempDir()
	be, err := remote.NewDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	if err := be.Put(ctx, remote.KeysDir+"0123", []byte("{}")); err != nil {
		t.Fatal(err)
	}
	if cfg, err := remote.Open(ctx, be, plain("3da3358b4dc173")); err != nil || cfg.Version != 1 {
		t.Fatalf("open of a store holding only a key object: %+v, %v; want it made", cfg, err)
	}
	if be, err = remote.NewDir(t.TempDir()); err != nil {
		t.Fatal(err)
	}
	if err := be.Put(ctx, "photos/2026/a.jpg", []byte("jpeg")); err != nil {
		t.Fatal(err)
	}
	if _, err := remote.Open(ctx, be, plain("3da3358b4dc173")); err == nil || !strings.Contains(err.Error(), "holds something else") {
		t.Fatalf("open of a store holding photos: %v, want refused", err)
	}
	if err := be.Put(ctx, remote.ConfigName, []byte(`{"version": 2}`)); err != nil {
		t.Fatal(err)
	}
	if _, err := remote.Open(ctx, be, plain("3da3358b4dc173")); err == nil || !strings.Contains(err.Error(), "not ledgerfs's") {
		t.Fatalf("open of a store with another format's config: %v, want refused", err)
	}
	if err := be.Put(ctx, remote.ConfigName, []byte(`{"format": "ledgerfs", "version": 99, "polynomial": "1"}`)); err != nil {
		t.Fatal(err)
	}
	if _, err := remote.Open(ctx, be, plain("3da3358b4dc173")); err == nil || !strings.Contains(err.Error(), "newer ledgerfs") {
		t.Fatalf("open of a newer layout: %v, want refused", err)
	}
}

// TestRaise: raising a store's layout rewrites only its version, keeps
// fields this code does not know, never lowers it, and the store opens at
// the new layout with everything else as it was.
func TestRaise(t *testing.T) {
	ctx := context.Background()
	be, err := remote.NewDir(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	cfg, err := remote.Open(ctx, be, plain("3da3358b4dc173"))
	if err != nil {
		t.Fatal(err)
	}
	body, err := be.Get(ctx, remote.ConfigName)
	if err != nil {
		t.Fatal(err)
	}
	// A field of a later build.
	body = bytes.Replace(body, []byte(`"format"`), []byte(`"later": {"x": 1}, "format"`), 1)
	if err := be.Put(ctx, remote.ConfigName, body); err != nil {
		t.Fatal(err)
	}
	for range 2 {
		if err := remote.Raise(ctx, be, remote.VersionOwnPolynomials); err != nil {
			t.Fatal(err)
		}
	}
	raised, err := remote.Open(ctx, be, plain("2f0d3f6b33a6e5"))
	if err != nil || raised.Version != remote.VersionOwnPolynomials || raised.Polynomial != cfg.Polynomial || !raised.Created.Equal(cfg.Created) {
		t.Fatalf("open after the raise: %+v, %v; want %+v at layout %d", raised, err, cfg, remote.VersionOwnPolynomials)
	}
	if body, err = be.Get(ctx, remote.ConfigName); err != nil || !bytes.Contains(body, []byte(`"later"`)) {
		t.Fatalf("the raised configuration lost a field it does not know: %s (%v)", body, err)
	}
	if err := remote.Raise(ctx, be, 1); err != nil {
		t.Fatal(err)
	}
	if again, err := remote.Open(ctx, be, plain("2f0d3f6b33a6e5")); err != nil || again.Version != remote.VersionOwnPolynomials {
		t.Fatalf("a raise to an older layout lowered it: %+v, %v", again, err)
	}
}

// plain makes the configuration of a plain store chunked with pol.
func plain(pol string) func() (remote.Config, error) {
	return func() (remote.Config, error) { return remote.Config{Polynomial: pol}, nil }
}

// TestOpenRace: devices that open an empty store at once agree on one
// configuration (the conditional create decides).
func TestOpenRace(t *testing.T) {
	ctx := context.Background()
	srv := s3test.Start(t)
	const devices = 16
	got := make(chan string, devices)
	for i := range devices {
		go func() {
			be, err := remote.NewS3(ctx, s3Config(srv, "race", ""))
			if err != nil {
				got <- "error: " + err.Error()
				return
			}
			cfg, err := remote.Open(ctx, be, plain(fmt.Sprintf("%x", 0x3da3358b4dc173+i)))
			if err != nil {
				got <- "error: " + err.Error()
				return
			}
			got <- cfg.Polynomial
		}()
	}
	first := <-got
	for range devices - 1 {
		if p := <-got; p != first || strings.HasPrefix(p, "error") {
			t.Fatalf("devices opening at once disagree: %q and %q", first, p)
		}
	}
}

// TestS3Errors: a server that cannot be reached and refused credentials
// are errors that say so; a missing bucket is created.
func TestS3Errors(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	srv := s3test.Start(t)
	cfg := s3Config(srv, "made-on-open", "")
	if _, err := remote.NewS3(ctx, cfg); err != nil {
		t.Fatalf("open with a missing bucket: %v, want it made", err)
	}
	if _, err := remote.NewS3(ctx, cfg); err != nil {
		t.Fatalf("open of the bucket made: %v", err)
	}
	bad := cfg
	bad.Creds = credentials.NewStaticV4(s3test.AccessKey, "wrong-secret", "")
	if _, err := remote.NewS3(ctx, bad); err == nil || !strings.Contains(err.Error(), "refused the credentials") {
		t.Fatalf("open with a wrong secret: %v, want the credentials named", err)
	}
	srv.Kill()
	if _, err := remote.NewS3(ctx, cfg); err == nil || !strings.Contains(err.Error(), "cannot reach") {
		t.Fatalf("open with the server down: %v, want it named unreachable", err)
	}
	srv.Restart()
	if _, err := remote.NewS3(ctx, cfg); err != nil {
		t.Fatalf("open after the server came back: %v", err)
	}
}

// TestParseURL: s3://BUCKET[/PREFIX] and nothing else.
func TestParseURL(t *testing.T) {
	cfg, err := remote.ParseURL("s3://my-bucket/laptop/repo/")
	if err != nil || cfg.Bucket != "my-bucket" || cfg.Prefix != "laptop/repo" {
		t.Fatalf("parse: %+v, %v", cfg, err)
	}
	for _, bad := range []string{"my-bucket", "s3://", "http://host/b", "s3://u:p@b/x", "s3://b/x?y=1"} {
		if _, err := remote.ParseURL(bad); err == nil {
			t.Errorf("%q taken", bad)
		}
	}
}

// TestDirBackendLeavesNoTemporaryFiles: a directory store holds the
// objects and nothing else once writes return.
func TestDirBackendLeavesNoTemporaryFiles(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	be, err := remote.NewDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	if err := be.Create(ctx, "a/b", []byte("x")); err != nil {
		t.Fatal(err)
	}
	if err := be.Create(ctx, "a/b", []byte("y")); !errors.Is(err, remote.ErrExists) {
		t.Fatal(err)
	}
	if err := be.Put(ctx, "a/c", []byte("z")); err != nil {
		t.Fatal(err)
	}
	var files []string
	filepath.WalkDir(dir, func(p string, d os.DirEntry, err error) error {
		if err == nil && !d.IsDir() {
			files = append(files, strings.TrimPrefix(p, dir+"/"))
		}
		return err
	})
	if !slices.Equal(files, []string{"a/b", "a/c"}) {
		t.Fatalf("files in the store: %v", files)
	}
}
