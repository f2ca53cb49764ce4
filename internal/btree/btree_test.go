package btree

import (
	"fmt"
	"maps"
	"math/rand/v2"
	"reflect"
	"runtime"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/restic/chunker"
	"pgregory.net/rapid"

	"github.com/ledgerfs/ledgerfs/cas"
	"github.com/ledgerfs/ledgerfs/internal/testutil"
)

const testPol = chunker.Pol(0x3DA3358B4DC173)

type memPieces struct {
	mu  sync.Mutex
	m   map[cas.Digest][]byte
	new int
}

func (p *memPieces) Put(d cas.Digest, b []byte) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if _, ok := p.m[d]; !ok {
		p.m[d] = b
		p.new++
	}
	return nil
}

func (p *memPieces) Get(d cas.Digest, buf []byte) ([]byte, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	b, ok := p.m[d]
	if !ok {
		return nil, cas.ErrNotFound
	}
	return append(buf[:0], b...), nil
}

func newStore(t testing.TB, cached bool) (*Store, *memPieces) {
	p := &memPieces{m: map[cas.Digest][]byte{}}
	var nc *NodeCache
	if cached {
		var err error
		nc, err = NewNodeCache(16 << 20)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(nc.Close)
	}
	return NewStore(p, testPol, nc), p
}

func entry(k string, v int) Entry {
	val := fmt.Sprintf("value-%d", v)
	return Entry{Key: k, Value: cas.ObjectIdentifier{Digest: cas.ComputeDigest(cas.KindBlob, false, []byte(val))}, Meta: Meta{Size: uint64(len(val))}}
}

func build(t tb, s *Store, root cas.ObjectIdentifier, ops func(tr *Tree)) cas.ObjectIdentifier {
	t.Helper()
	tr := s.Open(root)
	ops(tr)
	id, _, err := tr.Write(nil)
	if err != nil {
		t.Fatal(err)
	}
	return id
}

func contents(t tb, s *Store, root cas.ObjectIdentifier) []Entry {
	t.Helper()
	var out []Entry
	it := s.Open(root).Seek("")
	for it.Next() {
		out = append(out, it.Entry())
	}
	if it.Err() != nil {
		t.Fatal(it.Err())
	}
	return out
}

// tb is what the helpers need of *testing.T and *rapid.T alike.
type tb interface {
	Helper()
	Fatal(args ...any)
	Fatalf(format string, args ...any)
}

type op struct {
	A string
	V int
}

func opGen(lo, hi int) *rapid.Generator[op] {
	return rapid.Custom(func(t *rapid.T) op {
		return op{A: keyGen.Draw(t, "key"), V: rapid.IntRange(lo, hi).Draw(t, "v")}
	})
}

// keyGen draws keys from a small alphabet so that edits collide, with a
// share of long keys and keys of higher levels.
var keyGen = rapid.OneOf(
	rapid.StringMatching(`[ab/]{0,6}`),
	rapid.StringMatching(`k[0-9]{1,4}`),
)

