// Package gc collects a page: it prunes the commits its retention policy
// does not keep and deletes the pieces (tree nodes, index pieces, chunks)
// that no kept commit reaches, then has the store give the space back.
//
// A collection needs the page alone (store.Repository.AcquireIdle, or an
// unmounted repository): a writer could otherwise reuse a piece it is
// deleting, since a close that finds its chunk stored does not write it
// again. It stops early, with what it did so far, when asked (Options.Stop):
// everything it deleted is unreachable at every step, so a stop or a crash
// leaves a valid page, and the next collection deletes what is left.
//
// Layer: above store, journal and retention; the mount and the command
// line run it.
package gc

import (
	"encoding/binary"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/dgraph-io/ristretto/v2/z"

	"github.com/ledgerfs/ledgerfs/cas"
	"github.com/ledgerfs/ledgerfs/internal/btree"
	"github.com/ledgerfs/ledgerfs/internal/retention"
	"github.com/ledgerfs/ledgerfs/store"
)

// Options steer one collection.
type Options struct {
	Policy retention.Policy
	// DryRun counts what a collection would prune and delete, and changes
	// nothing.
	DryRun bool
	// KeepUnsynced keeps every commit not yet synced (unsynced/commits/
	// rows): set when the repository syncs, so that no commit is lost
	// before the cloud has it. Without sync every commit has the row, and
	// keeping them would keep everything.
	KeepUnsynced bool
	// Pinned are values readers of the page hold open (read-only files):
	// their pieces are kept whether or not a kept commit reaches them.
	Pinned []cas.ObjectIdentifier
	// Stop, polled between steps, ends the collection early.
	Stop func() bool
	// Progress, if set, is told each phase's progress.
	Progress func(phase string, done, total int64)
	// Gentle paces the collection to half of one processor: after each
	// short stretch of work it rests as long, so that the writers of other
	// pages keep their latency (the mount's: a create's p99 while a
	// collection ran fell from 18x its quiet p99 to 6.5x; resting three
	// times as long gained nothing more); without, it runs flat out (the
	// command line's, on an unmounted repository).
	Gentle bool
}

// pacer rests as long as the work since its last rest, when gentle.
type pacer struct {
	gentle bool
	since  time.Time
}

// stretch is how long a collection works between rests when gentle.
const stretch = 2 * time.Millisecond

func (p *pacer) pace() {
	if !p.gentle {
		return
	}
	if p.since.IsZero() {
		p.since = time.Now()
		return
	}
	if worked := time.Since(p.since); worked >= stretch {
		time.Sleep(worked)
		p.since = time.Now()
	}
}

// Result says what a collection did (or, dry, would do).
type Result struct {
	Commits int // commits stored before
	Pruned  int // commits removed
	Objects int // pieces stored before
	Deleted int // pieces removed
	Bytes   int64
	Freed   int64 // bytes of the pieces removed
	Stopped bool  // ended early by Options.Stop
	Took    time.Duration
	// Compressed pieces (written since the last collection, stored
	// as they were) and the bytes compression saved.
	Compressed    int
	CompressSaved int64
	// Unchanged: CollectPage found the page as its last collection left
	// it (PageOptions.Done) and did nothing. Done says what the page and
	// policy were, for the next one.
	Unchanged bool
	Done      string
	// GaveWay counts the times an explicit collection let the page's
	// writers in before it went on.
	GaveWay int
	// ReclaimLater: the page's readers kept it open, so the space of what
	// was deleted is given back at a later collection, once they are
	// gone.
	ReclaimLater bool
}

// Add adds o's counts to r's.
func (r *Result) Add(o Result) {
	r.Commits += o.Commits
	r.Pruned += o.Pruned
	r.Objects += o.Objects
	r.Deleted += o.Deleted
	r.Bytes += o.Bytes
	r.Freed += o.Freed
	r.Took += o.Took
	r.Compressed += o.Compressed
	r.CompressSaved += o.CompressSaved
}

