package store

import (
	"math"

	"github.com/ledgerfs/ledgerfs/internal/synclog"
)

// maxWhole bounds the value a whole record copies (record): a larger
// change is made durable by syncing the db, which then costs less.
const maxWhole = 64 << 10

// maxPromoted bounds what one sync of a page promotes (promote): the
// records of this many changes, of this many bytes. More, and a sync of
// the db costs less than copying them.
const (
	maxPromoted      = 1024
	maxPromotedBytes = 1 << 20
)

// wholeSize is the size of the value c puts as a whole record holds it: an
// inline value's (a directory's marker, a link, an empty or tiny file),
// else the entry's.
func wholeSize(c *Logged) uint64 {
	if c.Value.Digest.IsInline() {
		return uint64(len(c.Value.Digest.InlineData()))
	}
	return c.Size
}

// wholeRecordable reports whether c, a change written without a record,
// can have one made after it on its own (record, with no Source): a
// delete, or a put of a value of at most maxWhole bytes.
func wholeRecordable(c *Logged) bool {
	return c.Kind.IsDelete() || (c.Kind == OpPut || c.Kind == OpMarker) && wholeSize(c) <= maxWhole
}

// promote appends a record of each change of the page's entries that the
// log does not make durable yet, so that a sync of the log alone makes
// them durable: a directory's fsync after creates, renames and unlinks
// (queued in the log for a crash of the process alone, or written to the
// db), which a checkpoint's sync of the db cost three to four times as
// much. It reports false when a change cannot be so recorded (being
// written, a transaction's, a page cleared, a value larger than maxWhole,
// or too many of them) or the log cannot take the records: the caller then
// checkpoints, which drops any it appended.
//
// The records are whole (record, with no Source), and every key they name
// has records in the epoch from then on: its later changes are recorded
// too, queued (Queue) or with their rows (Prepare, Record), or checkpoint
// first, so no replay undoes one of them.
func (d *Durability) promote() bool {
	d.mu.Lock()
	var todo []*Logged
	n := 0
	for k := range d.unrecorded {
		c, ok := d.changed[k]
		if !ok || d.isDurableLocked(c) {
			delete(d.unrecorded, k)
			continue
		}
		if c.last == nil || c.gen == math.MaxUint64 || len(todo) == maxPromoted || !wholeRecordable(c.last) || len(d.intents[k]) > 0 {
			d.mu.Unlock()
			return false
		}
		todo = append(todo, c.last)
		n += c.last.recordLen()
	}
	d.mu.Unlock()
	if len(todo) == 0 {
		return true
	}
	if n > maxPromotedBytes {
		return false
	}
	// Built without the lock: they read values back.
	recs := make([]*synclog.Record, len(todo))
	for i, c := range todo {
		r, err := d.record(c)
		if err != nil {
			return false
		}
		recs[i] = r
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	for _, c := range todo {
		// Each must still be its key's latest change, and not durable:
		// a record of an earlier one would undo the later on replay.
		if kc, ok := d.changed[c.Key]; !ok || kc.last != c || d.isDurableLocked(kc) {
			return false
		}
	}
	if d.p.readOnly != nil {
		return false
	}
	// All or none: a log that failed, or cannot take them all even
	// grown, takes none.
	if err := d.appendLocked(recs...); err != nil {
		return false // the caller checkpoints, which drops any written
	}
	d.p.repo.counters.promoted.Add(uint64(len(recs)))
	return true
}
