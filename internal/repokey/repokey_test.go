package repokey

import (
	"bytes"
	"errors"
	"testing"
)

// TestSealOpen: a body opens under the key and name it was sealed with,
// and under no other key, name or change of a byte; two seals of one body
// differ (a fresh nonce each).
func TestSealOpen(t *testing.T) {
	k, err := New()
	if err != nil {
		t.Fatal(err)
	}
	other, err := New()
	if err != nil {
		t.Fatal(err)
	}
	body := []byte("the plan for next year")
	sealed := k.Seal(nil, []byte("logs/a/0"), body)
	if len(sealed) != len(body)+Overhead {
		t.Fatalf("sealed %d bytes into %d, want %d", len(body), len(sealed), len(body)+Overhead)
	}
	if bytes.Contains(sealed, body) {
		t.Fatal("the sealed body holds the plain one")
	}
	if again := k.Seal(nil, []byte("logs/a/0"), body); bytes.Equal(again, sealed) {
		t.Fatal("two seals of one body are the same bytes")
	}
	got, err := k.Open(nil, []byte("logs/a/0"), sealed)
	if err != nil || !bytes.Equal(got, body) {
		t.Fatalf("open: %q, %v", got, err)
	}
	if _, err := k.Open(nil, []byte("logs/a/1"), sealed); !errors.Is(err, ErrOpen) {
		t.Fatalf("open under another name: %v, want ErrOpen", err)
	}
	if _, err := other.Open(nil, []byte("logs/a/0"), sealed); !errors.Is(err, ErrOpen) {
		t.Fatalf("open under another key: %v, want ErrOpen", err)
	}
	for i := range sealed {
		bad := bytes.Clone(sealed)
		bad[i] ^= 1
		if _, err := k.Open(nil, []byte("logs/a/0"), bad); !errors.Is(err, ErrOpen) {
			t.Fatalf("open with byte %d changed: %v, want ErrOpen", i, err)
		}
	}
	if _, err := k.Open(nil, nil, sealed[:Overhead-1]); !errors.Is(err, ErrOpen) {
		t.Fatalf("open of a short body: %v", err)
	}
	// Names: keyed, so another key names the same content otherwise.
	h1, h2 := k.Hash(), other.Hash()
	h1.Write(body)
	h2.Write(body)
	if bytes.Equal(h1.Sum(nil), h2.Sum(nil)) {
		t.Fatal("two keys hash one content to one name")
	}
}

// TestWrap: a key object opens with the secret it was made with and gives
// the same master key; another passphrase, another key file, or the other
// kind of secret is ErrWrongSecret; a short key file is refused.
func TestWrap(t *testing.T) {
	k, err := New()
	if err != nil {
		t.Fatal(err)
	}
	pass := Secret{Passphrase: []byte("correct horse battery staple")}
	file := Secret{KeyFile: bytes.Repeat([]byte{7}, 32)}
	for _, c := range []struct {
		name  string
		made  Secret
		wrong []Secret
	}{
		{"passphrase", pass, []Secret{{Passphrase: []byte("correct horse battery stapler")}, file}},
		{"key file", file, []Secret{{KeyFile: bytes.Repeat([]byte{8}, 32)}, pass}},
	} {
		t.Run(c.name, func(t *testing.T) {
			obj, err := Wrap(k, c.made)
			if err != nil {
				t.Fatal(err)
			}
			if bytes.Contains(obj, k.master) {
				t.Fatal("the key object holds the master key in the clear")
			}
			got, err := Unwrap(obj, c.made)
			if err != nil || !bytes.Equal(got.Master(), k.Master()) {
				t.Fatalf("unwrap: %v", err)
			}
			for _, w := range c.wrong {
				if _, err := Unwrap(obj, w); !errors.Is(err, ErrWrongSecret) {
					t.Fatalf("unwrap with another secret: %v, want ErrWrongSecret", err)
				}
			}
		})
	}
	obj, err := Wrap(k, file)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := Unwrap(obj, Secret{KeyFile: []byte("short")}); err == nil || errors.Is(err, ErrWrongSecret) {
		t.Fatalf("unwrap with a 5-byte key file: %v, want a clear refusal", err)
	}
	if _, err := Wrap(k, Secret{}); err == nil {
		t.Fatal("wrap with no secret taken")
	}
}

// FuzzOpen: no body, sealed or not, makes Open or Unwrap panic, and only
// the sealed one opens.
func FuzzOpen(f *testing.F) {
	k, err := FromMaster(bytes.Repeat([]byte{1}, Size))
	if err != nil {
		f.Fatal(err)
	}
	f.Add(k.Seal(nil, []byte("n"), []byte("body")))
	f.Add([]byte(`{"kind":"argon2id","salt":"AAAA","time":1,"memory":8,"threads":1,"sealed":"AAAA"}`))
	f.Add([]byte(`{"kind":"key-file","sealed":""}`))
	f.Fuzz(func(t *testing.T, b []byte) {
		if got, err := k.Open(nil, []byte("n"), b); err == nil && !bytes.Equal(got, []byte("body")) {
			t.Fatalf("a forged body opened: %q", got)
		}
		// A key file's: a passphrase's would run Argon2id at whatever
		// cost the input names (up to its bound), too slow to fuzz.
		Unwrap(b, Secret{KeyFile: bytes.Repeat([]byte{1}, 32)})
	})
}
