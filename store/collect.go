package store

import (
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"math"
	"os"
	"path/filepath"
	"slices"
	"syscall"
	"time"

	"github.com/ledgerfs/ledgerfs/internal/badgerdb"

	"github.com/dgraph-io/badger/v4"

	"github.com/ledgerfs/ledgerfs/cas"
)

// Rows a collection reads and deletes (package gc decides what).

// UnsyncedCommits calls fn with the id of every commit with an
// unsynced/commits/ row.
func (p *Page) UnsyncedCommits(fn func(CommitID) error) error {
	return p.view(func(txn *badger.Txn) error {
		it := txn.NewIterator(badger.IteratorOptions{Prefix: []byte(PrefixUnsyncedCommits)})
		defer it.Close()
		for it.Rewind(); it.Valid(); it.Next() {
			k := it.Item().Key()[len(PrefixUnsyncedCommits):]
			var id CommitID
			if len(k) != len(id) {
				return fmt.Errorf("store: malformed unsynced row %q", it.Item().Key())
			}
			copy(id[:], k)
			if err := fn(id); err != nil {
				return err
			}
		}
		return nil
	})
}

// CountPieces counts the pieces stored (their status rows), reading keys
// only.
func (p *Page) CountPieces() (int, error) {
	n := 0
	err := p.view(func(txn *badger.Txn) error {
		for _, s := range Statuses {
			it := txn.NewIterator(badger.IteratorOptions{Prefix: []byte(StatusPrefix(s))})
			for it.Rewind(); it.Valid(); it.Next() {
				n++
			}
			it.Close()
		}
		return nil
	})
	return n, err
}

// DeleteCommits deletes commits' rows (commits/ and unsynced/commits/).
// Heads must not be among them; the caller holds Lock.
func (p *Page) DeleteCommits(ids []CommitID) error {
	if err := p.check(); err != nil {
		return err
	}
	if !p.Writable() {
		return fmt.Errorf("store: page %s/%s is read-only: %w", p.Ledger, p.Name, syscall.EROFS)
	}
	// No index of the page's history may describe a pruned commit.
	if err := os.Remove(p.VersionsPath()); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("store: delete commits: %w", err)
	}
	err := p.recovering(func() error {
		return batched(p.db, len(ids), func(txn *badger.Txn, i int) error {
			if err := txn.Delete(commitKey(ids[i])); err != nil {
				return err
			}
			return txn.Delete(unsyncedCommitKey(ids[i]))
		})
	})
	p.repo.pruned.Add(1)
	if err != nil {
		return fmt.Errorf("store: delete commits: %w", err)
	}
	return nil
}

// Pruned is a count that grows whenever commits are deleted from any page
// of the repository: what is cached of a page's history by its head must
// also be keyed by it, since a collection changes history and not the head.
func (p *Page) Pruned() uint64 { return p.repo.pruned.Load() }

// Pieces calls fn with every piece of status s, in digest order, reading
// status rows only.
func (p *Page) Pieces(s PieceStatus, fn func(d cas.Digest) error) error {
	prefix := []byte(StatusPrefix(s))
	return p.view(func(txn *badger.Txn) error {
		it := txn.NewIterator(badger.IteratorOptions{Prefix: prefix})
		defer it.Close()
		for it.Rewind(); it.Valid(); it.Next() {
			if err := fn(cas.Digest(it.Item().Key()[len(prefix):])); err != nil {
				return err
			}
		}
		return nil
	})
}

// Objects calls fn with every stored piece after the piece after (every
// one, if empty) and the size of its row's value (compressed, if it is), in
// digest order, reading keys only: a piece's size is in its key's entry.
func (p *Page) Objects(after cas.Digest, fn func(d cas.Digest, size int64) error) error {
	prefix := []byte(PrefixObjects)
	return p.view(func(txn *badger.Txn) error {
		it := txn.NewIterator(badger.IteratorOptions{Prefix: prefix})
		defer it.Close()
		it.Seek(append(slices.Clip(prefix), after...))
		for ; it.Valid(); it.Next() {
			item := it.Item()
			d := cas.Digest(item.Key()[len(prefix):])
			if after != "" && d == after {
				continue
			}
			if err := fn(d, item.ValueSize()); err != nil {
				return err
			}
		}
		return nil
	})
}

