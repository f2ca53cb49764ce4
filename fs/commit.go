package fs

import (
	"syscall"

	"github.com/ledgerfs/ledgerfs/internal/btree"
	"github.com/ledgerfs/ledgerfs/journal"
	"github.com/ledgerfs/ledgerfs/store"
)

// changedBehind takes a change of the node's key that a transaction
// committed. It reports whether the node is gone from its name: deleted,
// or its content or type replaced, in which case it lives on, unlinked,
// for its descriptors, as a file a rename replaced does. Metadata alone
// (chmod, utimes) changes the node in place, also while it is open for
// writing, as chmod of an open file does. A node gone has its inode number
// released; the caller drops it from the kernel's cache.
func (f *fileNode) changedBehind(ch btree.Change, ts int64) (gone bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.unlinked || f.fixed {
		return false
	}
	after := ch.After
	if ch.Before == nil || after == nil || after.Value != ch.Before.Value ||
		after.Meta.FileMode()&syscall.S_IFMT != f.StableAttr().Mode&syscall.S_IFMT {
		// The number goes first: a lookup that sees the node replaced
		// (newFile) then gets a new one, a new node.
		f.pg.fs.inos.release(f.pg.id('f', ch.Key))
		f.unlinked, f.behind = true, true
		if f.c == nil && ch.Before != nil && ch.Before.Meta.Link == "" && ch.Before.Meta.FileMode()&syscall.S_IFMT == syscall.S_IFREG {
			was := *ch.Before
			f.was = &was
		}
		return true
	}
	f.takeMeta(after.Meta, ts)
	return false
}

// takeMeta takes the metadata a commit behind the kernel's back left (a
// transaction's): a node with content keeps what it holds and takes only
// the mode, the mtime and the count of names; f.mu held.
func (f *fileNode) takeMeta(m btree.Meta, ts int64) {
	if f.c != nil {
		f.meta.Mode, f.meta.MtimeNs, f.meta.HasMtime, f.meta.Nlink = m.Mode, m.MtimeNs, m.HasMtime, m.Nlink
		return
	}
	f.meta, f.metaTs = m, ts
}

// How a change is committed: waiting for the commit, also for the disk, or
// queued for the page's committer (a close).
type commitMode int

const (
	commitWait commitMode = iota
	commitSync
	commitQueue
)

// commit commits the file's changes, if any.
func (f *fileNode) commit(mode commitMode) syscall.Errno {
	f.pg.keys.RLock()
	defer f.pg.keys.RUnlock()
	return f.commitHeld(mode)
}

// commitHeld is commit by a caller holding f.pg.keys.
func (f *fileNode) commitHeld(mode commitMode) syscall.Errno {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.commitLocked(mode)
}

// commitLocked is commit with f.pg.keys and f.mu held.
func (f *fileNode) commitLocked(mode commitMode) syscall.Errno {
	sync := mode == commitSync
	if f.unlinked || f.c == nil || !(f.c.dirty || f.changed) {
		if sync {
			return errno("fsync", f.pg.apply(true))
		}
		return 0
	}
	key, ok := f.key()
	if !ok && f.placed != "" && f.stillAt(f.placed) {
		key, ok = f.placed, true // forgotten by the kernel, not deleted
	}
	if !ok {
		return 0 // deleted meanwhile
	}
	if sync && f.pg.v.queues() {
		if done, err := f.logIntent(key); err != nil {
			return errno("fsync", err)
		} else if done {
			fsyncedCommitFailed(f.commitDue())
			return 0
		}
	}
	// An fsync on the live page is queued as a close is, and made durable
	// by a record in the page's sync log rather than a sync of its db; a
	// close of a key the log holds is recorded too (see journal.Op.Log).
	var logged *store.LogSource
	queues := f.pg.v.queues()
	if d := f.c.p.Durability(); queues && (sync || d.Has(key)) {
		var err error
		if logged, err = f.logSource(d, key, maxLoggedChange); err != nil {
			return errno("commit", err)
		}
	}
	id, size, w, err := f.c.value()
	if err != nil {
		return errno("commit", err)
	}
	if w != nil {
		defer w.Discard() // what a failure left uncommitted
	}
	m := f.meta
	m.Size = uint64(size)
	if btree.IsLinkKey(key) {
		// Links made or removed through other names since the node
		// last read its entry count, not the node's figure.
		if e, _, err := f.entryAt(key); err == nil {
			m.Nlink = e.Meta.Nlink
		}
	}
	saw := f.saw
	op := journal.Op{Key: key, Entry: btree.Entry{Key: key, Value: id, Meta: m}, Local: f.c.kept, Log: logged, Saw: &saw}
	queued := queues && (mode == commitQueue || sync && logged != nil)
	if queued {
		// The value's last pieces land with its journal entry, or
		// neither does.
		if err := f.queue(key, op, w); err != nil {
			return errno("commit", f.c.stored(err))
		}
		if sync {
			if err := f.syncLogged(key); err != nil {
				return errno("fsync", err)
			}
		}
	} else {
		if w != nil {
			err = f.c.stored(w.Commit())
		}
		if err == nil {
			err = f.pg.apply(sync, op)
		}
		if err != nil {
			return errno("commit", err)
		}
	}
	f.c.reset(id, size)
	f.saw = id
	// Applied, the commit has marked the value's pieces local: an edit of
	// it need not look up the pieces it keeps.
	if !queued {
		f.c.state = baseLanded
	}
	f.latest, f.latestSize = id, size
	f.committed++
	f.changed = false
	if f.created {
		f.created = false
		f.pg.unpend(key, f)
	}
	return 0
}

