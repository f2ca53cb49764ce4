package fs

import (
	"context"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"

	gofs "github.com/hanwen/go-fuse/v2/fs"
	"github.com/hanwen/go-fuse/v2/fuse"

	"github.com/ledgerfs/ledgerfs/cas"
	"github.com/ledgerfs/ledgerfs/internal/btree"
	"github.com/ledgerfs/ledgerfs/internal/keypath"
	"github.com/ledgerfs/ledgerfs/journal"
	"github.com/ledgerfs/ledgerfs/store"
)

// fileNode is an entry: a regular file or a symbolic link. While it is open
// for writing, its content and metadata live here until a close commits
// them.
type fileNode struct {
	gofs.Inode
	pg *pageRef
	// fixed gives a node whose place is not its key (a version under
	// .ledger/versions) the key it shows.
	fixed    bool
	fixedKey string
	// atimeSet is set by a setattr of the access time, until the content
	// is dropped: a read of the file meanwhile decides by it whether its
	// access time is due (see advanceAtime).
	atimeSet bool
	// placed is the key the node had at its last flush. The kernel may
	// forget a closed file's inode before the release that commits what
	// the last close left (a truncation while open), and go-fuse then
	// drops it from the tree: its key can no longer be found from its
	// place.
	placed string
	// linked is the key of the file's entry once it has hard links (see
	// links.go): the node works on it, whichever name it was found by.
	linked atomic.Pointer[string]

	mu      sync.Mutex
	c       *content // open for writing, or being changed
	p       *store.Page
	writers int
	readers int        // read-only handles
	meta    btree.Meta // with c: the metadata to commit; else as last shown
	metaTs  int64      // the time shown with meta when it has no mtime
	changed bool       // with c: meta changed since the last commit
	created bool       // created and never committed
	// unlinked is set once the file is deleted or replaced by a rename.
	// As POSIX has it, the file lives on for the descriptors still open:
	// they read what it holds (its content stays while any is open), and
	// fstat shows the attributes last shown, with no link. Its key may by
	// then hold another file.
	unlinked bool
	// behind: unlinked by a change the mount did not make (changedBehind),
	// which a path walk under way may not have seen: see goneErrno. was:
	// then the entry it had, which an open for reading still reads.
	behind  bool
	was     *btree.Entry
	cacheID cas.Digest // value at the last open, for keep-cache
	// latest is the value this node last committed, with its size, so that
	// descriptors opened before the commit read the new content.
	latest     cas.ObjectIdentifier
	latestSize int64
	committed  int // commits by this node; 0: latest is unset
	// saw is the value the content being written was made from: the
	// key's value when the content was loaded (zero for a file created
	// here), then each value the node committed. A commit says so
	// (journal.Op.Saw), so that a version a sync landed meanwhile is kept
	// beside the file rather than replaced.
	saw cas.ObjectIdentifier
	// moved is the entry the node's latest queued rename put at its key,
	// so that renaming it again before that lands moves the same entry
	// (stress-ng --rename, mv a b; mv b c) where a file this node never
	// committed has no latest to move. Read only while the node is
	// pending at its key with committed 0.
	moved *btree.Entry
	// deferred: closed with every change in intents, the node holds a
	// writer of its own until the page's intents timer has committed it
	// (see deferClose).
	deferred bool
	// queued counts this node's commits queued at close and not yet
	// landed; guarded by pg.mu. While any is queued, the node stays in
	// pg.ov.files and keeps its content, so that it shows what was closed.
	queued int
}

var (
	_ gofs.NodeGetattrer   = (*fileNode)(nil)
	_ gofs.NodeSetattrer   = (*fileNode)(nil)
	_ gofs.NodeOpener      = (*fileNode)(nil)
	_ gofs.NodeReadlinker  = (*fileNode)(nil)
	_ gofs.NodeOnForgetter = (*fileNode)(nil)
)

