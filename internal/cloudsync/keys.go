package cloudsync

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/ledgerfs/ledgerfs/internal/remote"
	"github.com/ledgerfs/ledgerfs/internal/repokey"
	"github.com/ledgerfs/ledgerfs/store"
)

// A KeyObject is one of an encrypted store's key objects: the master key
// wrapped under one passphrase or key file, as restic's keys/ are. Any of
// them unlocks the store for a device that joins.
type KeyObject struct {
	ID      string    // the object's name under keys/
	Kind    string    // repokey.KindPassphrase or repokey.KindKeyFile
	Created time.Time // when it was made
	// Opens reports whether the secret given opens it.
	Opens bool
	// Err says why the object does not read, if it does not.
	Err error
}

// ErrLastKey refuses to remove the only key object that opens a store: no
// device could join it after that.
var ErrLastKey = errors.New("it is the only key object that opens the store")

// ErrPlain reports a key command for a store that is not encrypted.
var ErrPlain = errors.New("the store is not encrypted: it has no keys")

// Keys lists the key objects of the encrypted store be, in name order,
// marking those opt.Secret opens (none without one). It needs no secret
// if repo keeps the store's key; repo may be nil.
func Keys(ctx context.Context, repo *store.Repository, be remote.Backend, opt Options) ([]KeyObject, error) {
	if _, err := storeKey(ctx, repo, be, opt); err != nil && !errors.Is(err, ErrNoSecret) {
		return nil, err
	}
	return listKeys(ctx, be, opt.Secret)
}

// listKeys lists the key objects of be, marking those secret opens.
func listKeys(ctx context.Context, be remote.Backend, secret repokey.Secret) ([]KeyObject, error) {
	var out []KeyObject
	err := be.List(ctx, remote.KeysDir, "", func(o remote.Object) error {
		out = append(out, KeyObject{ID: strings.TrimPrefix(o.Name, remote.KeysDir)})
		return nil
	})
	if err != nil {
		return nil, err
	}
	for i := range out {
		k := &out[i]
		body, err := be.Get(ctx, remote.KeysDir+k.ID)
		if err != nil {
			return nil, err
		}
		if k.Kind, k.Created, k.Err = repokey.Describe(body); k.Err != nil || secret.IsZero() {
			continue
		}
		_, err = repokey.Unwrap(body, secret)
		k.Opens = err == nil
	}
	return out, nil
}

// AddKey wraps the master key of the encrypted store be under secret and
// adds it as a new key object, whose id it returns. The master key is the
// one repo keeps, else the one opt.Secret opens.
func AddKey(ctx context.Context, repo *store.Repository, be remote.Backend, opt Options, secret repokey.Secret) (string, error) {
	if secret.IsZero() {
		return "", fmt.Errorf("no new passphrase or key file: %w", ErrNoSecret)
	}
	key, err := storeKey(ctx, repo, be, opt)
	if err != nil {
		return "", err
	}
	return addKey(ctx, be, key, secret)
}

// addKey adds a key object that keeps key under secret.
func addKey(ctx context.Context, be remote.Backend, key *repokey.Key, secret repokey.Secret) (string, error) {
	wrapped, err := repokey.Wrap(key, secret)
	if err != nil {
		return "", err
	}
	var id [16]byte
	rand.Read(id[:])
	name := hex.EncodeToString(id[:])
	if err := be.Create(ctx, remote.KeysDir+name, wrapped); err != nil {
		return "", fmt.Errorf("add a key object to %s: %w", be.Location(), err)
	}
	return name, nil
}

// RemoveKey removes the key object whose id starts with prefix from the
// encrypted store be. It refuses an ambiguous prefix, and the store's last
// key object that opens it: a device that joins needs one. Which others
// open the store it cannot tell without their secrets; the one it removes
// is checked against the store's key when opt.Secret or repo unlock it.
func RemoveKey(ctx context.Context, repo *store.Repository, be remote.Backend, opt Options, prefix string) (string, error) {
	keys, err := Keys(ctx, repo, be, opt)
	if err != nil {
		return "", err
	}
	var match []KeyObject
	for _, k := range keys {
		if strings.HasPrefix(k.ID, prefix) {
			match = append(match, k)
		}
	}
	switch {
	case prefix == "" || len(match) == 0:
		return "", fmt.Errorf("%s has no key object %q (ledgerfs key list shows them)", be.Location(), prefix)
	case len(match) > 1:
		return "", fmt.Errorf("%q names %d key objects of %s: give more of its id", prefix, len(match), be.Location())
	}
	readable := 0
	for _, k := range keys {
		if k.Err == nil {
			readable++
		}
	}
	if match[0].Err == nil && readable == 1 {
		return "", fmt.Errorf("remove key object %s of %s: %w", match[0].ID, be.Location(), ErrLastKey)
	}
	if err := be.Delete(ctx, remote.KeysDir+match[0].ID); err != nil {
		return "", fmt.Errorf("remove key object %s of %s: %w", match[0].ID, be.Location(), err)
	}
	return match[0].ID, nil
}

// ChangeKey replaces the key objects opt.Secret opens with one kept under
// secret: the new one is added first, so a failure between the two steps
// leaves both. Devices that joined keep working: their repositories keep
// the master key, which does not change. The store is unlocked once, by
// opt.Secret alone: it must open the store itself, not only a key object
// a device left behind.
func ChangeKey(ctx context.Context, be remote.Backend, opt Options, secret repokey.Secret) (added string, removed []string, err error) {
	if opt.Secret.IsZero() {
		return "", nil, fmt.Errorf("the current passphrase or key file names the key object to replace: %w", ErrNoSecret)
	}
	if secret.IsZero() {
		return "", nil, fmt.Errorf("no new passphrase or key file: %w", ErrNoSecret)
	}
	key, err := storeKey(ctx, nil, be, opt)
	if err != nil {
		return "", nil, err
	}
	keys, err := listKeys(ctx, be, opt.Secret)
	if err != nil {
		return "", nil, err
	}
	if added, err = addKey(ctx, be, key, secret); err != nil {
		return "", nil, err
	}
	for _, k := range keys {
		if !k.Opens {
			continue
		}
		if err := be.Delete(ctx, remote.KeysDir+k.ID); err != nil {
			return added, removed, fmt.Errorf("remove the old key object %s of %s (the new one, %s, is in place): %w", k.ID, be.Location(), added, err)
		}
		removed = append(removed, k.ID)
	}
	return added, removed, nil
}

// storeKey unlocks the encrypted store be with the key repo keeps (repo
// may be nil) or opt.Secret: ErrPlain for a store that is not encrypted.
func storeKey(ctx context.Context, repo *store.Repository, be remote.Backend, opt Options) (*repokey.Key, error) {
	_, _, key, err := openStore(ctx, repo, be, opt, false)
	if err != nil {
		return nil, err
	}
	if key == nil {
		return nil, fmt.Errorf("%s: %w", be.Location(), ErrPlain)
	}
	return key, nil
}
