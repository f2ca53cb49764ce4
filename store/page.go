package store

import (
	"errors"
	"fmt"
	"log/slog"
	"path/filepath"
	"slices"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/ledgerfs/ledgerfs/internal/badgerdb"

	"github.com/dgraph-io/badger/v4"
	"github.com/restic/chunker"

	"github.com/ledgerfs/ledgerfs/cas"
	"github.com/ledgerfs/ledgerfs/internal/btree"
)

// ErrClosed reports an operation on a page that has been closed.
var ErrClosed = errors.New("store: page is closed")

// Page is an open page: its Badger db and what is needed to read and write
// its trees and values. A Page is safe for concurrent use; the caller that
// changes heads holds Lock.
type Page struct {
	Ledger string
	Name   string
	ID     PageID

	db     *badger.DB
	pol    atomic.Uint64 // the chunker.Pol of its values (Polynomial)
	nodes  *btree.Store
	closed atomic.Bool
	// broken is the error of a panic Badger raised in the page's db: the
	// page gives it from then on (see recoverPanic).
	broken atomic.Pointer[error]

	// mu serializes changes to the heads (commits, recovery).
	mu sync.Mutex

	// heads caches the head commits: reading heads/ rows would walk the
	// deleted rows of every earlier head until compaction drops them.
	// hver counts the writers' changes of it (setHeads): a reader caches
	// what it read from the db only if none came meanwhile.
	hmu   sync.RWMutex
	heads []*Commit
	hver  uint64
	// headsRead, if set, runs in Heads between its read of the db and its
	// caching of what it read (tests).
	headsRead func()

	repo *Repository
	refs int // guarded by repo.mu
	// released is when the last user released the page; guarded by
	// repo.mu. A background Reclaim waits for a quiet page.
	released time.Time
	// readers counts the refs made readers' with AsReader, which do not
	// keep a collection from the page; guarded by repo.mu.
	readers int
	// exclusive is set (guarded by repo.mu) while a collection holds the
	// page alone (AcquireIdle); done is closed when it ends. yield asks it
	// to end soon: someone else wants the page.
	exclusive bool
	done      chan struct{}
	yield     atomic.Bool
	// waiters counts the users waiting for the exclusive holder to end
	// (guarded by repo.mu): a collection that gave way to them does not
	// take the page again before they had it (AcquireIdle).
	waiters int
	// handoff is set (guarded by repo.mu) while a collection that gave
	// way waits for the page (AcquireIdleWithin).
	handoff *handoff
	// readOnly is why the db was opened read-only: the repository's
	// filesystem was nearly full (see space), or the db is damaged (see
	// checkDB). Every change gets it; a page opened for want of space is
	// reopened for changes once there is room and it is idle.
	readOnly error
	damaged  bool

	ra   badgerdb.ReadAhead
	drop badgerdb.Dropper

	dur Durability
}

// Dir is the directory of the page's db.
func (p *Page) Dir() string { return p.db.Opts().Dir }

// VersionsFileName is the name, in a page's directory, of the index of
// its entries' versions that package history keeps there. It is derived
// from the commits, so DeleteCommits removes it before any goes.
const VersionsFileName = "ledgerfs-versions.idx"

// VersionsPath is the path of the page's version index (VersionsFileName).
func (p *Page) VersionsPath() string { return filepath.Join(p.Dir(), VersionsFileName) }

// Polynomial is the chunker polynomial the page's values and tree nodes are
// cut with: the repository's, or the page's own (see AdoptPolynomial).
func (p *Page) Polynomial() chunker.Pol { return chunker.Pol(p.pol.Load()) }

// Nodes returns the page's tree node store.
func (p *Page) Nodes() *btree.Store { return p.nodes }

// Lock serializes head changes.
func (p *Page) Lock()   { p.mu.Lock() }
func (p *Page) Unlock() { p.mu.Unlock() }

// CheckSpace returns an error wrapping syscall.ENOSPC when a change other
// than new content must be refused to keep the repository's filesystem from
// filling up (see space).
func (p *Page) CheckSpace() error {
	if p.readOnly != nil {
		return p.readOnly
	}
	return p.repo.space.Claim(0, badgerdb.ForChange)
}

