package fs

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/hanwen/go-fuse/v2/fuse"
	"github.com/restic/chunker"
	"pgregory.net/rapid"

	"github.com/ledgerfs/ledgerfs/cas"
	"github.com/ledgerfs/ledgerfs/internal/btree"
)

// memPieces holds a tree's pieces in memory.
type memPieces map[cas.Digest][]byte

func (m memPieces) Put(d cas.Digest, b []byte) error {
	m[d] = append([]byte(nil), b...)
	return nil
}

func (m memPieces) Get(d cas.Digest, buf []byte) ([]byte, error) {
	b, ok := m[d]
	if !ok {
		return nil, cas.ErrNotFound
	}
	return append(buf[:0], b...), nil
}

// walkDir, stepping over the keys it skips before it seeks, calls its
// function with exactly the entries a seek past each skip reaches: every
// name of the directory once, whatever the subdirectories hold.
func TestWalkDirSkipsAsASeekDoes(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		s := btree.NewStore(memPieces{}, chunker.Pol(0x3DA3358B4DC173), nil)
		tr := s.Open(btree.EmptyRoot)
		var keys []string
		for i := range rapid.IntRange(0, 60).Draw(t, "names") {
			// "n1/..." skips to "n10", a name of its own.
			name := fmt.Sprintf("n%d", rapid.IntRange(0, 200).Draw(t, "name"))
			keys = append(keys, "d/"+name)
			// A subdirectory: its marker alone, or many keys.
			for j := range rapid.SampledFrom([]int{0, 1, 1, 3, 20}).Draw(t, "under") {
				keys = append(keys, fmt.Sprintf("d/%s/k%02d", name, j))
			}
			if i%7 == 0 {
				keys = append(keys, "e/"+name) // after the directory
			}
		}
		keys = append(keys, "c", "d/")
		for i, k := range keys {
			if err := tr.Put(btree.Entry{Key: k, Value: cas.ObjectIdentifier{Digest: cas.ComputeDigest(cas.KindBlob, false, []byte(fmt.Sprint(i)))}}); err != nil {
				t.Fatal(err)
			}
		}
		skip := func(key string) string {
			rel := key[len("d/"):]
			if i := strings.IndexByte(rel, '/'); i >= 0 {
				return "d/" + rel[:i] + "0"
			}
			return ""
		}
		var want []string
		it := tr.Prefix("d/")
		for it.Next() {
			k := it.Entry().Key
			want = append(want, k)
			if to := skip(k); to != "" {
				it = tr.SeekPrefix(to, "d/")
			}
		}
		if it.Err() != nil {
			t.Fatal(it.Err())
		}
		var got []string
		if err := walkDir(tr, "d/", func(e btree.Entry) string {
			got = append(got, e.Key)
			return skip(e.Key)
		}); err != nil {
			t.Fatal(err)
		}
		if !slices.Equal(got, want) {
			t.Fatalf("walkDir saw %q, a seek past each skip %q", got, want)
		}
	})
}