// The same final set of entries gives the same root, whatever the edits that
// led there, and iteration returns exactly that set in order.
func TestHistoryIndependence(t *testing.T) {
	rapid.Check(t, func(rt *rapid.T) {
		s, _ := newStore(t, rapid.Bool().Draw(rt, "cached"))
		model := map[string]Entry{}
		root := EmptyRoot
		batches := rapid.IntRange(1, 6).Draw(rt, "batches")
		for b := range batches {
			ops := rapid.SliceOfN(opGen(-3, 5), 0, 300).Draw(rt, fmt.Sprintf("ops%d", b))
			root = build(rt, s, root, func(tr *Tree) {
				for _, op := range ops {
					if op.V < 0 {
						if _, err := tr.Delete(op.A); err != nil {
							rt.Fatal(err)
						}
						delete(model, op.A)
					} else {
						e := entry(op.A, op.V)
						if err := tr.Put(e); err != nil {
							rt.Fatal(err)
						}
						model[op.A] = e
					}
				}
			})
		}
		// Rebuild the final set from scratch in a random order.
		keys := slices.Collect(maps.Keys(model))
		rapid.Permutation(keys).Draw(rt, "order")
		s2, _ := newStore(t, false)
		fresh := build(rt, s2, EmptyRoot, func(tr *Tree) {
			for _, k := range keys {
				if err := tr.Put(model[k]); err != nil {
					rt.Fatal(err)
				}
			}
		})
		if fresh != root {
			rt.Fatalf("root after edits %s != root built fresh %s", root, fresh)
		}
		got := contents(rt, s, root)
		slices.Sort(keys)
		if len(got) != len(keys) {
			rt.Fatalf("iterated %d entries, want %d", len(got), len(keys))
		}
		for i, k := range keys {
			if got[i] != model[k] {
				rt.Fatalf("entry %d: %q, want %q", i, got[i].Key, k)
			}
		}
	})
}

func TestSeekPrefixAndDiff(t *testing.T) {
	rapid.Check(t, func(rt *rapid.T) {
		s, _ := newStore(t, true)
		a := map[string]Entry{}
		for _, k := range rapid.SliceOfN(keyGen, 0, 400).Draw(rt, "a") {
			a[k] = entry(k, 1)
		}
		b := maps.Clone(a)
		for _, op := range rapid.SliceOfN(opGen(-1, 2), 0, 50).Draw(rt, "edits") {
			if op.V < 0 {
				delete(b, op.A)
			} else {
				b[op.A] = entry(op.A, op.V)
			}
		}
		put := func(m map[string]Entry) cas.ObjectIdentifier {
			return build(rt, s, EmptyRoot, func(tr *Tree) {
				for _, e := range m {
					if err := tr.Put(e); err != nil {
						rt.Fatal(err)
					}
				}
			})
		}
		ra, rb := put(a), put(b)

		start := keyGen.Draw(rt, "start")
		var want []string
		for k := range b {
			if k >= start {
				want = append(want, k)
			}
		}
		slices.Sort(want)
		var got []string
		it := s.Open(rb).Seek(start)
		for it.Next() {
			got = append(got, it.Entry().Key)
		}
		if !slices.Equal(got, want) {
			rt.Fatalf("seek %q: got %q, want %q", start, got, want)
		}
		want, got = nil, nil
		for k := range b {
			if len(k) >= len(start) && k[:len(start)] == start {
				want = append(want, k)
			}
		}
		slices.Sort(want)
		it = s.Open(rb).Prefix(start)
		for it.Next() {
			got = append(got, it.Entry().Key)
		}
		if !slices.Equal(got, want) {
			rt.Fatalf("prefix %q: got %q, want %q", start, got, want)
		}

		var wantDiff []string
		for k, e := range a {
			if e2, ok := b[k]; !ok || e2 != e {
				wantDiff = append(wantDiff, k)
			}
		}
		for k := range b {
			if _, ok := a[k]; !ok {
				wantDiff = append(wantDiff, k)
			}
		}
		slices.Sort(wantDiff)
		var gotDiff []string
		err := s.Diff(ra, rb, func(c Change) error {
			gotDiff = append(gotDiff, c.Key)
			if (c.Before == nil) != (a[c.Key] == Entry{}) || (c.After == nil) != (b[c.Key] == Entry{}) {
				rt.Fatalf("change %q has wrong sides", c.Key)
			}
			return nil
		})
		if err != nil {
			rt.Fatal(err)
		}
		if !slices.Equal(gotDiff, wantDiff) {
			rt.Fatalf("diff: got %q, want %q", gotDiff, wantDiff)
		}

		// KeyChanged agrees with the diff and returns b's entry, for keys
		// in either tree and one in neither.
		for _, k := range append(slices.Concat(slices.Collect(maps.Keys(a)), slices.Collect(maps.Keys(b))), start) {
			e, ok, changed, err := s.KeyChanged(rb, ra, k)
			if err != nil {
				rt.Fatal(err)
			}
			want, inB := b[k]
			if ok != inB || ok && e != want {
				rt.Fatalf("KeyChanged(%q) entry %v %v, want %v %v", k, e, ok, want, inB)
			}
			if _, inDiff := slices.BinarySearch(wantDiff, k); changed != inDiff {
				rt.Fatalf("KeyChanged(%q) = %v, diff says %v", k, changed, inDiff)
			}
		}
	})
}

