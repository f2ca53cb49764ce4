package cloudsync

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"hash"
	"log/slog"

	"github.com/ledgerfs/ledgerfs/cas"
	"github.com/ledgerfs/ledgerfs/internal/remote"
	"github.com/ledgerfs/ledgerfs/internal/repokey"
	"github.com/ledgerfs/ledgerfs/store"
)

// ErrNoSecret reports an encrypted store, or a new one, with no secret to
// unlock or make its key.
var ErrNoSecret = errors.New("no passphrase or key file")

// stateKey is the repository db row (sync state) that keeps the master key
// of the repository's encrypted store, so that a device that joined once
// needs no passphrase again: whoever reads the repository reads its pages
// in the clear anyway.
const stateKey = "key"

// secretConfig is what an encrypted store's configuration keeps sealed.
type secretConfig struct {
	Polynomial string `json:"polynomial"`
}

// configAD is what the sealed part of a configuration is authenticated with.
var configAD = []byte(remote.ConfigName)

// openStore reads, or makes, the store's configuration and, for an
// encrypted one, unlocks its master key; it returns the store's polynomial
// and key (nil for a plain store). Without a repository (repo nil: the key
// commands given only a remote) it neither makes a store nor finds a key
// kept; only the secret unlocks.
func openStore(ctx context.Context, repo *store.Repository, be remote.Backend, opt Options, create bool) (pol string, version int, key *repokey.Key, err error) {
	var own string
	if repo != nil {
		own = repo.Polynomial().String()
	}
	create = create && repo != nil
	var made *repokey.Key
	cfg, err := remote.Open(ctx, be, func() (remote.Config, error) {
		switch {
		case !create:
			return remote.Config{}, fmt.Errorf("%s holds no repository", be.Location())
		case opt.Plain:
			return remote.Config{Polynomial: own}, nil
		case opt.Secret.IsZero():
			return remote.Config{}, fmt.Errorf("%s is empty, and a new store is encrypted: give a passphrase or a key file to keep its key under (or make it unencrypted): %w", be.Location(), ErrNoSecret)
		}
		k, err := repokey.New()
		if err != nil {
			return remote.Config{}, err
		}
		wrapped, err := repokey.Wrap(k, opt.Secret)
		if err != nil {
			return remote.Config{}, err
		}
		var id [16]byte
		rand.Read(id[:])
		if err := be.Create(ctx, remote.KeysDir+hex.EncodeToString(id[:]), wrapped); err != nil {
			return remote.Config{}, err
		}
		plain, err := json.Marshal(secretConfig{Polynomial: own})
		if err != nil {
			return remote.Config{}, err
		}
		made = k
		return remote.Config{Encryption: remote.Encryption, Sealed: k.Seal(nil, configAD, plain)}, nil
	})
	if err != nil {
		return "", 0, nil, err
	}
	if !cfg.Encrypted() {
		return cfg.Polynomial, cfg.Version, nil, nil
	}
	// The key made here, unless another device made the store meanwhile;
	// then the one the repository keeps; then the secret's.
	var sc secretConfig
	opens := func(k *repokey.Key) bool {
		if k == nil {
			return false
		}
		b, err := k.Open(nil, configAD, cfg.Sealed)
		return err == nil && json.Unmarshal(b, &sc) == nil && sc.Polynomial != ""
	}
	kept := false
	key = made
	if !opens(key) && repo != nil {
		key = nil
		if m, ok, err := repo.SyncState(stateKey); err != nil {
			return "", 0, nil, err
		} else if ok {
			if k, err := repokey.FromMaster(m); err == nil && opens(k) {
				key, kept = k, true
			} else if opt.Secret.IsZero() {
				return "", 0, nil, fmt.Errorf("the key this repository keeps for %s does not open it (was the store made anew?): give its passphrase or key file: %w", be.Location(), ErrNoSecret)
			}
		}
	}
	if key == nil {
		if key, err = unlock(ctx, be, opt.Secret, opens); err != nil {
			return "", 0, nil, err
		}
	}
	if !kept && repo != nil {
		if err := repo.SetSyncState(map[string][]byte{stateKey: key.Master()}); err != nil {
			return "", 0, nil, err
		}
	}
	return sc.Polynomial, cfg.Version, key, nil
}

