package cloudsync

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ledgerfs/ledgerfs/cas"
	"github.com/ledgerfs/ledgerfs/internal/check"
	"github.com/ledgerfs/ledgerfs/internal/gc"
	"github.com/ledgerfs/ledgerfs/internal/piececache"
	"github.com/ledgerfs/ledgerfs/internal/remote"
	"github.com/ledgerfs/ledgerfs/internal/retention"
	"github.com/ledgerfs/ledgerfs/store"
)

// TestLazyValues: a device that pulls a page fetches its tree, not its
// values: listing it and reading every entry's size fetches nothing; a
// read of a file fetches the pieces it needs (a read in order, those after
// them in one request each), verified and kept, so that a second read
// fetches nothing; the device that fetches everything gets the same bytes.
func TestLazyValues(t *testing.T) {
	dir, err := remote.NewDir(t.TempDir())
	must(t, err)
	be := &counting{Backend: dir}
	a := newDevice(t, "a", be)
	big := random(11, 6<<20)
	a.write("l", "p", "big.bin", big)
	for i := range 300 {
		a.write("l", "p", fmt.Sprintf("small/%03d", i), random(uint64(100+i), 3000+i))
	}
	a.sync()
	_, packBytes := packsIn(t, dir)
	b := newDevice(t, "b", be)
	be.take()
	st := b.sync()
	// 300 commits of small files pack their trees before their values:
	// the pull reads the runs of tree nodes (and index pieces) by range,
	// not the values, nor the big file's chunks.
	values := int64(len(big))
	for i := range 300 {
		values += int64(3000 + i)
	}
	if st.CommitsDown != 301 || st.BytesDown > packBytes-values {
		t.Fatalf("b's pull: %+v; the packs hold %d bytes, %d of them values: want the trees only", st, packBytes, values)
	}
	t.Logf("a lazy pull read %d bytes of %d in the packs", st.BytesDown, packBytes)
	// The push packed every commit's tree nodes back to back, before the
	// values: one range read for each pack that holds nodes, where nodes
	// packed before each commit's values cost one a commit.
	treePacks := 0
	for _, idx := range packIndexes(t, b, dir) {
		if slices.ContainsFunc(idx, func(r pieceRef) bool { return cas.Digest(r.Digest).IsTreeNode() }) {
			treePacks++
		}
	}
	reads := be.take()
	t.Logf("a lazy pull read %d ranges; %d packs hold tree nodes", reads["range"], treePacks)
	if reads["range"] > treePacks {
		t.Fatalf("b's pull read %d ranges, %v; the tree nodes are in %d packs: want a range a pack at most", reads["range"], reads, treePacks)
	}
	// Sizes come from the tree.
	pg := b.page("l", "p")
	head, err := pg.Head()
	must(t, err)
	it := pg.Tree(head).Seek("")
	var n int
	var size uint64
	for it.Next() {
		n++
		size += it.Entry().Meta.Size
	}
	must(t, it.Err())
	b.repo.Release(pg)
	if got := be.take(); n != 301 || size < uint64(len(big)) || len(got) != 0 {
		t.Fatalf("listing %d entries of %d bytes made requests %v", n, size, got)
	}

	// A collection (history pruned to the head: 300 trees go) and a check
	// of the page fetch nothing, and find the values in the remote.
	r0, err := gc.CollectPage(b.repo, "l", "p", gc.PageOptions{Policy: &retention.Policy{Last: 1}, Wait: true})
	must(t, err)
	pg = b.page("l", "p")
	rep, err := check.Page(pg, nil)
	b.repo.Release(pg)
	must(t, err)
	if got := be.take(); len(got) != 0 || r0.Pruned == 0 || !rep.OK() || rep.Remote == 0 {
		t.Fatalf("collection (%+v) and check (%+v) of a lazy page: requests %v", r0, rep, got)
	}

	// A read of 4 KiB in the middle: the value's index pieces down to the
	// chunk (each a ranged read: they are packed among the chunks), and
	// the chunk, or the two it straddles; how deep the index is depends on
	// the repository's random polynomial.
	pg = b.page("l", "p")
	e, _, err := pg.Tree(head).Get("big.bin")
	must(t, err)
	r, err := pg.OpenValue(e.Value)
	must(t, err)
	buf := make([]byte, 4096)
	_, err = r.ReadAt(buf, 3<<20)
	must(t, err)
	if !bytes.Equal(buf, big[3<<20:3<<20+4096]) {
		t.Fatal("a read in the middle: not a's bytes")
	}
	if got := be.take(); got["range"] < 2 || got["range"] > 8 || total(got) != got["range"] {
		t.Fatalf("a 4 KiB read made requests %v, want a ranged read per index level", got)
	}
	b.repo.Release(pg)

	// Read whole, in order: far fewer requests than pieces.
	got, err := b.read("l", "p", "big.bin")
	must(t, err)
	if !bytes.Equal(got, big) {
		t.Fatal("b reads other bytes than a wrote")
	}
	reqs := be.take()
	pieces := 0
	pg = b.page("l", "p")
	must(t, cas.Walk(pg, e.Value, func(cas.Digest) (bool, error) { pieces++; return true, nil }, nil))
	b.repo.Release(pg)
	t.Logf("a read in order of %d pieces: requests %v", pieces, reqs)
	if reqs["range"] == 0 || reqs["range"] > pieces/4 || total(reqs) != reqs["range"] {
		t.Fatalf("a read in order of %d pieces made requests %v", pieces, reqs)
	}
	// The read's fetches store what they keep in memory first.
	b.s.Settle()
	be.take()
	if got, err := b.read("l", "p", "big.bin"); err != nil || !bytes.Equal(got, big) || total(be.take()) != 0 {
		t.Fatalf("the second read: %v, or it made requests", err)
	}
	// What was fetched is kept as synced: a push sends none of it.
	if st := b.sync(); st.PiecesUp != 0 {
		t.Fatalf("b pushed %d pieces after reading", st.PiecesUp)
	}

	c, err := openDevice(t, "c", be, Options{Secret: testSecret, FetchAll: true}, 0)
	must(t, err)
	c.s.packSize = 256 << 10
	be.take()
	clear(be.packs)
	c.sync()
	pulled := be.take()
	for name, n := range be.packs {
		if n > 1 {
			t.Fatalf("a pull of everything read pack %s %d times", name, n)
		}
	}
	c.repo.SetFetcher(nil) // what c reads, it holds
	if !maps.Equal(c.files("l", "p"), b.files("l", "p")) {
		t.Fatal("the device that fetches everything holds other files")
	}
	if pulled["range"] != 0 {
		t.Fatalf("a pull of everything made ranged reads %v", pulled)
	}
}

