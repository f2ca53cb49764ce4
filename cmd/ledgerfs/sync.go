package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/signal"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/dustin/go-humanize"
	"github.com/spf13/cobra"

	"github.com/ledgerfs/ledgerfs/cas"
	"github.com/ledgerfs/ledgerfs/internal/cloudsync"
	"github.com/ledgerfs/ledgerfs/internal/remote"
	"github.com/ledgerfs/ledgerfs/internal/repokey"
	"github.com/ledgerfs/ledgerfs/store"
)

func newSync() *cobra.Command {
	var rf remoteFlags
	cmd := &cobra.Command{
		Use:   "sync REPO --remote s3://BUCKET[/PREFIX]",
		Short: "Pull and merge other devices' commits from a remote, then push this repository's",
		Long: `Sync does one round of sync of an unmounted repository with a remote store
and exits: it pulls the commits other devices pushed since the last round,
with the pieces they reach, merges each page's head with them, then pushes
the commits this repository made (merges included) and the pieces they
reach. Devices that merge the same heads make the same commit, so after
each device has synced twice they all show the same head.

The remote is --remote, or the repository's (ledgerfs config REPO
remote=URL); a --remote given to a repository that has none becomes its
remote, with the --endpoint and --region given with it. REPO is made if missing: a new device joins with an empty
repository. The remote is S3-compatible object storage, s3://BUCKET[/PREFIX] (the
bucket is created if missing), or a directory, file:///PATH. Endpoint and
region come from --endpoint and --region, else AWS_ENDPOINT_URL and
AWS_REGION; credentials from AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY,
else the shared credentials file (AWS_PROFILE). A store that holds
something else than a ledgerfs repository is refused.

A new remote is encrypted: object bodies, commits, page and ledger names and
the names of content-named objects are sealed or keyed-hashed with keys
derived from a master key made at random, kept in the store wrapped by the
passphrase ($LEDGERFS_PASSWORD, $LEDGERFS_PASSWORD_FILE or --password-file)
or by a key file (--key-file). Another device joins with the same
passphrase or key file; the repository then keeps the key and needs it no
more. --no-encryption makes a new remote readable to whoever can read the
bucket.

When two devices changed the same file, the later change wins and the
other is kept next to it as NAME.sync-conflict-YYYYMMDD-HHMMSS-DEVICE.EXT; a
change beats a delete. A page made on two devices is one page.`,
		Example: "  LEDGERFS_PASSWORD_FILE=~/.ledgerfs-pass ledgerfs sync ~/.ledgerfs --remote s3://my-bucket/laptop\n" +
			"  AWS_ENDPOINT_URL=http://127.0.0.1:9000 ledgerfs sync ~/.ledgerfs --remote s3://ledgerfs\n" +
			"  ledgerfs sync ~/.ledgerfs --remote file:///media/usb/ledgerfs",
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
			defer stop()
			// A new device joins with a repository made here.
			if err := os.MkdirAll(args[0], 0o755); err != nil {
				return err
			}
			repo, err := openUnmounted(args[0], writable(), "a mounted repository does not sync yet; unmount %s first")
			if err != nil {
				return err
			}
			defer repo.Close()
			be, opt, err := rf.open(ctx, repo)
			if err != nil {
				return err
			}
			start := time.Now()
			s, err := cloudsync.New(ctx, repo, be, opt)
			if err != nil {
				return syncError(err)
			}
			defer s.Close()
			// A bar per phase on a terminal, nothing otherwise.
			var ph phases
			s.Progress = ph.update
			st, err := s.Sync(ctx)
			ph.done()
			if err != nil {
				return err
			}
			s.Close() // the pieces it fetched are stored
			if err := repo.Close(); err != nil {
				return err
			}
			fmt.Fprintf(cmd.OutOrStdout(), "synced with %s as device %s in %s: pulled %d commits (%d pieces, %s), %d merges, %d conflict files; pushed %d commits (%d pieces in %d packs, %s)\n",
				be.Location(), s.Device(), time.Since(start).Round(time.Millisecond),
				st.CommitsDown, st.PiecesDown, humanize.IBytes(uint64(st.BytesDown)), st.Merges, st.Conflicts,
				st.CommitsUp, st.PiecesUp, st.PacksUp, humanize.IBytes(uint64(st.BytesUp)))
			return nil
		},
	}
	rf.register(cmd)
	return cmd
}

