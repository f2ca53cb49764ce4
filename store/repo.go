// Package store keeps a repository of ledgers and pages on disk: one Badger
// db per page, whose rows follow Ledger's documented schema, and one
// repository db (page_usage_db) for page usage and names.
//
// Layer: above btree, cas and format, below journal and history. It is the
// only package that opens Badger: every row is read and written through
// its methods, whose invariants journals.go states.
package store

import (
	"bytes"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/ledgerfs/ledgerfs/internal/badgerdb"

	"github.com/dgraph-io/badger/v4"
	"github.com/hashicorp/golang-lru/v2/simplelru"
	"github.com/restic/chunker"

	"github.com/ledgerfs/ledgerfs/cas"
	"github.com/ledgerfs/ledgerfs/internal/btree"
)

// SerializationVersion is the on-disk format version, the first path
// component under the repository directory.
const SerializationVersion = "1"

// Rows of the repository db. opened/ is Ledger's; the others are ledgerfs's
// so that listing ledgers and pages needs no scan of page dbs.
const (
	prefixOpened  = "opened/"
	prefixLedgers = "ledgers/"
	prefixPages   = "pages/"
	keyPolynomial = "repository/chunker_polynomial"
	keyFormat     = "repository/format"
	// keyCompression says how new pieces are stored: "zstd" (and when
	// the row is missing) or "none".
	keyCompression = "repository/compression"
)

// Format is the version of what page dbs hold that this code reads and
// writes, stored in the repository db. Format 1 placed B-tree entries by the
// zero bytes at the high end of their key's hash, where Ledger counts from
// the low end; its trees, and so every tree node and commit id, differ from
// Ledger's for the same entries, and this code cannot edit them.
//
// Format 3 adds pieces stored zstd-compressed, marked in the row's
// user-meta byte (see compress.go): format 2's rows are format 3's, so a
// format 2 repository is given the new number when opened for changes;
// code that reads format 2 only refuses it then, rather than read
// compressed bytes as a piece.
const Format = 3

// ErrFormat is the error of opening a repository of another format.
var ErrFormat = errors.New("repository format not supported")

// Errors of repository operations.
var (
	ErrNotFound = errors.New("not found")
	ErrExists   = errors.New("already exists")
	ErrNotEmpty = errors.New("not empty")
	ErrLocked   = errors.New("repository is in use by another process (is it mounted?)")
	// ErrNotRepository is the error of opening a directory that holds
	// files but no repository: a mistyped path must not be written into.
	ErrNotRepository = errors.New("not a ledgerfs repository (it is not empty and has no page_usage_db)")
)

// Options configure a repository.
type Options struct {
	// MaxIdlePages is how many pages stay open with no user (LRU); 0 means 16.
	MaxIdlePages int
	// NodeCacheBytes bounds the decoded tree nodes kept in memory; 0 means
	// 16 MiB. Most of what a busy page leaves there are nodes its own
	// commits replaced: after 100,000 unlinks the cache held 19 MiB of
	// them while the next file was written.
	NodeCacheBytes int64
	// IndexCacheBytes bounds the decoded index pieces of values kept in
	// memory (cas.IndexCache); 0 means 4 MiB, the index of random reads
	// over about 600 MiB of values.
	IndexCacheBytes int64
	// ReadOnly opens every db read-only.
	ReadOnly bool
	// OnOpen runs when a page db is opened, before anyone uses it: the
	// journal package recovers journals there.
	OnOpen func(*Page) error
	// OnClose runs before a page db is closed: the journal package commits
	// what is queued there.
	OnClose func(*Page) error
	// Reserve is the free space kept on the repository's filesystem for
	// Badger's own writes (see space); 0 means 5 % of the filesystem,
	// between MinReserve and MaxDefaultReserve.
	Reserve uint64
	// Trim drops the pages of the dbs' mapped files from the process once
	// its RSS passes a budget (badgerdb.Trimmer). Off by default: those
	// pages are page cache, which the kernel reclaims, and the memory
	// bound is the anonymous memory (Go's heap, Badger's allocations);
	// trimming made a cold read fetch 1.26–1.29 bytes from the disk per
	// byte returned, paging out what read-ahead had just brought in.
	Trim bool
	// CloseTimeout bounds the wait for one db to close; 0 means 30 s.
	// Badger retries a memtable flush that fails (its directory deleted,
	// the disk full) for ever, inside Close.
	CloseTimeout time.Duration
	// Now stamps the name changes recorded for sync; nil means time.Now.
	// The sync simulation runs its devices on one simulated clock, as
	// their commits (journal.Engine.StampWith).
	Now func() time.Time
	// Rand is where new page incarnations come from; nil means
	// crypto/rand. The sync simulation draws them from its seed, so that
	// a run replays.
	Rand io.Reader
}

// Repository is an open repository directory.
type Repository struct {
	created bool // Open made it (see Created)
	dir     string
	opts    Options
	db      *badger.DB
	pol     atomic.Uint64 // the chunker.Pol new pages are chunked with
	// compress stores new pieces zstd-compressed (keyCompression).
	compress atomic.Bool
	// nodes caches decoded tree nodes for every page, indexes the index
	// pieces of values.
	nodes    *btree.NodeCache
	indexes  *cas.IndexCache
	cutters  *cas.Cutters // chunk the values of every page's writers
	trim     *badgerdb.Trimmer
	stopTrim chan struct{}
	ra       *badgerdb.ReadAheads
	// loops are the repository's goroutines (the trimmer, the
	// read-ahead worker): Close waits for them.
	loops sync.WaitGroup
	space *badgerdb.Space // nil when read-only

	mu   sync.Mutex
	open map[string]*Page // by ledger + "/" + page
	// unused, on mu, is broadcast when a page's last user releases it
	// (WaitUnused); made on first use.
	unused *sync.Cond
	// abandoned are the closes given up on (closeBadger): each gets the
	// db's Close result if it ever ends.
	abandoned []chan error
	counters  counters
	idle      *simplelru.LRU[string, *Page]
	evicted   []*Page                  // dropped from idle, to close after unlocking
	closing   map[string]chan struct{} // pages being closed; reopen waits
	// pruned counts deletions of commits, in any page: views of history
	// cached by head (a log, a file's versions) are stale once it moves.
	pruned atomic.Uint64
	// fetcher fetches the pieces pages do not hold (SetFetcher).
	fetcher atomic.Pointer[Fetcher]
	closes  atomic.Uint64 // page dbs closed (Closes)
	// handoffs counts the pages a collection waits to be handed
	// (AcquireIdleWithin): while none does, a writer's check for one
	// (CollectionWaits) takes no lock.
	handoffs atomic.Int32
	closed   bool
	// namesMu orders the keys of recorded name changes (namesLast: the
	// last one's nanoseconds).
	namesMu   sync.Mutex
	randMu    sync.Mutex // guards opts.Rand
	namesLast int64
	// lockWait bounds the wait for a page db's lock held elsewhere
	// (openPageDB); lockWaited, for tests, is called at each wait.
	lockWait   time.Duration
	lockWaited func()
}

