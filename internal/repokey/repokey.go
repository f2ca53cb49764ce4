// Package repokey holds what encrypts a repository's remote store: a
// master key, made at random when the store is made, the keys derived
// from it (HKDF-SHA256) that seal object bodies (XChaCha20-Poly1305) and
// name content-named objects (HMAC-SHA256), and the key objects that keep
// the master key wrapped by a passphrase (Argon2id) or a key file, as
// restic's keys/ do, so that a device joins with either.
//
// Layer: beside remote; it imports no ledgerfs package.
package repokey

import (
	"crypto/cipher"
	"crypto/hkdf"
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"errors"
	"fmt"
	"hash"

	"golang.org/x/crypto/chacha20poly1305"
)

// Size is the size of a master key.
const Size = 32

// Overhead is what Seal adds to a body: its nonce and its tag.
const Overhead = NonceSize + chacha20poly1305.Overhead

// NonceSize is the size of the nonce a sealed body starts with: Open may
// decrypt in place into sealed[NonceSize:NonceSize].
const NonceSize = chacha20poly1305.NonceSizeX

// ErrOpen reports a sealed body that does not open: made under another
// key, or changed since.
var ErrOpen = errors.New("repokey: message authentication failed (another key made it, or it was changed)")

// A Key is a store's master key with the keys derived from it. It is safe
// for concurrent use.
type Key struct {
	master []byte
	aead   cipher.AEAD
	names  []byte // the HMAC key of Hash
}

// Purposes of the derived keys (HKDF's info).
const (
	infoData  = "ledgerfs data"
	infoNames = "ledgerfs names"
)

// New makes a master key at random.
func New() (*Key, error) {
	m := make([]byte, Size)
	if _, err := rand.Read(m); err != nil {
		return nil, err
	}
	return FromMaster(m)
}

// FromMaster returns the key of master, Size bytes.
func FromMaster(master []byte) (*Key, error) {
	if len(master) != Size {
		return nil, fmt.Errorf("repokey: a master key is %d bytes, not %d", Size, len(master))
	}
	data, err := hkdf.Key(sha256.New, master, nil, infoData, chacha20poly1305.KeySize)
	if err != nil {
		return nil, err
	}
	names, err := hkdf.Key(sha256.New, master, nil, infoNames, sha256.Size)
	if err != nil {
		return nil, err
	}
	aead, err := chacha20poly1305.NewX(data)
	if err != nil {
		return nil, err
	}
	return &Key{master: append([]byte(nil), master...), aead: aead, names: names}, nil
}

// Master returns the master key's bytes, for the repository to keep.
func (k *Key) Master() []byte { return append([]byte(nil), k.master...) }

// Seal appends to dst plain encrypted and authenticated, with ad (the
// object's name, say) authenticated along: a random nonce, then the
// ciphertext and its tag. A random 24-byte nonce never repeats in
// practice, whatever the number of bodies sealed under one key.
func (k *Key) Seal(dst, ad, plain []byte) []byte {
	n := len(dst)
	dst = append(dst, make([]byte, chacha20poly1305.NonceSizeX)...)
	nonce := dst[n:]
	if _, err := rand.Read(nonce); err != nil {
		panic("repokey: no randomness: " + err.Error()) // crypto/rand never fails on Linux
	}
	return k.aead.Seal(dst, nonce, plain, ad)
}

// Open appends to dst the plain text of sealed, which Seal made with the
// same ad; ErrOpen if it does not authenticate.
func (k *Key) Open(dst, ad, sealed []byte) ([]byte, error) {
	if len(sealed) < Overhead {
		return nil, ErrOpen
	}
	ns := chacha20poly1305.NonceSizeX
	out, err := k.aead.Open(dst, sealed[:ns], sealed[ns:], ad)
	if err != nil {
		return nil, ErrOpen
	}
	return out, nil
}

// Hash returns a hash of data keyed by the master key (HMAC-SHA256): the
// name of a content-named object, which says nothing of the content to
// whoever lacks the key.
func (k *Key) Hash() hash.Hash { return hmac.New(sha256.New, k.names) }
