package gc_test

import (
	"bytes"
	"fmt"
	"io"
	"strings"
	"testing"

	"pgregory.net/rapid"

	"github.com/ledgerfs/ledgerfs/cas"
	"github.com/ledgerfs/ledgerfs/internal/btree"
	"github.com/ledgerfs/ledgerfs/internal/check"
	"github.com/ledgerfs/ledgerfs/internal/gc"
	"github.com/ledgerfs/ledgerfs/internal/retention"
	"github.com/ledgerfs/ledgerfs/journal"
	"github.com/ledgerfs/ledgerfs/store"
)

// journals commits the tests' changes: one engine for the package's
// repositories, each page with its own committer.
var journals = journal.NewEngine()

// newRepo opens a new repository with one empty page, l/p, until the test
// ends.
func newRepo(t testing.TB) *store.Repository {
	t.Helper()
	repo, err := store.Open(t.TempDir(), journals.Hooks(store.Options{}))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { repo.Close() })
	if err := repo.CreateLedger("l"); err != nil {
		t.Fatal(err)
	}
	if err := repo.CreatePage("l", "p"); err != nil {
		t.Fatal(err)
	}
	return repo
}

func openPage(t testing.TB) (*store.Repository, *store.Page) {
	t.Helper()
	repo := newRepo(t)
	p, err := repo.AcquireIdle("l", "p")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { repo.ReleaseIdle(p) })
	return repo, p
}

// content is a value: one of a few sizes (inline, one chunk, an index of
// chunks) built from a seed, so that values share chunks.
func content(seed, size int) []byte {
	b := make([]byte, size)
	x := uint64(seed)*0x9e3779b97f4a7c15 + 1
	for i := range b {
		x ^= x << 13
		x ^= x >> 7
		x ^= x << 17
		b[i] = byte(x)
	}
	return b
}

// fataler is what put needs of a test: *testing.T and *rapid.T.
type fataler interface{ Fatal(...any) }

func put(t fataler, p *store.Page, key string, data []byte) journal.Op {
	w := p.NewValueWriter()
	if _, err := w.Write(data); err != nil {
		t.Fatal(err)
	}
	id, size, err := w.Close()
	if err != nil {
		t.Fatal(err)
	}
	return journal.Op{Key: key, Entry: btree.Entry{Value: id, Meta: btree.Meta{Size: size}}}
}

// snapshot reads every entry of commit c with its content.
func snapshot(p *store.Page, c *store.Commit) (map[string][]byte, error) {
	out := map[string][]byte{}
	it := p.Tree(c).Seek("")
	for it.Next() {
		e := it.Entry()
		r, err := p.OpenValue(e.Value)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", e.Key, err)
		}
		b, err := io.ReadAll(io.NewSectionReader(r, 0, int64(e.Meta.Size)))
		if err != nil {
			return nil, fmt.Errorf("%s: %w", e.Key, err)
		}
		out[e.Key] = b
	}
	return out, it.Err()
}