// Open opens or creates the repository in dir.
func Open(dir string, opts Options) (*Repository, error) {
	if opts.MaxIdlePages <= 0 {
		opts.MaxIdlePages = 16
	}
	if opts.NodeCacheBytes <= 0 {
		opts.NodeCacheBytes = 16 << 20
	}
	if opts.IndexCacheBytes <= 0 {
		opts.IndexCacheBytes = 4 << 20
	}
	if opts.CloseTimeout <= 0 {
		opts.CloseTimeout = 30 * time.Second
	}
	created, err := isNew(dir)
	switch {
	case err != nil:
		return nil, fmt.Errorf("open repository %s: %w", dir, err)
	case created && opts.ReadOnly:
		return nil, fmt.Errorf("open repository %s: %w", dir, os.ErrNotExist)
	}
	// The repository db first: a directory that has it is a repository,
	// whatever a crash left undone after it.
	usage := filepath.Join(dir, "page_usage_db")
	db, err := badgerdb.Open(badgerdb.SmallOptions(usage, opts.ReadOnly))
	if opts.ReadOnly && badgerdb.NeedsReplay(err) {
		// A crash left its logs unfinished, which only a writable open
		// replays; nobody serves the repository (a server would hold the
		// lock), so replay them as the next mount would, then read.
		if db, err = badgerdb.Open(badgerdb.SmallOptions(usage, false)); err == nil {
			if err = db.Close(); err == nil {
				db, err = badgerdb.Open(badgerdb.SmallOptions(usage, true))
			}
		}
	}
	if err != nil {
		return nil, fmt.Errorf("open repository %s: %w", dir, lockError(err))
	}
	if !opts.ReadOnly {
		if err := os.MkdirAll(filepath.Join(dir, SerializationVersion, "ledgers"), 0o755); err != nil {
			db.Close()
			return nil, fmt.Errorf("create repository: %w", err)
		}
	}
	r := &Repository{dir: dir, opts: opts, db: db, open: map[string]*Page{}, closing: map[string]chan struct{}{}, created: created,
		trim: badgerdb.NewTrimmer(dir), lockWait: pageLockWait}
	if !opts.ReadOnly {
		if opts.Reserve == 0 {
			if opts.Reserve, err = badgerdb.DefaultReserve(dir); err != nil {
				db.Close()
				return nil, err
			}
		}
		r.space = badgerdb.NewSpace(dir, opts.Reserve)
	}
	pol, err := r.polynomial()
	if err != nil {
		db.Close()
		return nil, err
	}
	r.pol.Store(uint64(pol))
	if err = r.checkFormat(); err != nil {
		db.Close()
		return nil, err
	}
	compress, err := r.Compression()
	if err != nil {
		db.Close()
		return nil, err
	}
	r.compress.Store(compress)
	if r.nodes, err = btree.NewNodeCache(opts.NodeCacheBytes); err != nil {
		db.Close()
		return nil, err
	}
	if r.indexes, err = cas.NewIndexCache(opts.IndexCacheBytes); err != nil {
		r.nodes.Close()
		db.Close()
		return nil, err
	}
	// No eviction callback: simplelru calls it on Remove too, and a page
	// taken back into use must not be closed. Release evicts by hand.
	r.idle, _ = simplelru.NewLRU[string, *Page](opts.MaxIdlePages+1, nil)
	r.cutters = cas.NewCutters()
	r.stopTrim = make(chan struct{})
	r.ra = badgerdb.NewReadAheads()
	if !opts.Trim {
		r.trim.Disable()
	} else {
		r.loops.Go(func() { r.trim.Run(r.stopTrim) })
	}
	r.loops.Go(r.ra.Run)
	if !opts.ReadOnly {
		if err := r.recover(); err != nil {
			r.Close()
			return nil, err
		}
	}
	return r, nil
}

// lockError turns Badger's directory lock failure into ErrLocked.
func lockError(err error) error {
	if isLockError(err) {
		return fmt.Errorf("%w: %v", ErrLocked, err)
	}
	return err
}

// isLockError reports whether err is Badger's refusal of a db whose
// directory lock another open file holds.
func isLockError(err error) bool {
	return err != nil && strings.Contains(err.Error(), "Cannot acquire directory lock")
}

// pageLockWait is how long opening a page's db waits for a lock held
// elsewhere before it reports ErrLocked.
const pageLockWait = 5 * time.Second

// openPageDB opens a page's db with open, waiting up to r.lockWait while
// its directory lock is held elsewhere. This process holds the
// repository's lock, so no other server or command has the page: the
// holder is a copy of the descriptor of the process that last had it
// open (this one, or a command that built the repository), in a child
// it forked that has not yet reached exec. flock(2) locks belong to the
// open file description, which fork shares, and close-on-exec releases
// the copy only at exec; on a loaded machine that came after the page's
// next open (a mount's first getattr failed with EIO in CI).
func (r *Repository) openPageDB(o badger.Options, open func(badger.Options) (*badger.DB, error)) (*badger.DB, error) {
	start := time.Now()
	delay := time.Millisecond
	for {
		db, err := open(o)
		if !isLockError(err) || time.Since(start) >= r.lockWait {
			if err == nil && delay > time.Millisecond {
				slog.Info("waited for a page db's lock held by another process", "dir", o.Dir, "took", time.Since(start))
			}
			return db, err
		}
		if r.lockWaited != nil {
			r.lockWaited()
		}
		time.Sleep(delay)
		delay = min(2*delay, 100*time.Millisecond)
	}
}

// polynomial returns the repository's chunker polynomial, choosing and
// storing one the first time: chunk boundaries, and so deduplication,
// depend on it.
func (r *Repository) polynomial() (chunker.Pol, error) {
	pol, err := r.storedPolynomial([]byte(keyPolynomial))
	if err == nil {
		if !pol.Irreducible() {
			return 0, fmt.Errorf("repository %s: stored chunker polynomial %v is not irreducible", r.dir, pol)
		}
		return pol, nil
	}
	if !errors.Is(err, badger.ErrKeyNotFound) {
		return 0, fmt.Errorf("repository %s: read chunker polynomial: %w", r.dir, err)
	}
	if r.opts.ReadOnly {
		return 0, fmt.Errorf("repository %s has no chunker polynomial", r.dir)
	}
	if pol, err = chunker.RandomPolynomial(); err != nil {
		return 0, fmt.Errorf("choose chunker polynomial: %w", err)
	}
	err = r.db.Update(func(txn *badger.Txn) error {
		return txn.Set([]byte(keyPolynomial), EncodeUint64(uint64(pol)))
	})
	if err != nil {
		return 0, fmt.Errorf("store chunker polynomial: %w", err)
	}
	return pol, r.db.Sync()
}

