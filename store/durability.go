package store

import (
	"errors"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"math"
	"os"
	"path/filepath"
	"slices"
	"sync"

	"github.com/ledgerfs/ledgerfs/cas"
	"github.com/ledgerfs/ledgerfs/internal/shrink"
	"github.com/ledgerfs/ledgerfs/internal/synclog"
)

// OpKind is what one change of a journal does. The page's durability
// treats each kind its own way; none is guessed from the shape of a key.
type OpKind uint8

const (
	// OpPut puts an entry: content, metadata or both.
	OpPut OpKind = iota
	// OpDelete removes an entry on its own (an unlink): replayed alone
	// from the sync log, it loses nothing.
	OpDelete
	// OpRenameDelete removes an entry as one half of a move (a rename's
	// source, a name taken from a file with hard links): it goes with a
	// put of the same change, and is never logged without it.
	OpRenameDelete
	// OpMarker puts a directory's marker: the directory made or its times
	// moved.
	OpMarker
	// OpAtime sets only the access time of the entry the key holds when
	// the journal commits.
	OpAtime
)

// IsDelete reports whether the change removes its entry.
func (k OpKind) IsDelete() bool { return k == OpDelete || k == OpRenameDelete }

// A LogSource is what the sync log's record of a put holds, as plain data
// taken when the change is made: Extents over the first Keep bytes of the
// value Base, or, with no Base, the whole value: one extent at offset 0
// holding all of it, or none, and the record reads it back from the page
// once the change's rows are written.
type LogSource struct {
	Base    cas.Digest
	Keep    uint64
	Extents []Extent
}

// An Extent is bytes at an offset of a value.
type Extent struct {
	Off  uint64
	Data []byte
}

// recordExtents returns xs as a log record holds them.
func recordExtents(xs []Extent) []synclog.Extent {
	var out []synclog.Extent
	for _, x := range xs {
		out = append(out, synclog.Extent{Off: x.Off, Data: x.Data})
	}
	return out
}

// A Logged is one change as the page's durability sees it.
type Logged struct {
	Key  string
	Kind OpKind
	// Row is a put's journal row (value and metadata), which the record
	// carries for replay; Value and Size are the value it puts.
	Row   []byte
	Value cas.ObjectIdentifier
	Size  uint64
	// Source, if not nil, is what makes a put's record. A put without one,
	// of a key with records in the log, checkpoints the log first.
	Source *LogSource
	// Through, if set, marks the put as the commit of the content the
	// key's intent it names leaves (see Intent): the intents up to it
	// already describe it, so it needs no record while later intents
	// follow, and never a checkpoint first.
	Through Intent
	// record is set by Prepare for a change it found recordable whole
	// (see wholeRecordable) that must have a record: one of a key with records
	// in the epoch, or another change of the same group.
	record bool
}

// An Intent names a record LogIntent appended. A commit of the content
// that record leaves (Logged.Through) supersedes it and the key's intents
// before it, and leaves the ones after: fsyncs made while the commit's
// value was computed, from a copy, without stopping the file's writes.
type Intent struct{ r *synclog.Record }

// IsZero reports whether i names no record.
func (i Intent) IsZero() bool { return i.r == nil }

// recordLen bounds the encoded size of the record of c.
func (c *Logged) recordLen() int {
	n := len(c.Key) + len(c.Row) + 128
	if c.Source == nil {
		return n + int(wholeSize(c))
	}
	if c.Source.Base == "" {
		return n + int(c.Size)
	}
	for _, x := range c.Source.Extents {
		n += len(x.Data) + 16
	}
	return n
}

// Durability is the one owner of what makes a page's changes survive a
// power loss: it tracks which change of each key is on disk, appends
// records of changes to the page's sync log (package synclog), checkpoints
// the log with a sync of the db, and replays what a crash left in it.
//
// Every change of an entry is durable once the db is synced after it, or
// once a record of it is in the log and the log is synced. Records chain:
// a key's record is built from a value that was durable when it was
// appended, or from the key's previous record in the same epoch, so
// replaying the epoch's records of a key in order rebuilds what the key
// held, whatever of the db's unsynced writes a power loss kept. That holds
// only if every change of a key that has a record in the epoch is logged
// too, or the log is checkpointed before it (Prepare sees to that). A
// checkpoint syncs the db, then starts a new epoch.
type Durability struct {
	p *Page
	// mu guards what follows and is held across a checkpoint, so that no
	// record is appended between the db's sync and the new epoch (it
	// would be dropped while its change is not durable).
	mu   sync.Mutex
	path string
	log  *synclog.Log // nil until the first record
	// found are the records a crash left, until recovery replays them.
	found []synclog.Record
	// gen counts checkpoints begun; durable is the last one finished: a
	// change noted with a generation at most durable is on disk.
	gen, durable uint64
	changed      map[string]keyChange
	changedPeak  shrink.Peak // tells when changed has mostly emptied
	// unrecorded holds every key of changed whose latest change the log
	// may not make durable yet (durableLocked false), and perhaps some
	// it does: promote looks at these alone, not at each of the up to
	// maxChanged keys changed since the last checkpoint at every fsync
	// of a directory.
	unrecorded map[string]struct{}
	// results holds the Result of each key's latest record in the
	// current epoch (empty for a delete; for an intent, its Base: the
	// next record of the key builds on that). It changes with mu held and
	// resultsMu too: Has and Empty read it under resultsMu alone, so that
	// a rename, a close or a queued change asking whether a key has
	// records does not wait for a checkpoint's sync of the db (1 ms and
	// more). What they see then is the log before the checkpoint: records
	// it drops read as still there, which only sends a change the
	// careful way.
	resultsMu sync.RWMutex
	results   map[string]string
	// intents holds each key's intent (LogIntent), the record of an fsync
	// of a change the db has not been written yet: a checkpoint carries
	// them into the new epoch, and a change of the key written to the db
	// supersedes its intent.
	intents     map[string][]*synclog.Record
	intentBytes int
	// queued holds, by implicit journal and key, the rows of changes
	// recorded in the log in place of their journal rows (Queue), until
	// the journal lands (Landed) or a checkpoint writes them to the db
	// (foldLocked); folded, the journals whose rows were so written.
	queued map[JournalID]map[string][]byte
	folded map[JournalID]bool
	// failed is why the log could not be created: the page syncs its db
	// instead until it is opened again.
	failed error
}

