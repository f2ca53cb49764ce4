// Package journal records uncommitted changes to a page as Ledger's journal
// rows and turns them into commits: implicit journals for ordinary writes
// (committed promptly, several closes sharing one commit), explicit journals
// for transactions (committed atomically or rolled back). On open, a page's
// explicit journals are dropped and its implicit ones committed.
//
// Layer: above store, below fs; it reads and writes rows only through
// store's methods.
package journal

import (
	"crypto/rand"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"slices"
	"strings"
	"time"

	"github.com/ledgerfs/ledgerfs/cas"
	"github.com/ledgerfs/ledgerfs/internal/btree"
	"github.com/ledgerfs/ledgerfs/store"
)

// Journal is a set of uncommitted changes to a page, kept in the page's db.
type Journal struct {
	p    *store.Page
	e    *Engine
	ID   store.JournalID
	Base store.CommitID
	done bool
	// ops holds the journal's changes by key when it was made in this
	// process, so that commit and clean-up need not scan its rows (nil: a
	// journal found on disk, read from its rows).
	ops map[string]Op
	// queued holds the keys whose latest change in ops went to the sync
	// log in place of its row (store.Durability.Queue).
	queued map[string]bool
	// at, when set, is the time (Unix ns) of the journal's latest change:
	// its commit takes that time rather than the time it lands (see
	// Committer.Latest).
	at int64
}

// Op is one change of the entry at Key; Kind says which. A put (OpPut,
// OpMarker) puts Entry; OpAtime sets only the access time
// (Entry.Meta.AtimeNs) of the entry the key holds when the journal commits,
// if it holds one: a read's update must not bring back content or metadata
// that a change queued or landed meanwhile replaced.
type Op struct {
	Key   string
	Kind  store.OpKind
	Entry btree.Entry // Entry.Key is ignored; Key is used
	// Local lists pieces under Entry.Value that the caller knows are
	// local already (an edited value's subtrees kept from a value whose
	// commit landed), so that the commit does not look each one up. It
	// is not recorded: a journal read back from its rows has none.
	Local []cas.Digest
	// Log, if not nil, is what the sync log's record of a put holds (see
	// store.Durability). It is not recorded in the rows. A put without
	// one, of a key with records in the log, checkpoints the log first.
	Log *store.LogSource
	// Through, if set, makes the put the commit of the content the key's
	// intent it names leaves (store.Logged.Through). Not recorded either.
	Through store.Intent
	// Saw, if not nil, is the value the put's writer worked from: what
	// the key held when the file was opened or last committed (a zero
	// identifier: no file). When the head holds another version at the
	// commit, a sync landed it meanwhile and the writer never saw it; the
	// engine's Unseen says where to keep it. Not recorded: a close
	// recovered after a crash is not checked.
	Saw *cas.ObjectIdentifier
}

// IsDelete reports whether the change removes its entry.
func (op Op) IsDelete() bool { return op.Kind.IsDelete() }

// ApplyTo makes the change in tree t.
func (op Op) ApplyTo(t *btree.Tree) error {
	switch {
	case op.IsDelete():
		_, err := t.Delete(op.Key)
		return err
	case op.Kind == store.OpAtime:
		e, ok, err := t.Get(op.Key)
		if err != nil || !ok {
			return err
		}
		e.Meta.AtimeNs, e.Meta.HasAtime = op.Entry.Meta.AtimeNs, true
		return t.Put(e)
	}
	e := op.Entry
	e.Key = op.Key
	return t.Put(e)
}

// newID returns a new journal id. Implicit journal ids are the time they
// begin, in big-endian hex, so that recovery commits them in order: a crash
// may leave one being committed and the next one filling, and the same key
// may be in both. Explicit ids are random.
func (e *Engine) newID(explicit bool) store.JournalID {
	var b [8]byte
	if explicit {
		rand.Read(b[:])
		return store.JournalID("E" + hex.EncodeToString(b[:]))
	}
	for {
		last := e.lastImplicit.Load()
		now := max(time.Now().UnixNano(), last+1)
		if e.lastImplicit.CompareAndSwap(last, now) {
			binary.BigEndian.PutUint64(b[:], uint64(now))
			return store.JournalID("I" + hex.EncodeToString(b[:]))
		}
	}
}