// DeletePieces deletes pieces with every status row they have. Only a
// collection that has made sure nothing reaches them calls it.
func (p *Page) DeletePieces(ds []cas.Digest) error {
	if err := p.check(); err != nil {
		return err
	}
	if !p.Writable() {
		return fmt.Errorf("store: page %s/%s is read-only: %w", p.Ledger, p.Name, syscall.EROFS)
	}
	err := p.recovering(func() error {
		return batched(p.db, len(ds), func(txn *badger.Txn, i int) error {
			for _, s := range Statuses {
				if err := txn.Delete(statusKey(s, ds[i])); err != nil {
					return err
				}
			}
			return txn.Delete(objectKey(ds[i]))
		})
	})
	if err != nil {
		return fmt.Errorf("store: delete pieces: %w", err)
	}
	return nil
}

// recovering runs fn, turning a panic of Badger into the page's error
// (see recoverPanic).
func (p *Page) recovering(fn func() error) (err error) {
	defer p.recoverPanic(&err)
	return fn()
}

// ErrBusy is the error of AcquireIdle on a page someone uses.
var ErrBusy = errors.New("store: page is in use")

// AcquireIdle takes a page that nobody uses but readers (AsReader),
// for the caller alone (a collection): until ReleaseIdle, Acquire and
// evict wait, and ask the holder to end soon (Yielding). A page in use
// gives ErrBusy. Readers go on reading meanwhile: the collection keeps
// what they read (gc's pins).
func (r *Repository) AcquireIdle(ledger, page string) (*Page, error) {
	p, err := r.Acquire(ledger, page)
	if err != nil {
		return nil, err
	}
	r.mu.Lock()
	if p.refs-p.readers > 1 || p.waiters > 0 {
		r.mu.Unlock()
		r.Release(p)
		return nil, fmt.Errorf("page %s/%s: %w", ledger, page, ErrBusy)
	}
	r.takeIdle(p)
	r.mu.Unlock()
	return p, nil
}

// takeIdle makes p exclusive, r.mu held.
func (r *Repository) takeIdle(p *Page) {
	p.exclusive, p.done = true, make(chan struct{})
	p.yield.Store(false)
}

// AsReader makes the caller's ref of p (from Acquire) a reader's: a reader
// of committed values that holds the page a long time (an open read-only
// file), which does not keep a collection from the page. The collection
// must keep what the reader reads (gc's pins): the caller records that
// before, while its ref still keeps collections off. It is given back with
// ReleaseReader.
func (r *Repository) AsReader(p *Page) {
	r.mu.Lock()
	p.readers++
	r.handOver(p)
	r.mu.Unlock()
}

// ReleaseReader gives back a ref made a reader's with AsReader.
func (r *Repository) ReleaseReader(p *Page) {
	r.mu.Lock()
	p.readers--
	r.mu.Unlock()
	r.Release(p)
}

// ReleaseIdle gives back a page taken with AcquireIdle.
func (r *Repository) ReleaseIdle(p *Page) {
	r.mu.Lock()
	p.exclusive = false
	close(p.done)
	r.mu.Unlock()
	r.Release(p)
}

// Yielding reports whether someone waits for a page held with AcquireIdle.
func (p *Page) Yielding() bool { return p.yield.Load() }

// waitExclusive waits, r.mu held (and held again on return), until p's
// exclusive holder releases it, asking it to hurry.
func (r *Repository) waitExclusive(p *Page) {
	p.yield.Store(true)
	p.waiters++
	done := p.done
	start := time.Now()
	r.mu.Unlock()
	<-done
	r.mu.Lock()
	p.waiters--
	slog.Debug("waited for a collection", "page", p.Ledger+"/"+p.Name, "took", time.Since(start))
}

// AcquireIdleWithin is AcquireIdle for a collection that gave way to the
// page's users: they have it for turn at least, and then it is handed to
// the collection at the first moment nobody but readers uses it, with
// nobody waiting (handOver), up to d from now. Users come and go without a
// pause (a loop of closes), so merely waiting for the page to be idle
// and then taking it would lose to them nearly every time.
func (r *Repository) AcquireIdleWithin(ledger, page string, turn, d time.Duration) (*Page, error) {
	p, err := r.Acquire(ledger, page)
	if err != nil {
		return nil, err
	}
	h := &handoff{from: time.Now().Add(turn), ch: make(chan struct{})}
	r.mu.Lock()
	p.handoff = h
	r.handoffs.Add(1)
	r.mu.Unlock()
	t := time.AfterFunc(turn, func() {
		r.mu.Lock()
		r.handOver(p)
		r.mu.Unlock()
	})
	defer t.Stop()
	expired := time.NewTimer(d)
	defer expired.Stop()
	select {
	case <-h.ch:
		return p, nil
	case <-expired.C:
	}
	r.mu.Lock()
	if p.handoff == h {
		p.handoff = nil
		r.handoffs.Add(-1)
		r.mu.Unlock()
		r.Release(p)
		return nil, fmt.Errorf("page %s/%s: %w", ledger, page, ErrBusy)
	}
	r.mu.Unlock()
	<-h.ch // handed over meanwhile
	return p, nil
}