func bigTree(t tb, s *Store, n int) cas.ObjectIdentifier {
	return build(t, s, EmptyRoot, func(tr *Tree) {
		for i := range n {
			if err := tr.Put(entry(fmt.Sprintf("key-%08d", i), i)); err != nil {
				t.Fatal(err)
			}
		}
	})
}

// One change to a page of 100,000 entries writes only the nodes on the path
// to that key, and a diff reads only those paths.
func TestIncrementalCommit(t *testing.T) {
	s, p := newStore(t, false)
	const n = 100_000
	root := bigTree(t, s, n)
	total := len(p.m)
	var depth func(r ref, parent int) int
	depth = func(r ref, parent int) int {
		nd, err := s.load(r, parent)
		if err != nil {
			t.Fatal(err)
		}
		if nd == nil {
			return 0
		}
		d := 0
		for _, c := range nd.children {
			d = max(d, depth(c, int(nd.level)))
		}
		return d + 1
	}
	height := depth(ref{id: root}, -1)
	rng := rand.New(rand.NewPCG(1, 1))
	for range 20 {
		tr := s.Open(root)
		k := fmt.Sprintf("key-%08d", rng.IntN(n))
		if err := tr.Put(entry(k, -1)); err != nil {
			t.Fatal(err)
		}
		before := p.new
		newRoot, written, err := tr.Write(nil)
		if err != nil {
			t.Fatal(err)
		}
		// A node of a few hundred entries is split into pieces itself: the
		// edit rewrites the chunk around the entry and the node's index.
		if written > height || p.new-before > 4*height {
			t.Fatalf("one change wrote %d nodes (%d pieces) in a tree of height %d", written, p.new-before, height)
		}
		changes := 0
		if err := s.Diff(root, newRoot, func(Change) error { changes++; return nil }); err != nil || changes != 1 {
			t.Fatalf("diff: %d changes, %v", changes, err)
		}
	}
	t.Logf("%d entries: %d nodes, height %d", n, total, height)
	if height < 2 || height > 5 {
		t.Fatalf("height %d for %d entries", height, n)
	}
}

func TestKeyTooLong(t *testing.T) {
	s, _ := newStore(t, false)
	tr := s.Open(EmptyRoot)
	if err := tr.Put(entry(string(make([]byte, MaxKeySize+1)), 1)); err == nil {
		t.Fatal("oversized key accepted")
	}
	if err := tr.Put(entry(string(make([]byte, MaxKeySize)), 1)); err != nil {
		t.Fatal(err)
	}
}

func TestMetaRoundTrip(t *testing.T) {
	s, _ := newStore(t, false)
	e := entry("f", 1)
	e.Meta = Meta{Size: 7, Mode: 0o120777, MtimeNs: -5, HasMtime: true, Symlink: "../t",
		Uid: 1000, Gid: 0, HasOwner: true, Rdev: 0x0801, AtimeNs: 3, HasAtime: true, CtimeNs: 9, HasCtime: true,
		Link: LinkPrefix + "0123456789abcdef", Nlink: 3}
	e.Priority = Lazy
	root := build(t, s, EmptyRoot, func(tr *Tree) { _ = tr.Put(e) })
	s2 := NewStore(s.pieces, testPol, nil)
	got, ok, err := s2.Open(root).Get("f")
	if err != nil || !ok || got != e {
		t.Fatalf("got %+v %v %v", got, ok, err)
	}
}

