package cloudsync

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

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
			// a keeps the last commit, b the last two: the store keeps two.
			pc := c.page("l", "p1")
			n := 0
			must(t, pc.CommitIDs(nil, func(store.CommitID) error { n++; return nil }))
			c.repo.Release(pc)
			if n != 2 {
				t.Fatalf("the joined device holds %d commits of l/p1; want the 2 b's policy keeps", n)
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