// began is the time (Unix ns) an implicit journal began, from its id; 0 for
// an explicit journal or an id this process did not make.
func began(id store.JournalID) int64 {
	s := string(id)
	if len(s) != 17 || s[0] != 'I' {
		return 0
	}
	b, err := hex.DecodeString(s[1:])
	if err != nil {
		return 0
	}
	return int64(binary.BigEndian.Uint64(b))
}

// Begin starts a journal on the page's current head. An implicit journal's
// base is recorded in its metadata row, so that it can be committed after a
// crash.
func (e *Engine) Begin(p *store.Page, explicit bool) (*Journal, error) {
	head, err := p.Head()
	if err != nil {
		return nil, err
	}
	j := &Journal{p: p, e: e, ID: e.newID(explicit), Base: head.ID, ops: map[string]Op{}}
	if !explicit {
		if err := p.CheckSpace(); err != nil {
			return nil, err
		}
		if err := p.BeginImplicit(j.ID, head.ID); err != nil {
			return nil, fmt.Errorf("journal: begin: %w", err)
		}
	}
	return j, nil
}

// Entry-row values: "A" + priority + object identifier [+ metadata] for a
// put, "D" for a delete, "T" + 8-byte little-endian Unix ns for an access
// time.
const (
	rowPut    = 'A'
	rowDelete = 'D'
	rowAtime  = 'T'
	prioEager = 'E'
	prioLazy  = 'L'
)

// EncodeOp returns the journal row value of a put or delete. The object
// identifier is a size-prefixed ObjectIdentifierStorage; the entry's file
// metadata follows as a size-prefixed EntryMetaStorage.
func EncodeOp(op Op) []byte {
	switch {
	case op.IsDelete():
		return []byte{rowDelete}
	case op.Kind == store.OpAtime:
		return binary.LittleEndian.AppendUint64([]byte{rowAtime}, uint64(op.Entry.Meta.AtimeNs))
	}
	prio := byte(prioEager)
	if op.Entry.Priority == btree.Lazy {
		prio = prioLazy
	}
	v := []byte{rowPut, prio}
	v = append(v, cas.EncodeIdentifier(op.Entry.Value)...)
	return append(v, btree.EncodeMeta(op.Entry.Meta)...)
}

// DecodeOp parses a journal entry row.
func DecodeOp(key string, v []byte) (Op, error) {
	op := Op{Key: key}
	switch {
	case len(v) == 1 && v[0] == rowDelete:
		op.Kind = store.OpDelete
		return op, nil
	case len(v) == 9 && v[0] == rowAtime:
		op.Kind = store.OpAtime
		op.Entry.Meta.AtimeNs, op.Entry.Meta.HasAtime = int64(binary.LittleEndian.Uint64(v[1:])), true
		return op, nil
	case len(v) < 2 || v[0] != rowPut || (v[1] != prioEager && v[1] != prioLazy):
		return op, fmt.Errorf("journal: malformed entry row value %q", v[:min(len(v), 8)])
	}
	id, rest, err := cas.DecodeIdentifier(v[2:])
	if err != nil {
		return op, fmt.Errorf("journal: entry %q: %w", key, err)
	}
	meta, err := btree.DecodeMeta(rest)
	if err != nil {
		return op, fmt.Errorf("journal: entry %q: %w", key, err)
	}
	op.Entry = btree.Entry{Key: key, Value: id, Meta: meta}
	if v[1] == prioLazy {
		op.Entry.Priority = btree.Lazy
	}
	return op, nil
}

// ErrDone reports the use of a journal after commit or rollback.
var ErrDone = errors.New("journal: already committed or rolled back")