// OnForget drops the node's inode number: the kernel no longer knows it,
// and the table stays as large as what the kernel holds.
func (f *fileNode) OnForget() {
	f.pg.fs.inos.forget(f.StableAttr().Ino)
	if g, ok := f.linkKey(); ok {
		pg := f.pg
		pg.mu.Lock()
		if pg.linkNodes[g] == f {
			delete(pg.linkNodes, g)
		}
		pg.mu.Unlock()
	}
}

// key returns the node's key, from its current place in the tree.
func (f *fileNode) key() (string, bool) {
	if f.fixed {
		return f.fixedKey, true
	}
	if g, ok := f.linkKey(); ok {
		return g, true
	}
	comps, ok := pathFrom(f.EmbeddedInode(), f.pg)
	if !ok {
		return f.detachedKey()
	}
	k, _, err := keypath.Key(comps)
	return k, err == nil
}

// detachedKey is the key of a file go-fuse holds in no directory, from the
// inode table. A lookup that races a rename can leave a node so: go-fuse
// places the node a lookup returns after Lookup returns, which can fall
// after the rename looked for the node it replaces (to mark it unlinked)
// and before go-fuse's move takes the name. The table, which every rename
// and unlink here updates, still knows the key the node's number belongs
// to, or that it belongs to none: the node was replaced (see replacedHere).
func (f *fileNode) detachedKey() (string, bool) {
	id, detached := f.detachedID()
	if !detached {
		return "", false // a directory above it left the tree
	}
	return strings.CutPrefix(id, f.pg.id('f', ""))
}

// replacedHere reports whether the file, held in no directory, was renamed
// over or unlinked by this mount: its inode number belongs to no key.
func (f *fileNode) replacedHere() bool {
	id, detached := f.detachedID()
	return detached && id == ""
}

// detachedID returns the inode table's id of the file's number, if go-fuse
// holds the file in no directory.
func (f *fileNode) detachedID() (string, bool) {
	if _, parent := f.EmbeddedInode().Parent(); parent != nil {
		return "", false
	}
	return f.pg.fs.inos.idOf(f.StableAttr().Ino), true
}

// stillAt reports whether the file is still the one at key: pending there,
// if it was created and never committed or has a commit queued, or else an
// entry of the page.
func (f *fileNode) stillAt(key string) bool {
	if f.pg.pendingFile(key) == f {
		return true
	}
	if f.created {
		return false
	}
	_, _, err := f.entryAt(key)
	return err == nil
}

// markUnlinked marks the file unlinked and reports whether it was, until
// then, a file created here and not yet unlinked: a name that exists.
func (f *fileNode) markUnlinked() bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	live := f.created && !f.unlinked
	f.unlinked = true
	return live
}

// setUnlinked marks the file deleted or replaced, or not after all (the
// unlink or rename failed).
func (f *fileNode) setUnlinked(v bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.unlinked = v
}

func (f *fileNode) mode() uint32 {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.meta.FileMode()
}

// entry reads the node's committed entry.
func (f *fileNode) entry() (btree.Entry, int64, error) {
	key, ok := f.key()
	if !ok {
		if f.replacedHere() {
			return btree.Entry{}, 0, syscall.ENOENT // as an unlinked node (goneErrno)
		}
		return btree.Entry{}, 0, syscall.ESTALE // its directory dropped behind (goneErrno)
	}
	return f.entryAt(key)
}

func (f *fileNode) isBehind() bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.behind
}

// goneErrno is the error of an open of the unlinked file, f.mu held. One
// a change the mount did not make replaced (a transaction's commit,
// another device's commit landed by sync) was dropped from the kernel's
// cache while a walk of its path could still hold it. An open for reading
// reads what it held (was), as on a local filesystem an open that found
// the old file before a rename over it does; any other gets ESTALE, not
// ENOENT, and the kernel walks the path again (LOOKUP_REVAL) and opens the
// file that replaced it. A reader never sees a file that was there all
// along as missing. So does a created file whose first commit failed,
// whose name the kernel keeps until told (see handle.Release). Deleted or
// renamed over here, the kernel dropped its name itself: ENOENT.
func (f *fileNode) goneErrno() syscall.Errno {
	if f.behind {
		return syscall.ESTALE
	}
	return syscall.ENOENT
}

