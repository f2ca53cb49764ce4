package cloudsync

import (
	"bytes"
	"cmp"
	"context"
	"errors"
	"flag"
	"fmt"
	"maps"
	"os"
	"os/exec"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"go.uber.org/goleak"
	"pgregory.net/rapid"

	"github.com/ledgerfs/ledgerfs/cas"
	"github.com/ledgerfs/ledgerfs/internal/gc"
	"github.com/ledgerfs/ledgerfs/internal/remote"
	"github.com/ledgerfs/ledgerfs/store"
)

// packBytes is what the store's packs take.
func packBytes(t *testing.T, be remote.Backend) int64 {
	t.Helper()
	var n int64
	for _, o := range objects(t, be) {
		if strings.HasPrefix(o.Name, packsDir) {
			n += o.Size
		}
	}
	return n
}

func storeBytes(t *testing.T, be remote.Backend) int64 {
	t.Helper()
	var n int64
	for _, o := range objects(t, be) {
		n += o.Size
	}
	return n
}

// reachedBytes is what the pieces that every commit d holds of page l/p
// reaches take in the packs of be, each counted once, in the pack d's
// index places it: what the store's collection keeps. Values d never
// fetched count too: the commits d keeps (other devices' batch heads among
// them) reach them.
func reachedBytes(t *testing.T, d *device, be remote.Backend, l, p string) int64 {
	t.Helper()
	pg := d.page(l, p)
	defer d.repo.Release(pg)
	reach := gc.NewReach(0)
	must(t, pg.CommitIDs(nil, func(id store.CommitID) error {
		c, err := pg.Commit(id)
		if err != nil {
			return err
		}
		return reach.Commit(pg, c)
	}))
	var n int64
	seen := map[cas.Digest]bool{}
	for _, o := range objects(t, be) {
		if !strings.HasPrefix(o.Name, packsDir) {
			continue
		}
		refs, err := d.s.packIndex(o.Name)
		must(t, err)
		for _, r := range refs {
			dg := cas.Digest(r.Digest)
			if seen[dg] || !reach.Has(dg) {
				continue
			}
			if at, ok, err := d.s.pieceAt(dg); err != nil {
				t.Fatal(err)
			} else if !ok || at.Pack != o.Name {
				continue
			}
			seen[dg] = true
			n += r.Len
		}
	}
	return n
}

// collectHere collects every page of d, as ledgerfs gc does before the
// store's collection.
func (d *device) collectHere() {
	d.t.Helper()
	ledgers, err := d.repo.Ledgers()
	must(d.t, err)
	for _, l := range ledgers {
		pages, err := d.repo.Pages(l)
		must(d.t, err)
		for _, p := range pages {
			_, err := gc.CollectPage(d.repo, l, p, gc.PageOptions{Wait: true})
			must(d.t, err)
		}
	}
}

func (d *device) collectStore(grace time.Duration) CollectStats {
	d.t.Helper()
	d.collectHere()
	cs, err := d.s.Collect(context.Background(), CollectOptions{Grace: grace})
	if err != nil {
		d.t.Fatalf("%s: collect the store: %v", d.name, err)
	}
	return cs
}