// TestCollectRandomHistories builds random histories (puts of values that
// share chunks, deletes, transactions that merge) and collects them with
// random policies: every kept commit reads back as it was, the heads are
// kept, and afterwards every stored object is reached from a kept commit
// (fsck's walker, not the collector's, counts them).
func TestCollectRandomHistories(t *testing.T) {
	rapid.Check(t, func(rt *rapid.T) {
		_, p := openPage(t)
		keys := []string{"a", "b", "c/d", "c/e", "f"}
		sizes := []int{10, 5000, 70_000, 300_000}
		steps := rapid.IntRange(1, 12).Draw(rt, "steps")
		var txn *journal.Journal
		for i := range steps {
			var ops []journal.Op
			if i == 0 && rapid.IntRange(0, 2).Draw(rt, "bulk") == 0 {
				// Hundreds of long keys: a tree node of more than
				// 64 KiB, stored as an index over chunks.
				tag := rapid.IntRange(0, 3).Draw(rt, "bulk tag")
				for k := range 700 {
					key := fmt.Sprintf("bulk/%d/%0120d", tag, k)
					id := cas.ObjectIdentifier{Digest: cas.ComputeDigest(cas.KindBlob, false, content(k, 10))} // inline
					ops = append(ops, journal.Op{Key: key, Entry: btree.Entry{Value: id, Meta: btree.Meta{Size: 10}}})
				}
			}
			for range rapid.IntRange(1, 3).Draw(rt, "ops") {
				k := rapid.SampledFrom(keys).Draw(rt, "key")
				if rapid.IntRange(0, 3).Draw(rt, "delete") == 0 {
					ops = append(ops, journal.Op{Key: k, Kind: store.OpDelete})
					continue
				}
				data := content(rapid.IntRange(0, 6).Draw(rt, "seed"), rapid.SampledFrom(sizes).Draw(rt, "size"))
				ops = append(ops, put(rt, p, k, data))
			}
			switch {
			case txn == nil && rapid.Bool().Draw(rt, "begin txn"):
				j, err := journals.Begin(p, true)
				if err != nil {
					rt.Fatal(err)
				}
				if err := j.Apply(ops...); err != nil {
					rt.Fatal(err)
				}
				txn = j
			default:
				j, err := journals.Begin(p, false)
				if err != nil {
					rt.Fatal(err)
				}
				if err := j.Apply(ops...); err != nil {
					rt.Fatal(err)
				}
				if _, err := j.Commit(); err != nil {
					rt.Fatalf("step %d: %v", i, err)
				}
			}
			if txn != nil && rapid.Bool().Draw(rt, "commit txn") {
				if _, err := txn.Commit(); err != nil {
					rt.Fatal(err)
				}
				txn = nil
			}
		}
		if txn != nil {
			if _, err := txn.Commit(); err != nil {
				rt.Fatal(err)
			}
		}
		before := map[store.CommitID]map[string][]byte{}
		err := p.CommitIDs(nil, func(id store.CommitID) error {
			c, err := p.Commit(id)
			if err != nil {
				return err
			}
			before[id], err = snapshot(p, c)
			return err
		})
		if err != nil {
			rt.Fatal(err)
		}
		heads, err := p.Heads()
		if err != nil {
			rt.Fatal(err)
		}
		policy := rapid.SampledFrom([]retention.Policy{
			{Last: 1}, {Last: 2}, {Last: 5}, {All: true}, {Hourly: 1}, {Within: 1},
		}).Draw(rt, "policy")
		transient := 0
		if err := p.Pieces(store.Transient, func(cas.Digest) error { transient++; return nil }); err != nil {
			rt.Fatal(err)
		}
		r, err := gc.Collect(p, gc.Options{Policy: policy})
		if err != nil {
			rt.Fatal(err)
		}
		kept := 0
		for id, want := range before {
			c, err := p.Commit(id)
			if err != nil {
				continue // pruned
			}
			kept++
			got, err := snapshot(p, c)
			if err != nil {
				rt.Fatalf("kept commit %s no longer reads: %v", id, err)
			}
			if len(got) != len(want) {
				rt.Fatalf("kept commit %s: %d entries, had %d", id, len(got), len(want))
			}
			for k, v := range want {
				if !bytes.Equal(got[k], v) {
					rt.Fatalf("kept commit %s: %s changed", id, k)
				}
			}
		}
		if kept != len(before)-r.Pruned {
			rt.Fatalf("%d commits left, %d before and %d pruned", kept, len(before), r.Pruned)
		}
		for _, h := range heads {
			if _, err := p.Commit(h.ID); err != nil {
				rt.Fatalf("head %s: %v", h.ID, err)
			}
		}
		// Keep-all deletes only transient pieces: values written for ops a
		// later op of the same journal replaced.
		if policy.All && (r.Pruned > 0 || r.Deleted > transient) {
			rt.Fatalf("keep-all pruned %d commits and deleted %d pieces, %d of them transient", r.Pruned, r.Deleted, transient)
		}
		rep, err := check.Page(p, func(key string, v []byte) error { _, err := journal.DecodeOp(key, v); return err })
		if err != nil {
			rt.Fatal(err)
		}
		if !rep.OK() {
			rt.Fatalf("fsck after collection: %v %v", rep.Problems, rep.Leftovers)
		}
		stored := 0
		for _, s := range store.Statuses {
			if err := p.Pieces(s, func(cas.Digest) error { stored++; return nil }); err != nil {
				rt.Fatal(err)
			}
		}
		// (A deleted piece of a kept commit may still read from the node
		// cache; fsck's walk counts it as reached, so this finds it.)
		switch reached := rep.Nodes + rep.Pieces; {
		case reached > stored:
			rt.Fatalf("%d objects stored after collection, %d reached from kept commits: reachable pieces deleted", stored, reached)
		case reached < stored:
			rt.Fatalf("%d objects stored after collection, %d reached from kept commits: garbage left", stored, reached)
		}
	})
}

