package remote

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"
)

// ConfigName is the name of the remote repository's configuration object,
// the first object a repository writes to an empty store.
const ConfigName = "config"

// Format names what a store holds in its configuration object.
const Format = "ledgerfs"

// Version is the newest layout of the store this code reads and writes:
// 1, plain; 2, encrypted (Config.Encryption); 3, either, whose batches may
// name a page's own chunker polynomial (a repository that wrote before it
// joined keeps its pages' chunking), which a device of layout 2 would not
// follow; 4, whose batches and changes of names carry pages' incarnations,
// by which a device of layout 4 lands them wherever the page is named,
// where one of layout 3 would go by name alone and part from it; 5, whose
// collections repack: a batch may say that pieces moved to new packs, and
// the packs they left are deleted, which a device of layout 4 would still
// read them from; 6, whose collections write checkpoints, from which a new
// device joins (a device of layout 5 would read every batch instead, and
// its collections would leave the checkpoints behind). A store is made
// with 1 or 2 and raised (Raise) before a device's first batch, to 5
// before the first repack and to 6 before the first checkpoint.
const Version = 6

// VersionOwnPolynomials is the layout whose batches may name a page's own
// polynomial.
const VersionOwnPolynomials = 3

// VersionIncarnations is the layout whose batches carry pages'
// incarnations.
const VersionIncarnations = 4

// VersionRepack is the layout whose batches may move pieces to new packs
// (a collection's repack).
const VersionRepack = 5

// VersionCheckpoints is the layout whose collections write checkpoints.
const VersionCheckpoints = 6

// KeysDir holds an encrypted store's key objects, which a device that makes
// the store writes before its configuration.
const KeysDir = "keys/"

// Encryption names how an encrypted store's objects are sealed: bodies with
// XChaCha20-Poly1305, names of content-named objects HMAC-SHA256, each
// under a key derived (HKDF-SHA256) from the master key.
const Encryption = "xchacha20-poly1305"

// Config is the remote repository's configuration object. Every device
// that shares the store chunks with its polynomial, so that the same
// content has the same pieces on each.
type Config struct {
	Format  string `json:"format"`
	Version int    `json:"version"`
	// Polynomial is the chunker polynomial, in hex (restic/chunker's
	// Pol.String), of a plain store.
	Polynomial string    `json:"polynomial,omitempty"`
	Created    time.Time `json:"created"`
	// Encryption is Encryption for an encrypted store, whose polynomial
	// is a secret of its devices, in Sealed (sealed under the master key).
	Encryption string `json:"encryption,omitempty"`
	Sealed     []byte `json:"sealed,omitempty"`
}

// Encrypted reports whether the store's objects are sealed.
func (c Config) Encrypted() bool { return c.Encryption != "" }

// Open returns the configuration of the repository in be. If be holds
// nothing yet, or only key objects (a device that makes it writes them
// first), it writes the configuration create returns, with Format, Version
// and Created filled in. It refuses a store that holds other objects and
// no configuration ("something else"), and one made in another format or by
// a newer layout.
func Open(ctx context.Context, be Backend, create func() (Config, error)) (Config, error) {
	for {
		cfg, err := readConfig(ctx, be)
		if !errors.Is(err, ErrNotFound) {
			return cfg, err
		}
		var other string
		err = be.List(ctx, "", "", func(o Object) error {
			if strings.HasPrefix(o.Name, KeysDir) {
				return nil
			}
			other = o.Name
			return errStop
		})
		if err != nil && !errors.Is(err, errStop) {
			return Config{}, err
		}
		if other == ConfigName {
			continue // made by another device since the read above
		}
		if other != "" {
			return Config{}, fmt.Errorf("remote: %s holds something else (%s, and no %s object of ledgerfs): choose an empty bucket or prefix", be.Location(), other, ConfigName)
		}
		if cfg, err = create(); err != nil {
			return Config{}, err
		}
		cfg.Format, cfg.Created = Format, time.Now().UTC()
		cfg.Version = 1
		if cfg.Encrypted() {
			cfg.Version = 2
		}
		body, err := json.MarshalIndent(cfg, "", "  ")
		if err != nil {
			return Config{}, err
		}
		err = be.Create(ctx, ConfigName, append(body, '\n'))
		if errors.Is(err, ErrExists) {
			continue // another device made it meanwhile: take theirs
		}
		if err != nil {
			return Config{}, err
		}
		return cfg, nil
	}
}

var errStop = errors.New("stop")

// Raise makes the layout of the store in be at least version, rewriting
// its configuration with nothing else changed: devices that read an older
// layout refuse it from then on. Every device that raises a store writes
// the same bytes, so two at once agree.
func Raise(ctx context.Context, be Backend, version int) error {
	body, err := be.Get(ctx, ConfigName)
	if err != nil {
		return err
	}
	cfg, err := parseConfig(be, body)
	if err != nil || cfg.Version >= version {
		return err
	}
	// Rewritten from the object's own fields, so that a field this code
	// does not know stays.
	var fields map[string]json.RawMessage
	if err := json.Unmarshal(body, &fields); err != nil {
		return err
	}
	if fields["version"], err = json.Marshal(version); err != nil {
		return err
	}
	out, err := json.MarshalIndent(fields, "", "  ")
	if err != nil {
		return err
	}
	return be.Put(ctx, ConfigName, append(out, '\n'))
}

func readConfig(ctx context.Context, be Backend) (Config, error) {
	body, err := be.Get(ctx, ConfigName)
	if err != nil {
		return Config{}, err
	}
	return parseConfig(be, body)
}

func parseConfig(be Backend, body []byte) (Config, error) {
	var cfg Config
	if err := json.Unmarshal(body, &cfg); err != nil || cfg.Format != Format {
		return Config{}, fmt.Errorf("remote: %s holds something else: its %s object is not ledgerfs's", be.Location(), ConfigName)
	}
	if cfg.Version > Version {
		return Config{}, fmt.Errorf("remote: %s holds a repository of layout %d, made by a newer ledgerfs (this one reads layout %d)", be.Location(), cfg.Version, Version)
	}
	switch {
	case cfg.Version < 1,
		cfg.Version == 1 && (cfg.Polynomial == "" || cfg.Encrypted()),
		cfg.Version == 2 && !cfg.Encrypted(),
		cfg.Encrypted() && (cfg.Encryption != Encryption || len(cfg.Sealed) == 0),
		!cfg.Encrypted() && cfg.Polynomial == "":
		return Config{}, fmt.Errorf("remote: %s: its %s object is damaged (version %d, polynomial %q, encryption %q)", be.Location(), ConfigName, cfg.Version, cfg.Polynomial, cfg.Encryption)
	}
	return cfg, nil
}
