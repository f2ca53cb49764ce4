package fs

import (
	"log/slog"
	"maps"
	"slices"
	"syscall"
	"time"

	"github.com/ledgerfs/ledgerfs/cas"
	"github.com/ledgerfs/ledgerfs/internal/btree"
	"github.com/ledgerfs/ledgerfs/journal"
	"github.com/ledgerfs/ledgerfs/store"
)

// An fsync of a small change is made durable by an intent in the page's
// sync log (store.Durability.LogIntent) before its value is computed: one
// record and one sync of the log, no chunking, hashing or db write on the
// way. The file stays written, not committed; its commit follows at its
// close, intentDelay after its first intent, or as soon as the page's
// intents fill their share of its log, whichever comes first — so history
// and sync see it soon, and several fsyncs share one commit.
//
// An intent holds the changes since the file's durable base, or since its
// last intent, up to maxEditIntent: a database's checkpoint rewrites
// thousands of pages scattered over a large file, and committing them in
// the fsync re-chunks the neighbourhood of each (0.4 s for 4 MiB of 4 KiB
// pages in a 100 MiB file), where logging them writes them once. A file
// with no durable base is logged whole only up to maxIntent: a larger one
// costs about as much to commit as to log, and its close follows.
// Larger changes commit in the fsync.
const (
	maxIntent     = 64 << 10
	maxEditIntent = 8 << 20
	intentDelay   = time.Second
)

// logIntent makes the file's changes durable by an intent, if they are
// small enough and the page's log takes it: the first since the file's
// base holds every change since it, each next one the changes since the
// last. Called with f.pg.keys and f.mu held, the file changed and at key.
func (f *fileNode) logIntent(key string) (bool, error) {
	c := f.c
	if btree.IsLinkKey(key) {
		return false, nil // a link's count of names is read at commit
	}
	d := c.p.Durability()
	var src *store.LogSource
	if c.intent != nil {
		if extentBytes(c.intent.ext) > maxEditIntent {
			return false, nil
		}
		ext, err := c.copyExtents(c.intent.ext)
		if err != nil {
			return false, err
		}
		src = &store.LogSource{Keep: uint64(c.intent.min), Extents: ext}
	} else {
		// logSource refuses changes over maxEditIntent.
		var err error
		if src, err = f.logSource(d, key, maxEditIntent); err != nil || src == nil {
			return false, err
		}
		if src.Base == "" {
			// No durable base: the record holds the whole content,
			// which logSource copied if it was in memory.
			if c.size > maxIntent {
				return false, nil
			}
			if src.Extents == nil {
				if src, err = c.wholeSource(); err != nil {
					return false, err
				}
			}
		}
	}
	m := f.meta
	m.Size = uint64(c.size)
	// The row names the base (a new file's: the empty value); the replay
	// puts the value it rebuilds.
	named := c.baseID
	if named.Digest == "" {
		named.Digest = cas.ComputeDigest(cas.KindBlob, false, nil)
	}
	row := journal.EncodeOp(journal.Op{Key: key, Entry: btree.Entry{Key: key, Value: named, Meta: m}})
	mark, full, err := d.LogIntent(key, row, uint64(c.size), src, c.intent != nil)
	if mark.IsZero() {
		return false, err
	}
	full = full && f.pg.crowded(d)
	c.intentLogged(mark)
	c.intentKey, c.intentMeta = key, m
	if c.copied != nil {
		// The copy's commit notes the file again when it lands.
		c.soon = c.soon || full
		return true, nil
	}
	f.pg.noteIntent(f, full)
	return true, nil
}

// noteIntent arms the page's timer that commits files with intents, unless
// it is armed or the filesystem is closing; soon, if the page's intents
// fill their share of its log.
func (pg *pageRef) noteIntent(f *fileNode, soon bool) {
	pg.mu.Lock()
	defer pg.mu.Unlock()
	if pg.intents == nil {
		pg.intents = map[*fileNode]struct{}{}
	}
	pg.intents[f] = struct{}{}
	delay := intentDelay
	if soon {
		delay = 0
	}
	if pg.intentTimer != nil {
		if soon && pg.intentTimer.Stop() {
			pg.intentTimer.Reset(0)
		}
		return
	}
	if !pg.fs.startBackground() {
		return
	}
	pg.intentTimer = time.AfterFunc(delay, func() {
		defer pg.fs.background.Done()
		pg.commitIntents(false)
	})
}

