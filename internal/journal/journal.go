// Package journal records uncommitted changes to a page as Ledger's journal
// rows and turns them into commits: implicit journals for ordinary writes
// (committed promptly, several closes sharing one commit), explicit journals
// for transactions (committed atomically or rolled back). On open, a page's
// explicit journals are dropped and its implicit ones committed.
package journal

import (
	"bytes"
	"crypto/rand"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync/atomic"
	"time"

	"github.com/dgraph-io/badger/v4"

	"github.com/ledgerfs/ledgerfs/internal/btree"
	"github.com/ledgerfs/ledgerfs/internal/cas"
	"github.com/ledgerfs/ledgerfs/internal/store"
)

// Journal is a set of uncommitted changes to a page, kept in the page's db.
type Journal struct {
	p    *store.Page
	ID   store.JournalID
	Base store.CommitID
	done bool
	// ops holds the journal's changes by key when it was made in this
	// process, so that commit and clean-up need not scan its rows (nil: a
	// journal found on disk, read from its rows).
	ops map[string]Op
	// at, when set, is the time (Unix ns) of the journal's latest change:
	// its commit takes that time rather than the time it lands (see
	// Committer.Latest).
	at int64
}

// Op is one change: a put of Entry, or a delete when Delete is set.
type Op struct {
	Key    string
	Entry  btree.Entry // Entry.Key is ignored; Key is used
	Delete bool
}

// ApplyTo makes the change in tree t.
func (op Op) ApplyTo(t *btree.Tree) error {
	if op.Delete {
		_, err := t.Delete(op.Key)
		return err
	}
	e := op.Entry
	e.Key = op.Key
	return t.Put(e)
}

// lastImplicit is the time in the newest implicit journal id.
var lastImplicit atomic.Int64

// newID returns a new journal id. Implicit journal ids are the time they
// begin, in big-endian hex, so that recovery commits them in order: a crash
// may leave one being committed and the next one filling, and the same key
// may be in both. Explicit ids are random.
func newID(explicit bool) store.JournalID {
	var b [8]byte
	if explicit {
		rand.Read(b[:])
		return store.JournalID("E" + hex.EncodeToString(b[:]))
	}
	for {
		last := lastImplicit.Load()
		now := max(time.Now().UnixNano(), last+1)
		if lastImplicit.CompareAndSwap(last, now) {
			binary.BigEndian.PutUint64(b[:], uint64(now))
			return store.JournalID("I" + hex.EncodeToString(b[:]))
		}
	}
}

// Begin starts a journal on the page's current head. An implicit journal's
// base is recorded in its metadata row, so that it can be committed after a
// crash.
func Begin(p *store.Page, explicit bool) (*Journal, error) {
	head, err := p.Head()
	if err != nil {
		return nil, err
	}
	j := &Journal{p: p, ID: newID(explicit), Base: head.ID, ops: map[string]Op{}}
	if !explicit {
		if err := p.CheckSpace(); err != nil {
			return nil, err
		}
		err := p.DB().Update(func(txn *badger.Txn) error {
			return txn.Set(store.ImplicitMetaKey(j.ID), head.ID[:])
		})
		if err != nil {
			return nil, fmt.Errorf("journal: begin: %w", err)
		}
	}
	return j, nil
}

// Entry-row values: "A" + priority + object identifier [+ metadata] for a
// put, "D" for a delete.
const (
	rowPut    = 'A'
	rowDelete = 'D'
	prioEager = 'E'
	prioLazy  = 'L'
)