// remoteFlags say where a remote store is, and what unlocks it.
type remoteFlags struct {
	url, endpoint, region string
	pathStyle             bool
	passwordFile, keyFile string
	plain                 bool
	fetchTimeout          time.Duration // a read's wait for the remote
}

// envPassword holds the passphrase of an encrypted store, as restic's
// RESTIC_PASSWORD does; envPasswordFile names a file that holds it.
const (
	envPassword     = "LEDGERFS_PASSWORD"
	envPasswordFile = "LEDGERFS_PASSWORD_FILE"
)

// options returns what unlocks the store: the key file's bytes, else the
// passphrase of --password-file, $LEDGERFS_PASSWORD_FILE or
// $LEDGERFS_PASSWORD (a file's trailing newline is not part of it).
func (f *remoteFlags) options() (cloudsync.Options, error) {
	opt := cloudsync.Options{Plain: f.plain, FetchTimeout: f.fetchTimeout}
	file := f.passwordFile
	if file == "" {
		file = os.Getenv(envPasswordFile)
	}
	var err error
	opt.Secret, err = readSecret(f.keyFile, file)
	if err == nil && opt.Secret.IsZero() {
		opt.Secret.Passphrase = []byte(os.Getenv(envPassword))
	}
	return opt, err
}

// readSecret reads a secret: the bytes of keyFile, else the passphrase in
// passwordFile (its trailing newline is not part of it); neither named, none.
func readSecret(keyFile, passwordFile string) (repokey.Secret, error) {
	var s repokey.Secret
	switch {
	case keyFile != "":
		b, err := os.ReadFile(keyFile)
		if err != nil {
			return s, fmt.Errorf("key file: %w", err)
		}
		if len(b) < repokey.MinKeyFile {
			return s, fmt.Errorf("key file %s holds %d bytes; a key file holds at least %d (head -c 32 /dev/urandom > FILE)", keyFile, len(b), repokey.MinKeyFile)
		}
		s.KeyFile = b
	case passwordFile != "":
		b, err := os.ReadFile(passwordFile)
		if err != nil {
			return s, fmt.Errorf("password file: %w", err)
		}
		b = bytes.TrimRight(b, "\r\n")
		if len(b) == 0 {
			return s, fmt.Errorf("password file %s is empty", passwordFile)
		}
		s.Passphrase = b
	}
	return s, nil
}

// syncError adds to an error of a store that wants a secret where to give
// one.
func syncError(err error) error {
	if errors.Is(err, cloudsync.ErrNoSecret) {
		return fmt.Errorf("%w (give it with $%s, --password-file FILE or --key-file FILE; a new store is unencrypted only with --no-encryption)", err, envPassword)
	}
	return err
}

func (f *remoteFlags) register(cmd *cobra.Command) {
	fl := cmd.Flags()
	fl.StringVar(&f.url, "remote", "", "the remote store: s3://BUCKET[/PREFIX] or file:///PATH")
	fl.StringVar(&f.endpoint, "endpoint", "", "the S3 server, http(s)://HOST[:PORT] (default $AWS_ENDPOINT_URL, else AWS)")
	fl.StringVar(&f.region, "region", "", "the bucket's region (default $AWS_REGION)")
	fl.BoolVar(&f.pathStyle, "path-style", false, "path-style requests (http://HOST/BUCKET/KEY), as most self-hosted servers need; the default with an endpoint other than AWS")
	fl.StringVar(&f.passwordFile, "password-file", "", "a file that holds the passphrase of the remote's key (default $"+envPasswordFile+", else $"+envPassword+"); needed to make an encrypted remote and to join one")
	fl.StringVar(&f.keyFile, "key-file", "", "a file of at least 32 random bytes that holds the remote's key instead of a passphrase (head -c 32 /dev/urandom > FILE)")
	fl.DurationVar(&f.fetchTimeout, "fetch-timeout", cloudsync.DefaultFetchTimeout, "how long a read waits for content from the remote before it fails (EIO)")
	fl.BoolVar(&f.plain, "no-encryption", false, "make a new remote unencrypted: its objects, names and contents readable to whoever can read the bucket")
}