// checkFormat refuses a repository of another format, and records the
// format in one that has none: a new repository, or one of format 1 that
// holds no page yet (nothing in it depends on the tree's rule).
func (r *Repository) checkFormat() error {
	var format uint64
	hasPages := false
	err := r.db.View(func(txn *badger.Txn) error {
		it, err := txn.Get([]byte(keyFormat))
		if err == nil {
			return it.Value(func(v []byte) error {
				format, err = DecodeUint64(v)
				return err
			})
		}
		if !errors.Is(err, badger.ErrKeyNotFound) {
			return err
		}
		format = 1
		pages := txn.NewIterator(badger.IteratorOptions{Prefix: []byte(prefixPages)})
		defer pages.Close()
		pages.Rewind()
		hasPages = pages.Valid()
		return nil
	})
	switch {
	case err != nil:
		return fmt.Errorf("repository %s: read format: %w", r.dir, err)
	case format == Format:
		return nil
	case format == 2 && r.opts.ReadOnly:
		return nil // read as it is: format 3 reads format 2's rows
	case format == 2:
	case format == 1 && hasPages:
		return fmt.Errorf("repository %s is in format 1, whose B-tree placed entries by another rule than Ledger's; this ledgerfs reads format %d only: copy the files out with the ledgerfs that wrote it (ledgerfs mount), then into a new repository: %w", r.dir, Format, ErrFormat)
	case format != 1:
		return fmt.Errorf("repository %s is in format %d; this ledgerfs reads format %d only (is it newer?): %w", r.dir, format, Format, ErrFormat)
	case r.opts.ReadOnly:
		return nil // nothing to read that depends on the format
	}
	err = r.db.Update(func(txn *badger.Txn) error {
		return txn.Set([]byte(keyFormat), EncodeUint64(Format))
	})
	if err != nil {
		return fmt.Errorf("repository %s: store format: %w", r.dir, err)
	}
	return r.db.Sync()
}

// Polynomial is the repository's chunker polynomial.
func (r *Repository) Polynomial() chunker.Pol { return chunker.Pol(r.pol.Load()) }

// Created reports whether Open made a new repository: its directory was
// missing or empty.
func (r *Repository) Created() bool { return r.created }

// isNew reports whether dir holds no repository yet, being missing or
// empty; a directory with other files in it is not a repository
// (ErrNotRepository).
func isNew(dir string) (bool, error) {
	if _, err := os.Stat(filepath.Join(dir, "page_usage_db")); err == nil {
		return false, nil
	}
	es, err := os.ReadDir(dir)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return true, nil
	case err != nil:
		return false, err
	case len(es) > 0:
		return false, ErrNotRepository
	}
	return true, nil
}

// Dir is the repository directory.
func (r *Repository) Dir() string { return r.dir }

// ModTime returns when ledger's list of pages last changed, as the
// modification time of its folder, or with ledger "" when the list of
// ledgers last changed. A ledger with no page yet has no folder and shows
// the repository's time. For what a filesystem shows as these
// directories' times.
func (r *Repository) ModTime(ledger string) time.Time {
	ledgers := filepath.Join(r.dir, SerializationVersion, "ledgers")
	paths := []string{ledgers, r.dir}
	if ledger != "" {
		paths = append([]string{filepath.Join(ledgers, ledgerFolder(ledger))}, paths...)
	}
	for _, p := range paths {
		if st, err := os.Stat(p); err == nil {
			return st.ModTime()
		}
	}
	return time.Time{}
}

// Sync makes the repository db's changes (ledger and page names) durable.
func (r *Repository) Sync() error {
	if err := r.db.Sync(); err != nil {
		return fmt.Errorf("store: sync repository db: %w", err)
	}
	return nil
}

// Reserve is the free space that changes leave on the repository's
// filesystem (Options.Reserve); 0 when read-only.
func (r *Repository) Reserve() uint64 {
	if r.space == nil {
		return 0
	}
	return r.space.Reserve()
}

func (r *Repository) trashDir() string { return filepath.Join(r.dir, SerializationVersion, "trash") }

func (r *Repository) pageDir(ledger string, id PageID) string {
	return filepath.Join(r.dir, SerializationVersion, "ledgers", ledgerFolder(ledger), id.String())
}

// recover finishes deletions and page moves interrupted by a crash: trash
// is emptied, moves are finished or undone, and name rows whose page
// directory is gone are dropped.
func (r *Repository) recover() error {
	if err := os.RemoveAll(r.trashDir()); err != nil {
		return fmt.Errorf("empty trash: %w", err)
	}
	if err := r.finishMoves(); err != nil {
		return err
	}
	ledgers, err := r.Ledgers()
	if err != nil {
		return err
	}
	for _, l := range ledgers {
		pages, err := r.Pages(l)
		if err != nil {
			return err
		}
		for _, p := range pages {
			if _, err := os.Stat(r.pageDir(l, PageIDFor(p))); errors.Is(err, fs.ErrNotExist) {
				if ev, err := r.Evicted(l, p); err != nil || ev {
					if err != nil {
						return err
					}
					continue // its db is in the remote
				}
				slog.Warn("dropping page whose db is gone", "ledger", l, "page", p)
				if err := r.dropPageRows(l, p, nil, nil); err != nil {
					return err
				}
			}
		}
	}
	return nil
}

func pageKey(ledger, page string) []byte { return []byte(prefixPages + ledger + "/" + page) }

func openedKey(ledger string, id PageID) []byte {
	return append([]byte(prefixOpened+ledger), id[:]...)
}

func (r *Repository) list(prefix string) ([]string, error) {
	var out []string
	err := r.db.View(func(txn *badger.Txn) error {
		it := txn.NewIterator(badger.IteratorOptions{Prefix: []byte(prefix)})
		defer it.Close()
		for it.Rewind(); it.Valid(); it.Next() {
			out = append(out, string(it.Item().Key()[len(prefix):]))
		}
		return nil
	})
	return out, err
}

func (r *Repository) exists(key []byte) (bool, error) {
	err := r.db.View(func(txn *badger.Txn) error {
		_, err := txn.Get(key)
		return err
	})
	if errors.Is(err, badger.ErrKeyNotFound) {
		return false, nil
	}
	return err == nil, err
}

// Ledgers lists the ledgers in byte order.
func (r *Repository) Ledgers() ([]string, error) { return r.list(prefixLedgers) }

// Pages lists a ledger's pages in byte order.
func (r *Repository) Pages(ledger string) ([]string, error) {
	return r.list(prefixPages + ledger + "/")
}

// HasLedger reports whether a ledger exists.
func (r *Repository) HasLedger(ledger string) (bool, error) {
	return r.exists([]byte(prefixLedgers + ledger))
}

// HasPage reports whether a page exists.
func (r *Repository) HasPage(ledger, page string) (bool, error) {
	return r.exists(pageKey(ledger, page))
}

