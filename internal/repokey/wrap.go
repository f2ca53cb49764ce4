package repokey

import (
	"crypto/cipher"
	"crypto/hkdf"
	"crypto/rand"
	"crypto/sha256"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"golang.org/x/crypto/argon2"
	"golang.org/x/crypto/chacha20poly1305"
)

// A Secret unlocks a store's master key: a passphrase, or the bytes of a
// key file.
type Secret struct {
	Passphrase []byte
	KeyFile    []byte
}

// IsZero reports whether s holds neither.
func (s Secret) IsZero() bool { return len(s.Passphrase) == 0 && len(s.KeyFile) == 0 }

// What a secret is, in a key object.
const (
	KindPassphrase = "argon2id"
	KindKeyFile    = "key-file"
)

// MinKeyFile is the least a key file holds: its bytes are the key, used
// as they are (HKDF), so they must be as hard to guess as a key.
const MinKeyFile = 32

// ErrWrongSecret reports a secret that opens no key object of a store.
var ErrWrongSecret = errors.New("wrong passphrase or key file")

// Argon2id's cost for a new key object (RFC 9106's second recommended
// option, at 2 threads): about 0.1 s and 64 MiB to try one passphrase.
const (
	argonTime    = 3
	argonMemory  = 64 << 10 // KiB
	argonThreads = 2
)

// The most a key object may ask to try one passphrase: a damaged or
// hostile one must not take a device's memory.
const (
	maxMemory = 1 << 20 // KiB
	maxTime   = 10
)

// A keyObject is the body of a store's key object: the master key sealed
// under a key made from a secret.
type keyObject struct {
	Kind    string    `json:"kind"`
	Created time.Time `json:"created"`
	// Salt and the Argon2id cost, for a passphrase.
	Salt    []byte `json:"salt,omitempty"`
	Time    uint32 `json:"time,omitempty"`
	Memory  uint32 `json:"memory,omitempty"`
	Threads uint8  `json:"threads,omitempty"`
	// Sealed is the master key, sealed (nonce, ciphertext, tag).
	Sealed []byte `json:"sealed"`
}

// Wrap returns a key object that keeps k's master key under s.
func Wrap(k *Key, s Secret) ([]byte, error) {
	o := keyObject{Created: time.Now().UTC()}
	switch {
	case len(s.KeyFile) > 0:
		o.Kind = KindKeyFile
	case len(s.Passphrase) > 0:
		o.Kind = KindPassphrase
		o.Salt = make([]byte, 16)
		if _, err := rand.Read(o.Salt); err != nil {
			return nil, err
		}
		o.Time, o.Memory, o.Threads = argonTime, argonMemory, argonThreads
	default:
		return nil, errors.New("repokey: no passphrase or key file to wrap the key with")
	}
	aead, err := o.aead(s)
	if err != nil {
		return nil, err
	}
	nonce := make([]byte, chacha20poly1305.NonceSizeX)
	if _, err := rand.Read(nonce); err != nil {
		return nil, err
	}
	o.Sealed = aead.Seal(nonce, nonce, k.master, []byte(o.Kind))
	return json.MarshalIndent(o, "", "  ")
}

// Unwrap returns the master key a key object keeps, if s opens it:
// ErrWrongSecret if it does not, or if the object is kept under the other
// kind of secret.
func Unwrap(body []byte, s Secret) (*Key, error) {
	var o keyObject
	if err := json.Unmarshal(body, &o); err != nil {
		return nil, fmt.Errorf("repokey: a key object that is not one: %w", err)
	}
	if (o.Kind == KindKeyFile) != (len(s.KeyFile) > 0) {
		return nil, ErrWrongSecret
	}
	aead, err := o.aead(s)
	if err != nil {
		return nil, err
	}
	ns := chacha20poly1305.NonceSizeX
	if len(o.Sealed) < ns {
		return nil, ErrWrongSecret
	}
	master, err := aead.Open(nil, o.Sealed[:ns], o.Sealed[ns:], []byte(o.Kind))
	if err != nil {
		return nil, ErrWrongSecret
	}
	return FromMaster(master)
}

// aead seals and opens the master key under s.
func (o *keyObject) aead(s Secret) (cipher.AEAD, error) {
	kek, err := o.kek(s)
	if err != nil {
		return nil, err
	}
	return chacha20poly1305.NewX(kek)
}

// kek is the key that seals the master key: Argon2id of a passphrase, or
// HKDF of a key file.
func (o *keyObject) kek(s Secret) ([]byte, error) {
	switch o.Kind {
	case KindKeyFile:
		if len(s.KeyFile) < MinKeyFile {
			return nil, fmt.Errorf("repokey: a key file holds at least %d bytes (head -c 32 /dev/urandom > FILE), this one %d", MinKeyFile, len(s.KeyFile))
		}
		return hkdf.Key(sha256.New, s.KeyFile, nil, "ledgerfs key file", chacha20poly1305.KeySize)
	case KindPassphrase:
		if o.Time == 0 || o.Memory == 0 || o.Threads == 0 || len(o.Salt) == 0 || o.Memory > maxMemory || o.Time > maxTime {
			return nil, fmt.Errorf("repokey: a key object with a damaged cost (time %d, memory %d KiB, threads %d)", o.Time, o.Memory, o.Threads)
		}
		return argon2.IDKey(s.Passphrase, o.Salt, o.Time, o.Memory, o.Threads, chacha20poly1305.KeySize), nil
	}
	return nil, fmt.Errorf("repokey: a key object of an unknown kind %q", o.Kind)
}

// Describe returns what a key object says of itself without its secret:
// the kind of secret that opens it (KindPassphrase or KindKeyFile) and when
// it was made.
func Describe(body []byte) (kind string, created time.Time, err error) {
	var o keyObject
	if err := json.Unmarshal(body, &o); err != nil {
		return "", time.Time{}, fmt.Errorf("repokey: a key object that is not one: %w", err)
	}
	return o.Kind, o.Created, nil
}