// keyChange is the latest change of a key the page knows of: the
// generation when it was written (unwritten: math.MaxUint64), the epoch of
// the log that holds a record of it (0: none), and, for a change of an
// implicit journal, the change itself, which a sync of the page may record
// (promote) rather than sync the db.
type keyChange struct {
	gen, epoch uint64
	last       *Logged
}

// clearKey stands for a change of every key (a journal that clears the page).
const clearKey = "\x00clear"

// maxChanged bounds the keys a page follows between two checkpoints
// (about 100 bytes each).
const maxChanged = 1 << 16

// maxLogged bounds what one append logs: larger changes are made durable
// by syncing the db, which costs less than copying them.
const maxLogged = synclog.DefaultSize / 4

// smallLogSize is the size of a new log whose first records fit it: a
// full-sized log's creation writes and syncs 8 MiB, 15 % of the sync
// simulation's time when every page that saw an unlink made one, and 9.5
// MB of disk writes for each page a user fsyncs a small file in. A log
// grows to full size when records do not fit it: in place while it holds
// queued records alone, which no fsync waits on (growLocked), else through
// a checkpoint that carries its intents (fit).
const smallLogSize = 256 << 10

// newLogSize is the size of a new log whose first epoch holds records of
// n bytes, k of them: small while they fit.
func newLogSize(n, k int) int64 {
	if synclog.Holds(smallLogSize, n, k) {
		return smallLogSize
	}
	return synclog.DefaultSize
}

// Durability returns the page's durability owner.
func (p *Page) Durability() *Durability { return &p.dur }

// open reads the records a crash left in the page's log, for Replay.
func (d *Durability) open(p *Page) error {
	d.p = p
	d.path = filepath.Join(p.Dir(), synclog.FileName)
	// What the db holds when it opens may still be in the page cache
	// alone (a crash of the process): nothing is known durable before the
	// first checkpoint.
	d.gen = 1
	d.changed = map[string]keyChange{clearKey: {gen: 1}}
	d.unrecorded = map[string]struct{}{clearKey: {}}
	recs, err := synclog.ReadFile(d.path)
	if err != nil {
		return err
	}
	d.found = recs
	return nil
}

// needsReplay reports whether a crash left records in the log.
func (d *Durability) needsReplay() bool {
	d.mu.Lock()
	defer d.mu.Unlock()
	return len(d.found) > 0
}

// Has reports whether key has a record in the log's current epoch.
func (d *Durability) Has(key string) bool {
	d.resultsMu.RLock()
	defer d.resultsMu.RUnlock()
	return d.hasLocked(key)
}

func (d *Durability) hasLocked(key string) bool {
	_, ok := d.results[key]
	return ok
}

// Empty reports whether the log's current epoch has no record.
func (d *Durability) Empty() bool {
	d.resultsMu.RLock()
	defer d.resultsMu.RUnlock()
	return len(d.results) == 0
}

// CanLog reports whether a change of key to a value built from base can
// be logged: base is durable, or the result of key's latest record.
func (d *Durability) CanLog(key string, base cas.Digest) bool {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.canLogLocked(key, base)
}

func (d *Durability) canLogLocked(key string, base cas.Digest) bool {
	if r, ok := d.results[key]; ok {
		return r == string(base)
	}
	return d.syncedLocked(key) && d.syncedLocked(clearKey)
}

// syncedLocked reports whether the latest change of key was written before
// the last finished checkpoint began.
func (d *Durability) syncedLocked(key string) bool {
	c, ok := d.changed[key]
	return !ok || c.gen <= d.durable
}

// Prepare readies the log for changes about to be written: it checkpoints
// if one would change a key that has records without a record of its own,
// or if their records do not fit. logs is whether the changes may be
// logged at all (an implicit journal's; a transaction's are made durable
// by syncing the db).
func (d *Durability) Prepare(logs bool, changes []Logged) error {
	// A change of a key with records in the epoch is recorded too, or a
	// replay would undo it; and with it every change of its group (the
	// other half of a rename, the times of its directories), which a
	// replay makes as one commit.
	whole := false
	for i := range changes {
		c := &changes[i]
		whole = whole || logs && c.Kind != OpAtime && c.Through.IsZero() && !(c.Kind == OpPut && c.Source != nil) && d.Has(c.Key)
	}
	need, checkpoint := 0, false
	for i := range changes {
		c := &changes[i]
		c.record = false
		switch {
		case c.Kind == OpAtime:
			// An access time may be lost by a crash: a replay
			// setting the time back is no loss.
		case logs && !c.Through.IsZero():
			// Its intents describe it; a record that does not fit
			// checkpoints after it is written (Record).
		case logs && c.Kind == OpPut && c.Source != nil:
			need += c.recordLen()
		case whole && wholeRecordable(c):
			c.record = true
			need += c.recordLen()
		case whole:
			checkpoint = true
		case logs && c.Kind == OpDelete:
			if d.Has(c.Key) {
				need += len(c.Key) + 16
			}
		default:
			checkpoint = checkpoint || d.Has(c.Key)
		}
	}
	var grow int64
	if !checkpoint && need > 0 {
		var fits bool
		fits, grow = d.fit(need)
		checkpoint = !fits
	}
	if checkpoint {
		for i := range changes {
			changes[i].record = false
		}
		if !logs {
			// A transaction's changes supersede their keys' intents:
			// the new epoch must not carry them, or a replay would put
			// them back over the changes.
			d.supersede(changes)
		}
		// A logged change's intents are carried: until the change is
		// written and recorded (or synced, Record), they are what
		// makes its fsynced bytes durable.
		return d.checkpointTo(grow)
	}
	return nil
}