// CheckScope returns an error (ErrNotFound) unless the scope a command
// names exists: the ledger, if not empty, and the page, if not empty. A
// typo must not act on the repository, or show its policy, as if it were
// the page's.
func (r *Repository) CheckScope(ledger, page string) error {
	if ledger == "" {
		return nil
	}
	if ok, err := r.HasLedger(ledger); err != nil || !ok {
		return errors.Join(err, missing(fmt.Sprintf("no ledger %q", ledger)))
	}
	if page == "" {
		return nil
	}
	if ok, err := r.HasPage(ledger, page); err != nil || !ok {
		return errors.Join(err, missing(fmt.Sprintf("no page %q in ledger %q", page, ledger)))
	}
	return nil
}

// missing says what does not exist; it is ErrNotFound.
type missing string

func (m missing) Error() string        { return string(m) }
func (m missing) Is(target error) bool { return target == ErrNotFound }

// CreateLedger creates an empty ledger.
func (r *Repository) CreateLedger(ledger string) error { return r.createLedger(ledger, true) }

func (r *Repository) createLedger(ledger string, rec bool) error {
	if err := checkLedgerName(ledger); err != nil {
		return err
	}
	if err := r.space.Claim(0, badgerdb.ForChange); err != nil {
		return err
	}
	nc, err := r.nameChange(rec, NameChange{Op: NameCreateLedger, Ledger: ledger})
	if err != nil {
		return err
	}
	return r.db.Update(func(txn *badger.Txn) error {
		if _, err := txn.Get([]byte(prefixLedgers + ledger)); err == nil {
			return fmt.Errorf("ledger %q: %w", ledger, ErrExists)
		}
		if err := r.recordName(txn, nc); err != nil {
			return err
		}
		return txn.Set([]byte(prefixLedgers+ledger), nil)
	})
}

// DeleteLedger deletes an empty ledger.
func (r *Repository) DeleteLedger(ledger string) error { return r.deleteLedger(ledger, true) }

func (r *Repository) deleteLedger(ledger string, rec bool) error {
	pages, err := r.Pages(ledger)
	if err != nil {
		return err
	}
	if len(pages) > 0 {
		return fmt.Errorf("ledger %q: %w", ledger, ErrNotEmpty)
	}
	if ok, err := r.HasLedger(ledger); err != nil {
		return err
	} else if !ok {
		return fmt.Errorf("ledger %q: %w", ledger, ErrNotFound)
	}
	nc, err := r.nameChange(rec, NameChange{Op: NameDeleteLedger, Ledger: ledger})
	if err != nil {
		return err
	}
	if err := os.RemoveAll(filepath.Join(r.dir, SerializationVersion, "ledgers", ledgerFolder(ledger))); err != nil {
		return err
	}
	return r.db.Update(func(txn *badger.Txn) error {
		if err := r.recordName(txn, nc); err != nil {
			return err
		}
		if err := txn.Delete(retentionKey(ledger, "")); err != nil {
			return err
		}
		return txn.Delete([]byte(prefixLedgers + ledger))
	})
}

// CreatePage creates an empty page in a ledger.
func (r *Repository) CreatePage(ledger, page string) error { return r.createPage(ledger, page, true) }

func (r *Repository) createPage(ledger, page string, rec bool) error {
	if err := CheckName(page); err != nil {
		return err
	}
	if err := r.space.Claim(0, badgerdb.ForChange); err != nil {
		return err
	}
	if ok, err := r.HasLedger(ledger); err != nil {
		return err
	} else if !ok {
		return fmt.Errorf("ledger %q: %w", ledger, ErrNotFound)
	}
	if ok, err := r.HasPage(ledger, page); err != nil {
		return err
	} else if ok {
		return fmt.Errorf("page %q: %w", page, ErrExists)
	}
	// A page made here is a new incarnation; one a sync makes takes
	// the other device's (cloudsync sets it).
	inc, err := r.newIncarnation()
	if err != nil {
		return err
	}
	nc, err := r.nameChange(rec, NameChange{Op: NameCreatePage, Ledger: ledger, Page: page, Incarnations: []string{inc.String()}})
	if err != nil {
		return err
	}
	id := PageIDFor(page)
	if err := os.MkdirAll(r.pageDir(ledger, id), 0o755); err != nil {
		return fmt.Errorf("create page: %w", err)
	}
	// Its db gets the first commit's head row, which Ledger's storage
	// holds for every page, at its first open for changes (ensureHead):
	// made here, outside the open pages' registry, the db raced an open
	// of the page just named, and a kill while it closed left its first
	// table unlisted, which the next open takes for damage.
	return r.db.Update(func(txn *badger.Txn) error {
		if err := r.recordName(txn, nc); err != nil {
			return err
		}
		if err := txn.Set(pageKey(ledger, page), id[:]); err != nil {
			return err
		}
		if rec {
			at := time.Unix(0, nowNs())
			if nc != nil {
				at = nc.Time
			}
			if err := setNaming(txn, ledger, page, &Naming{IDs: []Incarnation{inc}, At: NamedAt{Time: at.UTC()}}); err != nil {
				return err
			}
		}
		return txn.Set(openedKey(ledger, id), EncodeUint64(uint64(nowNs())))
	})
}

// DeletePage deletes a page and all its history. The db directory is first
// moved into the trash, so a crash leaves either the page or nothing.
func (r *Repository) DeletePage(ledger, page string) error { return r.deletePage(ledger, page, true) }

func (r *Repository) deletePage(ledger, page string, rec bool) error {
	if ok, err := r.HasPage(ledger, page); err != nil {
		return err
	} else if !ok {
		return fmt.Errorf("page %q: %w", page, ErrNotFound)
	}
	nc, err := r.nameChange(rec, NameChange{Op: NameDeletePage, Ledger: ledger, Page: page})
	if err != nil {
		return err
	}
	history, err := r.keepHistory(ledger, page)
	if err != nil {
		return err
	}
	release, err := r.seize(ledger, page)
	if err != nil {
		return err
	}
	defer release()
	trash, err := r.toTrash(r.pageDir(ledger, PageIDFor(page)))
	if err != nil {
		return err
	}
	if err := r.dropPageRows(ledger, page, nc, history); err != nil {
		return err
	}
	return os.RemoveAll(trash)
}

func (r *Repository) toTrash(dir string) (string, error) {
	if err := os.MkdirAll(r.trashDir(), 0o755); err != nil {
		return "", err
	}
	var b [8]byte
	rand.Read(b[:])
	trash := filepath.Join(r.trashDir(), hex.EncodeToString(b[:]))
	if err := os.Rename(dir, trash); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return "", fmt.Errorf("move page to trash: %w", err)
	}
	return trash, nil
}