// pushedFile has a device write data as l/p/key into a new directory
// store, and push it; it returns the store and data.
func pushedFile(t *testing.T, key string, data []byte) (remote.Backend, []byte) {
	t.Helper()
	dir, err := remote.NewDir(t.TempDir())
	must(t, err)
	a := newDevice(t, "a", dir)
	a.write("l", "p", key, data)
	a.sync()
	return dir, data
}

// packIndexes returns the pieces of each pack in be, in the packs' order,
// as d's syncer indexes them.
func packIndexes(t *testing.T, d *device, be remote.Backend) [][]pieceRef {
	t.Helper()
	var idxs [][]pieceRef
	for _, o := range objects(t, be) {
		if !strings.HasPrefix(o.Name, packsDir) {
			continue
		}
		idx, err := d.s.packIndex(o.Name)
		must(t, err)
		if len(idx) > 0 {
			idxs = append(idxs, idx)
		}
	}
	return idxs
}

// packsIn counts the packs in be, and their bytes.
func packsIn(t *testing.T, be remote.Backend) (n int, bytes int64) {
	t.Helper()
	for _, o := range objects(t, be) {
		if strings.HasPrefix(o.Name, packsDir) {
			n++
			bytes += o.Size
		}
	}
	return n, bytes
}

// unreachable is a store whose reads of ranges never answer once it is
// down.
type unreachable struct {
	remote.Backend
	down *atomic.Bool
}

func (u unreachable) GetRange(ctx context.Context, name string, off, n int64) ([]byte, error) {
	if !u.down.Load() {
		return u.Backend.GetRange(ctx, name, off, n)
	}
	<-ctx.Done()
	return nil, ctx.Err()
}

// TestLazyReadUnreachable: a read of a value not fetched yet, while the
// remote does not answer, fails after the fetch timeout with
// store.ErrRemoteOnly, not an errno of the network; once the remote
// answers, the read gives the bytes.
func TestLazyReadUnreachable(t *testing.T) {
	dir, want := pushedFile(t, "f", random(12, 300<<10))
	var down atomic.Bool
	b, err := openDevice(t, "b", unreachable{dir, &down}, Options{Secret: testSecret, FetchTimeout: 300 * time.Millisecond}, 0)
	must(t, err)
	b.sync() // the trees, read by ranges
	down.Store(true)
	start := time.Now()
	_, err = b.read("l", "p", "f")
	if !errors.Is(err, store.ErrRemoteOnly) || errors.Is(err, context.DeadlineExceeded) || time.Since(start) > 10*time.Second {
		t.Fatalf("a read with the remote unreachable: %v after %s, want ErrRemoteOnly after the timeout", err, time.Since(start))
	}
	again, err := New(context.Background(), b.repo, dir, Options{})
	must(t, err)
	t.Cleanup(again.Close)
	b.s.Close()
	b.s = again
	if got, err := b.read("l", "p", "f"); err != nil || !bytes.Equal(got, want) {
		t.Fatalf("the read once the remote answers: %v", err)
	}
}