// TestCollectStore: old versions and deleted pages leave the store when
// collected; what every device's head holds stays readable, on the
// devices and on one that joins after; once everything is deleted, the
// store holds at most 5 % of its peak. The devices' policies differ: the
// store keeps the union.
func TestCollectStore(t *testing.T) {
	for kind, be := range stores(t) {
		t.Run(kind, func(t *testing.T) {
			a, b := newDevice(t, "a", be), newDevice(t, "b", be)
			must(t, a.repo.SetRetention("", "", "keep-last=1"))
			must(t, b.repo.SetRetention("", "", "keep-last=2"))
			for i := range 3 {
				a.write("l", "p1", fmt.Sprintf("f%d", i), random(uint64(i), 400<<10))
			}
			a.write("l", "p2", "g", random(10, 600<<10))
			b.write("l", "p3", "h", random(11, 500<<10))
			a.sync()
			b.sync()
			a.sync()
			// Versions of f0: the store keeps b's two newest.
			for v := range 3 {
				b.write("l", "p1", "f0", random(uint64(20+v), 400<<10))
				b.sync()
			}
			a.sync()
			must(t, b.repo.DeletePage("l", "p2"))
			b.sync()
			a.sync()
			peak := storeBytes(t, be)
			wantP3 := a.files("l", "p3")
			// An evicted page is walked for the collection, and stays
			// evicted. (What the read fetched is stored first: the
			// page is in use until it is.)
			a.s.Settle()
			_, err := a.repo.Evict("l", "p3")
			must(t, err)

			cs := a.collectStore(0)
			if ev, err := a.repo.Evicted("l", "p3"); err != nil || !ev {
				t.Fatalf("the page evicted before the collection is back after it (%v)", err)
			}
			if cs.Deleted == 0 || cs.Waiting {
				t.Fatalf("a collection of old versions and a deleted page deleted nothing: %+v", cs)
			}
			// f0's version 20 is one of b's two newest, kept; 21 and 22
			// are the heads' history; the original f0 and g are gone.
			want := a.files("l", "p1")
			b.sync()
			if got := b.files("l", "p1"); !maps.Equal(got, want) {
				t.Fatal("b reads other files of l/p1 after the collection")
			}
			if got, err := b.read("l", "p3", "h"); err != nil || string(got) != string(random(11, 500<<10)) {
				t.Fatal("b's own page lost its file")
			}
			// A device that joins now lands the kept commits only, and
			// reads everything.
			var c *device
			c, err = openDevice(t, "c", be, Options{Secret: testSecret, FetchAll: true}, 0)
			must(t, err)
			// It read the records, then stopped before its pull: the
			// next syncer still lands only the kept commits.
			must(t, c.s.absorb(context.Background(), true))
			c.s.Close()
			c.s, err = New(context.Background(), c.repo, be, Options{Secret: testSecret, FetchAll: true})
			must(t, err)
			c.sync()
			if got := c.files("l", "p1"); !maps.Equal(got, want) {
				t.Fatal("a device that joined after the collection reads other files")
			}
			if got := c.files("l", "p3"); !maps.Equal(got, wantP3) {
				t.Fatal("a device that joined after the collection reads other files of the page evicted on the collecting device")
			}
			// a keeps the last commit, b the last two, and a the head of
			// each device's last batch of the page (the base of its next
			// merge with it): the store keeps those.
			commits := func(d *device) (ids []store.CommitID, heads []store.CommitID) {
				pg := d.page("l", "p1")
				defer d.repo.Release(pg)
				must(t, pg.CommitIDs(nil, func(id store.CommitID) error { ids = append(ids, id); return nil }))
				must(t, pg.BatchHeads(func(_ string, h store.BatchHead) error { heads = append(heads, h.Head); return nil }))
				return ids, heads
			}
			kept, heads := commits(a)
			pa := a.page("l", "p1")
			byTime := make([]*store.Commit, len(kept))
			for i, id := range kept {
				byTime[i], err = pa.Commit(id)
				must(t, err)
			}
			a.repo.Release(pa)
			slices.SortFunc(byTime, func(x, y *store.Commit) int { return cmp.Compare(y.Timestamp, x.Timestamp) })
			wantIDs := heads
			for _, c := range byTime[:2] {
				wantIDs = append(wantIDs, c.ID)
			}
			byID := func(x, y store.CommitID) int { return bytes.Compare(x[:], y[:]) }
			slices.SortFunc(wantIDs, byID)
			wantIDs = slices.Compact(wantIDs)
			got, _ := commits(c)
			slices.SortFunc(got, byID)
			slices.SortFunc(kept, byID)
			if !slices.Equal(got, wantIDs) || !slices.Equal(kept, wantIDs) {
				t.Fatalf("the joined device holds %d commits of l/p1, the collecting one %d; want the %d b's policy and the devices' batch heads keep", len(got), len(kept), len(wantIDs))
			}
			if ok, _ := c.repo.HasPage("l", "p2"); ok {
				t.Fatal("the deleted page came back on a device that joined after the collection")
			}
			if problems, err := Verify(context.Background(), c.repo, be, Options{}); err != nil || len(problems) > 0 {
				t.Fatalf("the joined device against the store: %v %v", problems, err)
			}

			// Everything deleted, everywhere: the store keeps little.
			for _, d := range []*device{a, b, c} {
				d.sync()
			}
			for _, pg := range []string{"p1", "p3"} {
				must(t, a.repo.DeletePage("l", pg))
			}
			a.sync()
			b.sync()
			c.sync()
			a.sync()
			a.collectStore(0)
			after := storeBytes(t, be)
			t.Logf("store: peak %d bytes, %d after everything was deleted and collected (%.2f %%)", peak, after, 100*float64(after)/float64(peak))
			if after*20 > peak {
				t.Fatalf("after everything was deleted the store holds %d of its peak %d bytes, over 5 %%", after, peak)
			}
		})
	}
}

