// Package fs serves a repository as a FUSE filesystem: the root lists
// ledgers, a ledger lists its pages, and a page shows its entries as files,
// with '/' in keys as directories (see package keypath). Closing a written
// file commits it through the page's implicit journal; fsync waits until the
// commit is on disk.
//
// # Nodes
//
// rootNode lists ledgers and ledgerNode a ledger's pages (root.go). A page
// directory and the directories inside it are dirNodes (dir.go, readdir.go,
// mutations.go, rename.go), its files fileNodes (file.go) with their open
// handles (handle.go); how a file's change is committed is commit.go. Each
// page directory shows a view (view.go): the live page, a snapshot or a
// transaction (txn.go); the state they share is a pageRef (page.go), with
// the changes accepted and not yet committed (queue.go). A page's .ledger
// is history.go, log.go and versions.go. Inode ids are built in inoid.go.
//
// # Locks
//
// What each mutex guards:
//   - FS.mu: the pages map.
//   - inoTable.mu: the inode table.
//   - pageRef.mu: a page's names, its transactions (txns), open files
//     (opens), its overlay (ov) and each fileNode's queued count; cond
//     waits on it.
//   - fileNode.mu: the node's content, its handles' counts, its metadata and
//     flags (created, unlinked), and what it last committed.
//   - txn.mu: the transaction's journal, base and tree.
//   - logCache.mu, versionList.mu: their caches.
//
// Lock order: FS.mu before pageRef.mu; fileNode.mu before txn.mu (a
// transaction's file commits), pageRef.mu and inoTable.mu; txn.mu before
// the store's page lock (a journal's commit). A queued commit's completion (the committer's goroutine)
// takes pageRef.mu, and fileNode.mu only with TryLock, handing the work to
// a goroutine otherwise: a FUSE operation may hold fileNode.mu while it
// waits for that very commit (a commit with commitWait).
//
// # The kernel
//
// Notify* calls (what a transaction's commit changed, a name a failed
// create leaves) are made with no lock of this package held, and never from
// inside the FUSE operation on the node they name: the kernel may hold that
// node's locks while it waits for the operation.
//
// Layer: the top of the library, above journal, history and store;
// internal/server serves it at a mount point.
package fs

import (
	"context"
	"errors"
	"log/slog"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/cespare/xxhash/v2"
	gofs "github.com/hanwen/go-fuse/v2/fs"

	"github.com/ledgerfs/ledgerfs/internal/gc"
	"github.com/ledgerfs/ledgerfs/internal/shrink"
	"github.com/ledgerfs/ledgerfs/journal"
	"github.com/ledgerfs/ledgerfs/store"
)

// Options configure the filesystem.
type Options struct {
	// Journals is the engine the repository was opened with (its Hooks):
	// changes are committed through it.
	Journals *journal.Engine
	ReadOnly bool
	// UID and GID own what stores no owner: the root, ledgers, pages,
	// history and entries written before owners were stored. The mount
	// must check permissions against the owners shown (the kernel's
	// default_permissions): this package does not.
	UID, GID uint32
	// ShowUID and ShowGID, when set, are shown as every file's owner
	// whatever it stores, for a single-user mount of files that other
	// users own (sshfs's and rclone's --uid and --gid).
	ShowUID, ShowGID *uint32
	// TmpDir holds spool files of files being edited at random offsets.
	TmpDir string
	// Stats, if set, gives the text of the .stats file at the root.
	Stats func() []byte
	// SyncStatus, if set, is the text of a page's .ledger/sync: how its
	// sync with the remote stands.
	SyncStatus func(p *store.Page) (string, error)
	// Pressure, if set, prunes a page's history when the repository's
	// filesystem runs short, before a file of the page is opened for
	// writing (see gc.Pressure).
	Pressure *gc.Pressure
	// Collector, if set, collects pages in the background; the .collect
	// file at the root shows and starts its collections.
	Collector *gc.Collector
}

// FS is the filesystem over one repository.
type FS struct {
	repo *store.Repository
	opts Options

	// root is the mounted root node: the kernel's view of ledgers and
	// pages starts at it.
	root *rootNode

	mu    sync.Mutex
	pages map[string]*pageRef
	inos  inoTable
	// background runs what follows a queued commit's landing; Close waits
	// for it. closing, under mu, refuses what would start after.
	background sync.WaitGroup
	closing    bool
}

// startBackground counts one more goroutine in background, unless Close
// has begun; the caller starts it, and it calls background.Done.
func (f *FS) startBackground() bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.closing {
		return false
	}
	f.background.Add(1)
	return true
}

