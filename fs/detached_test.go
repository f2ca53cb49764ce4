package fs

import (
	"syscall"
	"testing"

	gofs "github.com/hanwen/go-fuse/v2/fs"
	"github.com/hanwen/go-fuse/v2/fuse"

	"github.com/ledgerfs/ledgerfs/journal"
	"github.com/ledgerfs/ledgerfs/store"
)

// bridge drives the filesystem through go-fuse's node bridge in the test's
// process, as the kernel would through a mount, so that a test can set
// go-fuse's tree in a state a race leaves it in.
type bridge struct {
	t   *testing.T
	fs  *FS
	raw fuse.RawFileSystem
}

func newBridge(t *testing.T) *bridge {
	t.Helper()
	eng := journal.NewEngine()
	repo, err := store.Open(t.TempDir(), eng.Hooks(store.Options{}))
	if err != nil {
		t.Fatal(err)
	}
	fsys, err := New(repo, Options{Journals: eng, TmpDir: t.TempDir()})
	if err != nil {
		repo.Close()
		t.Fatal(err)
	}
	t.Cleanup(func() {
		fsys.Close()
		repo.Close()
	})
	return &bridge{t: t, fs: fsys, raw: gofs.NewNodeFS(fsys.Root(), &gofs.Options{})}
}

func (b *bridge) mkdir(parent uint64, name string) uint64 {
	b.t.Helper()
	var out fuse.EntryOut
	in := &fuse.MkdirIn{InHeader: fuse.InHeader{NodeId: parent}, Mode: 0o755}
	if st := b.raw.Mkdir(nil, in, name, &out); !st.Ok() {
		b.t.Fatalf("mkdir %s: %v", name, st)
	}
	return out.NodeId
}

// create creates name in parent with data, and closes it: a commit.
func (b *bridge) create(parent uint64, name, data string) uint64 {
	b.t.Helper()
	var out fuse.CreateOut
	in := &fuse.CreateIn{InHeader: fuse.InHeader{NodeId: parent}, Flags: syscall.O_WRONLY, Mode: 0o644}
	if st := b.raw.Create(nil, in, name, &out); !st.Ok() {
		b.t.Fatalf("create %s: %v", name, st)
	}
	w := &fuse.WriteIn{InHeader: fuse.InHeader{NodeId: out.NodeId}, Fh: out.Fh}
	if n, st := b.raw.Write(nil, w, []byte(data)); !st.Ok() || int(n) != len(data) {
		b.t.Fatalf("write %s: %d bytes, %v", name, n, st)
	}
	b.close(out.NodeId, out.Fh)
	return out.NodeId
}

func (b *bridge) close(node, fh uint64) {
	b.t.Helper()
	if st := b.raw.Flush(nil, &fuse.FlushIn{InHeader: fuse.InHeader{NodeId: node}, Fh: fh}); !st.Ok() {
		b.t.Fatalf("flush: %v", st)
	}
	b.raw.Release(nil, &fuse.ReleaseIn{InHeader: fuse.InHeader{NodeId: node}, Fh: fh})
}

// read opens node for reading and reads it whole, or returns the open's
// status.
func (b *bridge) read(node uint64) (string, fuse.Status) {
	b.t.Helper()
	var out fuse.OpenOut
	if st := b.raw.Open(nil, &fuse.OpenIn{InHeader: fuse.InHeader{NodeId: node}, Flags: syscall.O_RDONLY}, &out); !st.Ok() {
		return "", st
	}
	defer b.raw.Release(nil, &fuse.ReleaseIn{InHeader: fuse.InHeader{NodeId: node}, Fh: out.Fh})
	buf := make([]byte, 4096)
	res, st := b.raw.Read(nil, &fuse.ReadIn{InHeader: fuse.InHeader{NodeId: node}, Fh: out.Fh, Size: uint32(len(buf))}, buf)
	if !st.Ok() {
		b.t.Fatalf("read: %v", st)
	}
	data, st := res.Bytes(buf)
	if !st.Ok() {
		b.t.Fatalf("read: %v", st)
	}
	return string(data), fuse.OK
}

// A lookup that races a rename can leave the node it returned out of
// go-fuse's tree, unmarked by the rename that replaced it: go-fuse places
// the node after Lookup returns, after the rename looked for the node it
// replaces, and the rename's move then takes the name (seen in go-fuse's
// posixtest OpenSymlinkRace, as ESTALE from open). Such a node is what the
// inode table says it is: replaced here, and then gone (ENOENT, as an
// unlinked file); or still the file at its key, which it reads.
func TestDetachedNodeIsWhatItsNumberSays(t *testing.T) {
	b := newBridge(t)
	page := b.mkdir(b.mkdir(1, "l"), "p")
	pageInode := b.fs.root.EmbeddedInode().GetChild("l").GetChild("p")

	kept := b.create(page, "kept", "still here")
	replaced := b.create(page, "a", "old")
	b.create(page, "tmp", "new")
	// Landed, the nodes hold no content: an open reads the page's entry.
	if err := b.fs.pages["l/p"].settle(); err != nil {
		t.Fatal(err)
	}

	// The race's end: both nodes out of the tree while the kernel holds
	// them; "a" renamed over without the rename finding its node.
	pageInode.RmChild("kept", "a")
	in := &fuse.RenameIn{InHeader: fuse.InHeader{NodeId: page}, Newdir: page}
	if st := b.raw.Rename(nil, in, "tmp", "a"); !st.Ok() {
		t.Fatalf("rename tmp a: %v", st)
	}

	if got, st := b.read(kept); !st.Ok() || got != "still here" {
		t.Errorf("open of a file out of go-fuse's tree but still at its key: %q, %v; want its content", got, st)
	}
	if got, st := b.read(replaced); st != fuse.ENOENT {
		t.Errorf("open of a file renamed over while out of go-fuse's tree: %q, %v; want ENOENT", got, st)
	}
	var out fuse.EntryOut
	if st := b.raw.Lookup(nil, &fuse.InHeader{NodeId: page}, "a", &out); !st.Ok() {
		t.Fatalf("lookup a: %v", st)
	}
	if got, st := b.read(out.NodeId); !st.Ok() || got != "new" {
		t.Errorf("a after the rename: %q, %v; want %q", got, st, "new")
	}
}
