package cloudsync

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	lru "github.com/hashicorp/golang-lru/v2"
	"github.com/restic/chunker"

	"github.com/ledgerfs/ledgerfs/internal/history"
	"github.com/ledgerfs/ledgerfs/internal/piececache"
	"github.com/ledgerfs/ledgerfs/internal/remote"
	"github.com/ledgerfs/ledgerfs/internal/repokey"
	"github.com/ledgerfs/ledgerfs/store"
)

// DefaultPackSize is the size pieces are packed to before a pack goes up:
// a GiB is about 128 requests, not the 65,000 of one per chunk.
const DefaultPackSize = 8 << 20

// A Syncer pushes a repository's new commits to a remote store and pulls
// and merges other devices'. One process owns the repository; the Syncer
// is not safe for concurrent use, but for Changed.
type Syncer struct {
	repo   *store.Repository
	be     remote.Backend
	key    *repokey.Key // seals what goes to an encrypted store; nil: plain
	device string
	// pol is the store's chunker polynomial: a batch of a page chunked
	// with another names it (pageBatch.Polynomial).
	pol chunker.Pol
	// raised is the store's layout as far as this device knows, once at
	// least what its batches need (remote.Raise): they carry pages'
	// incarnations, and may name a page's own polynomial; 0 before.
	raised atomic.Int64
	// joined: this device is past joining (newDevice was false once; it
	// never becomes true again), so a pull asks no more.
	joined atomic.Bool
	// lazy leaves values to be fetched when read (Fetch): a pull fetches
	// commits and tree nodes only.
	lazy         bool
	fetchTimeout time.Duration
	flightMu     sync.Mutex
	flights      []*fetchFlight // Fetch's reads under way
	// nflights is len(flights), for Pending to answer a read of a page
	// that no fetch serves without taking flightMu.
	nflights atomic.Int32
	// settling counts the Settle calls under way: fetches store what
	// they bring at once meanwhile.
	settling atomic.Int32
	// keptFor bounds how long a fetch keeps its pieces in memory for its
	// reader (defaultKeptFor).
	keptFor time.Duration
	bg      sync.WaitGroup // their goroutines (Close waits)
	// packs caches the pieces of packs read lately (packIndex): a stream
	// looks its pack up at every piece it lacks.
	packs *lru.Cache[string, []pieceRef]
	// nexts caches the pack after a pack (nextPack), "" for none: a
	// stream looks it up at every Fetch that reaches a pack's end.
	nexts   *lru.Cache[string, string]
	cache   *piececache.Cache // Options.Cache
	fetched atomic.Int64      // bytes Fetch read from the remote
	// missed counts the Fetch calls that found no fetch under way to wait
	// for, and started one: a read in order that its fetches ahead did
	// not keep ahead of.
	missed   atomic.Int64
	packSize int
	// inFlight bounds the packs uploading at once, and those a repack
	// reads ahead; 0 means packsInFlight and repackReads.
	// The simulation uploads one at a time: which of several requests
	// run before a failed one cancels the rest is up to the scheduler,
	// and a run must follow from its seed.
	inFlight int
	// repackSmall is how many small packs a collection repacks at least;
	// 0 means repackSmallAtLeast. The simulation repacks them at every
	// collection.
	repackSmall int
	// Progress, if set, is told of each phase's progress: "push LEDGER/PAGE"
	// with the pieces packed of those to go up, "pull LEDGER/PAGE" with the
	// pieces fetched (total 0: not known ahead).
	Progress func(phase string, done, total int)
	// Landed, if set, is told of each page whose head a pull moved, after
	// the move: a mount invalidates what the kernel holds of it.
	Landed func(ledger, page string, from, to *store.Commit)
	// Names, if set, changes ledger and page names as other devices did;
	// else the repository does, unrecorded.
	Names Names

	// Watched says the owner calls Changed for every commit of the
	// repository (a mount does, from its journals): after its first push,
	// which visits every page, a push visits only the pages changed since,
	// and an idle round opens no page.
	Watched bool

	mu        sync.Mutex         // guards changed and moved
	changed   map[[2]string]bool // pages to push, when Watched and pushedAll
	pushedAll bool               // a push visited every page
	moved     map[[2]string]bool // pages whose heads pulls moved, to index

	// now is the clock of the feed's and the full scans' schedule
	// (time.Now; a simulation compresses time).
	now func() time.Time

	noted  time.Time // when a round was last recorded
	failed bool      // the last round failed

	scannedAt time.Time // the last full scan of the devices' logs
	lookedAt  time.Time // the last look at the change feed (or scan)

	absorbedAt time.Time    // the last read of the collection records
	kept       *keptCommits // what the newest record keeps of old batches
}