// TestCollectGrace: a collection with a grace records unreached packs and
// deletes them only at a collection the grace later. A device offline
// throughout, which restores an old version of a file from pieces it still
// holds in a deleted pack, sends them again: a device that joins after
// reads the restored version.
func TestCollectGrace(t *testing.T) {
	be, err := remote.NewDir(t.TempDir())
	must(t, err)
	a, b := newDevice(t, "a", be), newDevice(t, "b", be)
	clock := time.Now()
	for _, d := range []*device{a, b} {
		d.s.now = func() time.Time { return clock }
		must(t, d.repo.SetRetention("", "", "keep-last=1"))
	}
	old, cur := random(1, 700<<10), random(2, 700<<10)
	a.write("l", "p", "f", old)
	a.sync()
	a.write("l", "p", "f", cur)
	a.sync()
	b.sync() // a goes offline: it holds old's pieces, synced
	before := packBytes(t, be)

	cs := b.collectStore(time.Hour)
	if cs.Recorded == 0 || cs.Deleted != 0 {
		t.Fatalf("a collection with a grace: %+v; want packs recorded and none deleted", cs)
	}
	if packBytes(t, be) != before {
		t.Fatal("packs went before their grace")
	}
	clock = clock.Add(59 * time.Minute)
	if cs := b.collectStore(time.Hour); cs.Deleted != 0 {
		t.Fatalf("a collection within the grace deleted %d packs", cs.Deleted)
	}
	clock = clock.Add(2 * time.Hour)
	cs = b.collectStore(time.Hour)
	if cs.Deleted == 0 || packBytes(t, be) >= before {
		t.Fatalf("a collection past the grace: %+v; want the recorded packs deleted", cs)
	}

	// a, offline throughout, restores the old version: its pieces are
	// held here, synced, in a pack that is gone.
	a.write("l", "p", "f", old)
	a.sync()
	c := newDevice(t, "c", be)
	c.sync()
	got, err := c.read("l", "p", "f")
	if err != nil || string(got) != string(old) {
		t.Fatalf("a device that joined reads the restored version: %v (%d bytes)", err, len(got))
	}
}

// TestCollectLock: one device collects at a time; a lock whose holder is
// gone (its process exited, or it stopped refreshing) is taken over, and
// its holder finds out before it deletes.
func TestCollectLock(t *testing.T) {
	be, err := remote.NewDir(t.TempDir())
	must(t, err)
	a, b := newDevice(t, "a", be), newDevice(t, "b", be)
	ctx := context.Background()
	clock := time.Now()
	b.s.now = func() time.Time { return clock }
	la, err := a.s.takeLock(ctx)
	must(t, err)
	if _, err := b.s.Collect(ctx, CollectOptions{}); !errors.Is(err, ErrLocked) || !strings.Contains(err.Error(), a.s.device) {
		t.Fatalf("a collection while another device holds the lock: %v; want ErrLocked naming it", err)
	}
	clock = clock.Add(lockExpiry + time.Minute)
	if _, err := b.s.Collect(ctx, CollectOptions{}); err != nil {
		t.Fatalf("a collection after the lock expired: %v", err)
	}
	if err := la.check(ctx); !errors.Is(err, ErrLocked) {
		t.Fatalf("the first holder's check after its lock was taken over: %v", err)
	}

	// A lock of a process of this host that exited is stale at once.
	cmd := exec.Command("true")
	must(t, cmd.Run())
	host, _ := os.Hostname()
	dead := lockInfo{Device: "gone", Host: host, PID: cmd.Process.Pid, Created: time.Now(), Refreshed: time.Now()}
	if !dead.stale(time.Now(), host) {
		t.Fatal("the lock of a process that exited is not stale")
	}
	if live := (lockInfo{Host: host, PID: os.Getpid(), Refreshed: time.Now()}); live.stale(time.Now(), host) {
		t.Fatal("the lock of a running process is stale")
	}
	if other := (lockInfo{Host: host + "-other", PID: cmd.Process.Pid, Refreshed: time.Now()}); other.stale(time.Now(), host) {
		t.Fatal("a fresh lock of another host is stale")
	}
}

