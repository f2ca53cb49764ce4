package store

import (
	"errors"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"sync"

	"github.com/ledgerfs/ledgerfs/internal/synclog"
)

// syncLog is a page's sync log (package synclog) and what the page knows of
// which of its changes are durable.
//
// Every change of an entry is durable once the db is synced after it, or
// once a record of it is in the log and the log is synced. Records chain:
// a key's record is built from a value that was durable when it was
// appended, or from the key's previous record in the same epoch, so
// replaying the epoch's records of a key in order rebuilds what the key
// held, whatever of the db's unsynced writes a power loss kept. That holds
// only if every change of a key that has a record in the epoch is logged
// too, or the log is checkpointed before it (journal.Journal.ApplyWith
// sees to that). A checkpoint (Sync) syncs the db, then starts a new epoch.
type syncLog struct {
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
	// results holds the Result of each key's latest record in the
	// current epoch (empty for a delete).
	results map[string]string
	// failed is why the log could not be created: the page syncs its db
	// instead until it is opened again.
	failed error
}

// keyChange is the latest change of a key the page knows of: the
// generation when it was written (unwritten: math.MaxUint64), and the
// epoch of the log that holds a record of it (0: none).
type keyChange struct {
	gen, epoch uint64
}

// clearKey stands for a change of every key (a journal that clears the page).
const clearKey = "\x00clear"

func (p *Page) logPath() string { return filepath.Join(p.Dir(), synclog.FileName) }

// openSyncLog reads the records a crash left in the page's log, for
// recovery (LoggedRecords).
func (p *Page) openSyncLog() error {
	p.slog.path = p.logPath()
	// What the db holds when it opens may still be in the page cache
	// alone (a crash of the process): nothing is known durable before the
	// first checkpoint.
	p.slog.gen = 1
	p.slog.changed = map[string]keyChange{clearKey: {gen: 1}}
	recs, err := synclog.ReadFile(p.slog.path)
	if err != nil {
		return err
	}
	p.slog.found = recs
	return nil
}

// LoggedRecords returns the records a crash left in the page's sync log:
// changes that may be missing from the db. Recovery replays them, then
// checkpoints (Sync).
func (p *Page) LoggedRecords() []synclog.Record {
	p.slog.mu.Lock()
	defer p.slog.mu.Unlock()
	return p.slog.found
}

// LogHas reports whether key has a record in the log's current epoch.
func (p *Page) LogHas(key string) bool {
	p.slog.mu.Lock()
	defer p.slog.mu.Unlock()
	_, ok := p.slog.results[key]
	return ok
}

// LogEmpty reports whether the log's current epoch has no record.
func (p *Page) LogEmpty() bool {
	p.slog.mu.Lock()
	defer p.slog.mu.Unlock()
	return len(p.slog.results) == 0
}

// LogRoom reports whether records of n bytes in all fit in the log before
// its next checkpoint.
func (p *Page) LogRoom(n int) bool {
	l := &p.slog
	l.mu.Lock()
	defer l.mu.Unlock()
	return n <= maxLogged && (l.log == nil || l.log.Room(n))
}

// maxLogged bounds what one append logs: larger changes are made durable
// by syncing the db, which costs less than copying them.
const maxLogged = synclog.DefaultSize / 2

// CanLog reports whether a change of key to a value built from base can
// be logged: base is durable, or the result of key's latest record.
func (p *Page) CanLog(key string, base []byte) bool {
	l := &p.slog
	l.mu.Lock()
	defer l.mu.Unlock()
	if r, ok := l.results[key]; ok {
		return r == string(base)
	}
	return l.syncedLocked(key) && l.syncedLocked(clearKey)
}

// syncedLocked reports whether the latest change of key was written before
// the last finished checkpoint began.
func (l *syncLog) syncedLocked(key string) bool {
	c, ok := l.changed[key]
	return !ok || c.gen <= l.durable
}

// NoteChanges records that the entries at keys are about to change
// (all: every key, a journal that clears the page); call the returned function once the change is
// written.
func (p *Page) NoteChanges(keys []string, all bool) func() {
	if all {
		keys = append(keys, clearKey)
	}
	l := &p.slog
	l.mu.Lock()
	if l.changed == nil {
		l.changed = map[string]keyChange{}
	}
	for _, k := range keys {
		l.changed[k] = keyChange{gen: math.MaxUint64}
	}
	l.mu.Unlock()
	return func() {
		l.mu.Lock()
		defer l.mu.Unlock()
		if len(l.changed) > maxChanged {
			// Too many to follow one by one between two checkpoints:
			// as if every key changed.
			clear(l.changed)
			l.changed[clearKey] = keyChange{gen: l.gen}
			return
		}
		for _, k := range keys {
			l.changed[k] = keyChange{gen: l.gen}
		}
	}
}