// Every metadata field, present or absent, survives encoding.
func TestMetaEncodingProperty(t *testing.T) {
	rapid.Check(t, func(rt *rapid.T) {
		m := Meta{Size: rapid.Uint64().Draw(rt, "size"), Symlink: rapid.String().Draw(rt, "symlink")}
		if rapid.Bool().Draw(rt, "mode") {
			m.Mode = rapid.Uint32Range(1, 0o177777).Draw(rt, "m")
		}
		if m.HasMtime = rapid.Bool().Draw(rt, "hasMtime"); m.HasMtime {
			m.MtimeNs = rapid.Int64().Draw(rt, "mtime")
		}
		if m.HasOwner = rapid.Bool().Draw(rt, "hasOwner"); m.HasOwner {
			m.Uid, m.Gid = rapid.Uint32().Draw(rt, "uid"), rapid.Uint32().Draw(rt, "gid")
		}
		m.Rdev = rapid.Uint32().Draw(rt, "rdev")
		m.Link = rapid.String().Draw(rt, "link")
		m.Nlink = rapid.Uint32().Draw(rt, "nlink")
		if m.HasAtime = rapid.Bool().Draw(rt, "hasAtime"); m.HasAtime {
			m.AtimeNs = rapid.Int64().Draw(rt, "atime")
		}
		if m.HasCtime = rapid.Bool().Draw(rt, "hasCtime"); m.HasCtime {
			m.CtimeNs = rapid.Int64().Draw(rt, "ctime")
		}
		xs := rapid.MapOf(rapid.String(), rapid.String()).Draw(rt, "xattrs")
		for name, value := range xs {
			if err := m.SetXattr(name, value); err != nil {
				rt.Fatal(err)
			}
		}
		got, err := DecodeMeta(EncodeMeta(m))
		if err != nil || got != m {
			rt.Fatalf("decoded %+v, %v; want %+v", got, err, m)
		}
	})
}

// Extended attributes read back as set, in name order, whatever order
// they were set in; removing one leaves the others.
func TestXattrsProperty(t *testing.T) {
	rapid.Check(t, func(rt *rapid.T) {
		want := rapid.MapOf(rapid.String(), rapid.String()).Draw(rt, "xattrs")
		var m Meta
		for _, name := range rapid.Permutation(slices.Collect(maps.Keys(want))).Draw(rt, "order") {
			if err := m.SetXattr(name, "old"); err != nil {
				rt.Fatal(err)
			}
			if err := m.SetXattr(name, want[name]); err != nil {
				rt.Fatal(err)
			}
		}
		xs, err := m.XattrList()
		if err != nil || len(xs) != len(want) {
			rt.Fatalf("list %v, %v; want %d attributes", xs, err, len(want))
		}
		for i, x := range xs {
			if v, ok := want[x.Name]; !ok || v != x.Value || i > 0 && xs[i-1].Name >= x.Name {
				rt.Fatalf("attribute %d %q=%q: want %q, sorted", i, x.Name, x.Value, v)
			}
			if v, ok := m.Xattr(x.Name); !ok || v != x.Value {
				rt.Fatalf("Xattr(%q) = %q, %v", x.Name, v, ok)
			}
		}
		if len(xs) > 0 {
			gone := xs[rapid.IntRange(0, len(xs)-1).Draw(rt, "gone")].Name
			if ok, err := m.RemoveXattr(gone); !ok || err != nil {
				rt.Fatalf("remove %q: %v, %v", gone, ok, err)
			}
			if _, ok := m.Xattr(gone); ok {
				rt.Fatalf("%q still there after its removal", gone)
			}
			if rest, _ := m.XattrList(); len(rest) != len(xs)-1 {
				rt.Fatalf("%d attributes after removing one of %d", len(rest), len(xs))
			}
		}
	})
}

