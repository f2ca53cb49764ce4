package fs

import (
	"bytes"
	"io"
	"runtime"
	"syscall"
	"testing"

	"github.com/hanwen/go-fuse/v2/fuse"

	"github.com/ledgerfs/ledgerfs/internal/btree"
	"github.com/ledgerfs/ledgerfs/internal/testutil"
	"github.com/ledgerfs/ledgerfs/store"
)

// open opens node with flags and returns its handle.
func (b *bridge) open(node uint64, flags uint32) uint64 {
	b.t.Helper()
	var out fuse.OpenOut
	if st := b.raw.Open(nil, &fuse.OpenIn{InHeader: fuse.InHeader{NodeId: node}, Flags: flags}, &out); !st.Ok() {
		b.t.Fatalf("open: %v", st)
	}
	return out.Fh
}

// writeSync writes data at off through handle fh of node and fsyncs it.
func (b *bridge) writeSync(node, fh uint64, data []byte, off int64) {
	b.t.Helper()
	w := &fuse.WriteIn{InHeader: fuse.InHeader{NodeId: node}, Fh: fh, Offset: uint64(off)}
	if n, st := b.raw.Write(nil, w, data); !st.Ok() || int(n) != len(data) {
		b.t.Fatalf("write: %d bytes, %v", n, st)
	}
	if st := b.raw.Fsync(nil, &fuse.FsyncIn{InHeader: fuse.InHeader{NodeId: node}, Fh: fh}); !st.Ok() {
		b.t.Fatalf("fsync: %v", st)
	}
}

// keyIn returns the key of name in directory d and d's key prefix, the
// arguments of d.unlink.
func (b *bridge) keyIn(d *dirNode, name string) (key, prefix string) {
	b.t.Helper()
	key, _, err := d.childKey(name)
	if err != nil {
		b.t.Fatal(err)
	}
	prefix, _, err = d.prefix()
	if err != nil {
		b.t.Fatal(err)
	}
	return key, prefix
}

// committed returns the content of key in the head of page l/p once its
// queued commits landed.
func (b *bridge) committed(key string) []byte {
	b.t.Helper()
	pg := b.fs.page("l", "p")
	if err := pg.settle(); err != nil {
		b.t.Fatal(err)
	}
	p, err := pg.acquire()
	if err != nil {
		b.t.Fatal(err)
	}
	defer b.fs.repo.Release(p)
	head, err := p.Head()
	if err != nil {
		b.t.Fatal(err)
	}
	e, ok, err := p.Tree(head).Get(key)
	if err != nil || !ok {
		b.t.Fatalf("%s in the head: %v, %v", key, ok, err)
	}
	r, err := p.OpenValue(e.Value)
	if err != nil {
		b.t.Fatal(err)
	}
	got, err := io.ReadAll(io.NewSectionReader(r, 0, int64(e.Meta.Size)))
	if err != nil {
		b.t.Fatal(err)
	}
	return got
}

// The unmount commits every fsynced change (FS.Close: stopIntents), a
// large file's included while the intents timer commits it from a copy:
// an fsync during that commit logs an intent the copy does not hold, which
// the copy's landing leaves for the timer, and a closing filesystem runs no
// timer. The final commit waits for the copy's, then commits the rest.
// That rest is an intent the landing rebased on the copy's value, a new
// record the file's mark no longer named: the commit through it found no
// intent to drop, checkpointed the log, and left the intent there, for the
// next mount to replay ("page closed with fsynced changes not committed").
func TestForcedCommitTakesWhatACopyLeft(t *testing.T) {
	b := newBridge(t)
	page := b.mkdir(b.mkdir(1, "l"), "p")
	data := testutil.Random(1, 0, minCopyFile)
	node := b.create(page, "big", string(data))
	pg := b.fs.page("l", "p")
	b.committed("big") // landed
	p, err := pg.acquire()
	if err != nil {
		t.Fatal(err)
	}
	defer b.fs.repo.Release(p)
	d := p.Durability()
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	must(d.Checkpoint()) // a durable base an intent may name
	fh := b.open(node, syscall.O_RDWR)
	defer b.close(node, fh)
	first, second := testutil.Random(2, 0, 4096), testutil.Random(3, 0, 4096)
	b.writeSync(node, fh, first, 1<<20)
	pg.mu.Lock()
	var f *fileNode
	for g := range pg.intents {
		f = g
	}
	pg.mu.Unlock()
	if f == nil {
		t.Fatal("the fsync logged no intent")
	}
	cp, _, eno := f.copyForTimer(true) // the timer's commit from a copy, under way
	if cp == nil {
		t.Fatalf("no copy taken (%v): the file is not one commitFromCopy commits", eno)
	}
	pg.mu.Lock()
	mark, copying := pg.copying[f]
	pg.mu.Unlock()
	if !copying || mark.key != "big" || mark.through != cp.through {
		t.Fatalf("the page does not know of the commit from a copy under way (%v, %+v): its intents would hurry other files", copying, mark)
	}
	b.writeSync(node, fh, second, 9<<20)
	// The unmount's commit of the page's files with intents starts while
	// the copy's is under way: once it has taken the files, the copy lands.
	forced := make(chan struct{})
	go func() {
		defer close(forced)
		pg.commitIntents(true)
	}()
	for taken := false; !taken; {
		pg.mu.Lock()
		taken = pg.intents == nil
		pg.mu.Unlock()
		runtime.Gosched()
	}
	if eno := f.commitCopy(cp); eno != 0 {
		t.Fatalf("commit from the copy: %v", eno)
	}
	<-forced
	pg.mu.Lock()
	left := len(pg.copying)
	pg.mu.Unlock()
	if left != 0 {
		t.Fatal("a commit from a copy, landed, is still counted under way")
	}
	want := bytes.Clone(data)
	copy(want[1<<20:], first)
	copy(want[9<<20:], second)
	if got := b.committed("big"); !bytes.Equal(got, want) {
		t.Fatal("after the forced commit the head lacks the write fsynced during the copy's commit")
	}
	if !d.LastIntent("big").IsZero() {
		t.Fatal("after the forced commit the page's sync log still holds an intent of the file")
	}
}