// commitIntents commits the files with intents the page holds. A file
// written since its last intent is left for its next fsync to commit
// (fileNode.intentsDue), unless force: the filesystem is closing.
func (pg *pageRef) commitIntents(force bool) {
	pg.mu.Lock()
	files := pg.intents
	pg.intents, pg.intentTimer = nil, nil
	pg.mu.Unlock()
	for f := range files {
		fsyncedCommitFailed(f.commitFromCopy(force))
		f.endDeferred(force)
	}
}

// stopIntents stops the page's timer and commits its files with intents
// now, and the files whose close it was to commit, for Close.
func (pg *pageRef) stopIntents() {
	pg.mu.Lock()
	t := pg.intentTimer
	pg.mu.Unlock()
	if t != nil && t.Stop() {
		pg.fs.background.Done()
	}
	pg.commitIntents(true)
	pg.commitDeferred(true)
}

// A close whose every change is in the page's sync log already (a file
// created, written and fsynced: a database's rollback journal, a file
// written to a temporary name before its rename) is durable without a
// commit, as an fsync of it was. Its commit is left to the intents timer,
// which commits it with the page's other files with intents, or not at all
// if it was deleted meanwhile: a rollback journal lives from one
// transaction's start to its end, and committing each cost a transaction
// of SQLite's DELETE mode 0.8 ms of its 5. Until then the file keeps its
// content and a writer of its own, so that everything that handles a file
// open for writing (a rename, an unlink, a lookup after the kernel forgot
// it, a page that stays open while written) handles it too; views of
// history commit it first (settle).

// closeDeferrable reports whether the close of the file's last writer may
// leave its commit to the intents timer: the file was created here and
// never committed, and its last intent holds it as it is, at its key.
// Called with f.pg.keys and f.mu held.
func (f *fileNode) closeDeferrable() bool {
	c := f.c
	if !f.created || f.unlinked || f.fixed || c == nil || !c.dirty || c.intent == nil ||
		!c.intent.none(c.size) || c.copied != nil || c.err() != nil || c.stream != nil ||
		c.fromStream() || !f.pg.v.queues() {
		return false
	}
	m := f.meta
	m.Size = uint64(c.size)
	if m != c.intentMeta {
		return false
	}
	key, ok := f.key()
	return ok && key == c.intentKey
}

// deferClose leaves the file's commit to the intents timer, the file
// holding a writer until then (see endDeferred). Called with f.pg.keys and
// f.mu held, after closeDeferrable.
func (f *fileNode) deferClose() {
	f.deferred = true
	f.writers++
	pg := f.pg
	pg.mu.Lock()
	if pg.deferred == nil {
		pg.deferred = map[*fileNode]struct{}{}
	}
	pg.deferred[f] = struct{}{}
	pg.mu.Unlock()
	pg.noteIntent(f, false)
}

// endDeferred releases the writer a deferred close kept once the file's
// commit is made (or was not needed: the file was deleted), as the close's
// release would have. A commit that failed is tried again with the next
// intents, unless force: the page is closing, and the file's intents are
// in its log for the next start to commit.
func (f *fileNode) endDeferred(force bool) {
	f.pg.keys.RLock()
	defer f.pg.keys.RUnlock()
	f.mu.Lock()
	defer f.mu.Unlock()
	if !f.deferred {
		return
	}
	if c := f.c; !force && c != nil && !f.unlinked && (c.dirty || f.changed || c.copied != nil) {
		f.pg.noteIntent(f, false)
		return
	}
	f.deferred = false
	f.writers--
	pg := f.pg
	pg.mu.Lock()
	delete(pg.deferred, f)
	pg.mu.Unlock()
	f.writerGone()
}

// commitDeferred commits the files whose close was left to the intents
// timer, now. Called with no lock of this package held.
func (pg *pageRef) commitDeferred(force bool) {
	pg.mu.Lock()
	files := slices.Collect(maps.Keys(pg.deferred))
	pg.mu.Unlock()
	for _, f := range files {
		if eno := f.commit(commitQueue); eno != 0 {
			fsyncedCommitFailed(eno)
		}
		f.endDeferred(force)
	}
}

// fsyncedCommitFailed logs a failed commit of fsynced changes, if eno is
// one. Their intents stay in the log: the changes are durable, and the
// file's close commits them.
func fsyncedCommitFailed(eno syscall.Errno) {
	if eno != 0 {
		slog.Warn("commit of an fsynced change failed; its close retries", "errno", eno)
	}
}