// syncLogged makes the change of key just queued durable: through the
// sync log if its record is there, else by syncing the db. The commit
// lands with the next batch, as a close's does: durable, the change need
// not be in history yet (a view of history waits for it).
func (f *fileNode) syncLogged(key string) error {
	if d := f.c.p.Durability(); d.Durable(key) {
		return d.SyncLog()
	}
	return f.pg.apply(true)
}

// queue records op in the page's journal, in one db transaction with the
// last pieces of the value in w (if not nil), and lets the committer commit
// it with other closes. Until it lands, f stays pending at key with its
// content, so lookups and reads see what was closed; a crash leaves the
// journal for recovery to commit.
func (f *fileNode) queue(key string, op journal.Op, w *store.ValueWriter) error {
	pg := f.pg
	pg.mu.Lock()
	f.queued++
	pg.ov.setPending(key, f)
	pg.mu.Unlock()
	err := pg.queueWith(w, f.landing(key, nil), op)
	if err != nil {
		f.unqueue(key)
	}
	return err
}

// queueMove queues ops, a rename of the file from key src to dst, as
// queue queues a close: the file shows at dst, and src shows deleted,
// until they land. Called with f.mu held and the content loaded.
func (f *fileNode) queueMove(src, dst string, ops []journal.Op) error {
	pg := f.pg
	pg.mu.Lock()
	seq := pg.ov.next()
	pg.ov.showGone(src, seq)
	pg.unpendLocked(src, f)
	pg.ov.dropPending(dst) // a file the move replaces
	f.queued++
	pg.ov.setPending(dst, f)
	pg.cond().Broadcast()
	pg.mu.Unlock()
	gone := func() { pg.ov.landGone(src, seq) }
	err := pg.queueWith(nil, f.landing(dst, gone), ops...)
	if err != nil {
		pg.mu.Lock()
		gone()
		pg.mu.Unlock()
		f.unqueue(dst)
	}
	return err
}

// unqueue undoes queue's count and showing after the queueing failed.
func (f *fileNode) unqueue(key string) {
	pg := f.pg
	pg.mu.Lock()
	defer pg.mu.Unlock()
	f.queued--
	if f.queued == 0 && !f.created {
		pg.unpendLocked(key, f)
	}
}

// landing returns what runs once a queued change of the file at key has
// landed (also, if not nil, with pg.mu held): the file stops showing there
// when it was its last change queued, and drops its content.
func (f *fileNode) landing(key string, also func()) func(error) {
	pg := f.pg
	return func(err error) {
		// On the committer's goroutine: f.mu may be held by a caller
		// waiting for this very commit.
		pg.mu.Lock()
		if also != nil {
			also()
		}
		f.queued--
		last := f.queued == 0
		if last {
			pg.unpendLocked(key, f)
			pg.ov.ending++
		}
		pg.mu.Unlock()
		if !last {
			return
		}
		if f.mu.TryLock() {
			f.endChange()
			f.mu.Unlock()
			pg.ended()
			return
		}
		pg.fs.background.Go(func() {
			f.mu.Lock()
			f.endChange()
			f.mu.Unlock()
			pg.ended()
		})
	}
}