// dropPageRows removes the rows of ledger/page from the repository db,
// recording nc, and keeps history (keepHistory) under its incarnations.
func (r *Repository) dropPageRows(ledger, page string, nc *NameChange, history []Made) error {
	return r.db.Update(func(txn *badger.Txn) error {
		if err := r.recordName(txn, nc); err != nil {
			return err
		}
		if err := txn.Delete(pageKey(ledger, page)); err != nil {
			return err
		}
		if err := movePageRows(txn, ledger, page, "", ""); err != nil {
			return err
		}
		n, _, err := getNaming(txn, ledger, page)
		if err != nil {
			return err
		}
		if err := moveNaming(txn, ledger, page, "", "", NamedAt{}); err != nil {
			return err
		}
		if err := addHistory(txn, n.IDs, history); err != nil {
			return err
		}
		if nc != nil {
			seen, err := nc.SeenCommits()
			if err != nil {
				return err
			}
			if err := markDeleted(txn, n.IDs, ledger, page, seen); err != nil {
				return err
			}
		}
		return txn.Delete(openedKey(ledger, PageIDFor(page)))
	})
}

// RenamePage renames a page within its ledger, replacing nothing. The page's
// id follows its name, so its db directory moves too.
func (r *Repository) RenamePage(ledger, from, to string) error {
	return r.movePage(ledger, from, ledger, to, true)
}

// MovePage moves a page to another ledger, which must exist, under the name
// to, replacing nothing: its db directory moves with it, and so does every
// commit of its history.
func (r *Repository) MovePage(ledger, from, toLedger, to string) error {
	return r.movePage(ledger, from, toLedger, to, true)
}

// A pageMove is the row (prefixMoving) a page's rename or move writes
// before its db directory moves: a crash between that and the rows' move
// leaves the directory at the new name with rows of the old, which
// recovery mends (finishMoves) instead of dropping the page as gone.
type pageMove struct {
	Ledger   string      `json:"ledger"`
	Page     string      `json:"page"`
	ToLedger string      `json:"to_ledger"`
	To       string      `json:"to"`
	Change   *NameChange `json:"change,omitempty"` // to record for the remote
}

const prefixMoving = "moving/"

func movingKey(ledger, page string) []byte { return []byte(prefixMoving + ledger + "/" + page) }

func (r *Repository) movePage(ledger, from, toLedger, to string, rec bool) error {
	if err := CheckName(to); err != nil {
		return err
	}
	if ok, err := r.HasPage(ledger, from); err != nil {
		return err
	} else if !ok {
		return fmt.Errorf("page %q: %w", from, ErrNotFound)
	}
	if ok, err := r.HasLedger(toLedger); err != nil {
		return err
	} else if !ok {
		return fmt.Errorf("ledger %q: %w", toLedger, ErrNotFound)
	}
	if ok, err := r.HasPage(toLedger, to); err != nil {
		return err
	} else if ok {
		return fmt.Errorf("page %q: %w", to, ErrExists)
	}
	c := NameChange{Op: NameRenamePage, Ledger: ledger, Page: from, To: to}
	if toLedger != ledger {
		c.ToLedger = toLedger
	}
	nc, err := r.nameChange(rec, c)
	if err != nil {
		return err
	}
	release, err := r.seize(ledger, from)
	if err != nil {
		return err
	}
	defer release()
	m := pageMove{Ledger: ledger, Page: from, ToLedger: toLedger, To: to, Change: nc}
	b, err := json.Marshal(m)
	if err != nil {
		return err
	}
	if err := r.db.Update(func(txn *badger.Txn) error { return txn.Set(movingKey(ledger, from), b) }); err != nil {
		return fmt.Errorf("rename page: %w", err)
	}
	if err := r.moveDir(m); err != nil {
		r.db.Update(func(txn *badger.Txn) error { return txn.Delete(movingKey(ledger, from)) })
		return err
	}
	return r.moveRows(m)
}

// moveDir moves the page's db directory to its new name; an evicted page has
// none here.
func (r *Repository) moveDir(m pageMove) error {
	dst := r.pageDir(m.ToLedger, PageIDFor(m.To))
	if err := os.MkdirAll(filepath.Dir(dst), 0o755); err != nil {
		return fmt.Errorf("rename page: %w", err)
	}
	if err := os.Rename(r.pageDir(m.Ledger, PageIDFor(m.Page)), dst); err != nil {
		if ev, everr := r.Evicted(m.Ledger, m.Page); !errors.Is(err, fs.ErrNotExist) || everr != nil || !ev {
			return fmt.Errorf("rename page: %w", err)
		}
		// Evicted: its head row moves with the others.
	}
	return nil
}

// moveRows moves the page's rows to its new name and drops its move row, in
// one transaction.
func (r *Repository) moveRows(m pageMove) error {
	nid := PageIDFor(m.To)
	return r.db.Update(func(txn *badger.Txn) error {
		if err := r.recordName(txn, m.Change); err != nil {
			return err
		}
		if err := txn.Delete(pageKey(m.Ledger, m.Page)); err != nil {
			return err
		}
		if err := txn.Delete(openedKey(m.Ledger, PageIDFor(m.Page))); err != nil {
			return err
		}
		if err := movePageRows(txn, m.Ledger, m.Page, m.ToLedger, m.To); err != nil {
			return err
		}
		// A rename made here names the page since it was made; one a
		// sync applies, since the other device's (cloudsync sets it).
		var at NamedAt
		if m.Change != nil {
			at = NamedAt{Time: m.Change.Time.UTC(), Renamed: true}
		}
		if err := moveNaming(txn, m.Ledger, m.Page, m.ToLedger, m.To, at); err != nil {
			return err
		}
		if err := txn.Set(pageKey(m.ToLedger, m.To), nid[:]); err != nil {
			return err
		}
		if err := txn.Set(openedKey(m.ToLedger, nid), EncodeUint64(uint64(nowNs()))); err != nil {
			return err
		}
		return txn.Delete(movingKey(m.Ledger, m.Page))
	})
}

// finishMoves completes the page moves a crash cut short: one whose db
// directory moved has its rows moved too; one whose directory did not is
// dropped, as if it never began.
func (r *Repository) finishMoves() error {
	var moves []pageMove
	err := r.db.View(func(txn *badger.Txn) error {
		it := txn.NewIterator(badger.IteratorOptions{Prefix: []byte(prefixMoving), PrefetchValues: true})
		defer it.Close()
		for it.Rewind(); it.Valid(); it.Next() {
			var m pageMove
			if err := it.Item().Value(func(v []byte) error { return json.Unmarshal(v, &m) }); err != nil {
				return fmt.Errorf("page move %q: %w", it.Item().Key(), err)
			}
			moves = append(moves, m)
		}
		return nil
	})
	if err != nil {
		return err
	}
	for _, m := range moves {
		_, srcErr := os.Stat(r.pageDir(m.Ledger, PageIDFor(m.Page)))
		_, dstErr := os.Stat(r.pageDir(m.ToLedger, PageIDFor(m.To)))
		ev, err := r.Evicted(m.Ledger, m.Page)
		if err != nil {
			return err
		}
		if srcErr == nil || !ev && dstErr != nil {
			// The directory did not move: the page stays where it was.
			if err := r.db.Update(func(txn *badger.Txn) error { return txn.Delete(movingKey(m.Ledger, m.Page)) }); err != nil {
				return err
			}
			continue
		}
		slog.Info("finishing a page move a crash cut short", "from", m.Ledger+"/"+m.Page, "to", m.ToLedger+"/"+m.To)
		if err := r.moveRows(m); err != nil {
			return fmt.Errorf("finish the move of page %s/%s: %w", m.Ledger, m.Page, err)
		}
	}
	return nil
}