// CheckContentSpace returns an error wrapping syscall.ENOSPC when n more
// bytes of file content written outside the db, where statfs sees them at
// once (a spool), would eat into the reserve.
func (p *Page) CheckContentSpace(n int) error {
	if err := p.repo.space.Claim(uint64(n), badgerdb.ForContent); err != nil {
		return err
	}
	p.repo.space.Settled(uint64(n))
	return nil
}

func (p *Page) check() error {
	if p.closed.Load() {
		return fmt.Errorf("page %s/%s: %w", p.Ledger, p.Name, ErrClosed)
	}
	if err := p.broken.Load(); err != nil {
		return *err
	}
	return nil
}

// recoverPanic turns a panic of Badger's in the calling goroutine into an
// error wrapping EIO, and breaks the page: every later use of it gets that
// error, while other pages keep serving. Badger panics, rather than
// failing, on some damage it finds only when it reads a table (checkDB
// reads each at open; the damage may come later). A panic in one of
// Badger's own goroutines (a compaction) cannot be caught and still ends
// the process.
func (p *Page) recoverPanic(err *error) {
	r := recover()
	if r == nil {
		return
	}
	e := fmt.Errorf("page %s/%s: its db %s failed (%v); unmount, copy the repository aside and check it: %w", p.Ledger, p.Name, p.Dir(), badgerdb.FirstLine(r), syscall.EIO)
	if p.broken.CompareAndSwap(nil, &e) {
		slog.Error("page db failed; the page gives EIO until it is opened again", "page", p.Ledger+"/"+p.Name, "db", p.Dir(), "panic", badgerdb.FirstLine(r))
	}
	*err = e
}

// view runs fn in a read transaction of the page's db (see recoverPanic).
func (p *Page) view(fn func(*badger.Txn) error) (err error) {
	defer p.recoverPanic(&err)
	return p.db.View(fn)
}

// update runs fn in a read-write transaction of the page's db (see
// recoverPanic).
func (p *Page) update(fn func(*badger.Txn) error) (err error) {
	defer p.recoverPanic(&err)
	return p.db.Update(fn)
}

// Get returns a stored piece (cas.Source).
func (p *Page) Get(d cas.Digest, buf []byte) ([]byte, error) { return p.get(d, buf, 0) }

// GetStreaming returns a stored piece that a read in order wants, which
// goes on to read ahead bytes from d on, and has the value log around it
// read in (cas.StreamSource); a piece the page lacks is fetched with those
// after it (Fetcher).
func (p *Page) GetStreaming(d cas.Digest, buf []byte, ahead int64) ([]byte, error) {
	return p.get(d, buf, max(ahead, 1))
}

// get returns piece d; ahead is a read in order's (GetStreaming), 0 for
// another read.
func (p *Page) get(d cas.Digest, buf []byte, ahead int64) ([]byte, error) {
	if err := p.check(); err != nil {
		return nil, err
	}
	stream := ahead > 0
	if data, ok := p.pending(d, buf, ahead); ok {
		return data, nil
	}
	var out []byte
	var dropped bool
	err := p.view(func(txn *badger.Txn) error {
		it, err := txn.Get(objectKey(d))
		if err != nil {
			return err
		}
		enc := it.UserMeta()
		return it.Value(func(v []byte) error {
			var err error
			out, err = decodePiece(buf[:0], v, enc)
			if stream && !d.IsIndex() {
				p.ra.Near(p.repo.ra, v)
			} else if p.repo.trim.Pressed() {
				// Copied: its pages may leave the process, and stay in
				// the page cache (badgerdb.Dropper).
				dropped = p.drop.Drop(v)
			}
			return err
		})
	})
	if errors.Is(err, badger.ErrKeyNotFound) {
		return p.fetch(d, buf, ahead)
	}
	// An index piece held here is no part of a stream's run of chunks:
	// a stream asks for it from its source only so that a remote fetch
	// brings the chunks after it along.
	p.repo.trim.AddValueRead(len(out), stream && !d.IsIndex() || dropped)
	return out, err
}

// Put stores a piece in its own transaction (cas.Sink); streaming writers use
// a PieceWriter instead.
func (p *Page) Put(d cas.Digest, data []byte) error {
	w := p.NewPieceWriter()
	if err := w.Put(d, data); err != nil {
		w.Discard()
		return err
	}
	return w.Flush()
}