// intentsDue reports whether the intents timer may commit the file now,
// called with f.mu held. Its state now is one its writer left it in if
// nothing changed since its last intent (an fsync), or since the timer last
// looked: a commit at any other moment may catch a write halfway, as the
// kernel sends a write that starts inside a page it does not hold as two
// requests, and that state was never the file's. Else the file's next fsync
// commits it (commitDue), or the timer looks again after intentDelay.
func (f *fileNode) intentsDue() bool {
	c := f.c
	if c == nil || !c.dirty || c.intent != nil && c.intent.none(c.size) {
		return true
	}
	if c.due && c.changes == c.dueChanges {
		return true
	}
	c.due, c.dueChanges = true, c.changes
	f.pg.noteIntent(f, false)
	return false
}

// commitDue commits the file now if the intents timer left its commit to
// this fsync, whose intent was just logged: its state is the one fsynced.
// Called with f.pg.keys and f.mu held. A file large enough to commit from a
// copy is copied here and committed in the background.
func (f *fileNode) commitDue() syscall.Errno {
	if !f.c.due {
		return 0
	}
	cp, eno := f.copyOrCommitLocked()
	if cp == nil {
		return eno
	}
	if !f.pg.fs.startBackground() {
		f.endCopy(cp)
		f.c.copied = nil
		return f.commitLocked(commitQueue)
	}
	go func() {
		defer f.pg.fs.background.Done()
		fsyncedCommitFailed(f.commitCopy(cp))
	}()
	return 0
}

// maxCopied bounds the changes commitFromCopy copies. Every change it
// commits is in an intent, and the intents a page holds are bounded by
// their share of its log (a quarter: 2 MiB, up to 16 MiB in a grown log);
// this is a guard.
const maxCopied = 2 * maxEditIntent

// minCopyFile is the least size of a file commitFromCopy commits from a
// copy. Computing a value beside the fsyncs made meanwhile slows many of
// them a little, where the lock stops a few for the whole commit; for a
// small file, whose pieces stay in memory, the lock costs less. 3,000
// fsyncs into a 4 MiB file: p99 4.5–5.0 ms from a copy, 1.7–2.8 ms under
// the lock; into a 64 MiB file: p99 8–11 ms from a copy, 3–4.5 ms under the
// lock, but the slowest call 40–45 ms against 160–180 ms (and 400 ms at
// 1 GiB).
const minCopyFile = 64 << 20

// A contentCopy is what commitFromCopy takes of a file under its lock:
// enough to compute the value without it.
type contentCopy struct {
	c         *content
	key       string
	committed int
	meta      btree.Meta
	base      cas.ObjectIdentifier
	src       *store.LogSource // the changes since base
	logged    *store.LogSource // src, if the commit's record can be built on base
	size      int64
	landed    bool // the base's commit landed: w.Kept() applies
	through   store.Intent
	done      chan struct{} // closed when the copy's commit ends
}

// commitFromCopy commits a file's fsynced changes as the page's intents
// timer does, computing the value from a copy of them so that the file's
// writes and fsyncs go on meanwhile. An edit of a large file reads back the
// pieces around every change, which can take a second when they are no
// longer in memory; under the file's lock every write waited for it. The
// copy is taken at an intent (one is logged if the file changed since the
// last), so the intents up to it describe the value committed and the
// commit needs no record of its own (store.Logged.Through); fsyncs made
// during the edit stay durable by their own intents. A file the copy does
// not suit (small, changed too much to edit, a link, a stream) is committed
// under its lock, as a close commits it.
//
// With force (the filesystem is closing) a commit from a copy under way is
// waited for first: it leaves the intents logged meanwhile to the timer,
// which a closing filesystem no longer runs.
func (f *fileNode) commitFromCopy(force bool) syscall.Errno {
	for {
		cp, underWay, eno := f.copyForTimer(force)
		switch {
		case underWay == nil && cp == nil:
			return eno
		case underWay == nil:
			return f.commitCopy(cp)
		case !force:
			return 0 // that commit notes the file again
		}
		<-underWay
	}
}

