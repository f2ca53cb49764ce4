package cloudsync

import (
	"bytes"
	"context"
	"errors"
	"maps"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/restic/chunker"

	"github.com/ledgerfs/ledgerfs/cas"
	"github.com/ledgerfs/ledgerfs/internal/remote"
	"github.com/ledgerfs/ledgerfs/internal/repokey"
	"github.com/ledgerfs/ledgerfs/journal"
	"github.com/ledgerfs/ledgerfs/store"
)

// openDevice makes a repository, chunking with pol if it is not 0, and
// connects it to be with opt.
func openDevice(t testing.TB, name string, be remote.Backend, opt Options, pol uint64) (*device, error) {
	t.Helper()
	return openDeviceWith(t, name, be, opt, func(repo *store.Repository) {
		if pol != 0 {
			_, err := repo.AdoptPolynomial(chunker.Pol(pol))
			must(t, err)
		}
	})
}

// openDeviceWith opens a device whose repository prep readies before its
// syncer starts.
func openDeviceWith(t testing.TB, name string, be remote.Backend, opt Options, prep func(*store.Repository)) (*device, error) {
	t.Helper()
	eng := journal.NewEngine()
	repo, err := store.Open(t.TempDir(), eng.Hooks(store.Options{}))
	must(t, err)
	t.Cleanup(func() { repo.Close() })
	d := &device{t: t, name: name, repo: repo, eng: eng}
	prep(repo)
	d.s, err = New(context.Background(), repo, be, opt)
	if err == nil {
		t.Cleanup(d.s.Close)
	}
	return d, err
}

// bodies returns every object of be with its body.
func bodies(t *testing.T, be remote.Backend) map[string][]byte {
	t.Helper()
	out := map[string][]byte{}
	for _, o := range objects(t, be) {
		b, err := be.Get(context.Background(), o.Name)
		must(t, err)
		out[o.Name] = b
	}
	return out
}

// TestEncryptedStoreRevealsNothing: after two devices synced a page
// through an encrypted store, no object's name or body holds a ledger's,
// page's or file's name, a known string of a file's content, a piece's
// digest or the chunker polynomial; and the second device reads the files
// as the first wrote them. A plain store, the control, holds them all.
func TestEncryptedStoreRevealsNothing(t *testing.T) {
	secrets := []string{"hidden-ledger-name", "private-page-name", "renamed-page-name", "secret-file-name", "KNOWN-CONTENT-STRING"}
	content := bytes.Repeat([]byte("KNOWN-CONTENT-STRING, in every line of the file\n"), 3000)
	for kind, be := range stores(t) {
		t.Run(kind, func(t *testing.T) {
			a := newDevice(t, "a", be)
			a.write("hidden-ledger-name", "private-page-name", "diary/secret-file-name.txt", content)
			a.write("hidden-ledger-name", "private-page-name", "big.bin", random(9, 2<<20))
			a.sync()
			must(t, a.repo.RenamePage("hidden-ledger-name", "private-page-name", "renamed-page-name"))
			a.write("hidden-ledger-name", "renamed-page-name", "secret-file-name-2.txt", content[:100])
			a.sync()
			b := newDevice(t, "b", be)
			b.sync()
			if !maps.Equal(a.files("hidden-ledger-name", "renamed-page-name"), b.files("hidden-ledger-name", "renamed-page-name")) {
				t.Fatal("b does not read what a wrote")
			}
			needles := map[string][]byte{"the polynomial": []byte(a.repo.Polynomial().String())}
			for _, s := range secrets {
				needles[s] = []byte(s)
			}
			pg := a.page("hidden-ledger-name", "renamed-page-name")
			n := 0
			must(t, pg.Pieces(store.Synced, func(d cas.Digest) error {
				if !d.IsInline() {
					needles["a piece's digest"] = []byte(d)
					needles["a piece's digest in hex"] = []byte(d.String())
					n++
				}
				return nil
			}))
			a.repo.Release(pg)
			if n == 0 {
				t.Fatal("no piece synced")
			}
			objs := bodies(t, be)
			if len(objs) < 8 {
				t.Fatalf("the store holds %d objects", len(objs))
			}
			for name, body := range objs {
				for what, needle := range needles {
					if strings.Contains(name, string(needle)) || bytes.Contains(body, needle) {
						t.Errorf("object %s shows %s (%.40q)", name, what, needle)
					}
				}
			}
		})
	}
	t.Run("plain", func(t *testing.T) {
		be, err := remote.NewDir(t.TempDir())
		must(t, err)
		a, err := openDevice(t, "a", be, Options{Plain: true}, 0)
		must(t, err)
		a.write("hidden-ledger-name", "private-page-name", "diary/secret-file-name.txt", content)
		a.sync()
		var all []byte
		for _, body := range bodies(t, be) {
			all = append(all, body...)
		}
		for _, s := range []string{"hidden-ledger-name", "private-page-name", "KNOWN-CONTENT-STRING"} {
			if !bytes.Contains(all, []byte(s)) {
				t.Errorf("a plain store does not show %q", s)
			}
		}
	})
}