// PieceWriter batches new pieces into large transactions. A piece that the
// page already holds is skipped, so identical content adds no rows. New
// pieces are marked transient until a commit uses them.
type PieceWriter struct {
	p       *Page
	txn     *badger.Txn
	pending int
	// Full batches commit in the background while the next one fills, at
	// most maxInflight at a time; Flush waits for them.
	inflight chan struct{}
	wg       sync.WaitGroup
	errMu    sync.Mutex
	err      error
	// New lists the pieces this writer added, in the order they were put
	// (children before the index pieces over them).
	New []cas.Digest
	// Track makes the writer record New.
	Track bool
	// bulk marks a writer of file content, which must leave the whole
	// reserve free (see space).
	bulk bool
	// held remembers pieces put again lately: a run of zeros hands the
	// writer the same few pieces for every 4 KiB, and looking each up in
	// the db again cost ~35 µs once its batch was committed (9 s a GiB). A
	// piece is held from its second put (found in the batch, cheaply), so
	// a writer of new pieces alone, a close's, keeps no map.
	held map[cas.Digest]struct{}
}

// maxHeld bounds PieceWriter.held.
const maxHeld = 1024

// hold remembers d, put to w again.
func (w *PieceWriter) hold(d cas.Digest) {
	if w.held == nil || len(w.held) >= maxHeld {
		w.held = make(map[cas.Digest]struct{}, 64)
	}
	w.held[d] = struct{}{}
}

// flushBytes bounds the memory a batch holds before it is committed. A
// batch's values stay referenced until Badger has written them, so a
// streaming write keeps up to (1+maxInflight) batches of chunks live; 4 MiB
// batches held ~5 MiB less heap than 8 MiB ones but wrote 1 GiB 4 % slower
// (dd into a fresh mount, medians of four: 123 against 128 MB/s).
const flushBytes = 8 << 20

// maxInflight bounds the batches committing in the background.
const maxInflight = 2

// NewPieceWriter starts a batch of piece writes.
func (p *Page) NewPieceWriter() *PieceWriter {
	return &PieceWriter{p: p, inflight: make(chan struct{}, maxInflight)}
}

// WriteTree writes the nodes of t that changed as pieces of the page, and
// flushes them, for a commit of its root: the writer it returns tracks them
// (New) and takes what else the commit writes. On error what it wrote is
// discarded.
func (p *Page) WriteTree(t *btree.Tree) (cas.ObjectIdentifier, *PieceWriter, error) {
	pw := p.NewPieceWriter()
	pw.Track = true
	root, _, err := t.Write(pw)
	if err == nil {
		err = pw.Flush()
	}
	if err != nil {
		pw.Discard()
		return cas.ObjectIdentifier{}, nil, err
	}
	return root, pw, nil
}

// PutRepeat implements cas.RepeatSink: the piece is put once and counted
// as deduplicated the other n-1 times, as n puts would count it.
func (w *PieceWriter) PutRepeat(d cas.Digest, data []byte, n uint64) error {
	if err := w.Put(d, data); err != nil || n < 2 {
		return err
	}
	w.p.repo.counters.piecesDedup.Add(n - 1)
	w.p.repo.counters.bytesDedup.Add((n - 1) * uint64(len(data)))
	return nil
}