// RenameLedger renames a ledger, replacing nothing.
func (r *Repository) RenameLedger(from, to string) error { return r.renameLedger(from, to, true) }

func (r *Repository) renameLedger(from, to string, rec bool) error {
	if err := checkLedgerName(to); err != nil {
		return err
	}
	if ok, err := r.HasLedger(from); err != nil {
		return err
	} else if !ok {
		return fmt.Errorf("ledger %q: %w", from, ErrNotFound)
	}
	if ok, err := r.HasLedger(to); err != nil {
		return err
	} else if ok {
		return fmt.Errorf("ledger %q: %w", to, ErrExists)
	}
	pages, err := r.Pages(from)
	if err != nil {
		return err
	}
	nc, err := r.nameChange(rec, NameChange{Op: NameRenameLedger, Ledger: from, To: to, Pages: pages})
	if err != nil {
		return err
	}
	release, err := r.seizeAll(from, pages)
	if err != nil {
		return err
	}
	defer release()
	base := filepath.Join(r.dir, SerializationVersion, "ledgers")
	if err := os.Rename(filepath.Join(base, ledgerFolder(from)), filepath.Join(base, ledgerFolder(to))); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("rename ledger: %w", err)
	}
	return r.db.Update(func(txn *badger.Txn) error {
		if err := r.recordName(txn, nc); err != nil {
			return err
		}
		if err := txn.Delete([]byte(prefixLedgers + from)); err != nil {
			return err
		}
		if err := txn.Set([]byte(prefixLedgers+to), nil); err != nil {
			return err
		}
		if err := moveRow(txn, retentionKey(from, ""), retentionKey(to, "")); err != nil {
			return err
		}
		for _, p := range pages {
			id := PageIDFor(p)
			for _, k := range [][]byte{pageKey(from, p), openedKey(from, id)} {
				if err := txn.Delete(k); err != nil {
					return err
				}
			}
			if err := movePageRows(txn, from, p, to, p); err != nil {
				return err
			}
			if err := moveNaming(txn, from, p, to, p, NamedAt{}); err != nil {
				return err
			}
			if err := txn.Set(pageKey(to, p), id[:]); err != nil {
				return err
			}
			if err := txn.Set(openedKey(to, id), EncodeUint64(uint64(nowNs()))); err != nil {
				return err
			}
		}
		return nil
	})
}

// Acquire opens a page (or takes it from the open ones) for a user, who must
// Release it. Pages nobody uses stay open in an LRU of bounded size.
func (r *Repository) Acquire(ledger, page string) (*Page, error) {
	key := ledger + "/" + page
	r.mu.Lock()
	for {
		if r.closed {
			r.mu.Unlock()
			return nil, errors.New("store: repository is closed")
		}
		if p, ok := r.open[key]; ok {
			if p.exclusive {
				r.waitExclusive(p)
				continue
			}
			if p.refs == 0 && r.roomAgain(p) {
				// Opened read-only for want of space, idle, and there
				// is room again: reopen it for changes.
				r.idle.Remove(key)
				r.queueClose(key, p)
				r.unlock()
				r.mu.Lock()
				continue
			}
			p.refs++
			r.idle.Remove(key)
			r.mu.Unlock()
			return p, nil
		}
		ch, ok := r.closing[key]
		if !ok {
			break
		}
		// Its db is still being closed, or compacted alone (Reclaim):
		// Badger allows one owner at a time.
		r.mu.Unlock()
		<-ch
		r.mu.Lock()
	}
	// Open outside the lock (opening replays Badger's log), with the page
	// marked as being opened: others wait, as for a close, and nobody
	// (a Reclaim) takes its db meanwhile.
	opening := make(chan struct{})
	r.closing[key] = opening
	r.mu.Unlock()
	p, err := r.openExisting(ledger, page)
	r.mu.Lock()
	delete(r.closing, key)
	close(opening)
	if err != nil {
		r.mu.Unlock()
		return nil, err
	}
	p.refs = 1
	r.open[key] = p
	r.unlock()
	return p, nil
}

// AcquireForChange is Acquire for a user about to change the page. A page
// opened read-only for want of space is reopened for changes only while
// nobody holds it, so once there is room again the users on their way out
// (a descriptor closed just before is released after close returns) are
// waited for, up to d; a page still held after that stays read-only.
func (r *Repository) AcquireForChange(ledger, page string, d time.Duration) (*Page, error) {
	p, err := r.Acquire(ledger, page)
	if err != nil || p.Writable() || !r.roomAgain(p) {
		return p, err
	}
	r.Release(p)
	r.WaitUnused(ledger, page, d)
	return r.Acquire(ledger, page)
}

// roomAgain reports whether p was opened read-only for want of space and
// could now be opened for changes.
func (r *Repository) roomAgain(p *Page) bool {
	return p.readOnly != nil && !p.damaged && r.space.Claim(0, badgerdb.ForOpen) == nil
}

// openExisting opens the db of a page that exists.
func (r *Repository) openExisting(ledger, page string) (*Page, error) {
	ok, err := r.HasPage(ledger, page)
	if err != nil {
		return nil, err
	}
	if !ok {
		return nil, fmt.Errorf("page %s/%s: %w", ledger, page, ErrNotFound)
	}
	return r.openPage(ledger, page)
}

// queueClose takes an idle page out of use; unlock closes it. Called with
// r.mu held.
func (r *Repository) queueClose(key string, p *Page) {
	delete(r.open, key)
	r.closing[key] = make(chan struct{})
	r.evicted = append(r.evicted, p)
}

// unlock releases r.mu and closes the pages the LRU evicted meanwhile.
func (r *Repository) unlock() {
	evicted := r.evicted
	r.evicted = nil
	r.mu.Unlock()
	for _, p := range evicted {
		if err := r.closeDB(p); err != nil {
			slog.Error("close idle page", "ledger", p.Ledger, "page", p.Name, "err", err)
		}
		key := p.Ledger + "/" + p.Name
		r.mu.Lock()
		close(r.closing[key])
		delete(r.closing, key)
		r.mu.Unlock()
	}
}

// Release gives back a page taken with Acquire.
func (r *Repository) Release(p *Page) {
	r.mu.Lock()
	p.refs--
	if p.refs == 0 {
		p.released = time.Now()
	}
	if p.refs == 0 && r.unused != nil {
		r.unused.Broadcast()
	}
	r.handOver(p)
	if p.refs == 0 && !r.closed {
		r.idle.Add(p.Ledger+"/"+p.Name, p)
		for r.idle.Len() > r.opts.MaxIdlePages {
			key, old, _ := r.idle.RemoveOldest()
			r.queueClose(key, old)
		}
	}
	r.unlock()
}