// TestCollectRepack: after 90 % of a page's files are deleted, every pack
// still holds a file that stays, so none is unreached; the collection moves
// those files' pieces to new packs and the store ends within 10 % of the
// pieces reached. A device that read through the old packs, and one that
// joins after they are gone (whose first pull reads the batches naming
// them), read every file from the new packs; a device that holds the
// moved pieces sends none again. With a grace the old packs stay until a
// collection the grace later.
func TestCollectRepack(t *testing.T) {
	for kind, be := range stores(t) {
		t.Run(kind, func(t *testing.T) {
			a, b := newDevice(t, "a", be), newDevice(t, "b", be)
			clock := time.Now()
			for _, d := range []*device{a, b} {
				d.s.now = func() time.Time { return clock }
				must(t, d.repo.SetRetention("", "", "keep-last=1"))
			}
			const files = 40
			content := func(i int) []byte { return random(uint64(100+i), 24<<10) }
			for i := range files {
				a.write("l", "p", fmt.Sprint("f", i), content(i))
			}
			a.sync()
			b.sync()
			if got, err := b.read("l", "p", "f0"); err != nil || string(got) != string(content(0)) {
				t.Fatalf("b reads f0 before the collection: %v", err)
			}
			want := map[string]string{}
			for i := range files {
				key := fmt.Sprint("f", i)
				if i%10 == 0 {
					want[key] = string(content(i))
					continue
				}
				a.write("l", "p", key, nil)
			}
			a.sync()
			b.sync()
			b.collectHere() // b holds what is reached, no more
			before := packBytes(t, be)

			cs := a.collectStore(time.Hour)
			if cs.Repacked == 0 || cs.Deleted != 0 {
				t.Fatalf("a collection with a grace after 90 %% of the files went: %+v; want packs repacked, none deleted", cs)
			}
			if got := packBytes(t, be); got <= before {
				t.Fatalf("the packs a repack left went before their grace: %d bytes of packs, %d before", got, before)
			}
			// b reads the record before the repack's batch comes in its
			// pull (records are read every absorbEvery): what was moved
			// does not go up again from b.
			clock = clock.Add(absorbEvery + time.Minute)
			if st := b.sync(); st.PiecesUp != 0 {
				t.Fatalf("b sent %d pieces again after the repack; the repack moved every piece it holds", st.PiecesUp)
			}
			clock = clock.Add(2 * time.Hour)
			cs = a.collectStore(time.Hour)
			if cs.Deleted == 0 {
				t.Fatalf("a collection past the grace: %+v; want the repacked packs deleted", cs)
			}

			// The store holds what is reached, and little more.
			pa := a.page("l", "p")
			var live int64
			must(t, pa.Pieces(store.Synced, func(d cas.Digest) error {
				r, ok, err := a.s.pieceAt(d)
				if !ok && err == nil {
					err = fmt.Errorf("piece %s: no place in the store", d)
				}
				live += r.Len
				return err
			}))
			a.repo.Release(pa)
			after := packBytes(t, be)
			t.Logf("packs: %d bytes before, %d after; %d bytes of pieces reached (%.1f %%)", before, after, live, 100*float64(after)/float64(live))
			if after > live+live/10 {
				t.Fatalf("after the collection the packs hold %d bytes, over 110 %% of the %d reached", after, live)
			}

			// b read f0 from an old pack and reads the rest from the new.
			b.sync()
			if got := b.files("l", "p"); !maps.Equal(got, want) {
				t.Fatalf("b after the repack: %d files, want %d", len(got), len(want))
			}
			c := newDevice(t, "c", be)
			c.sync()
			if got := c.files("l", "p"); !maps.Equal(got, want) {
				t.Fatalf("a device that joined after the repack: %d files, want %d", len(got), len(want))
			}
			if problems, err := Verify(context.Background(), c.repo, be, Options{}); err != nil || len(problems) > 0 {
				t.Fatalf("the joined device against the store: %v %v", problems, err)
			}
		})
	}
}