// TestKeepUnsynced: with KeepUnsynced, a commit not yet synced is never
// pruned, whatever the policy; without sync every commit is unsynced.
func TestKeepUnsynced(t *testing.T) {
	_, p := openPage(t)
	for i := range 4 {
		j, err := journals.Begin(p, false)
		if err != nil {
			t.Fatal(err)
		}
		w := p.NewValueWriter()
		w.Write(content(i, 70_000))
		id, size, err := w.Close()
		if err != nil {
			t.Fatal(err)
		}
		if err := j.Apply(journal.Op{Key: "f", Entry: btree.Entry{Value: id, Meta: btree.Meta{Size: size}}}); err != nil {
			t.Fatal(err)
		}
		if _, err := j.Commit(); err != nil {
			t.Fatal(err)
		}
	}
	unsynced := 0
	if err := p.UnsyncedCommits(func(store.CommitID) error { unsynced++; return nil }); err != nil || unsynced != 4 {
		t.Fatalf("%d unsynced commits (%v), want 4", unsynced, err)
	}
	r, err := gc.Collect(p, gc.Options{Policy: retention.Policy{Last: 1}, KeepUnsynced: true})
	if err != nil || r.Pruned != 0 || r.Deleted != 0 {
		t.Fatalf("with every commit unsynced, a collection pruned %d commits and deleted %d pieces (%v)", r.Pruned, r.Deleted, err)
	}
	r, err = gc.Collect(p, gc.Options{Policy: retention.Policy{Last: 1}})
	if err != nil || r.Pruned != 3 || r.Deleted == 0 {
		t.Fatalf("without KeepUnsynced: pruned %d, deleted %d (%v); want 3 pruned", r.Pruned, r.Deleted, err)
	}
	unsynced = 0
	if err := p.UnsyncedCommits(func(store.CommitID) error { unsynced++; return nil }); err != nil || unsynced != 1 {
		t.Fatalf("%d unsynced rows after pruning (%v): a pruned commit's row must go with it", unsynced, err)
	}
}