func (f *fileNode) entryAt(key string) (btree.Entry, int64, error) {
	var e btree.Entry
	var ts int64
	err := f.pg.view(func(p *store.Page, head *store.Commit, t *btree.Tree) error {
		var found bool
		var err error
		e, found, err = t.Get(key)
		if err == nil && !found {
			err = syscall.ENOENT
		}
		if found && !e.Meta.HasMtime {
			ts = f.pg.shownTime(p, head) // shown only without an mtime of its own
		}
		return err
	})
	return e, ts, err
}

// shown records the attributes a lookup showed, which the node shows once
// unlinked; a node with content shows its own.
func (f *fileNode) shown(m btree.Meta, ts int64) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.c == nil {
		f.meta, f.metaTs = m, ts
	}
}

func (f *fileNode) hasContent() bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.c != nil
}

func (f *fileNode) fillAttr(a *fuse.Attr) syscall.Errno {
	key, ok := f.key()
	if !ok {
		return f.fillAttrAt("", a)
	}
	return f.fillAttrAt(key, a)
}

// fillAttrAt fills attributes of the node, which is at key (empty: it was
// deleted, only open content is left).
func (f *fileNode) fillAttrAt(key string, a *fuse.Attr) syscall.Errno {
	f.mu.Lock()
	if f.c != nil || f.unlinked {
		m, ts, unlinked := f.meta, f.metaTs, f.unlinked
		if f.c != nil {
			m.Size = uint64(f.c.size)
		}
		f.mu.Unlock()
		fileAttr(f.pg.fs, a, f.StableAttr().Ino, m, ts)
		if unlinked {
			a.Nlink = 0
		}
		return 0
	}
	f.mu.Unlock()
	if key == "" {
		return syscall.ESTALE // dropped behind, not deleted here
	}
	e, ts, err := f.entryAt(key)
	f.mu.Lock()
	if f.unlinked {
		// Replaced meanwhile: what the key holds may be the new file.
		f.mu.Unlock()
		return f.fillAttrAt("", a)
	}
	if err != nil {
		f.mu.Unlock()
		return errno("getattr", err)
	}
	e.Meta = f.pg.withQueuedAtime(key, e.Meta)
	f.meta, f.metaTs = e.Meta, ts
	f.mu.Unlock()
	fileAttr(f.pg.fs, a, f.StableAttr().Ino, e.Meta, ts)
	return 0
}

func fileAttr(fs *FS, a *fuse.Attr, ino uint64, m btree.Meta, ts int64) {
	a.Ino = ino
	a.Mode = m.FileMode()
	a.Size = m.Size
	a.Blocks = (m.Size + 511) / 512
	a.Blksize = 4096
	a.Nlink = max(1, m.Nlink)
	a.Rdev = m.Rdev
	fs.showMeta(a, m, ts)
}

func (f *fileNode) Getattr(ctx context.Context, fh gofs.FileHandle, out *fuse.AttrOut) syscall.Errno {
	return f.fillAttr(&out.Attr)
}

func (f *fileNode) Readlink(ctx context.Context) ([]byte, syscall.Errno) {
	e, _, err := f.entry()
	if err != nil {
		return nil, errno("readlink", err)
	}
	if e.Meta.Mode&syscall.S_IFMT != syscall.S_IFLNK {
		return nil, syscall.EINVAL
	}
	return []byte(e.Meta.Symlink), 0
}

// atimeDue reports whether a read of a regular file in the live page
// would advance its access time by relatime's rule, and at which key.
// Called with f.mu held.
func (f *fileNode) atimeDue(m btree.Meta, ts, now int64) (string, bool) {
	if !f.pg.v.queues() || f.pg.readOnly() || f.fixed || m.FileMode()&syscall.S_IFMT != syscall.S_IFREG {
		return "", false
	}
	key, ok := f.key()
	if !ok {
		return "", false
	}
	return key, relatimeDue(f.pg.withQueuedAtime(key, m), ts, now)
}