func FuzzDecodeNode(f *testing.F) {
	s, p := newStore(f, false)
	root := bigTree(f, s, 2000)
	f.Add([]byte(root.Digest))
	for _, b := range p.m {
		f.Add(b)
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		n, err := decodeNode(b)
		if err != nil {
			return
		}
		// A node that decodes re-encodes to the same node.
		n2, err := decodeNode(encodeNode(n))
		if err != nil || len(n2.entries) != len(n.entries) || n2.level != n.level {
			t.Fatalf("re-decode: %v", err)
		}
	})
}

// Edits of one tree never change the stored nodes that readers of another
// tree of the same store are using (run with -race).
func TestEditsLeaveStoredNodesAlone(t *testing.T) {
	s, _ := newStore(t, true)
	root := bigTree(t, s, 5000)
	want := contents(t, s, root)
	done := make(chan struct{})
	go func() {
		defer close(done)
		for range 20 {
			if got := contents(t, s, root); len(got) != len(want) || got[0] != want[0] || got[len(got)-1] != want[len(want)-1] {
				t.Error("stored tree changed under a reader")
				return
			}
		}
	}()
	for i := range 20 {
		tr := s.Open(root)
		for k := range 300 {
			key := fmt.Sprintf("key-%08d", (i*7919+k*104729)%6000)
			if err := tr.Put(entry(key, -i)); err != nil {
				t.Fatal(err)
			}
			if k%3 == 0 {
				if _, err := tr.Delete(fmt.Sprintf("key-%08d", (k*31)%5000)); err != nil {
					t.Fatal(err)
				}
			}
		}
		if _, _, err := tr.Write(nil); err != nil {
			t.Fatal(err)
		}
	}
	<-done
	if got := contents(t, s, root); !slices.Equal(got, want) {
		t.Fatal("stored tree changed by edits of another tree")
	}
}

// A hiding view answers as the tree without the hidden keys would, and
// leaves the tree itself alone.
func TestHiding(t *testing.T) {
	rapid.Check(t, func(rt *rapid.T) {
		s, _ := newStore(t, rapid.Bool().Draw(rt, "cached"))
		keys := map[string]bool{}
		for _, k := range rapid.SliceOfN(keyGen, 0, 400).Draw(rt, "keys") {
			keys[k] = true
		}
		hidden := map[string]bool{}
		for _, k := range rapid.SliceOfN(keyGen, 0, 100).Draw(rt, "hidden") {
			hidden[k] = true
		}
		root := build(rt, s, EmptyRoot, func(tr *Tree) {
			for k := range keys {
				if err := tr.Put(entry(k, 1)); err != nil {
					rt.Fatal(err)
				}
			}
		})
		full := s.Open(root)
		view := full.Hiding(func(k string) bool { return hidden[k] })

		prefix := rapid.StringMatching(`[ab/k]{0,2}`).Draw(rt, "prefix")
		var want []string
		for k := range keys {
			if !hidden[k] && strings.HasPrefix(k, prefix) {
				want = append(want, k)
			}
		}
		slices.Sort(want)
		var got []string
		it := view.Prefix(prefix)
		for it.Next() {
			got = append(got, it.Entry().Key)
		}
		if it.Err() != nil {
			rt.Fatal(it.Err())
		}
		if !slices.Equal(got, want) {
			rt.Fatalf("view lists %q under %q, want %q", got, prefix, want)
		}
		for k := range keys {
			_, ok, err := view.Get(k)
			if err != nil || ok == hidden[k] {
				rt.Fatalf("view.Get(%q) = %v, %v; hidden %v", k, ok, err, hidden[k])
			}
			if _, ok, err := full.Get(k); err != nil || !ok {
				rt.Fatalf("tree.Get(%q) = %v, %v after a view hid it", k, ok, err)
			}
		}
		if n := len(contents(rt, s, root)); n != len(keys) {
			rt.Fatalf("tree has %d entries, want %d", n, len(keys))
		}
	})
}

