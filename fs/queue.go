package fs

import (
	"slices"
	"sync"
	"syscall"

	"github.com/ledgerfs/ledgerfs/internal/btree"
	"github.com/ledgerfs/ledgerfs/journal"
	"github.com/ledgerfs/ledgerfs/store"
)

// queuedChanges is what a view of a page has accepted and not yet
// committed: files created and not committed yet, or closed with their
// commit queued; directory markers and deletions whose commits are queued;
// and the count of queued commits. Lookups, listings and name checks show
// them as if committed, so that a close, an unlink or a mkdir need not wait
// for its commit.
//
// Every field is guarded by the owning pageRef's mu; a fileNode's queued
// count is too.
type queuedChanges struct {
	// files are created and not yet committed, or with a commit queued,
	// by key.
	files keyMap[*fileNode]
	// markers are directory markers (mode and mtime) whose commit is
	// queued, by key.
	markers keyMap[queuedMarker]
	// gone holds the keys whose deletion is queued, with the change's
	// number. A view keeps a clone of it (see keyMap.Clone): a copy of the
	// whole set per unlink was a third of what rm -rf of a large directory
	// allocated.
	gone keyMap[uint64]
	// atimes are access times whose commit is queued (see
	// journal.Op.Atime), by key, with the change's number.
	atimes keyMap[queuedAtime]
	// touched holds the directory markers whose new times (see
	// pageRef.touch) wait to ride with the page's next change, by key, with
	// the number of the change that shows them in markers.
	touched map[string]uint64
	// seq numbers queued changes, so that a change landing does not clear
	// what a later change of the same key shows.
	seq uint64
	// inflight counts the commits queued at close that have not landed;
	// ending, the landed ones whose node has yet to drop its content.
	inflight, ending int
}

// queueDelete queues the deletion of key in the live page's implicit
// journal; until it lands, views of the page hide the key. A sequential rm
// then shares commits as a stream of closes does, rather than waiting for
// one commit per file.
func (pg *pageRef) queueDelete(key string) error {
	return pg.queueShown(journal.Op{Key: key, Kind: store.OpDelete}, func(seq uint64) {
		pg.q.gone.Set(key, seq)
	}, func(seq uint64) {
		if s, ok := pg.q.gone.Get(key); ok && s == seq {
			pg.q.gone.Delete(key)
		}
	})
}

type queuedAtime struct {
	ns int64
	// sent is set once the time rides in a queued change: it shows until
	// that change lands, and a newer time replaces it.
	sent bool
}

// noteAtime records a read's new access time of the file at key. It is not
// a change of its own: every one would be a commit, moving the page's time
// under readers (tar fails a directory whose time moves while it reads
// it). It rides with the page's next queued change (see queueWith), or is
// committed at unmount; a crash loses it, and the next read makes it
// again.
func (pg *pageRef) noteAtime(key string, ns int64) {
	pg.mu.Lock()
	defer pg.mu.Unlock()
	if _, ok := pg.q.atimes.Get(key); !ok && pg.q.atimes.Len() >= maxWaitingAtimes {
		return
	}
	pg.q.atimes.Set(key, queuedAtime{ns: ns})
}

// maxWaitingAtimes bounds the access times a page keeps waiting (about
// 100 bytes each): reads of more files between two changes leave the
// others' times as they were, rather than grow the server's memory or
// commit under the readers.
const maxWaitingAtimes = 1 << 16

// takeAtimes returns the access times not sent yet as ops (journal.Op.Atime),
// but none for the keys of ops, whose changes they would overwrite in the
// journal's rows; and the function that drops what landed. Called with
// pg.mu held.
func (pg *pageRef) takeAtimes(ops []journal.Op) ([]journal.Op, func()) {
	var out []journal.Op
	room := journal.MaxQueued - len(ops) // they must go through the implicit journal
	pg.q.atimes.Under("", func(key string, a queuedAtime) bool {
		if len(out) >= room {
			return false
		}
		if a.sent || slices.ContainsFunc(ops, func(op journal.Op) bool { return op.Key == key }) {
			return true
		}
		op := journal.Op{Key: key, Kind: store.OpAtime}
		op.Entry.Meta.AtimeNs, op.Entry.Meta.HasAtime = a.ns, true
		out = append(out, op)
		return true
	})
	for _, op := range out {
		pg.q.atimes.Set(op.Key, queuedAtime{ns: op.Entry.Meta.AtimeNs, sent: true})
	}
	return out, func() {
		pg.mu.Lock()
		defer pg.mu.Unlock()
		for _, op := range out {
			if a, ok := pg.q.atimes.Get(op.Key); ok && a.sent && a.ns == op.Entry.Meta.AtimeNs {
				pg.q.atimes.Delete(op.Key)
			}
		}
	}
}