// copyForTimer takes the copy commitFromCopy commits, or commits the file
// under its lock if a copy does not suit it (eno is that commit's), or
// neither if the file is not due (intentsDue) or a copy's commit is under
// way: then underWay is closed when that commit ends.
func (f *fileNode) copyForTimer(force bool) (cp *contentCopy, underWay <-chan struct{}, eno syscall.Errno) {
	f.pg.keys.RLock()
	defer f.pg.keys.RUnlock()
	f.mu.Lock()
	defer f.mu.Unlock()
	if c := f.c; c != nil && c.copied != nil {
		return nil, c.copyDone, 0
	}
	if !force && !f.intentsDue() {
		return nil, nil, 0
	}
	rest := f.c != nil && f.c.due // due, and found at rest
	cp, eno = f.copyOrCommitLocked()
	if rest && cp == nil && eno == 0 {
		// Tests wait for this line, then for the page's commits.
		l, n := f.pg.names()
		slog.Debug("committed a file at rest since its last fsync", "page", l+"/"+n)
	}
	return cp, nil, eno
}

// copyOrCommitLocked takes the copy commitCopy commits, or commits the file
// under its lock if a copy does not suit it (eno is that commit's), or
// neither if a copy's commit is under way. Called with f.pg.keys and f.mu
// held.
func (f *fileNode) copyOrCommitLocked() (*contentCopy, syscall.Errno) {
	cp, locked, err := f.takeCopyLocked()
	switch {
	case err != nil:
		return nil, errno("commit", err)
	case locked:
		return nil, f.commitLocked(commitQueue)
	}
	return cp, 0
}

// commitCopy computes the value of cp, taken by takeCopyLocked, without
// the file's lock, and lands it.
func (f *fileNode) commitCopy(cp *contentCopy) syscall.Errno {
	defer f.endCopy(cp)
	w, id, err := cp.c.p.EditExtents(cp.base, cp.src.Keep, uint64(cp.size), cp.src.Extents)
	if err != nil {
		f.mu.Lock()
		if f.c == cp.c {
			f.c.copied = nil
		}
		f.mu.Unlock()
		return errno("commit", err)
	}
	defer w.Discard() // what a failure or a change meanwhile left uncommitted
	return f.landCopy(cp, id, w)
}

// takeCopyLocked copies what commitCopy needs, logging an intent of the
// changes since the last one first. Called with f.pg.keys and f.mu held.
// locked: the file is not for a copy, and is committed under its lock;
// neither a copy nor locked: a copy's commit is under way.
func (f *fileNode) takeCopyLocked() (cp *contentCopy, locked bool, err error) {
	c := f.c
	if c != nil && c.copied != nil {
		return nil, false, nil
	}
	if f.unlinked || c == nil || !c.dirty || c.intent == nil ||
		c.err() != nil || c.stream != nil || c.fromStream() || !f.pg.v.queues() {
		return nil, true, nil
	}
	key, ok := f.key()
	if !ok || btree.IsLinkKey(key) {
		return nil, true, nil
	}
	if _, ok := c.edits(); !ok || c.size < minCopyFile || c.baseSize == 0 || extentBytes(c.ext) > maxCopied {
		return nil, true, nil
	}
	// Set first: the intent logged here must not arm the timer again;
	// landCopy notes the file if intents follow this one.
	c.copied, c.soon = newSince(c.size), false
	defer func() {
		if cp == nil {
			c.copied = nil
		}
	}()
	if !c.intent.none(c.size) {
		if ok, err := f.logIntent(key); err != nil || !ok {
			return nil, err == nil, err
		}
	}
	// The changes since the base, as the commit's record has them if the
	// log takes one over that base, else copied for the edit alone.
	src, err := f.logSource(c.p.Durability(), key, maxLoggedChange)
	if err != nil {
		return nil, false, err
	}
	var logged *store.LogSource
	if src != nil && src.Base != "" {
		logged = src
	} else if src, err = c.sinceBase(); err != nil {
		return nil, false, err
	}
	cp = &contentCopy{
		c: c, key: key, committed: f.committed, meta: f.meta, base: c.baseID,
		src: src, logged: logged, size: c.size, landed: c.state == baseLanded,
		through: c.lastIntent, done: make(chan struct{}),
	}
	c.copyDone = cp.done
	f.pg.mu.Lock()
	if f.pg.copying == nil {
		f.pg.copying = map[*fileNode]*contentCopy{}
	}
	f.pg.copying[f] = cp
	f.pg.mu.Unlock()
	return cp, false, nil
}

