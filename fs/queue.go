package fs

import (
	"log/slog"
	"sync"
	"syscall"

	"github.com/ledgerfs/ledgerfs/internal/btree"
	"github.com/ledgerfs/ledgerfs/journal"
	"github.com/ledgerfs/ledgerfs/store"
)

// queueDelete queues the deletion of key in the live page's implicit
// journal; until it lands, views of the page hide the key. A sequential rm
// then shares commits as a stream of closes does, rather than waiting for
// one commit per file.
func (pg *pageRef) queueDelete(key string) error {
	return pg.queueShown(journal.Op{Key: key, Kind: store.OpDelete}, func(seq uint64) {
		pg.ov.showGone(key, seq)
	}, func(seq uint64) {
		pg.ov.landGone(key, seq)
	})
}

// noteAtime records a read's new access time of the file at key. It is
// no change of the file: a commit would move the page's time under
// readers (tar fails a directory whose time moves while it reads it), and
// go to every device, uploaded for a read. It is kept in the repository
// db (store.Repository.SetLocalAtimes), a batch at a time in the
// background and the rest at unmount; a crash loses what waits, and the
// next read makes it again.
func (pg *pageRef) noteAtime(key string, ns int64) {
	pg.mu.Lock()
	pg.ov.noteAtime(key, ns)
	// The times being kept count too: none are while atimesSaving is
	// unset, and counting them apart would walk every time at each read.
	due := !pg.atimesSaving && pg.ov.atimes.Len() >= atimeBatch
	if due {
		pg.atimesSaving = true
	}
	pg.mu.Unlock()
	if due {
		pg.fs.background.Go(func() {
			defer func() {
				pg.mu.Lock()
				pg.atimesSaving = false
				pg.mu.Unlock()
			}()
			if err := pg.saveAtimes(); err != nil {
				l, n := pg.names()
				slog.Warn("access times not kept", "page", l+"/"+n, "err", err)
			}
		})
	}
}

// atimeBatch is how many access times wait before they are kept.
const atimeBatch = 1024

// saveAtimes keeps the access times waiting, a batch at a time.
func (pg *pageRef) saveAtimes() error {
	for {
		pg.mu.Lock()
		taken := pg.ov.takeAtimes(atimeBatch)
		pg.mu.Unlock()
		if len(taken) == 0 {
			return nil
		}
		l, n := pg.names()
		err := pg.fs.repo.SetLocalAtimes(l, n, taken)
		pg.mu.Lock()
		pg.ov.landAtimes(taken, err == nil)
		pg.mu.Unlock()
		if err != nil {
			return err
		}
	}
}

// forgetAtimes drops the access times waiting for the keys starting with
// prefix: a rename moves or replaces their files.
func (pg *pageRef) forgetAtimes(prefix string) {
	pg.mu.Lock()
	defer pg.mu.Unlock()
	pg.ov.forgetAtimes(prefix)
}

// flushAtimes keeps the access times waiting: at unmount.
func (pg *pageRef) flushAtimes() error { return pg.saveAtimes() }

// withQueuedAtime returns m, the metadata of the entry at key, with the
// access time a read on this device gave it in the live page (waiting, or
// kept in the repository db), if later and the entry was not changed
// since: a change, here or on another device, or a time set (touch -a)
// advances the entry's ctime, and shows.
func (pg *pageRef) withQueuedAtime(key string, m btree.Meta) btree.Meta {
	if !pg.v.queues() {
		return m
	}
	pg.mu.Lock()
	ns, ok := pg.ov.atime(key)
	pg.mu.Unlock()
	if !ok {
		l, n := pg.names()
		var err error
		if ns, ok, err = pg.fs.repo.LocalAtime(l, n, key); err != nil {
			slog.Warn("reading an access time", "page", l+"/"+n, "key", key, "err", err)
			return m
		}
	}
	var changed int64
	switch {
	case m.HasCtime:
		changed = m.CtimeNs
	case m.HasMtime:
		changed = m.MtimeNs
	}
	if ok && ns >= changed && (!m.HasAtime || ns > m.AtimeNs) {
		m.AtimeNs, m.HasAtime = ns, true
	}
	return m
}