func (s *Syncer) progress(phase string, done, total int) {
	if s.Progress != nil {
		s.Progress(phase, done, total)
	}
}

// Options say how a Syncer reaches an encrypted store, and what it
// fetches when.
type Options struct {
	// Secret unlocks an encrypted store's master key when the repository
	// keeps none that opens it (a device joining), and wraps the master
	// key of a store made here.
	Secret repokey.Secret
	// Plain makes a store made here unencrypted. A store that exists is
	// what it is.
	Plain bool
	// FetchAll makes a pull fetch every piece its commits reach; else
	// values are fetched when first read (Syncer.Fetch).
	FetchAll bool
	// FetchTimeout bounds a read's wait for a piece; 0 means
	// DefaultFetchTimeout.
	FetchTimeout time.Duration
	// Cache, if set, keeps what reads fetch instead of the page dbs:
	// bounded, least recently used dropped first (a mount's
	// --cache-size). Pinned pieces go in the page dbs whatever it says.
	Cache *piececache.Cache
}

// packsCached bounds the packs whose pieces a syncer keeps in memory.
const packsCached = 64

// Stats are what a Sync moved.
type Stats struct {
	// CommitsUp and PiecesUp were uploaded, in BytesUp of packs; PacksUp
	// and BatchesUp count the objects written.
	CommitsUp, PiecesUp, PacksUp, BatchesUp int
	BytesUp                                 int64
	// CommitsDown and PiecesDown were fetched, BytesDown of them;
	// Merges were made, Conflicts kept as conflict files.
	CommitsDown, PiecesDown, Merges, Conflicts int
	BytesDown                                  int64
	// Waiting counts batches a pull left to apply later (their pages
	// busy, or building on commits no batch brought yet).
	Waiting int
}

// New connects repo to the store in be, and makes the syncer fetch the
// pieces repo's pages lack (see Fetch): it writes the store's
// configuration if the store is empty (encrypted, unless opt says plain),
// unlocks an encrypted store's key, makes the store's chunker polynomial
// the repository's for new pages (the pages made before keep theirs, so
// the same content makes the same pieces on every device that writes a
// page), and registers the repository's device.
func New(ctx context.Context, repo *store.Repository, be remote.Backend, opt Options) (*Syncer, error) {
	remotePol, version, key, err := openStore(ctx, repo, be, opt, true)
	if err != nil {
		return nil, err
	}
	storePol, err := strconv.ParseUint(remotePol, 0, 64)
	if err != nil || !chunker.Pol(storePol).Irreducible() {
		return nil, fmt.Errorf("cloudsync: %s chunks with polynomial %q, which is not one", be.Location(), remotePol)
	}
	if repo.Polynomial() != chunker.Pol(storePol) {
		// New pages chunk as the store's devices do; pages made here
		// before keep their own chunking, and their batches say so.
		kept, err := repo.AdoptPolynomial(chunker.Pol(storePol))
		if err != nil {
			return nil, err
		}
		if kept > 0 {
			slog.Info("joined a store that chunks with another polynomial: the pages made here before keep their own", "remote", be.Location(), "pages", kept)
		}
	}
	device, err := repo.DeviceID()
	if err != nil {
		return nil, err
	}
	if v, err := repo.Setting(store.SettingFetch); err != nil {
		return nil, err
	} else if v == "all" {
		opt.FetchAll = true
	}
	packs, err := lru.New[string, []pieceRef](packsCached)
	if err != nil {
		return nil, err
	}
	nexts, err := lru.New[string, string](packsCached)
	if err != nil {
		return nil, err
	}
	s := &Syncer{repo: repo, be: be, key: key, device: device, pol: chunker.Pol(storePol), packSize: DefaultPackSize, now: time.Now, keptFor: defaultKeptFor,
		lazy: !opt.FetchAll, fetchTimeout: cmp.Or(opt.FetchTimeout, DefaultFetchTimeout), packs: packs, nexts: nexts, cache: opt.Cache}
	if version >= remote.VersionIncarnations {
		s.raised.Store(int64(version))
	}
	body, err := json.Marshal(struct {
		Created time.Time `json:"created"`
	}{time.Now().UTC()})
	if err != nil {
		return nil, err
	}
	name := deviceName(device)
	if err := be.Create(ctx, name, s.seal(name, body)); err != nil && !errors.Is(err, remote.ErrExists) {
		return nil, err
	}
	repo.SetFetcher(s)
	return s, nil
}