// New returns the filesystem of repo.
func New(repo *store.Repository, opts Options) (*FS, error) {
	if opts.Journals == nil {
		return nil, errors.New("fs: no journal engine (Options.Journals)")
	}
	if opts.TmpDir == "" {
		opts.TmpDir = filepath.Join(repo.Dir(), store.SerializationVersion, "tmp")
		if opts.ReadOnly {
			opts.TmpDir = os.TempDir() // for .ledger/log spools
		}
	}
	if !opts.ReadOnly {
		os.RemoveAll(opts.TmpDir)
		if err := os.MkdirAll(opts.TmpDir, 0o700); err != nil {
			return nil, err
		}
	}
	f := &FS{repo: repo, opts: opts, pages: map[string]*pageRef{}, inos: newInoTable()}
	f.root = &rootNode{fs: f}
	return f, nil
}

// Close rolls back the transactions still open, so that the next start
// finds no journal rows of theirs, and waits for queued commits to land.
func (f *FS) Close() {
	f.mu.Lock()
	pages := slices.Collect(maps.Values(f.pages))
	f.mu.Unlock()
	for _, p := range pages {
		p.commitUnflushed()
		p.stopIntents()
		p.rollbackAll()
		if err := p.flushAtimes(); err != nil {
			l, n := p.names()
			slog.Warn("access times not kept", "page", l+"/"+n, "err", err)
		}
		if err := p.settle(); err != nil {
			l, n := p.names()
			slog.Error("queued commit failed at unmount; recovery commits it at the next start", "page", l+"/"+n, "err", err)
		}
	}
	f.mu.Lock()
	f.closing = true
	f.mu.Unlock()
	f.background.Wait()
}

// Root returns the root node to mount.
func (f *FS) Root() gofs.InodeEmbedder { return f.root }

// page returns the shared state of a page, by name.
func (f *FS) page(ledger, name string) *pageRef {
	f.mu.Lock()
	defer f.mu.Unlock()
	k := ledger + "/" + name
	p, ok := f.pages[k]
	if !ok {
		p = &pageRef{fs: f, v: liveView{}, ledger: ledger, name: name}
		p.owner = p
		f.pages[k] = p
	}
	return p
}

// HeadMoved brings the mount up to date with a page whose head moved from
// from to to behind its back: a merge of another device's commits. The
// kernel's caches of the entries that changed are invalidated, so a new
// lookup, ls, cat or tail -f sees the change, as after a transaction's
// commit; a file open for writing is left as it is, and its next commit
// lands over the change. Call it from no FUSE operation.
func (f *FS) HeadMoved(ledger, page string, from, to *store.Commit) {
	f.mu.Lock()
	pg, ok := f.pages[ledger+"/"+page]
	f.mu.Unlock()
	if !ok {
		return // the kernel has not looked the page up
	}
	p, err := pg.acquire()
	if err != nil {
		slog.Warn("updating the mount after a merge", "page", ledger+"/"+page, "err", err)
		return
	}
	defer pg.release(p)
	pg.catchUp(p, from, to, func(string) bool { return true }, true)
}

// Busy reports whether the mount uses a page beyond what the store sees:
// files open or queued, transactions open. A collection waits for that.
func (f *FS) Busy(ledger, name string) bool {
	p, ok := f.known(ledger, name)
	return ok && p.busy()
}

// known returns the state of a page the mount has used, if any.
func (f *FS) known(ledger, name string) (*pageRef, bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	p, ok := f.pages[ledger+"/"+name]
	return p, ok
}

// movePage follows a page's rename, within its ledger or into toLedger, in
// the open state.
func (f *FS) movePage(ledger, from, toLedger, to string) {
	f.mu.Lock()
	if p, ok := f.pages[ledger+"/"+from]; ok {
		delete(f.pages, ledger+"/"+from)
		p.mu.Lock()
		p.ledger, p.name = toLedger, to
		p.mu.Unlock()
		f.pages[toLedger+"/"+to] = p
	}
	f.mu.Unlock()
	f.inos.move(pageID(ledger, from), pageID(toLedger, to), false)
	f.inos.move(pageNodesPrefix(ledger, from), pageNodesPrefix(toLedger, to), true)
}

// renameLedger follows a ledger rename in the open state.
func (f *FS) renameLedger(from, to string) {
	f.mu.Lock()
	for k, p := range f.pages {
		if p.ledger == from {
			delete(f.pages, k)
			p.mu.Lock()
			p.ledger = to
			p.mu.Unlock()
			f.pages[to+"/"+p.name] = p
		}
	}
	f.mu.Unlock()
	f.inos.move(ledgerID(from), ledgerID(to), false)
	f.inos.move(ledgerPagesPrefix(from), ledgerPagesPrefix(to), true)
}

// ledgerBusy reports whether a page of the ledger has open files.
func (f *FS) ledgerBusy(ledger string) bool {
	f.mu.Lock()
	var pages []*pageRef
	for _, p := range f.pages {
		if p.ledger == ledger {
			pages = append(pages, p)
		}
	}
	f.mu.Unlock()
	for _, p := range pages {
		p.commitDeferred(false)
		if p.busy() {
			return true
		}
	}
	return false
}