// packCount is how many packs the store holds.
func packCount(t *testing.T, be remote.Backend) int {
	t.Helper()
	n := 0
	for _, o := range objects(t, be) {
		if strings.HasPrefix(o.Name, packsDir) {
			n++
		}
	}
	return n
}

// TestRepackSmallPacks: a history of pushes of a few changes each is a
// small pack each. Fewer than repackSmallAtLeast stay as they are; more
// are repacked by a collection into full packs, their pieces in the order
// its walk reached them, so that a new device's join, which walks the
// pages in that order, reads each new pack about once rather than a pack
// a push, and ends with every file.
func TestRepackSmallPacks(t *testing.T) {
	be, err := remote.NewDir(t.TempDir())
	must(t, err)
	a := newDevice(t, "a", be)
	const pages, rounds = 8, 24
	write := func(r int) {
		for p := range pages {
			a.write("l", fmt.Sprint("p", p), fmt.Sprint("f", r), random(uint64(r*pages+p), 6<<10))
		}
		a.sync()
	}
	write(0)
	before := packCount(t, be)
	if cs := a.collectStore(0); cs.Small != 0 || cs.Repacked != 0 || packCount(t, be) != before {
		t.Fatalf("a collection of %d small packs, fewer than %d: %+v, %d packs after; want none repacked", before, repackSmallAtLeast, cs, packCount(t, be))
	}
	for r := 1; r < rounds; r++ {
		write(r)
	}
	before = packCount(t, be)
	cs := a.collectStore(0)
	after := packCount(t, be)
	t.Logf("%d packs before the collection, %d after; %+v", before, after, cs)
	if cs.Small < repackSmallAtLeast || cs.Small != cs.Repacked {
		t.Fatalf("a collection of a history of %d small packs: %+v; want them repacked", before, cs)
	}
	// Two runs of packs, trees and values, each ending in one partly full.
	if full := int(cs.RepackedBytes/int64(a.s.packSize)) + 2; after > full {
		t.Fatalf("%d packs after the repack of %d bytes, want %d at most", after, cs.RepackedBytes, full)
	}

	reads := &counting{Backend: be}
	c := newDevice(t, "c", reads)
	c.sync()
	joined := reads.take()
	t.Logf("the join's requests: %v", joined)
	for p := range pages {
		if got, want := c.files("l", fmt.Sprint("p", p)), a.files("l", fmt.Sprint("p", p)); !maps.Equal(got, want) {
			t.Fatalf("page p%d on the device that joined: %d files, want %d", p, len(got), len(want))
		}
	}
	packReads := joined["range"]
	for _, n := range reads.packs {
		packReads += n
	}
	if packReads > after {
		t.Fatalf("the join read packs %d times, of the %d packs of the store; want each once at most", packReads, after)
	}
}