// What a listing notes of the tree (listed) is what a lookup of each name
// reads from that tree (lookFor), whatever files, subdirectories, markers
// and names sorting between "a" and "a/" the directory holds; and a tree
// changed since is read again.
func TestListedFactsAreTheTreesFacts(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		s := btree.NewStore(memPieces{}, chunker.Pol(0x3DA3358B4DC173), nil)
		tr := s.Open(btree.EmptyRoot)
		// Names whose keys sort around each other's directories: "a-",
		// "a.b" and "a0" lie between "a" and "a/", "a0" after "a/".
		stems := []string{"a", "a-", "a.b", "a0", "b", "n1", "n10"}
		var names []string
		put := func(k string, i int) {
			e := btree.Entry{Key: k, Value: cas.ObjectIdentifier{Digest: cas.ComputeDigest(cas.KindBlob, false, []byte(fmt.Sprint(i)))}}
			e.Meta.MtimeNs = int64(i)
			if err := tr.Put(e); err != nil {
				t.Fatal(err)
			}
		}
		for i := range rapid.IntRange(0, 40).Draw(t, "names") {
			name := rapid.SampledFrom(stems).Draw(t, "stem") + rapid.SampledFrom([]string{"", "x", "-1"}).Draw(t, "tail")
			names = append(names, name)
			k := "d/" + name
			if rapid.Bool().Draw(t, "file") {
				put(k, i)
			}
			if rapid.Bool().Draw(t, "marker") {
				put(k+"/", i)
			}
			for j := range rapid.SampledFrom([]int{0, 1, 3}).Draw(t, "under") {
				put(fmt.Sprintf("%s/k%d", k, j), i)
				if j == 2 {
					put(fmt.Sprintf("%s/k%d/deeper", k, j), i)
				}
			}
		}
		put("c", 0)
		put("d/", 0)
		put("e/x", 0)
		root, _, err := tr.Write(nil)
		if err != nil {
			t.Fatal(err)
		}
		tr = s.Open(root)

		l := listWalk(t, tr)
		if !l.ok {
			t.Fatal("the listing noted nothing usable of a stored tree")
		}
		check := func(tr *btree.Tree) {
			for _, name := range append(names, "absent", "a/") {
				sameFacts(t, l, tr, "d/"+name)
			}
		}
		for _, name := range names {
			if nf, err := lookFor(tr, "d/"+name); err == nil && (nf.isFile || nf.isDir) && !noted(l, "d/"+name) {
				t.Fatalf("%q is in the tree, not in the listing's notes", name)
			}
		}
		check(tr)

		// Changed since: the listing's notes are not the tree's.
		if len(names) > 0 {
			name := rapid.SampledFrom(names).Draw(t, "changed")
			put("d/"+name, 1000)
			put("d/"+name+"/", 1000)
			if root, _, err = tr.Write(nil); err != nil {
				t.Fatal(err)
			}
			check(s.Open(root))
		}
	})
}

// A listing of more names than a chunk of its notes holds answers for
// every one of them, as the tree does.
func TestListedFactsPastAChunk(t *testing.T) {
	s := btree.NewStore(memPieces{}, chunker.Pol(0x3DA3358B4DC173), nil)
	tr := s.Open(btree.EmptyRoot)
	n := 2*factsChunk + 7
	for i := range n {
		e := btree.Entry{Key: fmt.Sprintf("d/f%04d", i), Value: cas.ObjectIdentifier{Digest: cas.ComputeDigest(cas.KindBlob, false, []byte(fmt.Sprint(i)))}}
		if i%3 == 0 {
			e.Key += "/" // a directory's marker
		}
		if err := tr.Put(e); err != nil {
			t.Fatal(err)
		}
	}
	root, _, err := tr.Write(nil)
	if err != nil {
		t.Fatal(err)
	}
	tr = s.Open(root)
	l := listWalk(t, tr)
	if !l.ok || len(l.names) != n {
		t.Fatalf("the listing noted %d names (usable %v), want %d", len(l.names), l.ok, n)
	}
	for i := range n {
		key := fmt.Sprintf("d/f%04d", i)
		if got := sameFacts(t, l, tr, key); !got.isFile && !got.markerFound {
			t.Fatalf("%q: the listing has nothing for it", key)
		}
	}
}

// listWalk walks d/ of tr as listDir does, past a subdirectory after its
// first key, noting what it finds.
func listWalk(t interface{ Fatal(...any) }, tr *btree.Tree) *listed {
	l := &listed{}
	l.start(tr)
	if err := walkDir(tr, "d/", func(e btree.Entry) string {
		skip := ""
		if i := strings.IndexByte(e.Key[len("d/"):], '/'); i >= 0 && e.Key != "d/" {
			skip = e.Key[:len("d/")+i] + "0"
		}
		l.see("d/", e, skip)
		return skip
	}); err != nil {
		t.Fatal(err)
	}
	return l
}