// TestKeysNameAlike: the same file written in two repositories that chunk
// alike makes the same pack names in plain stores, and unrelated ones in
// stores of different keys.
func TestKeysNameAlike(t *testing.T) {
	packs := func(opt Options) map[string]bool {
		be, err := remote.NewDir(t.TempDir())
		must(t, err)
		d, err := openDevice(t, "d", be, opt, 0x3DA3358B4DC173)
		must(t, err)
		d.writeAt("l", "p", "f", random(4, 3<<20), time.Unix(1700000000, 0))
		d.sync()
		out := map[string]bool{}
		for _, o := range objects(t, be) {
			if strings.HasPrefix(o.Name, packsDir) {
				out[o.Name] = true
			}
		}
		return out
	}
	p1, p2 := packs(Options{Plain: true}), packs(Options{Plain: true})
	if len(p1) == 0 || !maps.Equal(p1, p2) {
		t.Fatalf("plain stores: %v and %v, want the same packs", p1, p2)
	}
	e1 := packs(Options{Secret: repokey.Secret{Passphrase: []byte("one")}})
	e2 := packs(Options{Secret: repokey.Secret{Passphrase: []byte("two")}})
	for n := range e1 {
		if e2[n] || p1[n] {
			t.Fatalf("pack %s is named alike under two keys, or as a plain store names it", n)
		}
	}
	if len(e1) != len(p1) || len(e2) != len(p1) {
		t.Fatalf("%d and %d packs encrypted, %d plain", len(e1), len(e2), len(p1))
	}
}

// TestKeyMismatch: a new store is not made without a secret, and stays
// empty; a device that joins with another key file, or a passphrase where
// a key file keeps the key, is refused with ErrWrongSecret and writes
// nothing; a device that joined once reopens without its secret.
func TestKeyMismatch(t *testing.T) {
	be, err := remote.NewDir(t.TempDir())
	must(t, err)
	if _, err := openDevice(t, "x", be, Options{}, 0); !errors.Is(err, ErrNoSecret) {
		t.Fatalf("a new store without a secret: %v, want ErrNoSecret", err)
	}
	if n := len(objects(t, be)); n != 0 {
		t.Fatalf("a refused store holds %d objects", n)
	}
	a, err := openDevice(t, "a", be, Options{Secret: testSecret}, 0)
	must(t, err)
	a.write("l", "p", "f", []byte("a's"))
	a.sync()
	before := bodies(t, be)
	for _, opt := range []Options{
		{Secret: repokey.Secret{KeyFile: []byte("another key file, 32 bytes or more")}},
		{Secret: repokey.Secret{Passphrase: testSecret.KeyFile}},
	} {
		if _, err := openDevice(t, "wrong", be, opt, 0); !errors.Is(err, repokey.ErrWrongSecret) || !strings.Contains(err.Error(), be.Location()) {
			t.Fatalf("a wrong secret: %v, want ErrWrongSecret naming the store", err)
		}
	}
	if _, err := openDevice(t, "none", be, Options{}, 0); !errors.Is(err, ErrNoSecret) {
		t.Fatalf("no secret for an encrypted store: %v, want ErrNoSecret", err)
	}
	if after := bodies(t, be); !maps.EqualFunc(before, after, bytes.Equal) {
		t.Fatal("refused devices wrote to the store")
	}
	b, err := openDevice(t, "b", be, Options{Secret: testSecret}, 0)
	must(t, err)
	b.sync()
	again, err := New(context.Background(), b.repo, be, Options{})
	if err != nil {
		t.Fatalf("a device that joined, without its secret: %v", err)
	}
	t.Cleanup(again.Close)
	b.s.Close()
	b.s = again
	b.sync()
	if got := b.files("l", "p")["f"]; got != "a's" {
		t.Fatalf("b reads %q", got)
	}
}