// A collection may delete the value a sync log record is built from: it
// checkpoints the log first, so that no record names a base it deleted.
func TestCollectCheckpointsTheSyncLog(t *testing.T) {
	_, p := openPage(t)
	c := journals.CommitterFor(p)
	value := func(i int) journal.Op {
		w := p.NewValueWriter()
		w.Write(content(i, 70_000))
		id, size, err := w.Close()
		if err != nil {
			t.Fatal(err)
		}
		return journal.Op{Key: "f", Entry: btree.Entry{Value: id, Meta: btree.Meta{Size: size}}}
	}
	base := value(1)
	if err := c.Apply(true, base); err != nil {
		t.Fatal(err)
	}
	next := value(2)
	next.Log = &store.LogSource{Base: base.Entry.Value.Digest, Keep: 70_000,
		Extents: []store.Extent{{Data: content(2, 70_000)}}}
	if err := c.Apply(false, next); err != nil {
		t.Fatal(err)
	}
	if !p.Durability().Has("f") {
		t.Fatal("the change's record is not in the log")
	}
	r, err := gc.Collect(p, gc.Options{Policy: retention.Policy{Last: 1}})
	if err != nil || r.Pruned != 1 {
		t.Fatalf("collection: pruned %d (%v), want the base's commit pruned", r.Pruned, err)
	}
	if p.Durability().Has("f") || !p.Durability().Empty() {
		t.Fatal("the collection left a record whose base it may have deleted")
	}
}

// The head's content is what its files hold, whatever a collection's
// compression made of the rows: du showed it shrink after a collection.
func TestHeadContentIgnoresCompression(t *testing.T) {
	repo := newRepo(t)
	p, err := repo.Acquire("l", "p")
	if err != nil {
		t.Fatal(err)
	}
	text := []byte(strings.Repeat("a line of text that compresses well\n", 20000))
	var ops []journal.Op
	for i := range 40 {
		// Many keys: a tree of several nodes, which compress too.
		ops = append(ops, put(t, p, fmt.Sprintf("dir/file-%03d.txt", i), text[:len(text)-i]))
	}
	if err := journals.CommitterFor(p).Apply(false, ops...); err != nil {
		t.Fatal(err)
	}
	before, err := gc.PageUsage(repo, p)
	repo.Release(p)
	if err != nil {
		t.Fatal(err)
	}
	r, err := gc.CollectPage(repo, "l", "p", gc.PageOptions{Wait: true, Reclaim: true})
	if err != nil || r.Compressed == 0 {
		t.Fatalf("the collection compressed %d pieces: %v", r.Compressed, err)
	}
	p, err = repo.Acquire("l", "p")
	if err != nil {
		t.Fatal(err)
	}
	defer repo.Release(p)
	after, err := gc.PageUsage(repo, p)
	if err != nil {
		t.Fatal(err)
	}
	if after.HeadContent != before.HeadContent || after.HeadStored >= before.HeadStored {
		t.Fatalf("head content %d → %d bytes, stored %d → %d: want the content kept, the stored less", before.HeadContent, after.HeadContent, before.HeadStored, after.HeadStored)
	}
}

// A background collection of a page used a moment ago leaves the space
// it freed to give back later (Result.ReclaimLater): giving it back takes
// the page's db for a compaction nobody can stop, which a writer coming
// back would wait for. An explicit collection gives it back at once.
func TestBackgroundReclaimWaitsForAQuietPage(t *testing.T) {
	repo := newRepo(t)
	change := func(ops ...journal.Op) {
		t.Helper()
		p, err := repo.Acquire("l", "p")
		if err != nil {
			t.Fatal(err)
		}
		defer repo.Release(p) // the page is used until now
		if len(ops) == 0 {
			ops = []journal.Op{put(t, p, "f", content(1, 1<<20))}
		}
		if err := journals.CommitterFor(p).Apply(false, ops...); err != nil {
			t.Fatal(err)
		}
	}
	keepLast := &retention.Policy{Last: 1}
	for _, explicit := range []bool{false, true} {
		change()
		change(journal.Op{Key: "f", Kind: store.OpDelete})
		r, err := gc.CollectPage(repo, "l", "p", gc.PageOptions{Policy: keepLast, Gentle: true, Wait: explicit})
		if err != nil || r.Deleted == 0 {
			t.Fatalf("explicit %v: deleted %d pieces (%v): want the file's", explicit, r.Deleted, err)
		}
		if r.ReclaimLater == explicit {
			t.Errorf("explicit %v: space left for later %v, want %v", explicit, r.ReclaimLater, !explicit)
		}
	}
}