// forgetAtimes drops the access times waiting for the keys starting with
// prefix: a rename moves or replaces their files.
func (pg *pageRef) forgetAtimes(prefix string) {
	pg.mu.Lock()
	defer pg.mu.Unlock()
	var keys []string
	pg.q.atimes.Under(prefix, func(k string, _ queuedAtime) bool {
		keys = append(keys, k)
		return true
	})
	for _, k := range keys {
		pg.q.atimes.Delete(k)
	}
}

// flushAtimes commits the access times that wait for a change to ride
// with: at unmount, as many queued changes as they fill.
func (pg *pageRef) flushAtimes() error {
	for {
		pg.mu.Lock()
		pending := !pg.q.atimes.Under("", func(_ string, a queuedAtime) bool { return a.sent })
		pg.mu.Unlock()
		if !pending {
			return nil
		}
		if err := pg.queue(func(error) {}); err != nil {
			return err
		}
	}
}

// withQueuedAtime returns m, the metadata of the entry at key, with the
// access time queued for it, if any and later.
func (pg *pageRef) withQueuedAtime(key string, m btree.Meta) btree.Meta {
	pg.mu.Lock()
	a, ok := pg.q.atimes.Get(key)
	pg.mu.Unlock()
	if ok && (!m.HasAtime || a.ns > m.AtimeNs) {
		m.AtimeNs, m.HasAtime = a.ns, true
	}
	return m
}

// queueShown queues op, which shows until it lands: show records it and
// landed drops it, both called with pg.mu held and the change's number.
func (pg *pageRef) queueShown(op journal.Op, show, landed func(seq uint64)) error {
	pg.mu.Lock()
	pg.q.seq++
	seq := pg.q.seq
	show(seq)
	pg.mu.Unlock()
	done := func(error) {
		pg.mu.Lock()
		defer pg.mu.Unlock()
		landed(seq)
	}
	err := pg.queue(done, op)
	if err != nil {
		done(err)
	}
	return err
}

// queue records ops in the live page's implicit journal and commits them in
// the background, calling done after; see journal.Committer.Queue. The
// commit counts in pg.q.inflight until done has run, so settle waits for it.
func (pg *pageRef) queue(done func(error), ops ...journal.Op) error {
	return pg.queueWith(nil, done, ops...)
}

// queueWith is queue with the journal rows landing through w's commit,
// with the last pieces of the value they refer to.
func (pg *pageRef) queueWith(w *store.ValueWriter, done func(error), ops ...journal.Op) error {
	var commit journal.CommitFunc
	if w != nil {
		commit = w.CommitJournal
	}
	p, err := pg.acquire()
	if err != nil {
		return err
	}
	defer pg.release(p)
	pg.mu.Lock()
	pg.q.inflight++
	atimes, sent := pg.takeAtimes(ops)
	touches, touched := pg.takeTouches(ops, journal.MaxQueued-len(ops)-len(atimes))
	pg.mu.Unlock()
	// First in the rows, so that nothing of this change comes after them.
	ops = append(append(atimes, touches...), ops...)
	landed := func() {
		sent()
		touched()
		pg.mu.Lock()
		pg.q.inflight--
		carry := pg.q.inflight == 0 && len(pg.q.touched) > 0
		pg.mu.Unlock()
		if carry {
			// No change in flight will be followed by one that carries
			// the touches noted since.
			pg.fs.background.Go(func() {
				if err := pg.sendTouches(); err != nil {
					errno("directory times", err)
				}
			})
		}
	}
	err = pg.fs.opts.Journals.CommitterFor(p).QueueWith(commit, func(err error) {
		done(err)
		landed()
	}, ops...)
	if err != nil {
		landed()
	}
	return err
}