// queueShown queues op, which shows until it lands: show records it and
// landed drops it, both called with pg.mu held and the change's number.
func (pg *pageRef) queueShown(op journal.Op, show, landed func(seq uint64)) error {
	pg.mu.Lock()
	seq := pg.ov.next()
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
// commit counts in pg.ov.inflight until done has run, so settle waits for it.
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
	p, err := pg.acquireForChange()
	if err != nil {
		return err
	}
	defer pg.release(p)
	pg.mu.Lock()
	pg.ov.inflight++
	touches, touched := pg.takeTouches(ops, journal.MaxQueued-len(ops))
	pg.mu.Unlock()
	// First in the rows, so that nothing of this change comes after them.
	ops = append(touches, ops...)
	landed := func() {
		touched()
		pg.mu.Lock()
		pg.ov.inflight--
		carry := pg.ov.inflight == 0 && pg.ov.touchesWaiting()
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
	return errno(op, pg.settleQueued())
}

// settle waits until the live page's queued commits have landed. A close
// returns before its commit; operations that read the head to decide what
// to change (rename, link), and views of history, settle first so that
// they see every close that returned before them. Mkdir, symlink, unlink,
// rmdir and a directory's setattr need not: they read names, which pending
// files, queued markers and queued deletes cover, and directory markers,
// which a close never changes.
func (pg *pageRef) settle() error {
	if pg.v.queues() {
		pg.commitDeferred(false)
	}
	return pg.settleQueued()
}

// settleQueued is settle without committing the closes left to the
// intents timer, for a caller holding pg.keys: the files it commits
// itself are what it reads.
func (pg *pageRef) settleQueued() error {
	if !pg.v.queues() {
		return nil // a snapshot never changes; a transaction applies at once
	}
	if err := pg.sendTouches(); err != nil {
		return err
	}
	pg.mu.Lock()
	idle := pg.ov.inflight == 0 && pg.ov.ending == 0
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
	for pg.ov.ending > 0 {
		pg.cond().Wait()
	}
	pg.mu.Unlock()
	return err
}

// ended records that a landed node has dropped its content.
func (pg *pageRef) ended() {
	pg.mu.Lock()
	defer pg.mu.Unlock()
	if pg.ov.ending--; pg.ov.ending == 0 {
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
	return pg.ov.pending(key)
}

// unpendLocked drops f from pending at key if f is the node pending there
// (a later create may have taken the key). Called with pg.mu held.
func (pg *pageRef) unpendLocked(key string, f *fileNode) {
	if pg.ov.unpend(key, f) {
		pg.cond().Broadcast()
	}
}

// dirShown reports whether the directory at prefix exists by what is
// queued (see overlay.dirShown).
func (pg *pageRef) dirShown(prefix string) bool {
	pg.mu.Lock()
	defer pg.mu.Unlock()
	return pg.ov.dirShown(prefix)
}

// dirQueued is dirShown and queuedMarker of the directory at prefix, in
// one hold of pg.mu: a lookup reads both before the tree.
func (pg *pageRef) dirQueued(prefix string) (marker btree.Entry, markerQueued, shown bool) {
	pg.mu.Lock()
	defer pg.mu.Unlock()
	marker, markerQueued = pg.ov.marker(prefix)
	return marker, markerQueued, pg.ov.dirShown(prefix)
}

// pendingUnder lists pending keys starting with prefix.
func (pg *pageRef) pendingUnder(prefix string) map[string]*fileNode {
	pg.mu.Lock()
	defer pg.mu.Unlock()
	return pg.ov.pendingUnder(prefix)
}

func (pg *pageRef) dropPending(key string) {
	pg.mu.Lock()
	defer pg.mu.Unlock()
	pg.ov.dropPending(key)
	pg.cond().Broadcast()
}

// unpend drops f from the files pending at key unless a commit of f is still
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