// TestCollectionGivesWayAndGoesOn collects random histories in many runs,
// stopped at random polls, with commits between the runs that reuse the
// content of pruned commits (whose pieces may not be swept yet) and leave
// uncommitted pieces behind: as an explicit collection that gives way to
// writers runs. Every commit left reads back, the head as the changes made
// it, and nothing a commit reaches is deleted.
func TestCollectionGivesWayAndGoesOn(t *testing.T) {
	rapid.Check(t, func(rt *rapid.T) {
		_, p := openPage(t)
		keys := []string{"a", "b", "c/d", "c/e", "f"}
		sizes := []int{10, 5000, 70_000, 300_000}
		head := map[string][]byte{}
		change := func(label string) error {
			var ops []journal.Op
			for range rapid.IntRange(1, 3).Draw(rt, label+" ops") {
				k := rapid.SampledFrom(keys).Draw(rt, label+" key")
				if rapid.IntRange(0, 3).Draw(rt, label+" delete") == 0 {
					ops = append(ops, journal.Op{Key: k, Kind: store.OpDelete})
					delete(head, k)
					continue
				}
				data := content(rapid.IntRange(0, 6).Draw(rt, label+" seed"), rapid.SampledFrom(sizes).Draw(rt, label+" size"))
				ops = append(ops, put(rt, p, k, data))
				head[k] = data
			}
			if rapid.IntRange(0, 4).Draw(rt, label+" leftover") == 0 {
				// Pieces no commit uses: a write never committed.
				put(rt, p, "x", content(rapid.IntRange(7, 9).Draw(rt, label+" leftover seed"), 70_000))
			}
			return journals.CommitterFor(p).Apply(false, ops...)
		}
		if rapid.Bool().Draw(rt, "bulk") {
			// Hundreds of long keys: a tree of many nodes, whose walk a
			// stop cuts short.
			var ops []journal.Op
			for k := range 700 {
				key := fmt.Sprintf("bulk/%0120d", k)
				data := content(k, 10)
				ops = append(ops, put(rt, p, key, data))
				head[key] = data
			}
			if err := journals.CommitterFor(p).Apply(false, ops...); err != nil {
				rt.Fatal(err)
			}
		}
		for i := range rapid.IntRange(1, 10).Draw(rt, "steps") {
			if err := change(fmt.Sprint("before ", i)); err != nil {
				rt.Fatal(err)
			}
		}
		every := rapid.IntRange(1, 16).Draw(rt, "poll every")
		stopEvery := rapid.IntRange(8, 40).Draw(rt, "stop every")
		between := 0
		_, runs, err := gc.CollectInSteps(p, gc.Options{Policy: retention.Policy{Last: 1}}, every, stopEvery, func() error {
			// Writers who come at every stop can outrun a collection
			// stopped this often: a while, then no more.
			if between++; between > 20 {
				return nil
			}
			return change(fmt.Sprint("between ", between))
		})
		if err != nil {
			rt.Fatal(err)
		}
		rt.Logf("%d runs", runs)
		h, err := p.Head()
		if err != nil {
			rt.Fatal(err)
		}
		got, err := snapshot(p, h)
		if err != nil {
			rt.Fatalf("the head no longer reads: %v", err)
		}
		if len(got) != len(head) {
			rt.Fatalf("the head has %d entries, want %d", len(got), len(head))
		}
		for k, v := range head {
			if !bytes.Equal(got[k], v) {
				rt.Fatalf("the head's %s changed", k)
			}
		}
		err = p.CommitIDs(nil, func(id store.CommitID) error {
			c, err := p.Commit(id)
			if err != nil {
				return err
			}
			if _, err := snapshot(p, c); err != nil {
				return fmt.Errorf("commit %s no longer reads: %w", id, err)
			}
			return nil
		})
		if err != nil {
			rt.Fatal(err)
		}
		rep, err := check.Page(p, func(key string, v []byte) error { _, err := journal.DecodeOp(key, v); return err })
		if err != nil {
			rt.Fatal(err)
		}
		if len(rep.Problems) > 0 {
			rt.Fatalf("fsck after collection: %v", rep.Problems)
		}
		stored := 0
		for _, s := range store.Statuses {
			if err := p.Pieces(s, func(cas.Digest) error { stored++; return nil }); err != nil {
				rt.Fatal(err)
			}
		}
		if reached := rep.Nodes + rep.Pieces; reached > stored {
			rt.Fatalf("%d objects stored after collection, %d reached from commits: reachable pieces deleted", stored, reached)
		}
	})
}