// supersede drops the intents of the keys changes change.
func (d *Durability) supersede(changes []Logged) {
	d.mu.Lock()
	defer d.mu.Unlock()
	for i := range changes {
		if changes[i].Kind != OpAtime {
			d.dropIntentLocked(changes[i].Key)
		}
	}
}

// dropIntentLocked drops key's intents and reports whether it had any.
func (d *Durability) dropIntentLocked(key string) bool {
	chain := d.intents[key]
	for _, r := range chain {
		d.intentBytes -= r.Len()
	}
	delete(d.intents, key)
	return len(chain) > 0
}

// dropThroughLocked drops key's intents up to the one through names, for
// the commit of value, the content that intent leaves, just written. It
// reports whether intents follow it, and false for found if through is not
// among key's intents (a clear dropped them). Intents that follow stay for
// the next checkpoint to carry, the first one rebased on value: the
// checkpoint makes value durable, and the intents before are then gone from
// the log.
func (d *Durability) dropThroughLocked(key string, through Intent, value cas.Digest) (found, later bool) {
	chain := d.intents[key]
	i := slices.Index(chain, through.r)
	if i < 0 {
		return false, false
	}
	for _, r := range chain[:i+1] {
		d.intentBytes -= r.Len()
	}
	rest := slices.Clone(chain[i+1:])
	if len(rest) == 0 {
		delete(d.intents, key)
		return true, false
	}
	// A new record, not an edit of the one the log holds: an earlier
	// copy of the chain may be in a checkpoint's carry.
	first := *rest[0]
	d.intentBytes -= first.Len()
	first.Follows, first.Base = false, []byte(value)
	d.intentBytes += first.Len()
	rest[0] = &first
	d.intents[key] = rest
	return true, true
}

// Crowded reports whether the intents held fill half of the room they
// may take, as LogIntent's full does, setting apart the intents a commit
// under way will drop: for each key in pending, its chain up to the intent
// named (a commit from a copy, through it). Those take room but are no
// reason to commit the page's other files at once: a database's
// checkpoint logs megabytes for its file, and while that file's commit
// ran, every fsync of its WAL found the intents full and committed the WAL
// again, 122 times in 5 s. The others are crowded when they fill half of
// the room the pending ones leave.
func (d *Durability) Crowded(pending map[string]Intent) bool {
	d.mu.Lock()
	defer d.mu.Unlock()
	held := 0
	for key, through := range pending {
		chain := d.intents[key]
		if i := slices.Index(chain, through.r); i >= 0 {
			for _, r := range chain[:i+1] {
				held += r.Len()
			}
		}
	}
	return d.intentBytes-held > (d.intentCapLocked()-held)/2
}

// DropIntents drops every intent, for a change of every key (a journal
// that clears the page) about to be written.
func (d *Durability) DropIntents() {
	d.mu.Lock()
	defer d.mu.Unlock()
	clear(d.intents)
	d.intentBytes = 0
}

// fit reports whether a record of n bytes can be appended before the
// next checkpoint: the log takes it, or is made or grown for it as it is
// written (writeLocked). If not, grow is the size of log the checkpoint
// must make for it and the intents it carries: 0 keeps the log's size. A
// record larger than maxLogged never fits.
func (d *Durability) fit(n int) (fits bool, grow int64) {
	d.mu.Lock()
	defer d.mu.Unlock()
	switch {
	case n > maxLogged:
		return false, 0
	case d.log == nil:
		// Made now, of the size all of them need: writeLocked would
		// size it for the first record alone, and the next ones could
		// then fill it. Made or not, they fit (a log that cannot be
		// made says so as they are written).
		if d.p.readOnly == nil {
			d.openLocked(newLogSize(n, 1))
		}
		return true, 0
	case d.log.Room(n) || d.growsLocked():
		return true, 0
	}
	k := 1
	for _, chain := range d.intents {
		k += len(chain)
	}
	if size := newLogSize(n+d.intentBytes, k); size > d.log.Size() {
		return false, size
	}
	if d.smallLocked() {
		// Filled with records a replay makes (intents, promoted and
		// whole records): a busy page, whose next checkpoint makes it
		// the default size rather than another small log to fill.
		return false, synclog.DefaultSize
	}
	return false, 0
}

// smallLocked reports whether the log is smaller than the default size.
func (d *Durability) smallLocked() bool {
	return d.log != nil && d.log.Size() < synclog.DefaultSize
}

// growsLocked reports whether the log grows in place when full
// (growLocked): it is small and holds queued records alone, which make
// changes survive a crash of the process and no fsync waits on.
func (d *Durability) growsLocked() bool {
	return d.smallLocked() && len(d.results) == 0 && len(d.intents) == 0 && len(d.found) == 0
}

// growLocked replaces a small log of queued records alone (growsLocked)
// with a full-sized one: the rows its records stand in for are written to
// the db first (foldLocked), which keeps them through a crash of the
// process, the one thing those records were for.
func (d *Durability) growLocked() error {
	if err := d.foldLocked(); err != nil {
		return err
	}
	defer d.epochEndedLocked()
	return d.log.Grow(synclog.DefaultSize)
}

