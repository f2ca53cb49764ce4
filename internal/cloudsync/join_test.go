package cloudsync

import (
	"context"
	"encoding/json"
	"maps"
	"strings"
	"testing"

	"github.com/restic/chunker"

	"github.com/ledgerfs/ledgerfs/internal/remote"
	"github.com/ledgerfs/ledgerfs/journal"
	"github.com/ledgerfs/ledgerfs/store"
)

// TestLateJoinerKeepsItsChunking: a repository that wrote pages before it
// reached a store of another polynomial joins it. Its pages keep their
// chunking, go up with it named (the store's layout raised first), and are
// chunked alike on the device that pulls them: the same content written
// on both makes one value, not a conflict file. A page made on both
// before the join, and pages made after it, chunk with the store's
// polynomial.
func TestLateJoinerKeepsItsChunking(t *testing.T) {
	for kind, be := range stores(t) {
		t.Run(kind, func(t *testing.T) {
			a := newDevice(t, "a", be)
			a.write("l", "p", "a.txt", []byte("from a"))
			a.sync()

			// c wrote before it joined: its repository chose its own
			// polynomial.
			c := unconnected(t, "c")
			repo := c.repo
			own := repo.Polynomial()
			if own == a.repo.Polynomial() {
				t.Fatal("two repositories chose one polynomial")
			}
			big := random(7, 3<<20)
			c.write("m", "q", "big.bin", big)
			c.write("l", "p", "c.txt", []byte("from c"))
			var err error
			if c.s, err = New(context.Background(), repo, be, Options{Secret: testSecret}); err != nil {
				t.Fatalf("a repository that wrote before it joined: %v", err)
			}
			t.Cleanup(c.s.Close)
			c.s.packSize = 256 << 10

			if repo.Polynomial() != a.repo.Polynomial() {
				t.Fatal("the joining repository did not take the store's polynomial for new pages")
			}
			if pol := c.polynomial("m", "q"); pol != own {
				t.Fatalf("a page made before the join chunks with %v, not its own %v", pol, own)
			}
			c.write("n", "r", "new.txt", []byte("made after the join"))
			if pol := c.polynomial("n", "r"); pol != a.repo.Polynomial() {
				t.Fatalf("a page made after the join chunks with %v, not the store's", pol)
			}

			c.sync()
			if v := layout(t, be); v < remote.VersionOwnPolynomials {
				t.Fatalf("the store's layout after a batch naming a page's own polynomial: %d", v)
			}
			a.sync()
			c.sync()
			for _, lp := range [][2]string{{"m", "q"}, {"l", "p"}, {"n", "r"}} {
				if a.head(lp[0], lp[1]) != c.head(lp[0], lp[1]) || !maps.Equal(a.files(lp[0], lp[1]), c.files(lp[0], lp[1])) {
					t.Fatalf("%s/%s differs after the sync: a %v, c %v", lp[0], lp[1], a.files(lp[0], lp[1]), c.files(lp[0], lp[1]))
				}
			}
			if pol := a.polynomial("m", "q"); pol != own {
				t.Fatalf("the pulled page chunks with %v on a, not as on c (%v)", pol, own)
			}
			// l/p was made on both: a wrote it with the store's
			// polynomial, which c takes for it too.
			if pa, pc := a.polynomial("l", "p"), c.polynomial("l", "p"); pa != a.repo.Polynomial() || pc != pa {
				t.Fatalf("a page made on both before c joined chunks with %v on a and %v on c, want the store's %v on both", pa, pc, a.repo.Polynomial())
			}

			// The same content on both, apart: one value, no conflict.
			same := random(8, 1<<20)
			a.write("m", "q", "same.bin", same)
			c.write("m", "q", "same.bin", same)
			a.sync()
			c.sync()
			a.sync()
			for name := range c.files("m", "q") {
				if strings.Contains(name, "sync-conflict") {
					t.Fatalf("a conflict file for content written alike on both: %s", name)
				}
			}
			if a.head("m", "q") != c.head("m", "q") {
				t.Fatal("the page's heads differ after the same write on both")
			}
		})
	}
}

// unconnected makes a device whose repository is not connected to a store
// yet (its Syncer nil).
func unconnected(t *testing.T, name string) *device {
	t.Helper()
	eng := journal.NewEngine()
	repo, err := store.Open(t.TempDir(), eng.Hooks(store.Options{}))
	must(t, err)
	t.Cleanup(func() { repo.Close() })
	return &device{t: t, name: name, repo: repo, eng: eng}
}

// polynomial is the chunker polynomial of the device's page.
func (d *device) polynomial(l, p string) chunker.Pol {
	d.t.Helper()
	pg := d.page(l, p)
	defer d.repo.Release(pg)
	return pg.Polynomial()
}

// layout reads the version of the store's configuration.
func layout(t *testing.T, be remote.Backend) int {
	t.Helper()
	body, err := be.Get(context.Background(), remote.ConfigName)
	must(t, err)
	var cfg remote.Config
	must(t, json.Unmarshal(body, &cfg))
	return cfg.Version
}

// TestFirstBatchRaisesTheLayout: a store is made at the first layout of
// its kind and raised to the one whose batches carry pages' incarnations
// before a device's first batch, so that a device of an older layout
// refuses it rather than land those batches by name alone.
func TestFirstBatchRaisesTheLayout(t *testing.T) {
	st := newSimStore(1)
	a := newDevice(t, "a", st)
	if v := layout(t, st); v >= remote.VersionIncarnations {
		t.Fatalf("a new store at layout %d before any batch", v)
	}
	a.write("l", "p", "f", []byte("x"))
	a.sync()
	if v := layout(t, st); v != remote.VersionIncarnations {
		t.Fatalf("the store's layout after the first batch: %d, want %d", v, remote.VersionIncarnations)
	}
}