// TestDamagedObjects: a byte changed in a batch stops the pull with an
// error that names it; a byte changed in a pack stops a pull that fetches
// values, or a lazy device's first read of the file, with an error that
// names the pack; no piece of it lands, and once the object is whole again
// the pull, and the read, give the file's bytes.
func TestDamagedObjects(t *testing.T) {
	dir := t.TempDir()
	be, err := remote.NewDir(dir)
	must(t, err)
	a := newDevice(t, "a", be)
	want := random(5, 200<<10)
	a.write("l", "p", "f", want)
	a.sync()
	var pack, batch string
	for _, o := range objects(t, be) {
		switch {
		case strings.HasPrefix(o.Name, packsDir):
			pack = o.Name
		case strings.HasPrefix(o.Name, logsDir):
			batch = o.Name
		}
	}
	damage := func(name string) (mend func()) {
		path := filepath.Join(dir, name)
		orig, err := os.ReadFile(path)
		must(t, err)
		bad := bytes.Clone(orig)
		bad[len(bad)-100] ^= 0x40 // in the value, packed after the tree
		must(t, os.WriteFile(path, bad, 0o644))
		return func() { must(t, os.WriteFile(path, orig, 0o644)) }
	}
	eager, err := openDevice(t, "eager", be, Options{Secret: testSecret, FetchAll: true}, 0)
	must(t, err)
	lazy, err := openDevice(t, "lazy", be, Options{Secret: testSecret}, 0)
	must(t, err)
	for _, name := range []string{pack, batch} {
		mend := damage(name)
		_, err = eager.s.Sync(context.Background())
		if err == nil || !strings.Contains(err.Error(), name) || !errors.Is(err, repokey.ErrOpen) {
			t.Fatalf("pull with %s damaged: %v, want an error naming it", name, err)
		}
		if got := eager.files("l", "p"); len(got) != 0 {
			t.Fatalf("eager holds %d files after a failed pull", len(got))
		}
		mend()
	}
	eager.sync()
	if got := eager.files("l", "p")["f"]; got != string(want) {
		t.Fatal("eager's file after the objects were mended: not a's bytes")
	}

	lazy.sync() // the tree only
	mend := damage(pack)
	_, err = lazy.read("l", "p", "f")
	if err == nil || !strings.Contains(err.Error(), pack) || !strings.Contains(err.Error(), "authentication failed") || !errors.Is(err, store.ErrRemoteOnly) {
		t.Fatalf("lazy's read with the pack damaged: %v, want an error naming it", err)
	}
	mend()
	// Missing: the same, naming it.
	path := filepath.Join(dir, pack)
	orig, err := os.ReadFile(path)
	must(t, err)
	must(t, os.Remove(path))
	_, err = lazy.read("l", "p", "f")
	if err == nil || !strings.Contains(err.Error(), pack) || !errors.Is(err, store.ErrRemoteOnly) {
		t.Fatalf("lazy's read with the pack missing: %v, want an error naming it", err)
	}
	must(t, os.WriteFile(path, orig, 0o644))
	if got, err := lazy.read("l", "p", "f"); err != nil || !bytes.Equal(got, want) {
		t.Fatalf("lazy's read after the pack was mended: %v", err)
	}
}