// Put implements cas.Sink.
func (w *PieceWriter) Put(d cas.Digest, data []byte) (err error) {
	defer w.p.recoverPanic(&err)
	if err := w.p.check(); err != nil {
		return err
	}
	if w.p.readOnly != nil {
		return w.p.readOnly
	}
	if w.txn == nil {
		w.txn = w.p.db.NewTransaction(true)
	}
	if _, ok := w.held[d]; ok {
		w.p.repo.counters.piecesDedup.Add(1)
		w.p.repo.counters.bytesDedup.Add(uint64(len(data)))
		return nil
	}
	key := objectKey(d)
	switch _, err := w.txn.Get(key); {
	case err == nil:
		if w.Track {
			// A piece still transient (left by a write that was never
			// committed) must move to local with the pieces above it.
			switch _, err := w.txn.Get(statusKey(Transient, d)); {
			case err == nil:
				w.New = append(w.New, d)
			case !errors.Is(err, badger.ErrKeyNotFound):
				return fmt.Errorf("store: look up piece status %s: %w", d, err)
			}
		}
		w.p.repo.counters.piecesDedup.Add(1)
		w.p.repo.counters.bytesDedup.Add(uint64(len(data)))
		w.hold(d)
		return nil
	case !errors.Is(err, badger.ErrKeyNotFound):
		return fmt.Errorf("store: look up piece %s: %w", d, err)
	}
	if w.bulk {
		if err := w.p.repo.space.Claim(uint64(len(data)), badgerdb.ForContent); err != nil {
			return err
		}
	}
	// Stored as it is: compressing costs a close ~100 µs per 16 KiB of
	// source code on this kind of machine (zstd's fastest level at
	// ~170 MB/s), so pieces are compressed later, by a collection, when
	// the page is idle (Page.CompressNew).
	stored := data
	set := func() error {
		if err := w.txn.Set(key, stored); err != nil {
			return err
		}
		return w.txn.Set(statusKey(Transient, d), nil)
	}
	err = set()
	if errors.Is(err, badger.ErrTxnTooBig) {
		if err = w.commitAsync(); err == nil {
			err = set()
		}
	}
	if err == nil {
		w.p.repo.counters.piecesStored.Add(1)
		w.p.repo.counters.bytesStored.Add(uint64(len(data)))
	}
	if err != nil {
		w.settled(len(data))
		return fmt.Errorf("store: write piece %s: %w", d, err)
	}
	if w.Track {
		w.New = append(w.New, d)
	}
	w.pending += len(stored)
	w.p.repo.trim.AddWritten(len(stored))
	if w.pending >= flushBytes {
		return w.commitAsync()
	}
	return nil
}

// commitAsync starts committing the current (non-nil) batch, so that
// hashing and chunking go on while Badger writes it. A piece in a batch not
// yet committed is not seen by the next batch's lookups and may be written
// twice, which costs space until value-log GC and nothing else.
//
// The next batch's transaction starts before this one commits: Badger
// starts a transaction only once every commit before it is written, so
// starting it afterwards would make hashing wait for this batch's write.
func (w *PieceWriter) commitAsync() error {
	txn, full, n := w.txn, w.pending >= flushBytes, w.pending
	w.txn, w.pending = w.p.db.NewTransaction(true), 0
	w.inflight <- struct{}{}
	w.wg.Add(1)
	txn.CommitWith(func(err error) {
		w.settled(n)
		if err != nil {
			w.errMu.Lock()
			if w.err == nil {
				w.err = fmt.Errorf("store: commit pieces: %w", err)
			}
			w.errMu.Unlock()
		}
		<-w.inflight
		if full && err == nil {
			badgerdb.StartWriteback(w.p.db.Opts().ValueDir)
		}
		w.wg.Done()
	})
	return w.firstErr()
}

// settled tells the space guard that n bytes of content claimed by Put are
// in the db's files, or dropped.
func (w *PieceWriter) settled(n int) {
	if w.bulk {
		w.p.repo.space.Settled(uint64(n))
	}
}

func (w *PieceWriter) firstErr() error {
	w.errMu.Lock()
	defer w.errMu.Unlock()
	return w.err
}

// Flush commits the pieces written so far and waits until they are in the
// db.
func (w *PieceWriter) Flush() error { return w.flushWith(nil) }

// flushWith commits the pieces written so far together with the rows that
// rows (if not nil) sets, in one transaction after the batches already
// committing are written, and waits for it: rows that refer to the pieces
// (a journal entry) are written with them or not at all. Rows too many for the
// transaction follow the pieces in one of their own.
func (w *PieceWriter) flushWith(rows func(txn *badger.Txn) error) error {
	w.wg.Wait()
	if err := w.firstErr(); err != nil {
		w.Discard()
		return err
	}
	txn, n := w.txn, w.pending
	w.txn, w.pending = nil, 0
	defer w.settled(n)
	if rows == nil {
		if txn == nil {
			return nil
		}
		rows = func(*badger.Txn) error { return nil }
	}
	if txn == nil {
		txn = w.p.db.NewTransaction(true)
	}
	defer func() { txn.Discard() }()
	err := rows(txn)
	if errors.Is(err, badger.ErrTxnTooBig) {
		if err = txn.Commit(); err != nil {
			return fmt.Errorf("store: commit pieces: %w", err)
		}
		txn = w.p.db.NewTransaction(true)
		err = rows(txn)
	}
	if err != nil {
		return err
	}
	if err := txn.Commit(); err != nil {
		return fmt.Errorf("store: commit pieces and rows: %w", err)
	}
	return nil
}