// ErrJournals is the error of collecting a page with journals: changes
// not committed yet, or an open transaction, whose pieces only their
// journal knows.
var ErrJournals = errors.New("gc: the page has changes not committed yet")

// batch is how many rows one db transaction of a collection deletes.
const batch = 500

// Collect collects page p, which the caller holds alone.
func Collect(p *store.Page, o Options) (Result, error) {
	c := newCollection(o)
	err := c.run(p)
	return c.r, err
}

// collection is one collection of a page, in steps: prune the commits the
// policy does not keep, mark what the other commits reach, sweep the rest.
// It may stop (Options.Stop) and go on from where it stopped (run again),
// as an explicit one does when a writer wants the page: whatever was
// committed meanwhile is marked before the sweep goes on, so nothing the
// page's users reached in between goes. (They cannot reach a piece any
// other way: a collection runs only on a page nobody writes, with no
// journal, and the sweep reads the page as it was when the run began.)
type collection struct {
	o Options
	r Result
	// pruned is the commits chosen for pruning, once chosen (decide),
	// and prune the part of them still to delete.
	pruned map[store.CommitID]bool
	prune  []store.CommitID
	reach  *marker
	// known is the commits the collection found to mark, and todo those
	// of them whose walk has not ended.
	known map[store.CommitID]bool
	todo  []*store.Commit
	// after is the last piece swept; swept, whether the sweep ended.
	after cas.Digest
	swept bool
	// every is how many pieces the marker and the sweep go through
	// between polls of Options.Stop.
	every int
}

// poll is how many pieces a collection goes through between polls of
// Options.Stop: a few hundred microseconds' work.
const poll = 256

func newCollection(o Options) *collection {
	return &collection{o: o, every: poll}
}

// done reports whether the collection ended.
func (c *collection) done() bool { return c.swept }

// run goes on with the collection, on page p held alone, until it ends or
// is told to stop (c.r.Stopped).
func (c *collection) run(p *store.Page) error {
	start := time.Now()
	defer func() { c.r.Took += time.Since(start) }()
	pace := &pacer{gentle: c.o.Gentle}
	c.r.Stopped = false
	stop := func() bool {
		pace.pace()
		if c.o.Stop != nil && c.o.Stop() {
			c.r.Stopped = true
		}
		return c.r.Stopped
	}
	progress := func(phase string, done, total int64) {
		if c.o.Progress != nil {
			c.o.Progress(phase, done, total)
		}
	}
	p.Lock()
	defer p.Unlock()
	// The sync log's records are built from values the collection may
	// drop: after a checkpoint no record needs them.
	if d := p.Durability(); !d.Empty() {
		if err := d.Checkpoint(); err != nil {
			return err
		}
	}
	if has, err := p.HasJournals(); err != nil {
		return err
	} else if has {
		return ErrJournals
	}
	if c.pruned == nil {
		step(p, "pruning")
		if err := c.decide(p); err != nil {
			return err
		}
	}
	for total := len(c.prune); len(c.prune) > 0 && !c.o.DryRun; {
		if stop() {
			return nil
		}
		progress("prune", int64(total-len(c.prune)), int64(total))
		n := min(batch, len(c.prune))
		if err := p.DeleteCommits(c.prune[:n]); err != nil {
			return err
		}
		c.prune = c.prune[n:]
		step(p, "pruned a batch of commits")
	}
	if c.reach == nil {
		n, err := p.CountPieces()
		if err != nil {
			return err
		}
		c.reach = newMarker(p, n)
		c.reach.every = c.every
	}
	c.reach.p = p // the db may have been closed and opened again since
	c.reach.resume(stop)
	if err := c.mark(p, progress); err != nil || c.r.Stopped {
		return err
	}
	for _, v := range c.o.Pinned {
		if err := c.reach.value(v); err != nil {
			return err
		}
	}
	step(p, "marked what kept commits reach")
	return c.sweep(p, stop, progress)
}