// eachNode calls fn with every stored node of the tree at root.
func eachNode(t tb, s *Store, root cas.ObjectIdentifier, fn func(id cas.ObjectIdentifier, n *node)) {
	t.Helper()
	n, err := s.loadID(root)
	if err != nil {
		t.Fatal(err)
	}
	fn(root, n)
	for _, c := range n.children {
		if !c.empty() {
			eachNode(t, s, c.id, fn)
		}
	}
}

// BenchmarkDecodeNode decodes every stored node of a 20,000-entry tree:
// a lookup in a large directory whose nodes the cache no longer holds
// decodes a whole node, and `rm -rf` of 100,000 entries spent a fifth of
// the mount's CPU there.
func BenchmarkDecodeNode(b *testing.B) {
	s, _ := newStore(b, false)
	var nodes [][]byte
	entries := 0
	eachNode(b, s, bigTree(b, s, 20000), func(id cas.ObjectIdentifier, n *node) {
		buf, err := s.readObject(id)
		if err != nil {
			b.Fatal(err)
		}
		nodes = append(nodes, buf)
		entries += len(n.entries)
	})
	b.ReportAllocs()
	for b.Loop() {
		for _, buf := range nodes {
			if _, err := decodeNode(buf); err != nil {
				b.Fatal(err)
			}
		}
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*entries), "ns/entry")
	b.ReportMetric(float64(entries), "entries")
}

// After Forget, the cache holds the nodes of the new tree and none of the
// stored nodes its edits replaced; nodes the edits did not touch stay.
func TestForgetDropsReplacedNodes(t *testing.T) {
	s, _ := newStore(t, true)
	root := bigTree(t, s, 5000)
	cached := func(d cas.Digest) bool {
		s.cache.c.Wait()
		_, ok := s.cache.c.Get(string(d))
		return ok
	}
	old := map[cas.Digest]bool{}
	eachNode(t, s, root, func(id cas.ObjectIdentifier, _ *node) { old[id.Digest] = true })
	for d := range old {
		if !cached(d) {
			t.Fatalf("node %s of the old tree not cached to begin with", d)
		}
	}

	tr := s.Open(root)
	for _, k := range []int{7, 2500, 4999} {
		if _, err := tr.Delete(fmt.Sprintf("key-%08d", k)); err != nil {
			t.Fatal(err)
		}
	}
	if err := tr.Put(entry("key-00001234", -1)); err != nil {
		t.Fatal(err)
	}
	newRoot, _, err := tr.Write(nil)
	if err != nil {
		t.Fatal(err)
	}
	replaced := slices.Clone(tr.replaced)
	tr.Forget()
	if len(replaced) == 0 || !slices.Contains(replaced, root.Digest) {
		t.Fatalf("replaced %d nodes, old root among them: %v", len(replaced), slices.Contains(replaced, root.Digest))
	}
	for _, d := range replaced {
		if cached(d) {
			t.Errorf("replaced node %s still cached", d)
		}
	}
	if !cached(newRoot.Digest) {
		t.Error("new root not cached")
	}
	kept := 0
	for d := range old {
		if !slices.Contains(replaced, d) && cached(d) {
			kept++
		}
	}
	if kept != len(old)-len(replaced) {
		t.Errorf("%d of the %d untouched nodes still cached", kept, len(old)-len(replaced))
	}
	// The new tree reads back whole, the edits in it.
	if e, ok, err := s.Open(newRoot).Get("key-00001234"); err != nil || !ok || e != entry("key-00001234", -1) {
		t.Fatalf("get after forget: %+v %v %v", e, ok, err)
	}
	if _, ok, _ := s.Open(newRoot).Get("key-00002500"); ok {
		t.Fatal("deleted key back")
	}
}