// TestRepackProperty: whatever files two devices write and delete, a
// collection with no grace leaves every pack of the store holding at
// least repackBelow of its bytes in pieces its kept commits reach (so the
// packs take at most 1/repackBelow of what is reached), and both devices,
// and one that joins after, read every file. The kept commits are the
// collecting device's: its head and the other device's last batch head,
// whose values it may never have fetched (reachedBytes counts them too).
//
// Each check makes three repositories: 15 checks unless -long or
// -rapid.checks says otherwise.
func TestRepackProperty(t *testing.T) {
	set := false
	flag.Visit(func(f *flag.Flag) { set = set || f.Name == "rapid.checks" })
	if !set && !*long {
		must(t, flag.Set("rapid.checks", "15"))
	}
	rapid.Check(t, func(rt *rapid.T) {
		be, err := remote.NewDir(t.TempDir())
		must(t, err)
		devs := []*device{newDevice(t, "a", be), newDevice(t, "b", be)}
		for _, d := range devs {
			must(t, d.repo.SetRetention("", "", "keep-last=1"))
		}
		want := map[string]string{}
		rounds := rapid.IntRange(1, 4).Draw(rt, "rounds")
		for r := range rounds {
			for i, d := range devs {
				for range rapid.IntRange(0, 12).Draw(rt, "writes") {
					key := fmt.Sprint("f", rapid.IntRange(0, 30).Draw(rt, "file"))
					if rapid.IntRange(0, 2).Draw(rt, "delete") == 0 {
						if _, ok := d.files("l", "p")[key]; ok {
							d.write("l", "p", key, nil)
						}
						continue
					}
					d.write("l", "p", key, random(uint64(r*1000+i*100+len(want)), rapid.IntRange(1, 40<<10).Draw(rt, "size")))
				}
				d.sync()
			}
		}
		for range 2 {
			for _, d := range devs {
				d.sync()
			}
		}
		want = devs[0].files("l", "p")
		devs[1].collectHere()
		devs[0].collectStore(0)
		live := reachedBytes(t, devs[0], be, "l", "p")
		if got := packBytes(t, be); float64(got) > float64(live)/repackBelow+1 {
			rt.Fatalf("after a collection the packs hold %d bytes, over 1/%.2f of the %d reached", got, repackBelow, live)
		}
		devs = append(devs, newDevice(t, "c", be))
		for _, d := range devs {
			d.sync()
			if got := d.files("l", "p"); !maps.Equal(got, want) {
				rt.Fatalf("%s after the collection: %d files, want %d: %v vs %v", d.name, len(got), len(want), slices.Sorted(maps.Keys(got)), slices.Sorted(maps.Keys(want)))
			}
		}
		for _, d := range devs {
			d.s.Close()
			must(t, d.repo.Close())
		}
	})
}