// TestCacheOfFetchedPieces: with a cache (a mount's --cache-size), what
// reads fetch goes into the cache, not the page db, and the cache stays
// under its limit however much is read; a small file read twice is fetched
// once; a file read in order that is larger than the cache is fetched again
// (the least recently used pieces went first); what a page keeps local goes
// into its db.
func TestCacheOfFetchedPieces(t *testing.T) {
	dir, err := remote.NewDir(t.TempDir())
	must(t, err)
	be := &counting{Backend: dir}
	a := newDevice(t, "a", be)
	big, small := random(31, 3<<20), random(32, 40<<10)
	a.write("l", "p", "big", big)
	a.write("l", "p", "small", small)
	a.sync()

	const limit = 1 << 20
	cache, err := piececache.Open(t.TempDir(), limit)
	must(t, err)
	b, err := openDevice(t, "b", be, Options{Secret: testSecret, Cache: cache}, 0)
	must(t, err)
	b.sync()
	held := func() (n int) {
		pg := b.page("l", "p")
		defer b.repo.Release(pg)
		must(t, pg.Pieces(store.Synced, func(d cas.Digest) error {
			if !d.IsTreeNode() {
				n++
			}
			return nil
		}))
		return n
	}
	before := held()
	be.take()
	for i := range 2 {
		if got, err := b.read("l", "p", "small"); err != nil || !bytes.Equal(got, small) {
			t.Fatalf("small through the cache: %v", err)
		}
		b.s.Settle()
		if got := be.take(); (i == 0) != (got["range"] > 0) {
			t.Fatalf("read %d of a small file made %v; want it fetched the first time only", i+1, got)
		}
	}
	for range 2 {
		if got, err := b.read("l", "p", "big"); err != nil || !bytes.Equal(got, big) {
			t.Fatalf("big through the cache: %v", err)
		}
		b.s.Settle()
		if cache.Size() > limit {
			t.Fatalf("the cache holds %d bytes, over its limit %d", cache.Size(), limit)
		}
	}
	if got := be.take(); got["range"] < 2 {
		t.Fatalf("two reads of a file 3 times the cache made %v; want it fetched twice", got)
	}
	if n := held(); n != before {
		t.Fatalf("the page db holds %d value pieces after reads through the cache, %d before", n, before)
	}
	pg := b.page("l", "p")
	_, _, err = pg.MakeLocal("big")
	b.repo.Release(pg)
	must(t, err)
	if n := held(); n <= before {
		t.Fatal("a file kept local is not in the page db")
	}
}

// TestStreamReadsOnIntoTheNextPack: a value pushed in many packs, read in
// order on a device that pulled it lazily, is fetched ahead across the
// packs' ends: most packs are on their way before the read reaches them,
// where before each pack's first piece waited for a fetch it started.
func TestStreamReadsOnIntoTheNextPack(t *testing.T) {
	dir, big := pushedFile(t, "big.bin", random(12, 12<<20))
	packs, _ := packsIn(t, dir)
	b := newDevice(t, "b", dir)
	b.sync()
	got, err := b.read("l", "p", "big.bin")
	must(t, err)
	if !bytes.Equal(got, big) {
		t.Fatal("b reads other bytes than a wrote")
	}
	missed := b.s.missed.Load()
	t.Logf("a read in order of %d packs: %d fetches started by the read itself", packs, missed)
	if packs < 20 || missed > int64(packs/2) {
		t.Fatalf("a read in order of %d packs started %d fetches itself: the fetches ahead stopped at the packs' ends", packs, missed)
	}
}