// WaitUnused waits up to d until nobody holds the page, so that Reclaim
// can take its db, and reports whether that came: a descriptor closed just
// before is released after close returns.
func (r *Repository) WaitUnused(ledger, page string, d time.Duration) bool {
	key := ledger + "/" + page
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.unused == nil {
		r.unused = sync.NewCond(&r.mu)
	}
	expired := false
	t := time.AfterFunc(d, func() {
		r.mu.Lock()
		expired = true
		r.unused.Broadcast()
		r.mu.Unlock()
	})
	defer t.Stop()
	for {
		if p, ok := r.open[key]; !ok || p.refs == 0 {
			return true
		}
		if expired {
			return false
		}
		r.unused.Wait()
	}
}

// WhileBusy calls try, and again each time it fails with ErrBusy and the
// page's last user releases it before deadline: users on their way out (a
// descriptor closed just before is released after close returns) are
// waited for, again if another came between the wait and the try.
func (r *Repository) WhileBusy(ledger, page string, deadline time.Time, try func() error) error {
	err := try()
	for errors.Is(err, ErrBusy) {
		left := time.Until(deadline)
		if left <= 0 || !r.WaitUnused(ledger, page, left) {
			break
		}
		err = try()
	}
	return err
}

// OpenPages is the number of page dbs open now.
func (r *Repository) OpenPages() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.open)
}

func (r *Repository) openPage(ledger, page string) (*Page, error) {
	id := PageIDFor(page)
	if err := r.comeBack(ledger, page, id); err != nil {
		return nil, err
	}
	// Opening for changes writes (a memtable log, a value log's header,
	// the manifest); without room for that the page can still be read.
	readOnly := r.opts.ReadOnly
	var refused error
	if !readOnly {
		if refused = r.space.Claim(0, badgerdb.ForOpen); refused != nil {
			slog.Warn("page opened read-only for want of space", "ledger", ledger, "page", page, "err", refused)
			readOnly = true
		}
	}
	p, err := r.newPage(ledger, page, id, readOnly)
	damaged := false
	if !readOnly && badgerdb.ReadableDamage(err) {
		// Badger would cut the damaged log, discarding what follows the
		// bad entry; read-only it reads everything that is intact.
		slog.Error("page is damaged: serving it read-only; copy the repository aside before repairing it", "ledger", ledger, "page", page, "err", err)
		refused = fmt.Errorf("page %s/%s is damaged (%v), served read-only: %w", ledger, page, err, syscall.EROFS)
		readOnly, damaged = true, true
		p, err = r.newPage(ledger, page, id, true)
	}
	if r.opts.ReadOnly && (badgerdb.NeedsReplay(err) || hasEmptyLogs(r.pageDir(ledger, id)) || err == nil && p.recoverable()) {
		// A crash left work that only a writable open does: Badger
		// replays its logs, and the hook commits the journals. Nobody
		// serves the repository (a server would hold the db's lock), so
		// do it here, as the next mount would, before reading.
		err = nil
		if p != nil {
			err = p.db.Close()
		}
		if err == nil {
			err = r.recoverPage(ledger, page, id)
		}
		if err == nil {
			p, err = r.newPage(ledger, page, id, true)
		}
	}
	if err != nil {
		return nil, fmt.Errorf("open page %s/%s: %w", ledger, page, lockError(err))
	}
	p.readOnly, p.damaged = refused, damaged
	if !readOnly {
		if err := ensureHead(p.db); err != nil {
			p.db.Close()
			return nil, fmt.Errorf("open page %s/%s: %w", ledger, page, err)
		}
		if err := r.db.Update(func(txn *badger.Txn) error {
			return txn.Set(openedKey(ledger, id), EncodeUint64(0))
		}); err != nil {
			p.db.Close()
			return nil, fmt.Errorf("mark page open: %w", err)
		}
	}
	if r.opts.OnOpen != nil && !readOnly {
		if err := r.opts.OnOpen(p); err != nil {
			p.db.Close()
			return nil, fmt.Errorf("open page %s/%s: %w", ledger, page, err)
		}
	}
	return p, nil
}

// newPage opens the db of a page.
func (r *Repository) newPage(ledger, page string, id PageID, readOnly bool) (*Page, error) {
	db, err := r.openPageDB(badgerdb.Options(r.pageDir(ledger, id), readOnly), badgerdb.Open)
	if err != nil {
		return nil, err
	}
	pol, err := r.pagePolynomial(ledger, id)
	if err != nil {
		db.Close()
		return nil, err
	}
	p := &Page{Ledger: ledger, Name: page, ID: id, db: db, repo: r}
	p.pol.Store(uint64(pol))
	p.nodes = btree.NewStore(p, pol, r.nodes)
	if err := p.dur.open(p); err != nil {
		db.Close()
		return nil, err
	}
	return p, nil
}

// recoverable reports whether a crash left work for recovery in the page;
// on error it says yes, and recovery finds out.
func (p *Page) recoverable() bool {
	found, err := p.needsRecovery()
	return found || err != nil
}

// hasEmptyLogs reports whether a crash left an empty log in the db in dir,
// which only a writable open removes.
func hasEmptyLogs(dir string) bool {
	empty, err := badgerdb.EmptyLogs(dir, dir)
	return err == nil && len(empty) > 0
}

// recoverPage opens a page's db writable and runs the open hook on it, as
// a mount does, for a read-only repository to read it after a crash.
func (r *Repository) recoverPage(ledger, page string, id PageID) error {
	slog.Info("recovering a page a crash left, before reading it", "ledger", ledger, "page", page)
	p, err := r.newPage(ledger, page, id, false)
	if err != nil {
		return err
	}
	if r.opts.OnOpen != nil {
		err = r.opts.OnOpen(p)
	}
	err = errors.Join(err, p.db.Close())
	// Closed cleanly after recovery, the db holds every change: its sync
	// log, replayed, has nothing left to give.
	return errors.Join(err, p.dur.close(err == nil))
}

// closeDB closes a page's db, no longer in r.open, and records when it was
// closed.
func (r *Repository) closeDB(p *Page) error {
	var errs []error
	if r.opts.OnClose != nil {
		errs = append(errs, r.opts.OnClose(p))
	}
	p.mu.Lock()
	p.closed.Store(true)
	// Rows only the sync log holds (a queued commit failed) go to the db,
	// so that the log can go.
	err := p.dur.fold()
	err = errors.Join(err, r.closeBadger(p.db))
	err = errors.Join(err, p.dur.close(err == nil && p.readOnly == nil && !r.opts.ReadOnly))
	errs = append(errs, err)
	p.mu.Unlock()
	if !r.opts.ReadOnly && p.readOnly == nil {
		errs = append(errs, r.db.Update(func(txn *badger.Txn) error {
			return txn.Set(openedKey(p.Ledger, p.ID), EncodeUint64(uint64(nowNs())))
		}))
	}
	r.closes.Add(1)
	return errors.Join(errs...)
}

// Closes counts the page dbs closed since the repository opened: what an
// eviction waits for.
func (r *Repository) Closes() uint64 { return r.closes.Load() }