// advanceAtime gives a regular file read in the live page a new access
// time, when relatime's rule says so (see noteAtime). A handle calls it at
// its first read, not at open: Linux moves the access time on a read, and
// an open alone (fstat of a descriptor nobody read) shows the time it had.
// Called with f.mu held.
func (f *fileNode) advanceAtime(m btree.Meta, ts int64) {
	now := nowNs()
	key, due := f.atimeDue(m, ts, now)
	if !due {
		return
	}
	f.pg.noteAtime(key, now)
	f.meta.AtimeNs, f.meta.HasAtime = now, true
}

// onlyEmptied reports whether the file's change since its last commit is
// that it was emptied, with nothing written since: the start of a rewrite.
// A file created empty is not: its creation is a version. Called with
// f.mu held.
func (f *fileNode) onlyEmptied() bool {
	return f.c != nil && f.c.dirty && f.c.size == 0 && !f.created
}

// beginChange loads the content for writing, if it is not loaded. Called
// with f.mu held.
func (f *fileNode) beginChange() syscall.Errno {
	if f.c != nil {
		return 0
	}
	if f.unlinked {
		return f.goneErrno()
	}
	e, _, err := f.entry()
	if err != nil {
		return errno("open", err)
	}
	if e.Meta.Mode&syscall.S_IFMT == syscall.S_IFLNK {
		return syscall.EINVAL
	}
	p, err := f.pg.acquireForChange()
	if err != nil {
		return errno("open", err)
	}
	f.c = newContent(p, f.pg.fs.opts.TmpDir, e.Value, int64(e.Meta.Size))
	f.p, f.meta, f.changed, f.saw = p, e.Meta, false, e.Value
	f.pg.mu.Lock()
	f.pg.opens++
	f.pg.mu.Unlock()
	return 0
}

// endChange drops the loaded content once no writer holds it and no commit
// of it is queued. The content of an unlinked file is all there is of it,
// so it stays while any descriptor is open. Called with f.mu held.
func (f *fileNode) endChange() {
	if f.c == nil || f.writers > 0 || f.isQueued() || (f.unlinked && f.readers > 0) {
		return
	}
	f.meta.Size = uint64(f.c.size) // as shown once unlinked
	f.c.close()
	f.c, f.atimeSet = nil, false
	f.pg.release(f.p)
	f.p = nil
	f.pg.mu.Lock()
	f.pg.opens--
	f.pg.cond().Broadcast()
	f.pg.mu.Unlock()
}

// create starts a new, empty file at key: it is visible at once, and
// committed when closed.
func (f *fileNode) create(ctx context.Context, key string, m btree.Meta) (gofs.FileHandle, syscall.Errno) {
	p, err := f.pg.acquireForChange()
	if err != nil {
		return nil, errno("create", err)
	}
	c := newContent(p, f.pg.fs.opts.TmpDir, emptyValue, 0)
	f.mu.Lock()
	f.c, f.p, f.created, f.changed = c, p, true, true
	f.meta, f.saw = m, cas.ObjectIdentifier{}
	f.writers++
	f.mu.Unlock()
	f.pg.mu.Lock()
	f.pg.opens++
	f.pg.ov.setPending(key, f)
	f.pg.mu.Unlock()
	return &handle{f: f, write: true, opener: callerPid(ctx)}, 0
}