// CollectionWaits reports whether a collection that gave way to the
// page's users waits to go on, their turn over (AcquireIdleWithin).
func (r *Repository) CollectionWaits(ledger, page string) bool {
	return r.waiting(ledger, page) != nil
}

func (r *Repository) waiting(ledger, page string) *handoff {
	if r.handoffs.Load() == 0 {
		return nil
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	p, ok := r.open[ledger+"/"+page]
	if !ok || p.handoff == nil || time.Now().Before(p.handoff.from) {
		return nil
	}
	return p.handoff
}

// WaitTurn waits up to d while a collection waits to go on
// (CollectionWaits): the caller, about to start a change that would hold
// the page (a file opened for writing), lets the collection have it first.
func (r *Repository) WaitTurn(ledger, page string, d time.Duration) {
	h := r.waiting(ledger, page)
	if h == nil {
		return
	}
	start := time.Now()
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-h.ch:
	case <-t.C:
	}
	slog.Debug("waited for a collection", "page", ledger+"/"+page, "took", time.Since(start), "turn", true)
}

// handoff is a collection's wait for a page (AcquireIdleWithin): from when
// it may have it, and ch, closed when it has it.
type handoff struct {
	from time.Time
	ch   chan struct{}
}

// handOver makes p exclusive for the collection waiting for it, if any,
// once it may have it and nobody but readers and the collection uses the
// page, with nobody waiting. Called with r.mu held.
func (r *Repository) handOver(p *Page) {
	h := p.handoff
	if h == nil || p.exclusive || p.refs-p.readers > 1 || p.waiters > 0 || time.Now().Before(h.from) {
		return
	}
	p.handoff = nil
	r.handoffs.Add(-1)
	r.takeIdle(p)
	close(h.ch)
}

// Reclaim gives the disk back the space of deleted rows of an idle page.
// Badger frees a deleted row's space only when a compaction reaches the
// lowest level holding it (which a page left idle never gets) and then a
// value log mostly unused is rewritten. Reclaim closes the page's db (its
// memtables become tables; a reopened db writes a new value log, so every
// older one can be rewritten) and compacts its tables into one level.
// A small db is compacted opened alone (compactAlone): anyone who wants
// the page meanwhile waits, for a moment. A larger one is compacted
// opened as its users open it, beside them: compacting 10 MiB of tables
// takes about 100 ms, which no writer should wait for. Then Reclaim
// rewrites or removes the value logs that are mostly unused, beside the
// page's users too.
func (r *Repository) Reclaim(ledger, page string) error {
	return r.reclaim(ledger, page, false)
}

// ReclaimAlone is Reclaim with the db compacted opened alone whatever its
// size, for a writer who waits for the space anyway. Opened alone, the db
// is compacted with every version but the newest declared unreadable
// (badgerdb.OpenManaged); beside the page's users, a compaction right
// after the reopen may run before Badger's read watermark is set and
// keep every deleted row (seen in the full-disk test: 18,410 rows
// deleted, and the same number more after the compaction).
func (r *Repository) ReclaimAlone(ledger, page string) error {
	return r.reclaim(ledger, page, true)
}