// Changed tells a Watched syncer that ledger/page has a new commit to
// push. Safe to call from any goroutine.
func (s *Syncer) Changed(ledger, page string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.changed == nil {
		s.changed = map[[2]string]bool{}
	}
	s.changed[[2]string{ledger, page}] = true
}

// toPush takes the pages a push visits: every page, or for a Watched syncer
// that pushed every page once, those changed since.
func (s *Syncer) toPush() ([][2]string, error) {
	if !s.Watched || !s.pushedAll {
		return s.pages()
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make([][2]string, 0, len(s.changed))
	for lp := range s.changed {
		out = append(out, lp)
	}
	clear(s.changed)
	slices.SortFunc(out, func(a, b [2]string) int { return cmp.Or(strings.Compare(a[0], b[0]), strings.Compare(a[1], b[1])) })
	return out, nil
}

// Device is the repository's device id.
func (s *Syncer) Device() string { return s.device }

// Sync pulls and merges what other devices pushed, then pushes what this
// device committed (its merges included): one round, as `ledgerfs sync`
// does.
func (s *Syncer) Sync(ctx context.Context) (Stats, error) {
	var st Stats
	err := s.Pull(ctx, &st)
	if err == nil {
		err = s.Push(ctx, &st)
	}
	s.indexMoved(ctx)
	switch {
	case err != nil:
		s.note(StateError, err)
		s.failed = true
	case st != Stats{} || s.failed || time.Since(s.noted) > noteEvery:
		// An idle mount's rounds are recorded once a minute, not every
		// few seconds: each is a write of the repository db.
		s.note(StatePulledAt, nil)
		s.note(StatePushedAt, nil)
		s.noted, s.failed = time.Now(), false
	}
	return st, err
}

// landed notes a page whose head a pull moved, and tells Landed.
func (s *Syncer) landed(ledger, page string, from, to *store.Commit) {
	s.mu.Lock()
	if s.moved == nil {
		s.moved = map[[2]string]bool{}
	}
	s.moved[[2]string{ledger, page}] = true
	s.mu.Unlock()
	if s.Landed != nil {
		s.Landed(ledger, page, from, to)
	}
}

// indexMoved records the versions of the commits pulls brought in their
// pages' version files (history.IndexPage), as a mount's landings record
// its own: the first listing of a name's versions then reads them, where
// it walked every pulled commit (a device's first pull brings a page's
// whole history: 6 s for 20,000 commits). It runs after the push, which
// it would delay. A failure costs that listing its walk, no more.
func (s *Syncer) indexMoved(ctx context.Context) {
	s.mu.Lock()
	pages := s.moved
	s.moved = nil
	s.mu.Unlock()
	for n := range pages {
		if ctx.Err() != nil {
			return
		}
		if err := history.IndexPage(s.repo, n[0], n[1]); err != nil {
			slog.Warn("index the versions a pull brought; the first listing walks them", "page", n[0]+"/"+n[1], "err", err)
		}
	}
}

// noteEvery is how often rounds that moved nothing are recorded.
const noteEvery = time.Minute

// The repository's sync state rows that say how the last rounds went (see
// ledgerfs status): the times, RFC 3339, of the last pull and push that
// succeeded, and the last error with its time.
const (
	StatePulledAt = "pulled_at"
	StatePushedAt = "pushed_at"
	StateError    = "last_error"
)

// note records the time of a round that succeeded, or its error.
func (s *Syncer) note(key string, err error) { note(s.repo, key, err) }

// NoteError records err as the repository's last sync error (see
// StateError): one that came before a Syncer could be made, such as a
// remote that cannot be reached.
func NoteError(repo *store.Repository, err error) { note(repo, StateError, err) }

func note(repo *store.Repository, key string, err error) {
	v := time.Now().UTC().Format(time.RFC3339)
	kv := map[string][]byte{key: []byte(v)}
	if err != nil {
		kv[key] = []byte(v + " " + err.Error())
	} else if key == StatePushedAt {
		kv[StateError] = nil // the round went through: no error stands
	}
	if werr := repo.SetSyncState(kv); werr != nil {
		slog.Warn("cloudsync: record the round", "err", werr)
	}
}

// pages lists every page of the repository as ledger/page pairs.
func (s *Syncer) pages() ([][2]string, error) { return repoPages(s.repo) }

// repoPages lists the pages of repo, ledger by ledger.
func repoPages(repo *store.Repository) ([][2]string, error) {
	ledgers, err := repo.Ledgers()
	if err != nil {
		return nil, err
	}
	var out [][2]string
	for _, l := range ledgers {
		ps, err := repo.Pages(l)
		if err != nil {
			return nil, err
		}
		for _, p := range ps {
			out = append(out, [2]string{l, p})
		}
	}
	return out, nil
}