func (f *fileNode) Setattr(ctx context.Context, fh gofs.FileHandle, in *fuse.SetAttrIn, out *fuse.AttrOut) syscall.Errno {
	regular := f.StableAttr().Mode&syscall.S_IFMT == syscall.S_IFREG
	// Queued, as a close is: chmod, chown, utimes and truncate show at
	// once and commit with the next batch; each waited for its own commit
	// (stress-ng --chmod: 4.6 per second on a loaded machine; rsync sets
	// every file's times before its rename).
	eno := f.changeMeta(commitQueue, func(m *btree.Meta, c *content) (bool, syscall.Errno) {
		if sz, ok := in.GetSize(); ok {
			switch {
			case !regular:
				return false, syscall.EINVAL
			case c == nil:
				// Unlinked: a size change needs a writer, whose
				// content would be loaded.
				return false, syscall.EBADF
			}
			if err := c.truncate(int64(sz)); err != nil {
				return false, errno("truncate", err)
			}
			m.MtimeNs, m.HasMtime = nowNs(), true
		}
		changed := f.pg.fs.setAttrs(m, in)
		if in.Valid&(fuse.FATTR_ATIME|fuse.FATTR_ATIME_NOW) != 0 {
			// A read before this lands decides by this time (relatime).
			f.atimeSet = true
		}
		// A truncation or chown by someone without CAP_FSETID (see
		// killPriv).
		if in.Valid&fuse.FATTR_KILL_SUIDGID != 0 && killPriv(m) {
			changed = true
		}
		return changed, 0
	})
	if eno != 0 {
		return eno
	}
	return f.fillAttr(&out.Attr)
}

// changeMeta applies change to the file's metadata: for a regular file
// with its content loaded (c, which a truncation changes), for a symbolic
// link, a fifo, a socket or a device node to its entry (c nil). Unlinked
// with no content, only its descriptors still see it, and nothing commits
// the change. change reports whether it changed the metadata. A regular
// file's change is committed as mode says (a queued one shows at once, as
// a close's does).
func (f *fileNode) changeMeta(mode commitMode, change func(m *btree.Meta, c *content) (bool, syscall.Errno)) syscall.Errno {
	if f.pg.readOnly() {
		return syscall.EROFS
	}
	f.pg.keys.RLock()
	defer f.pg.keys.RUnlock()
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.unlinked && f.c == nil {
		_, eno := change(&f.meta, nil)
		return eno
	}
	if f.StableAttr().Mode&syscall.S_IFMT != syscall.S_IFREG {
		// cp -a, tar and rsync set a symlink's times (lutimes) and
		// owner (lchown); its mode is 0777, as on Linux.
		key, ok := f.key()
		if !ok {
			return syscall.ENOENT
		}
		e, _, err := f.entryAt(key)
		if err != nil {
			return errno("setattr", err)
		}
		changed, eno := change(&e.Meta, nil)
		if eno != 0 || !changed {
			return eno
		}
		return errno("setattr", f.pg.apply(false, journal.Op{Key: key, Entry: e}))
	}
	if eno := f.beginChange(); eno != 0 {
		return eno
	}
	changed, eno := change(&f.meta, f.c)
	if eno != 0 {
		f.endChange()
		return eno
	}
	if changed {
		f.changed = true
	}
	// While the file has changes no flush has committed (bytes written, a
	// truncation, a creation not yet closed), the change commits with them,
	// at the next flush or at the last release: cp -a sets mode and times
	// between its last write and close. This includes the truncation the
	// kernel sends, without a handle, for open(O_TRUNC). Otherwise it
	// commits now, even if the file is still open for writing: the kernel
	// releases a closed descriptor asynchronously, so a chmod right after
	// close may arrive while the server still counts its writer.
	if f.writers == 0 || !(f.c.dirty || f.created) {
		eno = f.commitLocked(mode)
		f.endChange()
	}
	return eno
}