// Deletes in nodes an edit session already copied change them in place:
// every kind of key, level-0 and higher, deleted after puts on the same
// paths in one session, gives the root a fresh build of the result has.
func TestDeleteInEditedNodes(t *testing.T) {
	s, _ := newStore(t, true)
	const n = 3000
	base := bigTree(t, s, n)
	rapid.Check(t, func(rt *rapid.T) {
		model := map[string]Entry{}
		for i := range n {
			model[fmt.Sprintf("key-%08d", i)] = entry(fmt.Sprintf("key-%08d", i), i)
		}
		tr := s.Open(base)
		ops := rapid.SliceOfN(rapid.IntRange(-n-n/3, n+n/3), 1, 2000).Draw(rt, "ops")
		for _, o := range ops {
			k := fmt.Sprintf("key-%08d", max(o, -o))
			if o < 0 {
				if _, err := tr.Delete(k); err != nil {
					rt.Fatal(err)
				}
				delete(model, k)
				continue
			}
			if err := tr.Put(entry(k, -o)); err != nil {
				rt.Fatal(err)
			}
			model[k] = entry(k, -o)
		}
		// Then the keys above level 0, in the nodes those edits copied: all
		// of them, or some, in any order.
		upper := []string{}
		for k := range model {
			if Level(k) > 0 {
				upper = append(upper, k)
			}
		}
		slices.Sort(upper)
		upper = rapid.Permutation(upper).Draw(rt, "upper")
		if !rapid.Bool().Draw(rt, "all") {
			upper = upper[:rapid.IntRange(0, len(upper)).Draw(rt, "some")]
		}
		for _, k := range upper {
			if _, err := tr.Delete(k); err != nil {
				rt.Fatal(err)
			}
			delete(model, k)
		}
		root, _, err := tr.Write(nil)
		if err != nil {
			rt.Fatal(err)
		}
		s2, _ := newStore(t, false)
		fresh := build(rt, s2, EmptyRoot, func(tr *Tree) {
			for _, e := range model {
				if err := tr.Put(e); err != nil {
					rt.Fatal(err)
				}
			}
		})
		if fresh != root {
			rt.Fatalf("root after edits %s != root built fresh %s", root, fresh)
		}
	})
}

// A node's size, the node cache's measure, is the heap its decoding takes,
// within a tenth: the cache's bound is a bound on memory.
func TestNodeSizeIsItsHeap(t *testing.T) {
	s, _ := newStore(t, false)
	var bufs [][]byte
	eachNode(t, s, bigTree(t, s, 20000), func(id cas.ObjectIdentifier, n *node) {
		buf, err := s.readObject(id)
		if err != nil {
			t.Fatal(err)
		}
		bufs = append(bufs, buf)
	})
	nodes := make([]*node, 0, len(bufs))
	before := testutil.LiveHeap()
	for _, buf := range bufs {
		n, err := decodeNode(buf)
		if err != nil {
			t.Fatal(err)
		}
		nodes = append(nodes, n)
	}
	heap := int64(testutil.LiveHeap() - before)
	runtime.KeepAlive(bufs) // or their collection counts against the nodes
	var size int64
	for _, n := range nodes {
		size += n.size()
	}
	if r := float64(size) / float64(heap); r < 0.9 || r > 1.1 {
		t.Fatalf("%d nodes: size %d, heap the decoded nodes hold %d (%.2f)", len(nodes), size, heap, r)
	}
}

// Meta and Entry pack without padding: every decoded entry of every cached
// node holds one of each, and a field added out of size order would pad
// them.
func TestEntryPacksWithoutPadding(t *testing.T) {
	for _, v := range []any{Meta{}, Entry{}} {
		typ := reflect.TypeOf(v)
		var sum, align uintptr
		for i := range typ.NumField() {
			sum += typ.Field(i).Type.Size()
			align = max(align, uintptr(typ.Field(i).Type.Align()))
		}
		if padded := (sum + align - 1) / align * align; typ.Size() > padded {
			t.Errorf("%s: %d bytes for %d of fields (%d with its alignment): reorder its fields by size", typ, typ.Size(), sum, padded)
		}
	}
}