// decide chooses the commits to prune: those the policy does not keep,
// but heads and, with KeepUnsynced, unsynced ones and each device's last
// batch's head (store.BatchHead). The others are to mark.
func (c *collection) decide(p *store.Page) error {
	var all []*store.Commit
	err := p.CommitIDs(nil, func(id store.CommitID) error {
		c, err := p.Commit(id)
		all = append(all, c)
		return err
	})
	if err != nil {
		return fmt.Errorf("gc: read commits: %w", err)
	}
	c.r.Commits = len(all)
	must := map[store.CommitID]bool{}
	heads, err := p.Heads()
	if err != nil {
		return err
	}
	for _, h := range heads {
		must[h.ID] = true
	}
	if c.o.KeepUnsynced {
		if err := p.UnsyncedCommits(func(id store.CommitID) error { must[id] = true; return nil }); err != nil {
			return err
		}
		// The bases of the next merges with the other devices.
		if err := p.BatchHeads(func(_ string, h store.BatchHead) error { must[h.Head] = true; return nil }); err != nil {
			return err
		}
	}
	byTime := make([]retention.Commit, len(all))
	index := map[store.CommitID]*store.Commit{}
	for i, c := range all {
		byTime[i] = retention.Commit{ID: c.ID, Time: time.Unix(0, c.Timestamp)}
		index[c.ID] = c
	}
	retention.Sort(byTime)
	keep := c.o.Policy.Keep(byTime)
	c.pruned, c.known = map[store.CommitID]bool{}, map[store.CommitID]bool{}
	for i, cm := range byTime {
		if keep[i] || must[cm.ID] {
			c.known[cm.ID] = true
			c.todo = append(c.todo, index[cm.ID])
		} else {
			c.pruned[cm.ID] = true
			c.prune = append(c.prune, cm.ID)
		}
	}
	c.r.Pruned = len(c.prune)
	return nil
}

// mark walks every commit not pruned whose walk has not ended: those
// decide kept, and those committed since the collection began.
func (c *collection) mark(p *store.Page, progress func(string, int64, int64)) error {
	if err := c.newCommits(p); err != nil {
		return err
	}
	for total := len(c.todo); len(c.todo) > 0; {
		progress("mark", int64(total-len(c.todo)), int64(total))
		if err := c.reach.commit(c.todo[0]); err != nil || c.reach.stopped() {
			return err
		}
		c.todo = c.todo[1:]
	}
	return nil
}

// newCommits queues for marking the commits made since the collection
// last ran, if any: the heads' ancestors up to commits it knows or pruned.
// (Every commit stored descends from a head, and those made since from one
// the collection knew: it keeps every head it found.)
func (c *collection) newCommits(p *store.Page) error {
	heads, err := p.Heads()
	if err != nil {
		return err
	}
	var stack []store.CommitID
	for _, h := range heads {
		stack = append(stack, h.ID)
	}
	for len(stack) > 0 {
		id := stack[len(stack)-1]
		stack = stack[:len(stack)-1]
		if c.known[id] || c.pruned[id] || id == store.FirstCommitID {
			continue
		}
		cm, err := p.Commit(id)
		if errors.Is(err, store.ErrNotFound) {
			continue // pruned by an earlier collection
		}
		if err != nil {
			return err
		}
		c.known[id] = true
		c.todo = append(c.todo, cm)
		stack = append(stack, cm.Parents...)
	}
	return nil
}

// marker finds the pieces kept commits reach: each tree node and index
// piece once, in an exact set (they are walked), and chunks in a Bloom
// filter, so that memory follows the tree and the indexes, not the data
// (a chunk averages 16 KiB; a filter spends 29 bits on each). A false
// positive keeps a garbage chunk until a later collection; it never
// deletes a reachable one.
type marker struct {
	p *store.Page
	// seen holds each tree node and index piece walked, with its place in
	// the walk's order.
	seen   map[cas.Digest]uint32
	chunks *z.Bloom
	stop   func() bool
	// open holds the nodes whose children a halt kept from being walked
	// whole.
	open   map[cas.Digest]struct{}
	n      int
	every  int // adds between polls of stop
	halted bool
	// remote: walk into tree nodes and index pieces not held too, read
	// through the repository's fetcher (Reach).
	remote bool
}