// evict closes a page's db, if idle, and lets it be opened again at once
// (Reclaim reopens it for a compaction beside its users).
func (r *Repository) evict(ledger, page string) error {
	release, err := r.seize(ledger, page)
	if err != nil {
		return err
	}
	release()
	return nil
}

// seize closes a page's db and keeps anyone from opening it until release
// is called: a rename, move, delete or eviction changes the db directory
// and the page's rows in two steps, and a page opened between them (a
// lookup's getattr) would have Badger write into a directory being moved
// away. Acquire waits meanwhile, and then finds the page where the change
// left it. A page in use gives ErrBusy.
func (r *Repository) seize(ledger, page string) (release func(), err error) {
	key := ledger + "/" + page
	r.mu.Lock()
	for {
		if r.closed {
			r.mu.Unlock()
			return nil, errors.New("store: repository is closed")
		}
		if p, ok := r.open[key]; ok {
			if p.exclusive {
				r.waitExclusive(p)
				continue
			}
			if p.refs > 0 {
				r.mu.Unlock()
				return nil, fmt.Errorf("page %s/%s: %w", ledger, page, ErrBusy)
			}
			r.idle.Remove(key)
			r.queueClose(key, p)
			r.unlock()
			r.mu.Lock()
			continue
		}
		ch, busy := r.closing[key]
		if !busy {
			break
		}
		r.mu.Unlock()
		<-ch
		r.mu.Lock()
	}
	held := make(chan struct{})
	r.closing[key] = held
	r.mu.Unlock()
	return func() {
		r.mu.Lock()
		delete(r.closing, key)
		close(held)
		r.mu.Unlock()
	}, nil
}

// seizeAll seizes pages of a ledger, all or none.
func (r *Repository) seizeAll(ledger string, pages []string) (release func(), err error) {
	var held []func()
	release = func() {
		for _, h := range held {
			h()
		}
	}
	for _, p := range pages {
		h, err := r.seize(ledger, p)
		if err != nil {
			release()
			return nil, err
		}
		held = append(held, h)
	}
	return release, nil
}

// PageUsage is a page's row in page_usage_db.
type PageUsage struct {
	Ledger string
	ID     PageID
	// Closed is when the page was last closed; zero while it is open.
	Closed time.Time
}

// Usage lists the opened/ rows.
func (r *Repository) Usage() ([]PageUsage, error) {
	var out []PageUsage
	err := r.db.View(func(txn *badger.Txn) error {
		it := txn.NewIterator(badger.IteratorOptions{Prefix: []byte(prefixOpened)})
		defer it.Close()
		for it.Rewind(); it.Valid(); it.Next() {
			k := it.Item().Key()[len(prefixOpened):]
			if len(k) < len(PageID{}) {
				return fmt.Errorf("malformed opened row %q", it.Item().Key())
			}
			u := PageUsage{Ledger: string(k[:len(k)-16]), ID: PageID(k[len(k)-16:])}
			err := it.Item().Value(func(v []byte) error {
				t, err := DecodeUint64(v)
				if t != 0 {
					u.Closed = time.Unix(0, int64(t))
				}
				return err
			})
			if err != nil {
				return err
			}
			out = append(out, u)
		}
		return nil
	})
	return out, err
}

// RunGC runs value log GC on every open page.
func (r *Repository) RunGC() {
	r.mu.Lock()
	pages := slices.Collect(maps.Values(r.open))
	r.mu.Unlock()
	for _, p := range pages {
		// A file rewritten at ratio 0.5 moves up to half its size before
		// the old one is deleted.
		if err := r.space.Claim(badgerdb.ValueLogFileSize/2, badgerdb.ForChange); err != nil {
			slog.Info("value-log GC skipped", "page", p.Ledger+"/"+p.Name, "err", err)
			continue
		}
		p.RunGC(0.5)
		r.space.Settled(badgerdb.ValueLogFileSize / 2)
	}
}

// Close closes every page and the repository db. Pages still acquired are
// closed too: their users get ErrClosed.
func (r *Repository) Close() error {
	r.mu.Lock()
	if r.closed {
		r.mu.Unlock()
		return nil
	}
	r.closed = true
	pages := make([]*Page, 0, len(r.open))
	for _, p := range r.open {
		pages = append(pages, p)
	}
	r.open = map[string]*Page{}
	r.unlock()
	close(r.stopTrim)
	r.ra.Stop()
	slices.SortFunc(pages, func(a, b *Page) int { return bytes.Compare([]byte(a.Name), []byte(b.Name)) })
	var errs []error
	for _, p := range pages {
		errs = append(errs, r.closeDB(p))
	}
	r.nodes.Close()
	r.indexes.Close()
	r.cutters.Close()
	errs = append(errs, r.closeBadger(r.db))
	r.trim.Hold() // for good: the dbs are gone
	r.loops.Wait()
	return errors.Join(errs...)
}

// errCloseStuck reports a db that did not close within the timeout.
var errCloseStuck = errors.New("did not close")

// closeBadger closes db, giving up after the close timeout: one db whose
// memtable cannot be written must not hold up the other dbs, nor the
// process's exit. Its writes stay in its write-ahead log, which the next
// open replays if the files are still there.
//
// No trim runs while a db unmaps its files: one that read a mapping's
// address before could drop pages someone else mapped there since. A close
// given up on may unmap them at any later time, so trimming stops for good.
func (r *Repository) closeBadger(db *badger.DB) error {
	r.trim.Hold()
	done := make(chan error, 1)
	go func() { done <- db.Close() }()
	select {
	case err := <-done:
		r.trim.Release()
		return err
	case <-time.After(r.opts.CloseTimeout):
		r.trim.Disable()
		r.trim.Release()
		r.mu.Lock()
		r.abandoned = append(r.abandoned, done)
		r.mu.Unlock()
		return fmt.Errorf("db %s %w within %v (see Badger's errors); its write-ahead log is left for the next open",
			db.Opts().Dir, errCloseStuck, r.opts.CloseTimeout)
	}
}

// The free space kept on the repository's filesystem when Options.Reserve
// is 0: 5 % of the filesystem (ext4 keeps as much for root), between
// MinReserve and MaxDefaultReserve.
const (
	MinReserve        = badgerdb.MinReserve
	MaxDefaultReserve = badgerdb.MaxDefaultReserve
)

// ErrDamaged marks a page db found damaged before it was opened.
var ErrDamaged = badgerdb.ErrDamaged

// Free returns the bytes free on the repository's filesystem, less the
// content taken and not yet written, from a statfs made now.
func (r *Repository) Free() (uint64, error) {
	if r.space == nil {
		free, _, err := badgerdb.Statfs(r.dir)
		return free, err
	}
	return r.space.Free()
}

// FilesystemSize returns the size of the filesystem holding the repository.
func (r *Repository) FilesystemSize() (uint64, error) {
	_, size, err := badgerdb.Statfs(r.dir)
	return size, err
}