// endCopy ends the commit from the copy cp of the file, landed or not.
// Once landCopy let go of the file, a next copy of it may have begun.
func (f *fileNode) endCopy(cp *contentCopy) {
	f.pg.mu.Lock()
	if f.pg.copying[f] == cp {
		delete(f.pg.copying, f)
	}
	f.pg.mu.Unlock()
	close(cp.done)
}

// crowded reports whether the page's intents, but for those a commit from
// a copy under way will drop, fill half of what they may (d.Crowded): only
// then are its files committed at once. Called after d.LogIntent found
// them full, with f.mu of the file logging held.
func (pg *pageRef) crowded(d *store.Durability) bool {
	pg.mu.Lock()
	if len(pg.copying) == 0 {
		pg.mu.Unlock()
		return true
	}
	pending := make(map[string]store.Intent, len(pg.copying))
	for _, cp := range pg.copying {
		pending[cp.key] = cp.through
	}
	pg.mu.Unlock()
	return d.Crowded(pending)
}

// landCopy queues the commit of id, the value of cp, and makes it the base
// of the content, with the changes made since the copy over it. A file
// committed, renamed or reshaped meanwhile is committed under its lock
// instead (or not at all, if that commit took everything).
func (f *fileNode) landCopy(cp *contentCopy, id cas.ObjectIdentifier, w *store.ValueWriter) syscall.Errno {
	f.pg.keys.RLock()
	defer f.pg.keys.RUnlock()
	f.mu.Lock()
	defer f.mu.Unlock()
	c := f.c
	if c != cp.c || f.committed != cp.committed {
		return f.commitLocked(commitQueue) // a commit took the content meanwhile
	}
	after := c.copied
	c.copied = nil
	if key, ok := f.key(); f.unlinked || !ok || key != cp.key || c.err() != nil ||
		c.stream != nil || c.fromStream() || c.baseID != cp.base {
		return f.commitLocked(commitQueue)
	}
	m := cp.meta
	m.Size = uint64(cp.size)
	saw := f.saw
	op := journal.Op{Key: cp.key, Entry: btree.Entry{Key: cp.key, Value: id, Meta: m}, Log: cp.logged, Through: cp.through, Saw: &saw}
	if cp.landed {
		op.Local = w.Kept()
	}
	if err := f.queue(cp.key, op, w); err != nil {
		return errno("commit", err)
	}
	c.rebase(id, cp.size, after)
	f.latest, f.latestSize, f.saw = id, cp.size, id
	f.committed++
	if f.meta == cp.meta {
		f.changed = false
	}
	if f.created {
		f.created = false
		f.pg.unpend(cp.key, f)
	}
	if c.lastIntent != cp.through {
		// Fsynced during the edit: their intents wait for a commit,
		// the first now a record rebased on id, which the next commit
		// through the last must find.
		c.lastIntent = c.p.Durability().LastIntent(cp.key)
		f.pg.noteIntent(f, c.soon)
	} else {
		// The commit ended the key's intents: the next starts a chain
		// on the value committed.
		c.intent, c.lastIntent = nil, store.Intent{}
	}
	return 0
}

// fsync makes the file's changes durable: commit(commitSync), except while
// a copy's commit of the file is under way (commitFromCopy) and the changes
// cannot be logged as an intent (the page's intents are full). It then
// waits for that commit to land, which frees their room, rather than
// computing the same value again under the file's lock, beside it.
func (f *fileNode) fsync() syscall.Errno {
	for {
		wait, eno := f.fsyncOrWait()
		if wait == nil {
			return eno
		}
		<-wait
	}
}

// fsyncOrWait is one try of fsync: what to wait for before the next, or
// nil and the result.
func (f *fileNode) fsyncOrWait() (<-chan struct{}, syscall.Errno) {
	f.pg.keys.RLock()
	defer f.pg.keys.RUnlock()
	f.mu.Lock()
	defer f.mu.Unlock()
	if c := f.c; c != nil && c.copied != nil && c.dirty && !f.unlinked && f.pg.v.queues() {
		if key, ok := f.key(); ok {
			done, err := f.logIntent(key)
			switch {
			case err != nil:
				return nil, errno("fsync", err)
			case done:
				return nil, 0
			}
			return c.copyDone, 0
		}
	}
	return nil, f.commitLocked(commitSync)
}