// unlock finds the store's key object that s opens and whose master key
// opens the store's configuration.
func unlock(ctx context.Context, be remote.Backend, s repokey.Secret, opens func(*repokey.Key) bool) (*repokey.Key, error) {
	if s.IsZero() {
		return nil, fmt.Errorf("%s is encrypted: give its passphrase or key file: %w", be.Location(), ErrNoSecret)
	}
	var names []string
	if err := be.List(ctx, remote.KeysDir, "", func(o remote.Object) error {
		names = append(names, o.Name)
		return nil
	}); err != nil {
		return nil, err
	}
	for _, name := range names {
		body, err := be.Get(ctx, name)
		if err != nil {
			return nil, err
		}
		k, err := repokey.Unwrap(body, s)
		switch {
		case errors.Is(err, repokey.ErrWrongSecret):
			continue
		case err != nil:
			slog.Warn("cloudsync: a key object that does not read", "object", name, "err", err)
			continue
		case opens(k):
			return k, nil
		}
		// Left by a device that lost the race to make the store.
	}
	return nil, fmt.Errorf("%s: %w: none of its %d key objects opens with it", be.Location(), repokey.ErrWrongSecret, len(names))
}

// seal returns body as it goes to the store under name: sealed, with its
// name authenticated along (a body moved to another name does not open),
// in an encrypted store; as it is in a plain one.
func (s *Syncer) seal(name string, body []byte) []byte {
	if s.key == nil {
		return body
	}
	return s.key.Seal(make([]byte, 0, len(body)+repokey.Overhead), []byte(name), body)
}

// open returns the body of the object name read from the store.
func (s *Syncer) open(name string, body []byte) ([]byte, error) {
	if s.key == nil {
		return body, nil
	}
	b, err := s.key.Open(nil, []byte(name), body)
	if err != nil {
		return nil, fmt.Errorf("object %s: %w", name, err)
	}
	return b, nil
}

// get reads and opens the object name.
func (s *Syncer) get(ctx context.Context, name string) ([]byte, error) {
	body, err := s.be.Get(ctx, name)
	if err != nil {
		return nil, err
	}
	return s.open(name, body)
}

// nameHash is the hash that names content-named objects: SHA-256 in a
// plain store, keyed by the master key in an encrypted one, where a name
// must say nothing of what the object holds.
func (s *Syncer) nameHash() hash.Hash {
	if s.key == nil {
		return sha256.New()
	}
	return s.key.Hash()
}

// sealPiece appends piece d's bytes to a pack: sealed, with its digest
// authenticated along, in an encrypted store, so that a pull (or a ranged
// read) opens each piece alone.
func (s *Syncer) sealPiece(pack []byte, d cas.Digest, data []byte) []byte {
	if s.key == nil {
		return append(pack, data...)
	}
	return s.key.Seal(pack, []byte(d), data)
}

// openPiece returns the bytes of piece d from what a pack holds of it,
// verified against its digest; inPlace decrypts within sealed, which
// then holds the result.
func (s *Syncer) openPiece(d cas.Digest, pack string, sealed []byte, inPlace bool) ([]byte, error) {
	data := sealed
	if s.key != nil {
		var dst []byte
		if inPlace {
			dst = sealed[repokey.NonceSize:repokey.NonceSize]
		}
		var err error
		if data, err = s.key.Open(dst, []byte(d), sealed); err != nil {
			return nil, fmt.Errorf("piece %s from pack %s: %w", d, pack, err)
		}
	}
	if err := d.Verify(data); err != nil {
		return nil, fmt.Errorf("piece %s from pack %s: %w", d, pack, err)
	}
	return data, nil
}