// falsePositives is the share of garbage chunks a collection keeps.
const falsePositives = 1e-6

// stopped reports whether the collection was asked to stop.
func (m *marker) stopped() bool { return m.halted }

func newMarker(p *store.Page, pieces int) *marker {
	m := &marker{p: p, seen: map[cas.Digest]uint32{}, chunks: z.NewBloomFilter(float64(max(pieces, 1024)), falsePositives), every: poll,
		open: map[cas.Digest]struct{}{}}
	m.resume(func() bool { return false })
	return m
}

// resume readies the marker to walk again, polling stop, after a walk
// halted: a walk from a root goes down again to the nodes the halt left
// open (node).
func (m *marker) resume(stop func() bool) {
	m.halted = false
	m.stop = func() bool {
		m.halted = m.halted || stop()
		return m.halted
	}
}

// chunkHash is 8 bytes of a chunk's digest, already a uniform hash, with
// its lowest bit set. z.Bloom probes h + i·l modulo its size (a power of
// two), l the hash's low bits: an even l repeats positions, and l = 0 (1
// digest in 2^15 at 1,024 entries) put all 20 probes on one bit, so such a
// chunk passed for reached whenever that bit was set, on every collection
// with the same chunks (a deleted page's 8 MiB pack kept in the store). An
// odd l makes the probes distinct.
func chunkHash(d cas.Digest) uint64 { return binary.LittleEndian.Uint64([]byte(d[1:9])) | 1 }

// walked reports whether d is a piece the marker walks into: a tree node
// or an index piece.
func walked(d cas.Digest) bool { return d.IsTreeNode() || d.IsIndex() }

// reached reports whether the marker reached d (a chunk: maybe).
func (m *marker) reached(d cas.Digest) bool {
	if walked(d) {
		_, ok := m.seen[d]
		return ok
	}
	return m.chunks.Has(chunkHash(d))
}

func (m *marker) commit(c *store.Commit) error {
	if c.Root == btree.EmptyRoot {
		return nil
	}
	if err := m.node(c.Root); err != nil {
		return fmt.Errorf("gc: walk commit %s: %w", c.ID, err)
	}
	return nil
}

// add records d and reports whether it is to be walked into: a tree node
// or an index piece not seen before.
func (m *marker) add(d cas.Digest) bool {
	if d.IsInline() {
		return false
	}
	if m.n++; m.n%m.every == 0 {
		m.stop() // paces; the walk ends at the next node if stopped
	}
	if !walked(d) {
		m.chunks.Add(chunkHash(d))
		return false
	}
	if _, ok := m.seen[d]; ok {
		return false
	}
	m.seen[d] = uint32(len(m.seen))
	// An index piece of a value not fetched yet (a lazy pull's) has
	// nothing held below it: walking it would fetch it.
	if m.remote {
		return true
	}
	held, err := m.p.Has(d)
	return held || err != nil
}

// value marks the pieces of a value.
func (m *marker) value(v cas.ObjectIdentifier) error {
	if err := cas.Walk(m.p, v, func(d cas.Digest) (bool, error) { return m.add(d), nil }, nil); err != nil {
		return fmt.Errorf("gc: walk value %s: %w", v.Digest, err)
	}
	return nil
}