// Apply records ops in the journal.
func (j *Journal) Apply(ops ...Op) error { return j.ApplyWith(nil, ops...) }

// A CommitFunc lands entry rows of a journal in one db transaction with
// rows of its own, such as a value's last pieces (see
// store.ValueWriter.CommitJournal), and waits for it.
type CommitFunc func(id store.JournalID, es []store.JournalEntry) error

// ApplyWith records ops in the journal through commit; nil commits the rows
// alone.
func (j *Journal) ApplyWith(commit CommitFunc, ops ...Op) error {
	if j.done {
		return ErrDone
	}
	if err := j.p.CheckSpace(); err != nil {
		return err
	}
	for _, op := range ops {
		if len(op.Key) > btree.MaxKeySize {
			return fmt.Errorf("journal: %d-byte key: %w", len(op.Key), btree.ErrKeyTooLong)
		}
	}
	ops = j.mergeAtimes(ops)
	es := make([]store.JournalEntry, len(ops))
	logged := make([]store.Logged, len(ops))
	for i, op := range ops {
		es[i] = store.JournalEntry{Key: op.Key, Value: EncodeOp(op)}
		logged[i] = store.Logged{Key: op.Key, Kind: op.Kind, Row: es[i].Value,
			Value: op.Entry.Value, Size: op.Entry.Meta.Size, Source: op.Log, Through: op.Through}
	}
	// A transaction's changes are made durable by its commit's sync.
	d, logs := j.p.Durability(), !j.ID.Explicit()
	if logs && commit == nil && j.mayQueue(ops) {
		// Changes that bring no pieces of their own (an unlink, a
		// rename, a mkdir, a chmod) go to the sync log alone, one append
		// and no db transaction; a checkpoint or recovery writes their
		// rows if the journal has not landed by then.
		queued, err := d.Queue(j.ID, logged, es)
		if err != nil {
			slog.Warn("queued changes not recorded in the sync log; writing their rows", "page", j.p.Ledger+"/"+j.p.Name, "err", err)
		}
		if queued {
			j.note(ops, true)
			return nil
		}
	}
	if commit == nil {
		commit = j.p.PutJournalEntries
	}
	if err := d.Prepare(logs, logged); err != nil {
		return err
	}
	if unqueued := j.unqueue(ops); len(unqueued) > 0 {
		d.Unqueue(j.ID, unqueued)
	}
	written := d.Note(logged, logs, false)
	err := commit(j.ID, es)
	written()
	if err != nil {
		return err
	}
	j.note(ops, false)
	return d.Record(logs, logged)
}

// mayQueue reports whether ops may go to the sync log in place of their
// rows (store.Durability.Queue): no key of theirs has a row of this
// journal written already. Within a journal a key's changes are queued,
// then written as rows; never a queued one after a row, which recovery
// could not tell from one before it.
func (j *Journal) mayQueue(ops []Op) bool {
	for _, op := range ops {
		if _, ok := j.ops[op.Key]; ok && !j.queued[op.Key] {
			return false
		}
	}
	return true
}

// unqueue returns the keys of ops whose latest change in the journal was
// queued, which ops, written as rows, supersede.
func (j *Journal) unqueue(ops []Op) []string {
	var keys []string
	for _, op := range ops {
		if j.queued[op.Key] {
			delete(j.queued, op.Key)
			keys = append(keys, op.Key)
		}
	}
	return keys
}

// note keeps ops, recorded (queued: in the sync log alone), as the
// journal's latest change of each key.
func (j *Journal) note(ops []Op, queued bool) {
	if j.ops == nil {
		return
	}
	if queued {
		if j.queued == nil {
			j.queued = map[string]bool{}
		}
		for _, op := range ops {
			j.queued[op.Key] = true
		}
	}
	for _, op := range ops {
		if prev, ok := j.ops[op.Key]; ok && op.Kind != store.OpAtime && prev.Kind != store.OpAtime {
			// What the head holds is what the key's first change
			// in the journal was made from.
			op.Saw = prev.Saw
		}
		j.ops[op.Key] = op
	}
}