// TestReachOrder: Reach.Order numbers the tree nodes and index pieces in
// the order the marks walked them, the first commit's before the
// second's, and knows no chunk; Has knows them all.
func TestReachOrder(t *testing.T) {
	_, p := openPage(t)
	c := journals.CommitterFor(p)
	var ops []journal.Op
	for i := range 200 {
		ops = append(ops, put(t, p, fmt.Sprintf("k%03d", i), content(i, 100)))
	}
	ops = append(ops, put(t, p, "big", content(1000, 1<<20))) // an index over chunks
	if err := c.Apply(false, ops...); err != nil {
		t.Fatal(err)
	}
	first, err := p.Head()
	if err != nil {
		t.Fatal(err)
	}
	if err := c.Apply(false, put(t, p, "k000", content(2000, 100))); err != nil {
		t.Fatal(err)
	}
	second, err := p.Head()
	if err != nil {
		t.Fatal(err)
	}
	r := gc.NewReach(1024)
	for _, cm := range []*store.Commit{first, second} {
		if err := r.Commit(p, cm); err != nil {
			t.Fatal(err)
		}
	}
	// Every piece of each commit: those of commit 1 come before those
	// only commit 2 reaches.
	seen := map[cas.Digest]bool{}
	var last uint32
	walked, chunks := 0, 0
	piece := func(i int, d cas.Digest) (bool, error) {
		if d.IsInline() || seen[d] {
			return false, nil
		}
		seen[d] = true
		if !r.Has(d) {
			t.Errorf("piece %s of commit %d not reached", d, i+1)
		}
		o, ok := r.Order(d)
		if !d.IsTreeNode() && !d.IsIndex() {
			chunks++
			if ok {
				t.Errorf("chunk %s has a place in the order", d)
			}
			return false, nil
		}
		if !ok {
			return false, fmt.Errorf("tree node or index piece %s of commit %d has no place in the order", d, i+1)
		}
		walked++
		if i == 0 {
			last = max(last, o)
		} else if o <= last {
			t.Errorf("a piece only commit 2 reaches comes at %d, before commit 1's last at %d", o, last)
		}
		return true, nil
	}
	var node func(i int, id cas.ObjectIdentifier) error
	node = func(i int, id cas.ObjectIdentifier) error {
		if err := cas.Walk(p, id, func(d cas.Digest) (bool, error) { return piece(i, d) }, nil); err != nil {
			return err
		}
		children, values, err := p.Nodes().Refs(id)
		if err != nil {
			return err
		}
		for _, v := range values {
			if err := cas.Walk(p, v, func(d cas.Digest) (bool, error) { return piece(i, d) }, nil); err != nil {
				return err
			}
		}
		for _, ch := range children {
			if err := node(i, ch); err != nil {
				return err
			}
		}
		return nil
	}
	for i, cm := range []*store.Commit{first, second} {
		if err := node(i, cm.Root); err != nil {
			t.Fatal(err)
		}
	}
	if o, ok := r.Order(first.Root.Digest); !ok || o != 0 {
		t.Errorf("commit 1's root at %d (%v), want 0", o, ok)
	}
	if walked < 3 || chunks == 0 {
		t.Fatalf("walked %d tree nodes and index pieces and %d chunks; the test wants more", walked, chunks)
	}
}