func (m *marker) node(id cas.ObjectIdentifier) error {
	if id.Digest.IsInline() {
		return nil
	}
	_, seen := m.seen[id.Digest]
	if _, open := m.open[id.Digest]; seen && !open {
		return nil // walked whole
	}
	if !seen {
		if m.stopped() {
			return nil
		}
		// A node not held (a page that came back after eviction fetches
		// its tree as it is read) has nothing held below it.
		if !m.remote {
			if held, err := m.p.Has(id.Digest); err != nil || !held {
				return err
			}
		}
		// The node's own pieces: a large node is stored as an index
		// over chunks, like a value.
		if err := cas.Walk(m.p, id, func(d cas.Digest) (bool, error) { return m.add(d), nil }, nil); err != nil {
			return fmt.Errorf("node %s: %w", id.Digest, err)
		}
		m.open[id.Digest] = struct{}{}
	}
	children, values, err := m.p.Nodes().Refs(id)
	if err != nil {
		return err
	}
	// A node's own pieces and its values are walked whole, halted or
	// not: a walk that goes on after a halt goes on with the children of
	// the nodes it left open.
	if !seen {
		for _, v := range values {
			if err := m.value(v); err != nil {
				return err
			}
		}
	}
	for _, c := range children {
		if err := m.node(c); err != nil || m.stopped() {
			return err
		}
	}
	delete(m.open, id.Digest)
	return nil
}

// Reach is what commits of a repository's pages reach: every tree node
// and index piece exactly, chunks in a Bloom filter (a false positive
// keeps what is garbage). It walks into pieces not held here too, read
// through the repository's fetcher, so that it finds what the remote store
// holds for them: the bucket's collection keeps the packs of what it
// reaches.
type Reach struct{ m *marker }

// NewReach returns an empty Reach sized for about n pieces.
func NewReach(n int) *Reach {
	m := newMarker(nil, n)
	m.remote = true
	return &Reach{m: m}
}

// Commit marks what commit c of page p reaches.
func (r *Reach) Commit(p *store.Page, c *store.Commit) error {
	r.m.p = p
	return r.m.commit(c)
}

// Has reports whether a marked commit reaches d (a chunk: maybe).
func (r *Reach) Has(d cas.Digest) bool { return r.m.reached(d) }

// Order reports where tree node or index piece d came in the walks of the
// commits marked, the first walked 0; false for a chunk or a piece not
// reached. Pieces packed in this order are read in few packs by a walk
// that goes the same way (a new device's join).
func (r *Reach) Order(d cas.Digest) (uint32, bool) {
	o, ok := r.m.seen[d]
	return o, ok
}

// sweep deletes the pieces the marker did not reach, from the piece after
// the last one swept. Transient ones too: with the page held alone and no
// journal, they are values of closes that a later close of the same file
// replaced before they committed, which only a page's recovery deleted
// until now. Stopped, it deletes what it found so far and notes where it
// was.
func (c *collection) sweep(p *store.Page, stop func() bool, progress func(string, int64, int64)) error {
	var garbage []cas.Digest
	var garbageBytes int64
	flush := func() error {
		if len(garbage) > 0 && !c.o.DryRun {
			if err := p.DeletePieces(garbage); err != nil {
				return err
			}
			step(p, "deleted a batch of pieces")
		}
		c.r.Deleted += len(garbage)
		c.r.Freed += garbageBytes
		garbage, garbageBytes = garbage[:0], 0
		return nil
	}
	// Rows are deleted in their own transactions while the read goes on:
	// the read sees the db as it began.
	err := p.Objects(c.after, func(d cas.Digest, size int64) error {
		if c.r.Objects%c.every == 0 {
			progress("sweep", int64(c.r.Objects), 0)
			if stop() {
				return errStopped
			}
		}
		c.r.Objects++
		c.r.Bytes += size
		c.after = d
		if c.reach.reached(d) {
			return nil
		}
		garbage = append(garbage, d)
		garbageBytes += size
		if len(garbage) < batch {
			return nil
		}
		return flush()
	})
	if err == nil || errors.Is(err, errStopped) {
		c.swept = err == nil
		err = flush()
	}
	if err != nil {
		return fmt.Errorf("gc: sweep: %w", err)
	}
	if c.swept {
		step(p, "swept")
	}
	return nil
}

var errStopped = errors.New("stopped")

// step logs a step of a collection at debug level: the crash tests kill a
// collection at these lines.
func step(p *store.Page, what string) {
	slog.Debug("collection step", "page", p.Ledger+"/"+p.Name, "step", what)
}