// maxChanged bounds the keys a page follows between two checkpoints
// (about 100 bytes each).
const maxChanged = 1 << 16

// AppendLog appends r, a record of the change just written to its key
// (see NoteChanges), to the log; SyncLog makes it durable. ErrFull: the
// caller checkpoints instead (Sync).
func (p *Page) AppendLog(r *synclog.Record) error {
	l := &p.slog
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.failed != nil {
		return synclog.ErrFull // said once; the db's syncs do the work
	}
	if l.log == nil {
		log, recs, err := synclog.Open(l.path, synclog.DefaultSize)
		if err != nil {
			// A full disk, say: the page goes on syncing its db.
			l.failed = err
			return err
		}
		if len(recs) > 0 {
			// Left by a crash and not replayed (recovery resets the
			// log): they must not be replayed over what follows.
			log.Close()
			return fmt.Errorf("sync log %s has records recovery did not replay", l.path)
		}
		l.log = log
	}
	if err := l.log.Append(r); err != nil {
		return err
	}
	if l.results == nil {
		l.results = map[string]string{}
	}
	l.results[r.Key] = string(r.Result)
	if c, ok := l.changed[r.Key]; ok && c.gen != math.MaxUint64 {
		c.epoch = l.log.Epoch()
		l.changed[r.Key] = c
	}
	return nil
}

// SyncLog makes the records appended so far durable.
func (p *Page) SyncLog() error {
	l := &p.slog
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.log == nil || !l.log.Unsynced() {
		return nil
	}
	p.repo.counters.logSyncs.Add(1)
	return l.log.Sync()
}

// Durable reports whether the latest change of key is on disk: synced with
// the db, or in a synced record of the log (after SyncLog).
func (p *Page) Durable(key string) bool {
	l := &p.slog
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.durableLocked(key)
}

func (l *syncLog) durableLocked(key string) bool {
	return l.syncedLocked(key) || l.log != nil && l.changed[key].epoch == l.log.Epoch()
}

// SyncChanges makes every change of the page's entries durable: through
// the log when each has a record there, else by a checkpoint.
func (p *Page) SyncChanges() error {
	l := &p.slog
	l.mu.Lock()
	logged := true
	for k := range l.changed {
		if !l.durableLocked(k) {
			logged = false
			break
		}
	}
	l.mu.Unlock()
	if !logged {
		return p.Sync()
	}
	return p.SyncLog()
}

// checkpoint syncs the db and starts a new epoch of the log. Called by
// Sync.
func (p *Page) checkpoint() error {
	l := &p.slog
	l.mu.Lock()
	defer l.mu.Unlock()
	g := l.gen
	l.gen++
	p.repo.counters.dbSyncs.Add(1)
	if err := p.db.Sync(); err != nil {
		return err
	}
	l.durable = g
	for k, c := range l.changed {
		if c.gen <= g {
			delete(l.changed, k)
		}
	}
	if l.log == nil && len(l.found) > 0 {
		// Recovery replayed what a crash left: those records must not be
		// replayed again over later changes.
		log, _, err := synclog.Open(l.path, synclog.DefaultSize)
		if err != nil {
			return err
		}
		l.log = log
	}
	if l.log == nil {
		return nil
	}
	if err := l.log.Reset(); err != nil {
		return err
	}
	l.found = nil
	clear(l.results)
	return nil
}

// closeSyncLog closes the page's log, and removes it once the db closed
// cleanly (remove): every change is then in the db's synced tables.
func (p *Page) closeSyncLog(remove bool) error {
	l := &p.slog
	l.mu.Lock()
	defer l.mu.Unlock()
	var err error
	if l.log != nil {
		err = l.log.Close()
		l.log = nil
	}
	if !remove {
		return err
	}
	if rmErr := os.Remove(l.path); rmErr != nil && !errors.Is(rmErr, os.ErrNotExist) {
		err = errors.Join(err, fmt.Errorf("remove sync log: %w", rmErr))
	}
	return err
}
