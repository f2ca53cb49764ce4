package remote

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"
)

// ConfigName is the name of the remote repository's configuration object,
// the first object a repository writes to an empty store.
const ConfigName = "config"

// Format names what a store holds in its configuration object.
const Format = "ledgerfs"

// Version is the layout of the store this code reads and writes.
const Version = 1

// Config is the remote repository's configuration object. Every device
// that shares the store chunks with its polynomial, so that the same
// content has the same pieces on each.
type Config struct {
	Format  string `json:"format"`
	Version int    `json:"version"`
	// Polynomial is the chunker polynomial, in hex (restic/chunker's
	// Pol.String).
	Polynomial string    `json:"polynomial"`
	Created    time.Time `json:"created"`
}

// Open returns the configuration of the repository in be, writing it with
// polynomial pol if be holds nothing yet. It refuses a store that holds
// other objects and no configuration ("something else"), and one made in
// another format or by a newer layout.
func Open(ctx context.Context, be Backend, pol string) (Config, error) {
	for {
		cfg, err := readConfig(ctx, be)
		if !errors.Is(err, ErrNotFound) {
			return cfg, err
		}
		var other string
		err = be.List(ctx, "", "", func(o Object) error {
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
		cfg = Config{Format: Format, Version: Version, Polynomial: pol, Created: time.Now().UTC()}
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

func readConfig(ctx context.Context, be Backend) (Config, error) {
	body, err := be.Get(ctx, ConfigName)
	if err != nil {
		return Config{}, err
	}
	var cfg Config
	if err := json.Unmarshal(body, &cfg); err != nil || cfg.Format != Format {
		return Config{}, fmt.Errorf("remote: %s holds something else: its %s object is not ledgerfs's", be.Location(), ConfigName)
	}
	if cfg.Version > Version {
		return Config{}, fmt.Errorf("remote: %s holds a repository of layout %d, made by a newer ledgerfs (this one reads layout %d)", be.Location(), cfg.Version, Version)
	}
	if cfg.Version < 1 || cfg.Polynomial == "" {
		return Config{}, fmt.Errorf("remote: %s: its %s object is damaged (version %d, polynomial %q)", be.Location(), ConfigName, cfg.Version, cfg.Polynomial)
	}
	return cfg, nil
}