func (f *fileNode) Open(ctx context.Context, flags uint32) (gofs.FileHandle, uint32, syscall.Errno) {
	write := flags&syscall.O_ACCMODE != syscall.O_RDONLY
	if write && f.pg.readOnly() {
		return nil, 0, syscall.EROFS
	}
	if write {
		f.pg.letCollectionIn()
	}
	if write && f.pg.fs.opts.Pressure != nil {
		// A rewrite is expected to take about the file's present size,
		// as the lookup that found it showed (no read of the tree).
		f.mu.Lock()
		size := f.meta.Size
		if f.c != nil {
			size = uint64(f.c.size)
		}
		f.mu.Unlock()
		f.pg.yieldHistory(size, true)
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if write {
		if eno := f.beginChange(); eno != 0 {
			return nil, 0, eno
		}
		f.writers++
		// The kernel's pages will hold what this writer writes, which a
		// failed commit drops: the next open must not keep them.
		f.cacheID = ""
		if flags&syscall.O_TRUNC != 0 {
			if err := f.c.truncate(0); err != nil {
				f.writers--
				f.endChange()
				return nil, 0, errno("open", err)
			}
			f.meta.MtimeNs, f.meta.HasMtime = nowNs(), true
			if !privileged(ctx) && killPriv(&f.meta) {
				f.changed = true
			}
		}
		return &handle{f: f, write: true, opener: callerPid(ctx)}, 0, 0
	}
	if f.c != nil {
		// Being written, or closed with its commit queued: read through the
		// content while it is loaded, then the value last committed (see
		// handle.current); the content may be dropped before this handle is
		// released.
		p, err := f.pg.acquire()
		if err != nil {
			return nil, 0, errno("open", err)
		}
		h := &handle{f: f, p: p, seen: f.committed}
		if f.committed > 0 {
			h.id, h.size = f.latest, f.latestSize
			if h.size > 0 {
				if h.r, err = p.OpenValue(f.latest); err != nil {
					f.pg.release(p)
					return nil, 0, errno("open", err)
				}
			}
		}
		if f.atimeSet && f.writers == 0 {
			// Its access time set by a change still queued (touch -a): a
			// read is due by that time, not the committed entry's.
			h.atimeDue = true
			f.atimeSet = false
		}
		f.readers++
		f.pg.reading(p, h.id)
		return h, 0, 0
	}
	if f.unlinked && f.was == nil {
		return nil, 0, f.goneErrno()
	}
	// Held before the entry is read, so that no collection drops its
	// value before the value is pinned (see pins.go).
	p, err := f.pg.acquire()
	if err != nil {
		return nil, 0, errno("open", err)
	}
	var e btree.Entry
	var ts int64
	if f.was != nil {
		// Replaced behind a path walk that found it: the open reads
		// what it held, as an open that came first would have.
		e, ts = *f.was, f.metaTs
	} else if e, ts, err = f.entry(); err != nil {
		f.pg.release(p)
		return nil, 0, errno("open", err)
	}
	if e.Meta.Mode&syscall.S_IFMT == syscall.S_IFLNK {
		f.pg.release(p)
		return nil, 0, syscall.ELOOP
	}
	// The kernel reads up to the size it was shown. A change behind it
	// that landed since, not yet caught up with (catchUp drops the node
	// next), changed the size: read with the old one, the new content
	// would be cut short, so such an open reads around the kernel's
	// cache, and the size shown stays (no open shows one).
	direct := e.Meta.Size != f.meta.Size
	m := e.Meta
	if direct {
		m.Size = f.meta.Size
	}
	f.meta, f.metaTs = m, ts
	_, atimeDue := f.atimeDue(e.Meta, ts, nowNs())
	var r *cas.Reader
	if e.Meta.Size > 0 {
		if r, err = p.OpenValue(e.Value); err != nil {
			f.pg.release(p)
			if f.was != nil {
				return nil, 0, syscall.ESTALE // collected since: the file that replaced it, then
			}
			return nil, 0, errno("open", err)
		}
	}
	f.pg.reading(p, e.Value)
	// The kernel may keep its cached pages if the content is the one it
	// cached at the last open, unless a read is due to move the access
	// time: then the first read must reach the server.
	var fl uint32
	switch {
	case direct:
		fl = fuse.FOPEN_DIRECT_IO
	case f.cacheID == e.Value.Digest && !atimeDue:
		fl = fuse.FOPEN_KEEP_CACHE
	}
	f.cacheID = e.Value.Digest
	f.readers++
	return &handle{f: f, p: p, r: r, id: e.Value, size: int64(e.Meta.Size), seen: f.committed, atimeDue: atimeDue}, fl, 0
}

// isWritten reports whether the file is open for writing.
func (f *fileNode) isWritten() bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.writers > 0
}