// dropPage forgets a page's state after it was deleted.
func (f *FS) dropPage(ledger, name string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	delete(f.pages, ledger+"/"+name)
}

// inoTable hands out inode numbers: a key's number is a hash of it, so a
// path keeps its number across remounts; a rename carries the number to the
// new key, and a hash already taken by a moved inode is probed further, so
// two live inodes never share a number.
type inoTable struct {
	mu    sync.Mutex
	byKey map[string]uint64
	byIno map[uint64]string
	// peak tells when the kernel has forgotten most inodes: Go maps never
	// shrink, and after a 100,000-file directory was listed and removed
	// they held ~10 MiB, which the collector's heap goal doubled.
	peak shrink.Peak
}

func newInoTable() inoTable {
	return inoTable{byKey: map[string]uint64{}, byIno: map[uint64]string{1: "/"}}
}

// peek returns the number id has or would get, without taking it: readdir
// lists names the kernel may never look up, and the table must stay as
// large as what the kernel holds, not as what was listed.
func (t *inoTable) peek(id string) uint64 {
	t.mu.Lock()
	defer t.mu.Unlock()
	if ino, ok := t.byKey[id]; ok {
		return ino
	}
	return xxhash.Sum64String(id)
}

func (t *inoTable) get(id string) uint64 {
	t.mu.Lock()
	defer t.mu.Unlock()
	if ino, ok := t.byKey[id]; ok {
		return ino
	}
	h := xxhash.New()
	h.WriteString(id)
	ino := h.Sum64()
	for {
		if _, taken := t.byIno[ino]; !taken && ino > 1 && ino != ^uint64(0) {
			break
		}
		h.WriteString("+")
		ino = h.Sum64()
	}
	t.byKey[id], t.byIno[ino] = ino, id
	t.peak.Grew(len(t.byKey))
	return ino
}

// idOf returns the id whose number ino is, or "" for a number a rename or
// unlink took from its key (or never handed out).
func (t *inoTable) idOf(ino uint64) string {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.byIno[ino]
}

// move gives the number of id from to id to, or, with prefix, the numbers
// of all ids starting with from to the same ids starting with to.
func (t *inoTable) move(from, to string, prefix bool) {
	t.mu.Lock()
	defer t.mu.Unlock()
	moveOne := func(id string, ino uint64) {
		nid := to + id[len(from):]
		if old, ok := t.byKey[nid]; ok {
			t.byIno[old] = "" // a replaced inode, taken until forgotten
		}
		delete(t.byKey, id)
		t.byKey[nid], t.byIno[ino] = ino, nid
	}
	if !prefix {
		if ino, ok := t.byKey[from]; ok {
			moveOne(from, ino)
		}
		return
	}
	for id, ino := range t.byKey {
		if strings.HasPrefix(id, from) {
			moveOne(id, ino)
		}
	}
}

// release takes id's number from it, for the inode that has it to keep
// until the kernel forgets it (a file unlinked while open): a new file at
// the key gets a number of its own, as two live files never share one.
func (t *inoTable) release(id string) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if ino, ok := t.byKey[id]; ok {
		delete(t.byKey, id)
		t.byIno[ino] = ""
	}
}

func (t *inoTable) forget(ino uint64) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if id, ok := t.byIno[ino]; ok && ino != 1 {
		delete(t.byIno, ino)
		if t.byKey[id] == ino {
			delete(t.byKey, id)
		}
	}
	if t.peak.Due(len(t.byKey)) {
		t.byKey = maps.Collect(maps.All(t.byKey))
		t.byIno = maps.Collect(maps.All(t.byIno))
	}
}

// errno maps an error to the errno a caller should see, logging unexpected
// ones: a store failure is EIO.
func errno(op string, err error) syscall.Errno {
	if err == nil {
		return 0
	}
	var e syscall.Errno
	switch {
	case errors.As(err, &e):
		if e == syscall.EIO && err != error(e) {
			// A failure below named as EIO: the caller sees only that.
			slog.Error("filesystem operation failed", "op", op, "err", err)
		}
		return e
	case errors.Is(err, store.ErrNotFound):
		return syscall.ENOENT
	case errors.Is(err, store.ErrExists):
		return syscall.EEXIST
	case errors.Is(err, store.ErrNotEmpty):
		return syscall.ENOTEMPTY
	case errors.Is(err, store.ErrBadName):
		return syscall.EINVAL
	case errors.Is(err, store.ErrBusy):
		return syscall.EBUSY
	case errors.Is(err, context.Canceled):
		return syscall.EINTR
	case errors.Is(err, store.ErrRemoteOnly):
		// The remote unreachable, or an object of it damaged: the read
		// fails, the mount goes on.
		slog.Warn("content in the remote store only could not be fetched", "op", op, "err", err)
		return syscall.EIO
	}
	slog.Error("filesystem operation failed", "op", op, "err", err)
	return syscall.EIO
}

func nowNs() int64 { return time.Now().UnixNano() }