func (r *Repository) reclaim(ledger, page string, alone bool) error {
	if r.opts.ReadOnly {
		return nil
	}
	key := ledger + "/" + page
	alone = alone || tablesSize(r.pageDir(ledger, PageIDFor(page))) < compactAloneBelow
	if alone {
		if err := r.compactAlone(ledger, page); err != nil {
			return err
		}
	} else {
		if err := r.evict(ledger, page); err != nil {
			return err
		}
		compacting(key, false)
	}
	p, err := r.Acquire(ledger, page)
	if err != nil {
		return err
	}
	defer r.Release(p)
	if !alone {
		// Opened after the close, the db's tables are the page's whole
		// state and its oldest readable version is its newest: deleted
		// rows go wherever the compaction meets them. Writers add
		// tables to level 0 meanwhile; Flatten compacts those first.
		if err := p.db.Flatten(1); err != nil {
			return fmt.Errorf("store: compact %s: %w", key, err)
		}
		slog.Debug("collection step", "page", key, "step", "compacted")
	}
	// A rewrite copies up to (1-reclaimRatio) of a log into the current
	// one before the old goes: Badger writes it through a mapping, and a
	// full filesystem would kill the process.
	rewrite := uint64(float64(p.db.Opts().ValueLogFileSize) * (1 - reclaimRatio))
	for r.space.Room(rewrite) && p.check() == nil && p.db.RunValueLogGC(reclaimRatio) == nil {
		slog.Debug("collection step", "page", p.Ledger+"/"+p.Name, "step", "rewrote a value log")
	}
	return nil
}

// compacting logs the start of a compaction at debug level, the page's db
// closed: tests time writes against it.
func compacting(key string, alone bool) {
	slog.Debug("collection step", "page", key, "step", "compacting", "alone", alone)
}

// compactAloneBelow is the size of a page's tables below which Reclaim
// compacts them with the db opened alone. There its level 0 counts from
// one table, so that a db whose tables all sit in level 0 (where Badger
// compacts only from four) is compacted too; above it, the tables have
// spilled below level 0 (Badger's base level holds 4 MiB) and a compaction
// beside the users reaches them.
const compactAloneBelow = 4 << 20

// tablesSize sums the sizes of the tables in a db directory; an error
// counts as none.
func tablesSize(dir string) int64 {
	tables, _ := filepath.Glob(filepath.Join(dir, "*.sst"))
	var n int64
	for _, t := range tables {
		if fi, err := os.Stat(t); err == nil {
			n += fi.Size()
		}
	}
	return n
}

// compactAlone closes the page's db and compacts it, opened alone, into
// one level (see Reclaim).
func (r *Repository) compactAlone(ledger, page string) error {
	release, err := r.seize(ledger, page)
	if err != nil {
		return err
	}
	defer release()
	key := ledger + "/" + page
	compacting(key, true)
	dir := r.pageDir(ledger, PageIDFor(page))
	if err := badgerdb.Check(dir, true); err != nil {
		// Opened for changes, Badger would cut a damaged log.
		return fmt.Errorf("store: reclaim %s/%s: %w", ledger, page, err)
	}
	// Compacted by Flatten alone: Badger starts its compactors before it
	// knows its oldest readable version, and a compaction begun at open
	// keeps every deleted row (it moved them, still there, to the last
	// level, where nothing rewrites them again).
	o := badgerdb.Options(dir, false).WithNumLevelZeroTables(1).WithNumCompactors(0)
	return r.reclaimWith(o, key, func(db *badger.DB) error {
		// Every row's version is readable by nobody but the newest:
		// the compaction drops deleted rows and replaced versions.
		db.SetDiscardTs(db.MaxVersion())
		if err := db.Flatten(1); err != nil {
			return fmt.Errorf("store: compact %s: %w", key, err)
		}
		slog.Debug("collection step", "page", key, "step", "compacted")
		return nil
	})
}

// reclaimWith runs fn on the db opened with o, and closes it; a panic of
// Badger's is an error.
func (r *Repository) reclaimWith(o badger.Options, key string, fn func(db *badger.DB) error) (err error) {
	db, err := r.openPageDB(o, badgerdb.OpenManaged)
	if err != nil {
		return fmt.Errorf("store: reclaim %s: %w", key, err)
	}
	defer func() {
		if v := recover(); v != nil {
			err = fmt.Errorf("store: reclaim %s: the db failed (%v): %w", key, badgerdb.FirstLine(v), syscall.EIO)
		}
		err = errors.Join(err, db.Close())
	}()
	return fn(db)
}

// UnusedFor returns how long nobody has used the page: since its last
// release, or, for a page not open, as long as can be.
func (r *Repository) UnusedFor(ledger, page string) time.Duration {
	r.mu.Lock()
	defer r.mu.Unlock()
	p, open := r.open[ledger+"/"+page]
	switch {
	case !open:
		return math.MaxInt64
	case p.refs > 0:
		return 0
	}
	return time.Since(p.released)
}

// reclaimRatio is the share of a value log that must be unused for Reclaim
// to rewrite it: a log half unused costs half its size to rewrite.
const reclaimRatio = 0.5