// sameFacts checks that l answers for key in tr as tr does, and returns
// the answer.
func sameFacts(t interface {
	Fatal(...any)
	Fatalf(string, ...any)
}, l *listed, tr *btree.Tree, key string) nameFacts {
	want, err := lookFor(tr, key)
	if err != nil {
		t.Fatal(err)
	}
	got, err := l.factsOf(tr, key)
	if err != nil {
		t.Fatal(err)
	}
	if got != want {
		t.Fatalf("%q: the listing says %+v, the tree %+v", key, got, want)
	}
	return got
}

func noted(l *listed, key string) bool {
	_, ok := l.names[key]
	return ok
}

// A listing that steps over keys other than a subdirectory's notes
// nothing: what it stepped over is not known.
func TestListedForgetsWhatAWalkSkips(t *testing.T) {
	l := &listed{}
	s := btree.NewStore(memPieces{}, chunker.Pol(0x3DA3358B4DC173), nil)
	l.start(s.Open(btree.EmptyRoot))
	l.see("d/", btree.Entry{Key: "d/a/x"}, "d/a0")
	if !l.ok {
		t.Fatal("a skip past a subdirectory's keys: the notes were dropped")
	}
	l.see("d/", btree.Entry{Key: "d/b/x"}, "d/c")
	if l.ok || l.names != nil || l.facts != nil {
		t.Fatal("a skip past other names' keys: the notes were kept")
	}
}

// READDIRPLUS's lookup of each name, answered from what the listing found
// in the tree, is the directory's own Lookup: for files, hard links and
// directories, and for a file changed after the listing began.
func TestListingLookupIsLookup(t *testing.T) {
	b := newBridge(t)
	page := b.mkdir(b.mkdir(1, "l"), "p")
	a := b.create(page, "a", "one")
	b.mkdir(page, "sub")
	b.create(page, "z", "x")
	var lo fuse.EntryOut
	if st := b.raw.Link(nil, &fuse.LinkIn{InHeader: fuse.InHeader{NodeId: page}, Oldnodeid: a}, "a2", &lo); !st.Ok() {
		t.Fatalf("link: %v", st)
	}
	pg := b.fs.pages["l/p"]
	if err := pg.settle(); err != nil {
		t.Fatal(err)
	}
	d := b.fs.root.EmbeddedInode().GetChild("l").GetChild("p").Operations().(*dirNode)
	ctx := context.Background()
	fh, _, eno := d.OpendirHandle(ctx, 0)
	if eno != 0 {
		t.Fatal(eno)
	}
	h := fh.(*dirHandle)
	defer h.Releasedir(ctx, 0)
	var names []string
	for {
		e, eno := h.Readdirent(ctx)
		if eno != 0 {
			t.Fatal(eno)
		}
		if e == nil {
			break
		}
		if e.Name != "." && e.Name != ".." {
			names = append(names, e.Name)
		}
	}
	if !slices.Equal(names, []string{"a", "a2", "sub", "z"}) {
		t.Fatalf("listed %q", names)
	}
	if !h.known.ok || len(h.known.names) != len(names) {
		t.Fatalf("the listing noted %d names (usable: %v), want %d", len(h.known.names), h.known.ok, len(names))
	}
	same := func(name string) fuse.Attr {
		t.Helper()
		var got, want fuse.EntryOut
		if _, eno := h.Lookup(ctx, name, &got); eno != 0 {
			t.Fatalf("listing's lookup %s: %v", name, eno)
		}
		if _, eno := d.Lookup(ctx, name, &want); eno != 0 {
			t.Fatalf("lookup %s: %v", name, eno)
		}
		if got != want {
			t.Fatalf("%s: the listing's lookup gives %+v, Lookup %+v", name, got, want)
		}
		return got.Attr
	}
	for _, name := range names[:3] {
		same(name)
	}

	// z changes after the listing: its lookup reads the new tree.
	b.create(page, "z", "longer")
	if err := pg.settle(); err != nil {
		t.Fatal(err)
	}
	if a := same("z"); a.Size != uint64(len("longer")) {
		t.Fatalf("z after it changed: size %d, want %d", a.Size, len("longer"))
	}
}