// Note records that the entries changes change are about to change (all:
// every key, a journal that clears the page); call the returned function
// once the changes are written. logs is whether they are an implicit
// journal's, which a sync of the page may record rather than sync the db.
func (d *Durability) Note(changes []Logged, logs, all bool) func() {
	d.mu.Lock()
	if d.changed == nil {
		d.changed = map[string]keyChange{}
	}
	for i := range changes {
		if changes[i].Kind != OpAtime {
			d.changed[changes[i].Key] = keyChange{gen: math.MaxUint64}
			d.unrecordLocked(changes[i].Key)
		}
	}
	if all {
		d.changed[clearKey] = keyChange{gen: math.MaxUint64}
		d.unrecordLocked(clearKey)
	}
	d.mu.Unlock()
	return func() {
		d.mu.Lock()
		defer d.mu.Unlock()
		d.wroteLocked(changes, logs)
		if all {
			d.changed[clearKey] = keyChange{gen: d.gen}
		}
	}
}

// wroteLocked records that changes were just written (logs: by an implicit
// journal, each then kept for a promotion).
func (d *Durability) wroteLocked(changes []Logged, logs bool) {
	if d.changed == nil {
		d.changed = map[string]keyChange{}
	}
	if len(d.changed) > maxChanged {
		// Too many to follow one by one between two checkpoints: as if
		// every key changed. A map cleared keeps its buckets (5.7 MiB
		// of the heap, pprof, after 100,000 creates): a new one does
		// not.
		d.changed = map[string]keyChange{clearKey: {gen: d.gen}}
		d.changedPeak = shrink.Peak{}
		d.unrecorded = map[string]struct{}{clearKey: {}}
		return
	}
	for i := range changes {
		c := &changes[i]
		if c.Kind == OpAtime {
			continue
		}
		kc := keyChange{gen: d.gen}
		if logs {
			kc.last = &Logged{Key: c.Key, Kind: c.Kind, Row: c.Row, Value: c.Value, Size: c.Size}
		}
		d.changed[c.Key] = kc
		d.unrecordLocked(c.Key)
	}
	d.changedPeak.Grew(len(d.changed))
}

// Record appends the records of changes just written (see Prepare and
// Note) to the log; SyncLog makes them durable. A record that cannot be
// made or does not fit checkpoints the log instead: the change is then
// durable with the db, and no earlier record of its key is left to undo
// it.
//
// A logged change that superseded intents and leaves no record of its own
// checkpoints too, once written: the intents that made its fsynced bytes
// durable are gone.
func (d *Durability) Record(logs bool, changes []Logged) error {
	if !logs {
		// Written, the changes supersede their keys' intents.
		d.supersede(changes)
		return nil
	}
	for i := range changes {
		c := &changes[i]
		if c.Kind == OpAtime {
			continue
		}
		had, err := d.recordOne(c)
		if err == nil && !had {
			continue
		}
		if err != nil && !errors.Is(err, synclog.ErrFull) {
			slog.Warn("no sync log record of a change; syncing the page instead", "page", d.p.Ledger+"/"+d.p.Name, "key", c.Key, "err", err)
		}
		if err := d.Checkpoint(); err != nil {
			return err
		}
	}
	return nil
}