// fromRepository fills what the flags leave unset from the repository's
// settings, and keeps a remote given to a repository that has none.
func (f *remoteFlags) fromRepository(repo *store.Repository) error {
	kept, err := repo.Setting(store.SettingRemote)
	if err != nil {
		return err
	}
	switch {
	case f.url == "" && kept == "":
		return fmt.Errorf("no remote: give --remote s3://BUCKET[/PREFIX] or file:///PATH, or keep one with ledgerfs config REPO remote=URL")
	case f.url == "":
		f.url = kept
	case kept == "":
		if err := f.check(); err != nil {
			return err
		}
		if err := repo.SetSetting(store.SettingRemote, f.url); err != nil {
			return err
		}
	}
	for _, s := range []struct {
		v    *string
		name string
	}{{&f.endpoint, store.SettingRemoteEndpoint}, {&f.region, store.SettingRemoteRegion}} {
		v, err := repo.Setting(s.name)
		if err != nil {
			return err
		}
		switch {
		case *s.v == "":
			*s.v = v
		case v == "" && kept == "":
			// Kept with the remote they came with.
			if err := repo.SetSetting(s.name, *s.v); err != nil {
				return err
			}
		}
	}
	return nil
}

// open connects to repo's remote store, as the flags and the repository's
// settings name it, and says what unlocks it.
func (f *remoteFlags) open(ctx context.Context, repo *store.Repository) (remote.Backend, cloudsync.Options, error) {
	if err := f.fromRepository(repo); err != nil {
		return nil, cloudsync.Options{}, err
	}
	be, err := f.backend(ctx)
	if err != nil {
		return nil, cloudsync.Options{}, err
	}
	opt, err := f.options()
	return be, opt, err
}

// check checks the remote's URL.
func (f *remoteFlags) check() error {
	if dir, ok := strings.CutPrefix(f.url, "file://"); ok {
		if !strings.HasPrefix(dir, "/") {
			return fmt.Errorf("remote %s: want file:///ABSOLUTE/PATH", f.url)
		}
		return nil
	}
	_, err := remote.ParseURL(f.url)
	return err
}

// backend connects to the remote store the flags name.
func (f *remoteFlags) backend(ctx context.Context) (remote.Backend, error) {
	if err := f.check(); err != nil {
		return nil, err
	}
	if dir, ok := strings.CutPrefix(f.url, "file://"); ok {
		return remote.NewDir(dir)
	}
	cfg, err := remote.ParseURL(f.url)
	if err != nil {
		return nil, err
	}
	cfg.Endpoint, cfg.Region = f.endpoint, f.region
	endpoint := cfg.Endpoint
	if endpoint == "" {
		endpoint = os.Getenv("AWS_ENDPOINT_URL")
	}
	cfg.PathStyle = f.pathStyle || endpoint != "" && !strings.Contains(endpoint, "amazonaws.com")
	return remote.NewS3(ctx, cfg)
}

// remoteFetcher connects to the repository's remote at the first piece a
// read needs from it (store.Fetcher): an unmounted repository then reads
// what a sync left in the remote, as ledgerfs cat does.
type remoteFetcher struct {
	repo *store.Repository
	once sync.Once
	s    atomic.Pointer[cloudsync.Syncer] // set once connected
	err  error
}

// fetchFromRemote makes repo fetch from its remote, if it keeps one, until
// the returned function is called.
func fetchFromRemote(repo *store.Repository) (stop func(), err error) {
	if kept, err := repo.Setting(store.SettingRemote); err != nil || kept == "" {
		return func() {}, err
	}
	f := &remoteFetcher{repo: repo}
	repo.SetFetcher(f)
	return func() {
		repo.DropFetcher(f)
		if s := f.s.Load(); s != nil {
			s.Close()
		}
	}, nil
}

func (f *remoteFetcher) Fetch(p *store.Page, d cas.Digest, ahead int64) ([]byte, error) {
	f.once.Do(func() {
		var rf remoteFlags
		if f.err = rf.fromRepository(f.repo); f.err != nil {
			return
		}
		ctx, cancel := context.WithTimeout(context.Background(), cloudsync.DefaultFetchTimeout)
		defer cancel()
		be, err := rf.backend(ctx)
		if err != nil {
			f.err = err
			return
		}
		opt, err := rf.options()
		if err != nil {
			f.err = err
			return
		}
		var s *cloudsync.Syncer
		if s, f.err = cloudsync.New(ctx, f.repo, be, opt); f.err == nil {
			f.s.Store(s)
		}
	})
	if f.err != nil {
		return nil, syncError(f.err)
	}
	return f.s.Load().Fetch(p, d, ahead)
}

// Pending returns what the syncer's fetches hold unstored, once it
// connected (store.Fetcher).
func (f *remoteFetcher) Pending(p *store.Page, d cas.Digest, ahead int64) ([]byte, bool) {
	if s := f.s.Load(); s != nil {
		return s.Pending(p, d, ahead)
	}
	return nil, false
}