// EncodeOp returns the journal row value of a put or delete. The object
// identifier is a size-prefixed ObjectIdentifierStorage; the entry's file
// metadata follows as a size-prefixed EntryMetaStorage.
func EncodeOp(op Op) []byte {
	if op.Delete {
		return []byte{rowDelete}
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
		op.Delete = true
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

// A CommitFunc lands the rows that rows sets (if not nil) in one db
// transaction with rows of its own, such as a value's last pieces (see
// store.ValueWriter.Commit), and waits for it.
type CommitFunc func(rows func(txn *badger.Txn) error) error

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
	var err error
	if commit == nil {
		// Rows of one Apply need not land in one transaction: an implicit
		// journal only gets groups small enough for one (see Committer),
		// and an explicit journal is dropped whole by a crash.
		err = store.Batched(j.p.DB(), len(ops), func(txn *badger.Txn, i int) error {
			return txn.Set(store.JournalEntryKey(j.ID, ops[i].Key), EncodeOp(ops[i]))
		})
	} else {
		err = commit(func(txn *badger.Txn) error {
			for _, op := range ops {
				if err := txn.Set(store.JournalEntryKey(j.ID, op.Key), EncodeOp(op)); err != nil {
					return err
				}
			}
			return nil
		})
	}
	if err == nil && j.ops != nil {
		for _, op := range ops {
			j.ops[op.Key] = op
		}
	}
	return err
}

// deleteOwnRows deletes the journal's rows.
func (j *Journal) deleteOwnRows() error {
	if j.ops == nil {
		return deleteRows(j.p.DB(), []byte(store.JournalPrefix(j.ID)))
	}
	keys := make([][]byte, 0, len(j.ops)+1)
	for k := range j.ops {
		keys = append(keys, store.JournalEntryKey(j.ID, k))
	}
	keys = append(keys, store.JournalClearKey(j.ID))
	if err := store.Batched(j.p.DB(), len(keys), func(txn *badger.Txn, i int) error {
		return txn.Delete(keys[i])
	}); err != nil {
		return fmt.Errorf("journal: delete rows of %s: %w", j.ID, err)
	}
	return nil
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
	if err := j.deleteOwnRows(); err != nil {
		return err
	}
	if j.ops != nil {
		clear(j.ops)
	}
	return j.p.DB().Update(func(txn *badger.Txn) error {
		return txn.Set(store.JournalClearKey(j.ID), nil)
	})
}

// Get returns the journal's change to key, if it has one.
func (j *Journal) Get(key string) (Op, bool, error) {
	var op Op
	var found bool
	err := j.p.DB().View(func(txn *badger.Txn) error {
		it, err := txn.Get(store.JournalEntryKey(j.ID, key))
		if errors.Is(err, badger.ErrKeyNotFound) {
			return nil
		}
		if err != nil {
			return err
		}
		return it.Value(func(v []byte) error {
			op, err = DecodeOp(key, v)
			found = err == nil
			return err
		})
	})
	return op, found, err
}

// Cleared reports whether the journal clears the page.
func (j *Journal) Cleared() (bool, error) { return hasClear(j.p.DB(), j.ID) }

func hasClear(db *badger.DB, id store.JournalID) (bool, error) {
	err := db.View(func(txn *badger.Txn) error {
		_, err := txn.Get(store.JournalClearKey(id))
		return err
	})
	if errors.Is(err, badger.ErrKeyNotFound) {
		return false, nil
	}
	return err == nil, err
}

// Ops calls fn for the journal's changes with keys starting with prefix, in
// key order.
func (j *Journal) Ops(prefix string, fn func(Op) error) error {
	if j.ops == nil {
		return forOps(j.p.DB(), j.ID, prefix, fn)
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

func forOps(db *badger.DB, id store.JournalID, prefix string, fn func(Op) error) error {
	rowPrefix := []byte(store.JournalEntryPrefix(id) + prefix)
	skip := len(store.JournalEntryPrefix(id))
	return db.View(func(txn *badger.Txn) error {
		it := txn.NewIterator(badger.IteratorOptions{Prefix: rowPrefix, PrefetchValues: true, PrefetchSize: 64})
		defer it.Close()
		for it.Rewind(); it.Valid(); it.Next() {
			item := it.Item()
			key := string(item.Key()[skip:])
			v, err := item.ValueCopy(nil)
			if err != nil {
				return err
			}
			op, err := DecodeOp(key, v)
			if err != nil {
				return err
			}
			if err := fn(op); err != nil {
				return err
			}
		}
		return nil
	})
}

// Rollback drops the journal and its changes.
func (j *Journal) Rollback() error {
	if j.done {
		return ErrDone
	}
	j.done = true
	if err := j.p.DB().Update(func(txn *badger.Txn) error {
		return txn.Delete(store.ImplicitMetaKey(j.ID))
	}); err != nil {
		return err
	}
	return j.deleteOwnRows()
}

// deleteRows deletes every row with the prefix, in bounded transactions.
func deleteRows(db *badger.DB, prefix []byte) error {
	for {
		var keys [][]byte
		err := db.View(func(txn *badger.Txn) error {
			it := txn.NewIterator(badger.IteratorOptions{Prefix: prefix})
			defer it.Close()
			for it.Rewind(); it.Valid() && len(keys) < 5000; it.Next() {
				keys = append(keys, it.Item().KeyCopy(nil))
			}
			return nil
		})
		if err != nil || len(keys) == 0 {
			return err
		}
		if err := store.Batched(db, len(keys), func(txn *badger.Txn, i int) error {
			return txn.Delete(keys[i])
		}); err != nil {
			return fmt.Errorf("journal: delete rows %q: %w", prefix, err)
		}
		if !bytes.HasPrefix(keys[len(keys)-1], prefix) {
			return nil
		}
	}
}