// recordOne appends the record of c, just written, if it has one; unsynced
// reports that c superseded intents with no record of its own.
func (d *Durability) recordOne(c *Logged) (unsynced bool, err error) {
	var r *synclog.Record
	if c.record || c.Kind == OpPut && c.Source != nil {
		// Built before the lock: it may read the value back.
		r, err = d.record(c)
	}
	if err != nil {
		d.mu.Lock()
		d.dropIntentLocked(c.Key)
		d.mu.Unlock()
		return false, err
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	if !c.Through.IsZero() {
		d.p.repo.counters.copyCommits.Add(1)
		found, later := d.dropThroughLocked(c.Key, c.Through, c.Value.Digest)
		switch {
		case !found:
			return true, nil
		case later:
			// The intents, in the log, end with the later ones: a
			// record of c would be replayed over them.
			d.markLoggedLocked(c.Key)
			return false, nil
		case r == nil:
			// The key's next intent starts a chain on c's value,
			// which must then be durable: synced, as no record can
			// say how to build it.
			return true, nil
		}
		return false, d.appendLocked(r)
	}
	// A logged change's record follows the intents it supersedes in the
	// chain.
	had := d.dropIntentLocked(c.Key)
	switch {
	case r != nil:
		return false, d.appendLocked(r)
	case c.Kind == OpDelete && d.hasLocked(c.Key):
		return false, d.appendLocked(&synclog.Record{Key: c.Key, Delete: true})
	}
	return had, nil
}

// markLoggedLocked records that the latest change of key, just written, is
// described by records in the log's current epoch.
func (d *Durability) markLoggedLocked(key string) {
	if c, ok := d.changed[key]; ok && c.gen != math.MaxUint64 && d.log != nil {
		c.epoch = d.log.Epoch()
		d.changed[key] = c
		delete(d.unrecorded, key)
	}
}

// unrecordLocked notes that the latest change of key may lack a record
// the log makes durable.
func (d *Durability) unrecordLocked(key string) {
	if d.unrecorded == nil {
		d.unrecorded = map[string]struct{}{}
	}
	d.unrecorded[key] = struct{}{}
}

// epochEndedLocked notes that the records of the log's last epoch no
// longer count (a new epoch, or the log closed): each change not synced
// with the db may lack a record again.
func (d *Durability) epochEndedLocked() {
	d.unrecorded = nil
	for k, c := range d.changed {
		if c.gen > d.durable {
			d.unrecordLocked(k)
		}
	}
}

// record builds the record of c, a change written to the db or about to be
// queued: a delete, or a put from its Source. A put with no Source is
// recorded whole (wholeRecordable): the record holds its value's every
// byte, an inline value's own or read back from the page, and its replay
// needs nothing of what the db held.
func (d *Durability) record(c *Logged) (*synclog.Record, error) {
	if c.Kind.IsDelete() {
		return &synclog.Record{Key: c.Key, Delete: true}, nil
	}
	r := &synclog.Record{Key: c.Key, Op: c.Row, Size: c.Size, Result: []byte(c.Value.Digest)}
	switch s := c.Source; {
	case s == nil && c.Value.Digest.IsInline():
		// A directory's marker, a link, an empty or tiny file: the
		// value is its digest's bytes, whatever the entry's size says.
		r.Size = wholeSize(c)
		if r.Size > 0 {
			r.Extents = []synclog.Extent{{Data: c.Value.Digest.InlineData()}}
		}
		return r, nil
	case s == nil:
	case s.Base != "":
		r.Base, r.Keep, r.Extents = []byte(s.Base), s.Keep, recordExtents(s.Extents)
		return r, nil
	default:
		r.Extents = recordExtents(s.Extents)
	}
	if c.Size == 0 || len(r.Extents) > 0 {
		return r, nil // empty, or the whole value copied by the caller
	}
	b, err := d.valueBytes(c)
	if err != nil {
		return nil, err
	}
	r.Extents = []synclog.Extent{{Data: b}}
	return r, nil
}

// valueBytes reads back the value c puts, c.Size bytes, from the page.
func (d *Durability) valueBytes(c *Logged) ([]byte, error) {
	v, err := d.p.OpenValue(c.Value)
	if err != nil {
		return nil, err
	}
	b := make([]byte, c.Size)
	if n, err := v.ReadAt(b, 0); n < len(b) {
		if err == nil || err == io.EOF {
			err = fmt.Errorf("value %s holds %d bytes, not %d", c.Value, n, c.Size)
		}
		return nil, err
	}
	return b, nil
}

// append appends r, a record of the change just written to its key.
// ErrFull: the caller checkpoints instead.
func (d *Durability) append(r *synclog.Record) error {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.appendLocked(r)
}

// appendLocked appends rs, records of changes just written to their keys,
// all or none of them (writeLocked).
func (d *Durability) appendLocked(rs ...*synclog.Record) error {
	if err := d.writeLocked(rs...); err != nil {
		return err
	}
	for _, r := range rs {
		if !r.Intent { // an intent's chain goes on from its base (LogIntent)
			d.setResult(r.Key, string(r.Result))
		}
		d.markLoggedLocked(r.Key)
	}
	return nil
}

// writeLocked appends rs to the log in one write, the log made on first
// use and grown if it can be (growsLocked). ErrFull: they do not fit
// before a checkpoint, and none was written.
func (d *Durability) writeLocked(rs ...*synclog.Record) error {
	n := 0
	for _, r := range rs {
		n += r.Len()
	}
	if err := d.openLocked(newLogSize(n, len(rs))); err != nil {
		return err
	}
	if !d.log.Room(n) && d.growsLocked() {
		if err := d.growLocked(); err != nil {
			return err
		}
	}
	return d.log.Append(rs...)
}

// openLocked makes the log, of size bytes, if the page has none open.
func (d *Durability) openLocked(size int64) error {
	if d.failed != nil {
		return synclog.ErrFull // said once; the db's syncs do the work
	}
	if d.log != nil {
		return nil
	}
	log, recs, err := synclog.Open(d.path, size)
	if err != nil {
		// A full disk, say: the page goes on syncing its db.
		d.failed = err
		return err
	}
	if len(recs) > 0 {
		// Left by a crash and not replayed (recovery resets the
		// log): they must not be replayed over what follows.
		log.Close()
		return fmt.Errorf("sync log %s has records recovery did not replay", d.path)
	}
	d.log = log
	return nil
}

// setResult records result as the Result of key's latest record. Called
// with d.mu held.
func (d *Durability) setResult(key, result string) {
	d.resultsMu.Lock()
	defer d.resultsMu.Unlock()
	if d.results == nil {
		d.results = map[string]string{}
	}
	d.results[key] = result
}

// queueable reports whether change c can be recorded in the log in place
// of its journal row (Queue): any change but an access time's or an
// intent's commit through Through. Its value is in the db already: the
// change comes with no pieces of its own to write. A put that asks for a
// record a replay makes (a Source: a chmod of a file the log holds) gets
// that record, as a change recorded whole does.
func queueable(c *Logged) bool {
	return c.Kind != OpAtime && c.Through.IsZero() && (c.Source == nil || c.Kind == OpPut)
}

// Queue records changes of implicit journal id in the log in place of
// their journal rows es, which the caller then does not write: the log's
// append is the changes' one write, and costs no db transaction. It
// reports false, having recorded nothing, when the changes cannot all be
// recorded so (see queueable), the journal's rows were written since
// (fold), or the log has no room or cannot be made; the caller then writes
// the rows.
//
// When a key changed has records in the log's epoch (a sync promoted its
// change), or a change asks for a record a replay makes (a Source), the
// changes are recorded as a replay needs them, all of them: from their
// Source, else whole (record). A replay of a key's earlier record
// must not undo them. A change too large to be recorded whole is refused,
// and its rows' writing checkpoints first (Prepare).
//
// The records make the changes survive a crash of the process, which
// leaves the log's appends in the page cache: recovery writes them into
// their journal before it commits it (QueuedFound). They are no records
// for a replay after a power loss: a change so recorded is durable once a
// checkpoint has written its rows and synced the db, as an unrecorded
// change is. Until the journal lands (Landed), a checkpoint writes the
// rows before it drops their records, so the db alone holds every change
// as seed 000's rows after each checkpoint.
func (d *Durability) Queue(id JournalID, changes []Logged, es []JournalEntry) (bool, error) {
	if id.Explicit() {
		return false, nil
	}
	recs := make([]*synclog.Record, len(changes))
	keys := make([]string, len(changes))
	whole := false
	for i := range changes {
		c := &changes[i]
		if !queueable(c) {
			return false, nil
		}
		keys[i] = c.Key
		whole = whole || c.Source != nil || d.Has(c.Key)
	}
	n := 0
	for i := range changes {
		c := &changes[i]
		var r *synclog.Record
		switch {
		case whole && c.Source == nil && !wholeRecordable(c):
			return false, nil
		case whole:
			// Built before the lock: it may read the value back.
			var err error
			if r, err = d.record(c); err != nil {
				return false, nil // the rows go to the db
			}
		case c.Kind == OpDelete:
			r = &synclog.Record{Key: c.Key, Journal: []byte(id), Delete: true}
		default:
			r = &synclog.Record{Key: c.Key, Journal: []byte(id), Op: c.Row, Result: []byte(c.Value.Digest)}
		}
		recs[i] = r
		n += r.Len()
	}
	if fits, grow := d.fit(n); !fits && grow > 0 {
		// A small log that holds records an fsync made: it grows
		// through a checkpoint, which carries its intents, and then
		// takes the next journals' changes. This one's write rows.
		if err := d.checkpointTo(grow); err != nil {
			return false, err
		}
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.failed != nil || d.p.readOnly != nil || d.folded[id] || n > maxLogged {
		return false, nil
	}
	if err := d.openLocked(newLogSize(n, len(recs))); err != nil {
		return false, nil // the rows go to the db
	}
	if !d.log.Room(n) && d.growsLocked() {
		// Queued changes filled a small log: the next go to a full one.
		// The journals it folded, id among them, write rows.
		if err := d.growLocked(); err != nil {
			return false, err
		}
	}
	if d.folded[id] || !d.log.Room(n) {
		return false, nil
	}
	if !whole && slices.ContainsFunc(keys, d.Has) {
		return false, nil // promoted meanwhile
	}
	if whole && slices.ContainsFunc(keys, func(k string) bool { return len(d.intents[k]) > 0 }) {
		return false, nil // their rows supersede the intents (Record)
	}
	// A queued record: no result, no epoch: the key has no record a
	// replay makes. A record a replay makes marks its key's latest change,
	// which is noted first.
	write := d.writeLocked
	if whole {
		d.wroteLocked(changes, true)
		write = d.appendLocked
	}
	if err := write(recs...); err != nil {
		if errors.Is(err, synclog.ErrFull) {
			return false, nil // none written: the rows go to the db
		}
		return false, err
	}
	if !whole {
		d.wroteLocked(changes, true)
	}
	if d.queued == nil {
		d.queued = map[JournalID]map[string][]byte{}
	}
	rows := d.queued[id]
	if rows == nil {
		rows = map[string][]byte{}
		d.queued[id] = rows
	}
	for _, e := range es {
		rows[e.Key] = e.Value
	}
	d.p.repo.counters.queuedInLog.Add(uint64(len(es)))
	return true, nil
}

// Unqueue says that the rows of keys in journal id are being written to
// the db: a checkpoint must not write over them the rows the log stood in
// for, older.
func (d *Durability) Unqueue(id JournalID, keys []string) {
	d.mu.Lock()
	defer d.mu.Unlock()
	for _, k := range keys {
		delete(d.queued[id], k)
	}
}

// Landed says that implicit journal id has landed: its rows the log stood
// in for need no writing.
func (d *Durability) Landed(id JournalID) {
	d.mu.Lock()
	defer d.mu.Unlock()
	delete(d.queued, id)
	delete(d.folded, id)
}

// foldLocked writes the rows the log stands in for to the db. The
// journals written to take no more such changes (Queue): a record after
// the rows would be the key's latest change and its row not, which
// recovery could not tell. A journal that lands meanwhile deletes the rows
// after (its rows are deleted by key once it has landed), and a crash
// first leaves them without the journal's metadata, which recovery
// deletes.
func (d *Durability) foldLocked() error {
	for id, rows := range d.queued {
		es := make([]JournalEntry, 0, len(rows))
		for k, v := range rows {
			es = append(es, JournalEntry{Key: k, Value: v})
		}
		if err := d.p.PutJournalEntries(id, es); err != nil {
			return fmt.Errorf("write queued journal rows: %w", err)
		}
		delete(d.queued, id)
		if d.folded == nil {
			d.folded = map[JournalID]bool{}
		}
		d.folded[id] = true
	}
	return nil
}

// Folded reports whether a checkpoint wrote the rows the log stood in for
// of implicit journal id, which then queues no more changes (foldLocked).
func (d *Durability) Folded(id JournalID) bool {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.folded[id]
}

// fold writes the rows the log stands in for, for the db's close: a
// journal whose commit failed keeps its changes in its rows.
func (d *Durability) fold() error {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.foldLocked()
}

// A QueuedRecord is a change a crash left recorded in the log in place of
// its journal row: the journal, the key, and the row (nil for a delete).
type QueuedRecord struct {
	Journal JournalID
	Key     string
	Row     []byte
}

// QueuedFound returns, for recovery, the changes the log stood in for
// whose records are their keys' last: each is written into its journal,
// if that journal did not land, before the journals commit. A key whose
// last record is another (a later change, logged with its rows written)
// has its rows in the db.
func (d *Durability) QueuedFound() []QueuedRecord {
	d.mu.Lock()
	defer d.mu.Unlock()
	last := map[string]int{}
	for i := range d.found {
		last[d.found[i].Key] = i
	}
	var out []QueuedRecord
	for i := range d.found {
		r := &d.found[i]
		if len(r.Journal) == 0 || last[r.Key] != i {
			continue
		}
		q := QueuedRecord{Journal: JournalID(r.Journal), Key: r.Key}
		if !r.Delete {
			q.Row = r.Op
		}
		out = append(out, q)
	}
	return out
}

// SyncLog makes the records appended so far durable.
func (d *Durability) SyncLog() error {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.log == nil || !d.log.Unsynced() {
		return nil
	}
	d.p.repo.counters.logSyncs.Add(1)
	return d.log.Sync()
}

// maxIntents bounds the bytes of the intents a checkpoint carries into the
// new epoch of a log of the default size: half of what an epoch holds. A
// grown log carries a quarter of its size (intentCapLocked).
const maxIntents = synclog.DefaultSize / 4

// maxLogSize is the largest a page's log grows to hold an intent too large
// for it (LogIntent): its quarter, what one intent and the intents carried
// may hold, is then 16 MiB. A grown log keeps its size until the page
// closes cleanly and removes it.
const maxLogSize = 64 << 20

// grownSize is the size of log whose quarter holds a record of n bytes:
// the default size doubled as often as needed, or 0 if even maxLogSize's
// quarter cannot hold it.
func grownSize(n int) int64 {
	size := int64(synclog.DefaultSize)
	for size/4 < int64(n) {
		if size *= 2; size > maxLogSize {
			return 0
		}
	}
	return size
}

// intentCapLocked is the bytes of intents the log may hold: a quarter of
// its size, at least maxIntents.
func (d *Durability) intentCapLocked() int {
	if d.log == nil {
		return maxIntents
	}
	return max(maxIntents, int(d.log.Size()/4))
}

// LogIntent makes a change of key durable ahead of its commit, the way an
// fsync of a file being written does: a record of the content it puts
// (src, size bytes) and of its journal row (row, whose value the replay
// sets to the one it rebuilds) is appended to the log and synced, before
// the value is computed or anything is written to the db. With follows,
// src holds the changes since the key's last intent (Base unused, Keep the
// bytes of that intent's content kept); else those since src.Base.
//
// The change must be committed later as usual, with a record built on the
// same base, or through the intent returned (Logged.Through); until then
// the intents stand for it, and a checkpoint carries them over. A zero
// Intent: nothing was logged (no room, or the base is not durable, or
// follows and the key has no intent), and the caller commits the change
// instead. full reports that the intents held fill half of what
// they may: their files should be committed soon.
func (d *Durability) LogIntent(key string, row []byte, size uint64, src *LogSource, follows bool) (mark Intent, full bool, err error) {
	r := &synclog.Record{Key: key, Op: row, Size: size, Intent: true, Follows: follows, Keep: src.Keep, Extents: recordExtents(src.Extents)}
	if !follows {
		r.Base = []byte(src.Base)
	}
	n := r.Len()
	switch grow := d.growFor(n); {
	case grow < 0:
		return Intent{}, false, nil // larger than any log takes: committed instead
	case grow > 0:
		// Larger than the log holds (an edit of megabytes, as a
		// database's checkpoint fsyncs): a checkpoint carries the live
		// intents into a larger log, once; a commit of the change in
		// the fsync would cost far more, each time.
		if err := d.checkpointTo(grow); err != nil {
			// A full disk, most likely: the change is committed
			// instead, as it would be without the larger log, and that
			// commit reports what the disk says.
			slog.Warn("cannot grow the sync log for an fsync; committing it instead", "page", d.p.Ledger+"/"+d.p.Name, "key", key, "size", grow, "err", err)
			return Intent{}, false, nil
		}
	case n <= maxLogged:
		fits, grow := d.fit(n)
		if fits {
			break
		}
		// The epoch is full, mostly of intents their commits superseded
		// (or the log is small): a checkpoint carries the live ones into
		// a new epoch, for the cost of a sync of the db rather than of
		// a commit of the file.
		if err := d.checkpointTo(grow); err != nil {
			return Intent{}, false, err
		}
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.p.readOnly != nil {
		return Intent{}, false, nil
	}
	chain := d.intents[key]
	switch {
	case follows && len(chain) == 0:
		return Intent{}, false, nil
	case !follows && src.Base != "" && !d.canLogLocked(key, src.Base):
		return Intent{}, false, nil
	}
	if !follows {
		for _, old := range chain {
			n -= old.Len()
		}
	}
	if d.intentBytes+n > d.intentCapLocked() {
		return Intent{}, true, nil
	}
	if err := d.appendLocked(r); err != nil {
		if errors.Is(err, synclog.ErrFull) {
			return Intent{}, true, nil
		}
		return Intent{}, false, err
	}
	if !follows {
		d.setResult(key, string(src.Base))
		chain = chain[:0]
	}
	if d.intents == nil {
		d.intents = map[string][]*synclog.Record{}
	}
	d.intentBytes += n
	d.intents[key] = append(chain, r)
	d.p.repo.counters.logSyncs.Add(1)
	if err := d.log.Sync(); err != nil {
		return Intent{}, false, err
	}
	return Intent{r}, d.intentBytes > d.intentCapLocked()/2, nil
}

// growFor returns the size the log must grow to, or start a new epoch at,
// for an intent of n bytes: 0 if it takes one as it is (a change the
// default log takes, as before), -1 if no log may. A larger one is made
// room for beside the intents the log holds, which the checkpoint that
// grows it carries: a database's WAL holds intents while its checkpoint
// fsyncs the database file.
func (d *Durability) growFor(n int) int64 {
	if grownSize(n) == 0 {
		return -1
	}
	if n <= maxLogged {
		return 0
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	size := grownSize(n + d.intentBytes)
	if size == 0 {
		size = maxLogSize
	}
	if d.log != nil && d.log.Size() >= size {
		if !d.log.Room(n) {
			return d.log.Size() // a new epoch of the same size
		}
		return 0
	}
	return size
}

// LastIntent names key's latest intent in the log, or none. A commit
// through an intent that leaves later ones rebases the first of those on
// the value committed, as a new record (dropThroughLocked): a mark taken
// when it was logged no longer names it, and a commit through that mark
// would find nothing to drop.
func (d *Durability) LastIntent(key string) Intent {
	d.mu.Lock()
	defer d.mu.Unlock()
	chain := d.intents[key]
	if len(chain) == 0 {
		return Intent{}
	}
	return Intent{chain[len(chain)-1]}
}

// Durable reports whether the latest change of key is on disk: synced with
// the db, or in a synced record of the log (after SyncLog).
func (d *Durability) Durable(key string) bool {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.durableLocked(key)
}

func (d *Durability) durableLocked(key string) bool {
	c, ok := d.changed[key]
	return !ok || d.isDurableLocked(c)
}

// isDurableLocked reports whether c, a key's latest change, is durable:
// synced with the db, or described by records in the log's epoch.
func (d *Durability) isDurableLocked(c keyChange) bool {
	return c.gen <= d.durable || d.log != nil && c.epoch == d.log.Epoch()
}

// SyncChanges makes every change of the page's entries durable: through
// the log when each has a record there or can be given one (promote), else
// by a checkpoint.
func (d *Durability) SyncChanges() error {
	if !d.promote() {
		return d.Checkpoint()
	}
	return d.SyncLog()
}

// Checkpoint syncs the db and starts a new epoch of the log: every change
// written so far is durable, and no record is needed for it. A page
// opened read-only has nothing to sync.
func (d *Durability) Checkpoint() error { return d.checkpointTo(0) }

// checkpointTo checkpoints into a new log of size bytes if that is more
// than the log has (0: the log as it is).
func (d *Durability) checkpointTo(size int64) error {
	p := d.p
	if err := p.check(); err != nil {
		return err
	}
	if p.readOnly != nil {
		return nil
	}
	if err := d.checkpoint(size); err != nil {
		if size > 0 {
			return fmt.Errorf("store: grow the sync log to %d bytes: %w", size, err)
		}
		return fmt.Errorf("store: checkpoint the sync log: %w", err)
	}
	return nil
}

// checkpoint syncs the db and starts a new epoch of the log, in a new
// file of grow bytes if that is more than the log has.
func (d *Durability) checkpoint(grow int64) error {
	d.mu.Lock()
	defer d.mu.Unlock()
	// The db must hold every change the new epoch will not: the rows the
	// log stood in for are written first.
	if err := d.foldLocked(); err != nil {
		return err
	}
	g := d.gen
	d.gen++
	d.p.repo.counters.dbSyncs.Add(1)
	if err := d.p.db.Sync(); err != nil {
		return err
	}
	d.durable = g
	for k, c := range d.changed {
		if c.gen <= g {
			delete(d.changed, k)
		}
	}
	if d.changedPeak.Due(len(d.changed)) {
		d.changed = maps.Collect(maps.All(d.changed))
	}
	// What is left is being written; the epoch may end below.
	d.epochEndedLocked()
	if d.log == nil && len(d.found) > 0 {
		// Recovery replayed what a crash left: those records must not be
		// replayed again over later changes.
		log, _, err := synclog.Open(d.path, max(grow, smallLogSize))
		if err != nil {
			return err
		}
		d.log = log
	}
	if d.log == nil && grow > 0 {
		log, _, err := synclog.Open(d.path, grow)
		if err != nil {
			return err
		}
		d.log = log
	}
	if d.log == nil {
		return nil
	}
	size := max(grow, d.log.Size())
	if grow == 0 && len(d.results) == 0 && len(d.intents) == 0 && len(d.found) == 0 && d.log.Room(int(d.log.Size()/4)) {
		// The epoch holds queued records alone, whose rows are written
		// now: recovery takes none of them again (their journals hold
		// rows of their keys, or have landed), and a replay after a
		// power loss passes over them. The epoch goes on, for one
		// fdatasync less, while half of it is free.
		return nil
	}
	var carry []*synclog.Record
	for _, chain := range d.intents {
		carry = append(carry, chain...)
	}
	reset := d.log.Reset
	if size > d.log.Size() {
		reset = func(carry ...*synclog.Record) error { return d.log.Grow(size, carry...) }
	}
	if err := reset(carry...); err != nil {
		return err
	}
	d.found = nil
	d.resultsMu.Lock()
	defer d.resultsMu.Unlock()
	clear(d.results)
	for k, chain := range d.intents {
		d.results[k] = string(chain[0].Base)
	}
	return nil
}

// close closes the page's log, and removes it once the db closed cleanly
// (remove): every change is then in the db's synced tables.
func (d *Durability) close(remove bool) error {
	d.mu.Lock()
	defer d.mu.Unlock()
	var err error
	if d.log != nil {
		err = d.log.Close()
		d.log = nil
		d.epochEndedLocked()
	}
	if len(d.queued) > 0 {
		// Rows neither landed nor written (a failed commit, a fold that
		// failed): the next open writes them from the log and commits.
		slog.Warn("page closed with queued changes only its sync log holds; they are committed when it opens", "page", d.p.Ledger+"/"+d.p.Name, "journals", len(d.queued))
		return err
	}
	if len(d.intents) > 0 {
		// Fsynced changes never committed: the next open replays them.
		slog.Warn("page closed with fsynced changes not committed; they are replayed when it opens", "page", d.p.Ledger+"/"+d.p.Name, "changes", len(d.intents))
		return err
	}
	if !remove {
		return err
	}
	if rmErr := os.Remove(d.path); rmErr != nil && !errors.Is(rmErr, os.ErrNotExist) {
		err = errors.Join(err, fmt.Errorf("remove sync log: %w", rmErr))
	}
	return err
}