// A rollback journal's unlink (SQLite's DELETE mode: created, fsynced,
// closed, unlinked) can reach the server while the kernel's release of
// that close is served, or while the intents timer ends the close left to
// it (endDeferred). The unlink marks the file unlinked before it looks for
// the name; either of those, seeing the mark, dropped the never-committed
// file's pending name, the unlink found none and answered ENOENT, which
// SQLite reports as SQLITE_IOERR_DELETE_NOENT ("disk I/O error"). The
// interleavings, step by step: the unlink must succeed.
func TestWriterEndDuringUnlinkLeavesTheName(t *testing.T) {
	for _, timer := range []bool{false, true} {
		b := newBridge(t)
		page := b.mkdir(b.mkdir(1, "l"), "p")
		var out fuse.CreateOut
		in := &fuse.CreateIn{InHeader: fuse.InHeader{NodeId: page}, Flags: syscall.O_RDWR, Mode: 0o644}
		if st := b.raw.Create(nil, in, "db-journal", &out); !st.Ok() {
			t.Fatalf("create: %v", st)
		}
		b.writeSync(out.NodeId, out.Fh, []byte("journal"), 0)
		if st := b.raw.Flush(nil, &fuse.FlushIn{InHeader: fuse.InHeader{NodeId: out.NodeId}, Fh: out.Fh}); !st.Ok() {
			t.Fatalf("flush: %v", st)
		}
		pageInode := b.fs.root.EmbeddedInode().GetChild("l").GetChild("p")
		d := pageInode.Operations().(*dirNode)
		f := pageInode.GetChild("db-journal").Operations().(*fileNode)
		if !f.deferred {
			t.Fatal("the close did not leave the journal's commit to the intents timer")
		}
		key, prefix := b.keyIn(d, "db-journal")
		// unlinkShared's mark, then the release (and the timer's end of
		// the deferred close), then its lookup.
		live := f.markUnlinked()
		b.raw.Release(nil, &fuse.ReleaseIn{InHeader: fuse.InHeader{NodeId: out.NodeId}, Fh: out.Fh})
		if timer {
			f.endDeferred(false)
		}
		d.pg.keys.RLock()
		eno, _ := d.unlink(key, prefix, live)
		d.pg.keys.RUnlock()
		if eno != 0 {
			t.Fatalf("unlink after a release (and the timer's end: %v) that raced it: %v", timer, eno)
		}
	}
}

// A file created and never committed has no name but its pending one. When
// an unlink's mark comes first and the release of the last writer then
// drops that name, the unlink has nothing left to delete: it succeeds and
// writes nothing. It used to queue a delete of the absent key, whose failure
// (a page broken under it, say) returned an error and left the kernel's
// entry of a name that no longer existed.
func TestUnlinkOfANameAReleaseDroppedWritesNothing(t *testing.T) {
	b := newBridge(t)
	page := b.mkdir(b.mkdir(1, "l"), "p")
	b.create(page, "kept", "so that the page has a head")
	pageInode := b.fs.root.EmbeddedInode().GetChild("l").GetChild("p")
	d := pageInode.Operations().(*dirNode)
	if err := d.pg.settle(); err != nil {
		t.Fatal(err)
	}
	var out fuse.CreateOut
	in := &fuse.CreateIn{InHeader: fuse.InHeader{NodeId: page}, Flags: syscall.O_RDWR, Mode: 0o644}
	if st := b.raw.Create(nil, in, "tmp", &out); !st.Ok() {
		t.Fatalf("create: %v", st)
	}
	f := pageInode.GetChild("tmp").Operations().(*fileNode)
	key, prefix := b.keyIn(d, "tmp")
	var before *store.Commit
	if err := d.pg.view(func(_ *store.Page, head *store.Commit, _ *btree.Tree) error {
		before = head
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	// unlinkShared's mark, then the release of the only writer, then the
	// unlink's lookup.
	live := f.markUnlinked()
	b.raw.Release(nil, &fuse.ReleaseIn{InHeader: fuse.InHeader{NodeId: out.NodeId}, Fh: out.Fh})
	if d.pg.pendingFile(key) != nil {
		t.Fatal("the release of a file marked unlinked left its never-committed name")
	}
	d.pg.keys.RLock()
	eno, _ := d.unlink(key, prefix, live)
	inflight := d.pg.ov.inflight
	d.pg.keys.RUnlock()
	if eno != 0 {
		t.Fatalf("unlink of a name the release dropped: %v", eno)
	}
	if inflight != 0 {
		t.Fatalf("unlink of a name the release dropped queued %d changes", inflight)
	}
	if err := d.pg.settle(); err != nil {
		t.Fatal(err)
	}
	if err := d.pg.view(func(_ *store.Page, head *store.Commit, _ *btree.Tree) error {
		if head.ID != before.ID {
			t.Errorf("unlink of a name the release dropped made a commit")
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
}