// commitThenSettle commits what is written to files and waits for the
// commits queued before: a close that returned before the caller began, or
// that these commits waited for, has queued its commit by now. For a
// change of several keys (rename, link, unlink of a linked name) made with
// the page's keys held exclusively, which then reads a head with nothing
// in flight.
func (pg *pageRef) commitThenSettle(op string, files ...*fileNode) syscall.Errno {
	for _, f := range files {
		if eno := f.commitHeld(commitWait); eno != 0 {
			return eno
		}
	}
	return errno(op, pg.settle())
}

// settle waits until the live page's queued commits have landed. A close
// returns before its commit; operations that read the head to decide what
// to change (unlink, rename, rmdir), and views of history, settle first so
// that they see every close that returned before them. Mkdir, symlink and
// a directory's setattr need not: they read names, which pending files and
// queued markers cover, and directory markers, which a close never changes.
func (pg *pageRef) settle() error {
	if !pg.v.queues() {
		return nil // a snapshot never changes; a transaction applies at once
	}
	if err := pg.sendTouches(); err != nil {
		return err
	}
	pg.mu.Lock()
	idle := pg.q.inflight == 0 && pg.q.ending == 0
	pg.mu.Unlock()
	if idle {
		return nil
	}
	p, err := pg.acquire()
	if err != nil {
		return err
	}
	err = pg.fs.opts.Journals.CommitterFor(p).Wait()
	pg.release(p)
	pg.mu.Lock()
	for pg.q.ending > 0 {
		pg.cond().Wait()
	}
	pg.mu.Unlock()
	return err
}

// ended records that a landed node has dropped its content.
func (pg *pageRef) ended() {
	pg.mu.Lock()
	defer pg.mu.Unlock()
	if pg.q.ending--; pg.q.ending == 0 {
		pg.cond().Broadcast()
	}
}

// cond returns the page's condition variable, made on first use. Called
// with pg.mu held.
func (pg *pageRef) cond() *sync.Cond {
	if pg.endCond == nil {
		pg.endCond = sync.NewCond(&pg.mu)
	}
	return pg.endCond
}

func (pg *pageRef) pendingFile(key string) *fileNode {
	pg.mu.Lock()
	defer pg.mu.Unlock()
	f, _ := pg.q.files.Get(key)
	return f
}

// unpendLocked drops f from pending at key if f is the node pending there
// (a later create may have taken the key). Called with pg.mu held.
func (pg *pageRef) unpendLocked(key string, f *fileNode) {
	if p, _ := pg.q.files.Get(key); p == f {
		pg.q.files.Delete(key)
		pg.cond().Broadcast()
	}
}

// dirShown reports whether the directory at prefix exists by what is
// queued: a pending file or a queued marker in it. Every lookup and name
// check asks, so it stops at the first and collects nothing.
func (pg *pageRef) dirShown(prefix string) bool {
	pg.mu.Lock()
	defer pg.mu.Unlock()
	return !pg.q.markers.Under(prefix, func(string, queuedMarker) bool { return false }) ||
		!pg.q.files.Under(prefix, func(string, *fileNode) bool { return false })
}

// pendingUnder lists pending keys starting with prefix.
func (pg *pageRef) pendingUnder(prefix string) map[string]*fileNode {
	pg.mu.Lock()
	defer pg.mu.Unlock()
	var out map[string]*fileNode
	pg.q.files.Under(prefix, func(k string, f *fileNode) bool {
		if out == nil {
			out = map[string]*fileNode{}
		}
		out[k] = f
		return true
	})
	return out
}

func (pg *pageRef) dropPending(key string) {
	pg.mu.Lock()
	defer pg.mu.Unlock()
	pg.q.files.Delete(key)
	pg.q.atimes.Delete(key) // the file is gone: its read time with it
	pg.cond().Broadcast()
}

// unpend drops f from pg.q.files at key unless a commit of f is still
// queued.
func (pg *pageRef) unpend(key string, f *fileNode) {
	pg.mu.Lock()
	defer pg.mu.Unlock()
	if f.queued == 0 {
		pg.unpendLocked(key, f)
	}
}

func (f *fileNode) isQueued() bool {
	f.pg.mu.Lock()
	defer f.pg.mu.Unlock()
	return f.queued > 0
}