// TestStreamStopsAtItsValuesEnd: a read in order of a value pushed in many
// packs, with another value pushed in the packs after it, fetches ahead
// within its own value only: no range it reads is in a pack that holds
// none of its pieces. Fetched ahead past its end, a read of a file took
// up to two fetches of the next file's bytes (18 MiB, in packs of 8 MiB),
// some of them after the read had returned.
func TestStreamStopsAtItsValuesEnd(t *testing.T) {
	dir, err := remote.NewDir(t.TempDir())
	must(t, err)
	a := newDevice(t, "a", dir)
	one, two := random(21, 3<<20), random(22, 3<<20)
	a.write("l", "p", "one.bin", one)
	a.write("l", "p", "two.bin", two)
	a.sync()
	pieces := func(key string) map[string]bool {
		e, pg := a.entry("l", "p", key)
		defer a.repo.Release(pg)
		ds := map[string]bool{}
		must(t, cas.Walk(pg, e.Value, func(d cas.Digest) (bool, error) { ds[string(d)] = true; return true, nil }, nil))
		return ds
	}
	ofOne, ofTwo := pieces("one.bin"), pieces("two.bin")
	log := &counting{Backend: dir}
	b := newDevice(t, "b", log)
	b.sync()
	holdsOne := map[string]bool{}
	onlyTwo := 0
	for _, idx := range packIndexes(t, b, dir) {
		name, two := idx[0].Pack, false
		for _, r := range idx {
			holdsOne[name] = holdsOne[name] || ofOne[string(r.Digest)]
			two = two || ofTwo[string(r.Digest)]
		}
		if two && !holdsOne[name] {
			onlyTwo++
		}
	}
	if onlyTwo < streamAhead {
		t.Fatalf("%d packs hold two.bin's pieces and none of one.bin's: want at least %d", onlyTwo, streamAhead)
	}
	log.takeRanged()
	got, err := b.read("l", "p", "one.bin")
	must(t, err)
	if !bytes.Equal(got, one) {
		t.Fatal("b reads other bytes than a wrote")
	}
	b.s.Settle()
	reads := log.takeRanged()
	for _, name := range reads {
		if !holdsOne[name] {
			t.Fatalf("a read in order of one.bin read a range of %s, which holds none of its pieces (ranges read: %d)", name, len(reads))
		}
	}
	t.Logf("a read in order of one.bin: %d ranges, each of its own packs", len(reads))
	if got, err := b.read("l", "p", "two.bin"); err != nil || !bytes.Equal(got, two) {
		t.Fatalf("b reads two.bin: %v, or other bytes", err)
	}
}

// TestReadsTakeWhatAFetchAheadKeeps: a fetch ahead of a read in order keeps
// its pieces out of the page db until the read reaches them, and then until
// the read passes it (reaches a later fetch), and the page's reads take
// them from the fetch meanwhile; stored at once, the read would find them
// in the db and start no fetches after them, and read each piece back from
// the db.
func TestReadsTakeWhatAFetchAheadKeeps(t *testing.T) {
	dir, big := pushedFile(t, "big.bin", random(13, 2<<20))
	b := newDevice(t, "b", dir)
	b.s.keptFor = time.Hour // only the reader stores what a fetch keeps
	b.sync()
	pg := b.page("l", "p")
	defer b.repo.Release(pg)
	var chunks []pieceRef // a pack's chunks, none held yet
	for _, idx := range packIndexes(t, b, dir) {
		if len(chunks) > 2 {
			break
		}
		chunks = chunks[:0]
		for _, r := range idx {
			d := cas.Digest(r.Digest)
			if held, err := pg.Has(d); err == nil && !held && !d.IsTreeNode() && !d.IsIndex() {
				chunks = append(chunks, r)
			}
		}
	}
	if len(chunks) <= 2 {
		t.Fatal("no pack of chunks")
	}
	idx, err := b.s.packIndex(chunks[0].Pack)
	must(t, err)
	b.s.flightMu.Lock()
	f := b.s.fly("l/p", chunks[0], idx, store.ReadOn, true)
	b.s.flightMu.Unlock()
	<-f.done
	for _, r := range chunks {
		d := cas.Digest(r.Digest)
		if held, err := pg.Has(d); err != nil || held {
			t.Fatalf("piece %s, fetched ahead, was stored before a read reached it (%v)", d, err)
		}
	}
	for _, r := range chunks {
		d := cas.Digest(r.Digest)
		data, err := pg.GetStreaming(d, nil, store.ReadOn)
		if err != nil || !bytes.Contains(big, data) || d.Verify(data) != nil {
			t.Fatalf("piece %s read while a fetch keeps it: %v", d, err)
		}
	}
	// Reached, the fetch keeps its pieces until its reader passes it:
	// reaches a later fetch of the page.
	for _, r := range chunks {
		d := cas.Digest(r.Digest)
		if held, err := pg.Has(d); err != nil || held {
			t.Fatalf("piece %s was stored while its reader was still in its fetch (%v)", d, err)
		}
	}
	b.s.flightMu.Lock()
	g := b.s.fly("l/p", chunks[0], idx, store.ReadOn, true)
	b.s.reached(g)
	b.s.flightMu.Unlock()
	select {
	case <-f.stored:
	case <-time.After(30 * time.Second):
		t.Fatal("a fetch its reader passed did not store its pieces")
	}
	for _, r := range chunks {
		d := cas.Digest(r.Digest)
		if held, err := pg.Has(d); err != nil || !held {
			t.Fatalf("piece %s is not stored once its reader passed its fetch (%v)", d, err)
		}
	}
	b.s.Settle()
	for _, r := range chunks {
		d := cas.Digest(r.Digest)
		if held, err := pg.Has(d); err != nil || !held {
			t.Fatalf("piece %s is not stored once read (%v)", d, err)
		}
		if _, ok := b.s.Pending(pg, d, 0); ok {
			t.Fatalf("piece %s is still kept in memory once stored", d)
		}
	}
}
