package cloudsync

import (
	"context"
	"errors"
	"testing"

	"github.com/ledgerfs/ledgerfs/internal/remote"
	"github.com/ledgerfs/ledgerfs/internal/repokey"
)

// TestKeyCommands: a key added under a new passphrase lets a new device
// join; a change of passphrase adds the new key object and removes the
// one the old passphrase opened, so the old passphrase no longer joins
// while a device that joined before still syncs without one; the last key
// object is not removed; a plain store has no keys; a wrong secret changes
// nothing.
func TestKeyCommands(t *testing.T) {
	ctx := context.Background()
	be, err := remote.NewDir(t.TempDir())
	must(t, err)
	one := repokey.Secret{Passphrase: []byte("one")}
	two := repokey.Secret{Passphrase: []byte("two")}
	three := repokey.Secret{KeyFile: []byte("a third secret, a key file of 32 bytes")}
	a, err := openDevice(t, "a", be, Options{Secret: one}, 0)
	must(t, err)
	a.write("l", "p", "f", []byte("a's"))
	a.sync()

	// a keeps the key: it adds one without a secret.
	id2, err := AddKey(ctx, a.repo, be, Options{}, two)
	must(t, err)
	keys, err := Keys(ctx, nil, be, Options{Secret: two})
	must(t, err)
	if len(keys) != 2 {
		t.Fatalf("%d key objects after an add, want 2: %+v", len(keys), keys)
	}
	for _, k := range keys {
		if k.Opens != (k.ID == id2) || k.Kind != repokey.KindPassphrase || k.Created.IsZero() {
			t.Fatalf("key objects listed with the second passphrase: %+v", keys)
		}
	}
	b, err := openDevice(t, "b", be, Options{Secret: two}, 0)
	must(t, err)
	b.sync()
	if got, err := b.read("l", "p", "f"); err != nil || string(got) != "a's" {
		t.Fatalf("b joined with the added key and reads %q", got)
	}

	// A wrong current secret changes nothing.
	if _, _, err := ChangeKey(ctx, be, Options{Secret: repokey.Secret{Passphrase: []byte("nope")}}, three); !errors.Is(err, repokey.ErrWrongSecret) {
		t.Fatalf("a change with a wrong passphrase: %v, want ErrWrongSecret", err)
	}
	if keys, _ := Keys(ctx, nil, be, Options{}); len(keys) != 2 {
		t.Fatalf("a refused change left %d key objects", len(keys))
	}

	// one → three: one no longer joins; a, which joined, syncs on.
	added, removed, err := ChangeKey(ctx, be, Options{Secret: one}, three)
	must(t, err)
	if len(removed) != 1 || removed[0] == id2 || added == "" {
		t.Fatalf("a change removed %v and added %q", removed, added)
	}
	if _, err := openDevice(t, "old", be, Options{Secret: one}, 0); !errors.Is(err, repokey.ErrWrongSecret) {
		t.Fatalf("a device with the replaced passphrase: %v, want ErrWrongSecret", err)
	}
	c, err := openDevice(t, "c", be, Options{Secret: three}, 0)
	must(t, err)
	c.sync()
	a.write("l", "p", "g", []byte("after the change"))
	a.sync()
	c.sync()
	if got, err := c.read("l", "p", "g"); err != nil || string(got) != "after the change" {
		t.Fatalf("c reads %q of what a wrote after the change", got)
	}

	// Removals: an unknown id, then down to the last.
	if _, err := RemoveKey(ctx, nil, be, Options{Secret: three}, "zz"); err == nil {
		t.Fatal("removed a key object that does not exist")
	}
	if got, err := RemoveKey(ctx, nil, be, Options{Secret: three}, id2[:6]); err != nil || got != id2 {
		t.Fatalf("remove by a prefix of its id: %q, %v", got, err)
	}
	if _, err := RemoveKey(ctx, nil, be, Options{Secret: three}, added); !errors.Is(err, ErrLastKey) {
		t.Fatalf("removing the last key object: %v, want ErrLastKey", err)
	}
	if _, err := openDevice(t, "d", be, Options{Secret: three}, 0); err != nil {
		t.Fatalf("the last key object after the refused removal: %v", err)
	}

	plain, err := remote.NewDir(t.TempDir())
	must(t, err)
	p, err := openDevice(t, "p", plain, Options{Plain: true}, 0)
	must(t, err)
	p.sync()
	if _, err := Keys(ctx, nil, plain, Options{}); !errors.Is(err, ErrPlain) {
		t.Fatalf("keys of a plain store: %v, want ErrPlain", err)
	}
	if _, err := AddKey(ctx, p.repo, plain, Options{}, two); !errors.Is(err, ErrPlain) {
		t.Fatalf("a key added to a plain store: %v, want ErrPlain", err)
	}
}