// Discard drops the pieces not yet flushed (batches already committing
// complete: their pieces stay transient, garbage for recovery).
func (w *PieceWriter) Discard() {
	if w.txn != nil {
		w.txn.Discard()
		w.txn = nil
	}
	w.settled(w.pending)
	w.pending = 0
	w.wg.Wait()
}

// Commit returns a commit by id.
func (p *Page) Commit(id CommitID) (*Commit, error) {
	if id == FirstCommitID {
		return FirstCommit(), nil
	}
	if err := p.check(); err != nil {
		return nil, err
	}
	var c *Commit
	err := p.view(func(txn *badger.Txn) error {
		var err error
		c, err = readCommit(txn, id)
		return err
	})
	return c, err
}

// readCommit reads a commit inside a transaction.
func readCommit(txn *badger.Txn, id CommitID) (*Commit, error) {
	if id == FirstCommitID {
		return FirstCommit(), nil
	}
	it, err := txn.Get(commitKey(id))
	if errors.Is(err, badger.ErrKeyNotFound) {
		return nil, fmt.Errorf("store: commit %s: %w", id, ErrNotFound)
	}
	if err != nil {
		return nil, err
	}
	buf, err := it.ValueCopy(nil)
	if err != nil {
		return nil, err
	}
	return DecodeCommit(id, buf)
}

// Heads returns the page's head commits. A page with no heads row is new: its
// head is the first commit.
func (p *Page) Heads() ([]*Commit, error) {
	if err := p.check(); err != nil {
		return nil, err
	}
	p.hmu.RLock()
	cached, ver := p.heads, p.hver
	p.hmu.RUnlock()
	if cached != nil {
		return slices.Clone(cached), nil
	}
	var heads []*Commit
	err := p.view(func(txn *badger.Txn) error {
		var err error
		heads, err = readHeads(txn)
		return err
	})
	if err != nil {
		return nil, err
	}
	if p.headsRead != nil {
		p.headsRead()
	}
	// A commit or a pull that moved the heads since the read above cached
	// its own: what was read is older, and caching it would hide the move
	// from every later reader of this page (a mount's lookups saw a page
	// pulled in as empty until it was closed).
	p.hmu.Lock()
	if p.hver == ver {
		p.heads = slices.Clone(heads)
	}
	p.hmu.Unlock()
	return heads, nil
}

// ensureHead gives a page db with no heads/ row the first commit's: Ledger's
// storage holds a head for every page, an empty one's being the first
// commit (a page made before this rule, and never changed, had none).
func ensureHead(db *badger.DB) error {
	return db.Update(func(txn *badger.Txn) error {
		it := txn.NewIterator(badger.IteratorOptions{Prefix: []byte(PrefixHeads)})
		it.Rewind()
		found := it.Valid()
		it.Close()
		if found {
			return nil
		}
		return txn.Set(headKey(FirstCommitID), EncodeUint64(uint64(FirstCommit().Timestamp)))
	})
}

// setHeads records the heads a change of them left in the db (Land,
// Adopt), after its transaction.
func (p *Page) setHeads(heads []*Commit) {
	p.hmu.Lock()
	p.heads = slices.Clone(heads)
	p.hver++
	p.hmu.Unlock()
}

// readHeads reads the heads inside a transaction.
func readHeads(txn *badger.Txn) ([]*Commit, error) {
	var ids []CommitID
	it := txn.NewIterator(badger.IteratorOptions{Prefix: []byte(PrefixHeads)})
	defer it.Close()
	for it.Rewind(); it.Valid(); it.Next() {
		k := it.Item().Key()[len(PrefixHeads):]
		if len(k) != len(CommitID{}) {
			return nil, fmt.Errorf("store: malformed head row %q", it.Item().Key())
		}
		ids = append(ids, CommitID(k))
	}
	if len(ids) == 0 {
		return []*Commit{FirstCommit()}, nil
	}
	heads := make([]*Commit, 0, len(ids))
	for _, id := range ids {
		c, err := readCommit(txn, id)
		if err != nil {
			return nil, err
		}
		heads = append(heads, c)
	}
	return heads, nil
}