// mergeAtimes folds access times into the changes of their keys already in
// the journal: into a put (its row carries the time), not after a delete.
// A put that comes after an access time replaces it.
func (j *Journal) mergeAtimes(ops []Op) []Op {
	if j.ops == nil || !slices.ContainsFunc(ops, func(op Op) bool { return op.Kind == store.OpAtime }) {
		return ops
	}
	out := make([]Op, 0, len(ops))
	for _, op := range ops {
		prev, ok := j.ops[op.Key]
		switch {
		case op.Kind != store.OpAtime || !ok || prev.Kind == store.OpAtime:
			out = append(out, op)
		case !prev.IsDelete():
			prev.Entry.Meta.AtimeNs, prev.Entry.Meta.HasAtime = op.Entry.Meta.AtimeNs, true
			out = append(out, prev)
		}
	}
	return out
}

// deleteOwnRows deletes the journal's rows.
func (j *Journal) deleteOwnRows() error {
	var keys []string // nil: every row, found by a scan
	if j.ops != nil {
		keys = slices.Collect(maps.Keys(j.ops))
	}
	return j.p.DeleteJournalRows(j.ID, keys)
}

// Clear records that the journal clears the page: the page's previous state
// is dropped when it commits, and earlier changes in the journal with it.
func (j *Journal) Clear() error {
	if j.done {
		return ErrDone
	}
	if err := j.p.CheckSpace(); err != nil {
		return err
	}
	d := j.p.Durability()
	d.DropIntents() // the clear supersedes them: the checkpoint must not carry them
	if !d.Empty() { // a clear changes every logged key
		if err := d.Checkpoint(); err != nil {
			return err
		}
	}
	if err := j.deleteOwnRows(); err != nil {
		return err
	}
	if j.ops != nil {
		clear(j.ops)
	}
	written := d.Note(nil, false, true)
	defer written()
	return j.p.ClearJournal(j.ID)
}

// Get returns the journal's change to key, if it has one.
func (j *Journal) Get(key string) (Op, bool, error) {
	v, found, err := j.p.JournalEntry(j.ID, key)
	if err != nil || !found {
		return Op{}, false, err
	}
	op, err := DecodeOp(key, v)
	return op, err == nil, err
}

// Cleared reports whether the journal clears the page.
func (j *Journal) Cleared() (bool, error) { return j.p.JournalCleared(j.ID) }

// Ops calls fn for the journal's changes with keys starting with prefix, in
// key order.
func (j *Journal) Ops(prefix string, fn func(Op) error) error {
	if j.ops == nil {
		return j.p.JournalEntries(j.ID, prefix, func(key string, v []byte) error {
			op, err := DecodeOp(key, v)
			if err != nil {
				return err
			}
			return fn(op)
		})
	}
	keys := make([]string, 0, len(j.ops))
	for k := range j.ops {
		if strings.HasPrefix(k, prefix) {
			keys = append(keys, k)
		}
	}
	slices.Sort(keys)
	for _, k := range keys {
		if err := fn(j.ops[k]); err != nil {
			return err
		}
	}
	return nil
}

// Keys reports which keys the journal changes: all of them if it clears
// the page.
func (j *Journal) Keys() (func(key string) bool, error) {
	if cleared, err := j.Cleared(); err != nil || cleared {
		return func(string) bool { return true }, err
	}
	keys := map[string]bool{}
	err := j.Ops("", func(op Op) error {
		keys[op.Key] = true
		return nil
	})
	return func(key string) bool { return keys[key] }, err
}

// Rollback drops the journal and its changes.
func (j *Journal) Rollback() error {
	if j.done {
		return ErrDone
	}
	j.done = true
	if err := j.p.DropImplicitMeta(j.ID); err != nil {
		return err
	}
	if !j.ID.Explicit() {
		j.p.Durability().Landed(j.ID) // nothing of it to write
	}
	return j.deleteOwnRows()
}