// TestMergeAcrossPrunedHistory: a merge whose common ancestor a collection
// pruned (from the store, or from the device merging) still merges on it,
// through the heads of the batches each device last landed or pushed:
// both sides' changes stand and no conflict file appears.
func TestMergeAcrossPrunedHistory(t *testing.T) {
	// pruning returns devices of one store that keep one version, the
	// clock of the last one set by *clock, after the first wrote f and g
	// and all of them synced.
	pruning := func(t *testing.T, clock *time.Time, ds ...*device) {
		ds[len(ds)-1].s.now = func() time.Time { return *clock }
		for _, d := range ds {
			must(t, d.repo.SetRetention("", "", "keep-last=1"))
		}
		ds[0].write("l", "p", "f", []byte("v1"))
		ds[0].write("l", "p", "g", []byte("w1"))
		for _, d := range ds {
			d.sync()
		}
	}
	// pair returns two such devices, a and b, and b's clock.
	pair := func(t *testing.T) (a, b *device, clock *time.Time) {
		be, err := remote.NewDir(t.TempDir())
		must(t, err)
		a, b = newDevice(t, "a", be), newDevice(t, "b", be)
		now := time.Now()
		pruning(t, &now, a, b)
		return a, b, &now
	}
	// rewrite has d write f three times, syncing each.
	rewrite := func(d *device) {
		for i := 2; i <= 4; i++ {
			d.write("l", "p", "f", fmt.Appendf(nil, "v%d", i))
			d.sync()
		}
	}
	// check fails unless d holds want and its last sync (st) made no
	// conflict file.
	check := func(t *testing.T, d *device, st Stats, want map[string]string) {
		t.Helper()
		if got := d.files("l", "p"); !maps.Equal(got, want) || st.Conflicts != 0 {
			t.Fatalf("%s after the merge: %v, %d conflicts; want %v and none", d.name, got, st.Conflicts, want)
		}
	}
	for _, grace := range []time.Duration{time.Hour, 0} {
		t.Run(fmt.Sprintf("store, grace %v", grace), func(t *testing.T) {
			// b was away while a collected the store: the commits
			// between what b last landed and a's head are gone from
			// it. With a grace, b reads the record when due; with
			// none, the packs are gone at once, and b, which read the
			// records a moment before, learns of it from the packs
			// missing.
			a, b, clock := pair(t)
			b.write("l", "p", "g", []byte("w2"))
			rewrite(a)
			a.collectStore(grace)
			if grace != 0 {
				*clock = clock.Add(absorbEvery)
			}
			want := map[string]string{"f": "v4", "g": "w2"}
			check(t, b, b.sync(), want)
			check(t, a, a.sync(), want)
		})
	}
	t.Run("own push", func(t *testing.T) {
		// a's batches say they applied b's: the base is b's head of
		// that push, not a's older one, and b's undoing of its own
		// change since stands.
		a, b, clock := pair(t)
		b.write("l", "p", "g", []byte("w2"))
		b.sync()
		a.sync()
		b.write("l", "p", "g", []byte("w1"))
		rewrite(a)
		a.collectStore(time.Hour)
		*clock = clock.Add(absorbEvery)
		check(t, b, b.sync(), map[string]string{"f": "v4", "g": "w1"})
	})
	t.Run("joined", func(t *testing.T) {
		// c joins after x collected: y's head, which y built on x's
		// and whose parents are gone, lands before x's kept head (y's
		// log is read first), which is its ancestor: that lands
		// without a merge, which, with no base, made a conflict file of
		// the version y replaced.
		be, err := remote.NewDir(t.TempDir())
		must(t, err)
		withID := func(name, id string) *device {
			d, err := openDeviceWith(t, name, be, Options{Secret: testSecret}, func(r *store.Repository) { must(t, r.SetDeviceID(id)) })
			must(t, err)
			return d
		}
		x, y := withID("x", strings.Repeat("f", 32)), withID("y", strings.Repeat("0", 32))
		clock := time.Now()
		pruning(t, &clock, x, y)
		x.write("l", "p", "f", []byte("v2"))
		x.sync()
		y.sync()
		y.write("l", "p", "f", []byte("v3"))
		y.write("l", "p", "g", []byte("w2"))
		y.sync()
		x.sync()
		want := x.files("l", "p")
		x.collectStore(time.Hour)
		c := newDevice(t, "c", be)
		check(t, c, c.sync(), want)
	})
	t.Run("here", func(t *testing.T) {
		// b's change builds on a's head of a's last push, which a's
		// policy would prune before b's batch lands.
		a, b, _ := pair(t)
		b.write("l", "p", "g", []byte("w2"))
		b.sync()
		a.write("l", "p", "f", []byte("v2"))
		a.write("l", "p", "f", []byte("v3"))
		a.collectHere()
		check(t, a, a.sync(), map[string]string{"f": "v3", "g": "w2"})
	})
	t.Run("older push", func(t *testing.T) {
		// b's change builds on a's head of a push before a's last one,
		// and a's policy pruned what lies between: a keeps the batch
		// head b built on until b says it applied a later one (the
		// simulation's seed 117 of -sim.pages -sim.ledgers
		// -sim.collect=keep-last=2).
		a, b, _ := pair(t)
		// b's batches say what it applied of a's.
		b.write("l", "q", "h", []byte("b's"))
		b.sync()
		a.sync()
		first := a.head("l", "p")
		b.write("l", "p", "g", []byte("w2"))
		a.write("l", "p", "f", []byte("v2"))
		a.sync()
		a.write("l", "p", "f", []byte("v3"))
		a.collectHere()
		must(t, b.s.Push(context.Background(), &Stats{}))
		want := map[string]string{"f": "v3", "g": "w2"}
		check(t, a, a.sync(), want)
		// Once b's batches say they applied a's later ones, the row of
		// the first goes, and with it what kept its commit.
		for range 2 {
			b.sync()
			a.sync()
		}
		check(t, b, b.sync(), want)
		pg := a.page("l", "p")
		defer a.repo.Release(pg)
		must(t, pg.BatchHeads(func(dev string, h store.BatchHead) error {
			if h.Head == first {
				t.Errorf("a still keeps the batch head of %s's first push, which b applied past", dev)
			}
			return nil
		}))
	})
}