// Head returns the page's newest head: the one of highest generation, then
// latest timestamp. Pages have one head except between a commit and its
// merge.
func (p *Page) Head() (*Commit, error) {
	heads, err := p.Heads()
	if err != nil {
		return nil, err
	}
	return Newest(heads), nil
}

// Newest picks the head of highest generation, then latest timestamp, then
// highest id.
func Newest(heads []*Commit) *Commit {
	best := heads[0]
	for _, h := range heads[1:] {
		if h.Generation > best.Generation ||
			h.Generation == best.Generation && (h.Timestamp > best.Timestamp ||
				h.Timestamp == best.Timestamp && string(h.ID[:]) > string(best.ID[:])) {
			best = h
		}
	}
	return best
}

// Tree opens the tree of a commit.
func (p *Page) Tree(c *Commit) *btree.Tree { return p.nodes.Open(c.Root) }

// SetStatus moves pieces to status s in batches, in the order given; callers
// pass children before parents so that a piece never has a later status
// than a piece below it.
func (p *Page) SetStatus(s PieceStatus, ds []cas.Digest) error {
	err := batched(p.db, len(ds), func(txn *badger.Txn, i int) error {
		for _, o := range Statuses {
			if o != s {
				if err := txn.Delete(statusKey(o, ds[i])); err != nil {
					return err
				}
			}
		}
		return txn.Set(statusKey(s, ds[i]), nil)
	})
	if err != nil {
		return fmt.Errorf("store: set piece status %s: %w", s, err)
	}
	// The rows reach tables the db flushes and compacts through their
	// mappings: counted as a writer's traffic, so that the trimmer keeps
	// a landing's share of them at a writer's bound.
	p.repo.trim.AddWritten(len(ds) * statusTraffic)
	return nil
}

// statusTraffic is what SetStatus counts of mapped table pages per piece:
// its three rows (two deletes and a set), their share of the memtable's
// flush and of the compactions after it.
const statusTraffic = 1 << 10

// IsTransient reports whether a piece is marked transient: used by a
// journal that is not committed yet, or garbage left by a crash.
func (p *Page) IsTransient(d cas.Digest) (bool, error) {
	// A large value's commit looks up the status of each of its chunks, in
	// no order the tables know.
	p.repo.trim.AddLookup()
	err := p.view(func(txn *badger.Txn) error {
		_, err := txn.Get(statusKey(Transient, d))
		return err
	})
	if errors.Is(err, badger.ErrKeyNotFound) {
		return false, nil
	}
	return err == nil, err
}

// Has reports whether the piece d is stored, reading its key only.
func (p *Page) Has(d cas.Digest) (bool, error) {
	err := p.view(func(txn *badger.Txn) error {
		_, err := txn.Get(objectKey(d))
		return err
	})
	if errors.Is(err, badger.ErrKeyNotFound) {
		return false, nil
	}
	return err == nil, err
}

// Settle returns value-log pages touched by recent work to the page cache;
// the journal calls it after each commit.
func (p *Page) Settle() { p.repo.trim.Settle() }

// Writable reports whether the page takes changes: its db was opened for
// writing, and not refused changes (see readOnly).
func (p *Page) Writable() bool { return p.readOnly == nil && !p.db.Opts().ReadOnly }

// RunGC reclaims value log space; it runs until no file is worth
// rewriting, or someone waits for a page held with AcquireIdle.
func (p *Page) RunGC(ratio float64) {
	if p.readOnly != nil {
		return
	}
	for !p.Yielding() && p.check() == nil && p.db.RunValueLogGC(ratio) == nil {
	}
}

func nowNs() int64 { return time.Now().UnixNano() }

// batched runs op for i in [0, n) in as few transactions as Badger allows,
// in order: when a transaction is full it is committed and op(i) retried in
// the next. For row maintenance that need not be atomic as a whole.
func batched(db *badger.DB, n int, op func(txn *badger.Txn, i int) error) error {
	txn := db.NewTransaction(true)
	defer func() { txn.Discard() }()
	for i := 0; i < n; i++ {
		err := op(txn, i)
		if errors.Is(err, badger.ErrTxnTooBig) {
			if err = txn.Commit(); err != nil {
				return err
			}
			txn = db.NewTransaction(true)
			err = op(txn, i)
		}
		if err != nil {
			return err
		}
	}
	return txn.Commit()
}