// failNth is a Backend whose read of a pack fails once, when n reads
// remain to it.
type failNth struct {
	remote.Backend
	n atomic.Int64
}

func (f *failNth) GetRange(ctx context.Context, name string, off, n int64) ([]byte, error) {
	if strings.HasPrefix(name, packsDir) && f.n.Add(-1) == 0 {
		return nil, fmt.Errorf("a read of %s cut short", name)
	}
	return f.Backend.GetRange(ctx, name, off, n)
}

// TestRepackReadCutShort: a read failing midway through a repack, with
// reads ahead of the copy under way, fails the collection, leaves no read
// running, and deletes nothing; the next collection repacks, and a device
// that joins after reads every file.
func TestRepackReadCutShort(t *testing.T) {
	dir, err := remote.NewDir(t.TempDir())
	must(t, err)
	fail := &failNth{Backend: dir}
	a := newDevice(t, "a", fail)
	for r := range 3 * repackSmallAtLeast {
		a.write("l", "p", fmt.Sprint("f", r), random(uint64(r), 4<<10))
		a.sync()
	}
	want := a.files("l", "p")
	before := packCount(t, dir)
	a.collectHere()
	fail.n.Store(repackSmallAtLeast)
	running := goleak.IgnoreCurrent()
	if _, err := a.s.Collect(context.Background(), CollectOptions{}); err == nil || !strings.Contains(err.Error(), "cut short") {
		t.Fatalf("a collection whose repack failed a read: %v", err)
	}
	goleak.VerifyNone(t, running)
	if after := packCount(t, dir); after < before {
		t.Fatalf("a failed repack left %d packs of %d", after, before)
	}
	if cs := a.collectStore(0); cs.Small < repackSmallAtLeast {
		t.Fatalf("the collection after: %+v; want the small packs repacked", cs)
	}
	c := newDevice(t, "c", dir)
	c.sync()
	if got := c.files("l", "p"); !maps.Equal(got, want) {
		t.Fatalf("a device that joined after: %d files, want %d", len(got), len(want))
	}
}

// TestRepackOfARepack: one collection repacks small packs into a pack
// small enough for the next, by another device, to repack again. A device
// away meanwhile reads both repacks' batches in one pull, the later one
// first (its device's log comes first), and finds each piece where the
// later repack put it, not in the pack it deleted.
func TestRepackOfARepack(t *testing.T) {
	be, err := remote.NewDir(t.TempDir())
	must(t, err)
	a, b, c := newDevice(t, "a", be), newDevice(t, "b", be), newDevice(t, "c", be)
	a.write("l", "p", "first", []byte("before b goes away"))
	a.sync()
	b.sync()
	c.sync()
	// The second collector's log is read first: devices' logs are read
	// in the order of their names.
	first, second := a, c
	if first.s.Device() < second.s.Device() {
		first, second = second, first
	}
	n := 0
	smalls := func(d *device) {
		for range repackSmallAtLeast {
			d.write("l", "p", fmt.Sprint("f", n), random(uint64(n), 2<<10))
			d.sync()
			n++
		}
	}
	smalls(first)
	if cs := first.collectStore(0); cs.Small < repackSmallAtLeast {
		t.Fatalf("%s's collection: %+v; want the small packs repacked", first.name, cs)
	}
	first.sync() // which announces the repack's batch, as a mount's next round does
	second.sync()
	smalls(second)
	if cs := second.collectStore(0); cs.Small <= repackSmallAtLeast {
		t.Fatalf("%s's collection: %+v; want its small packs and the last repack's repacked", second.name, cs)
	}
	second.sync()
	b.sync()
	if got, want := b.files("l", "p"), second.files("l", "p"); !maps.Equal(got, want) {
		t.Fatalf("b after both repacks: %d files, want %d", len(got), len(want))
	}
}
