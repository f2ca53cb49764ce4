package cloudsync

import (
	"encoding/base64"
	"errors"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"testing"

	"github.com/ledgerfs/ledgerfs/internal/check"
	"github.com/ledgerfs/ledgerfs/internal/gc"
	"github.com/ledgerfs/ledgerfs/internal/remote"
	"github.com/ledgerfs/ledgerfs/store"
)

// pageDir is where a page's db lies (DESIGN.md, "Repository layout").
func pageDir(repo, ledger, page string) string {
	return filepath.Join(repo, "1", "ledgers", base64.URLEncoding.EncodeToString([]byte(ledger)), store.PageIDFor(page).String())
}

// TestEvictPage: a closed page whose every change is synced leaves the
// device (its db removed, its name kept) and comes back when opened, its
// files the same; after it came back it pulls and pushes as before, and a
// collection and a check of it fetch nothing. A page with a change not
// synced, a pinned page and a page in use stay. An eviction cut short
// after its row was written (the db partly removed) finishes at the next
// open.
func TestEvictPage(t *testing.T) {
	dir, err := remote.NewDir(t.TempDir())
	must(t, err)
	be := &counting{Backend: dir}
	a := newDevice(t, "a", be)
	for i := range 40 {
		a.write("l", "p", "docs/"+string(rune('a'+i%26))+string(rune('0'+i/26)), random(uint64(i), 5000+i*100))
	}
	a.write("l", "p", "big.bin", random(99, 2<<20))
	a.write("l", "q", "f", []byte("q's"))
	a.write("l", "r", "f", []byte("r's"))
	a.sync()
	b := newDevice(t, "b", be)
	b.sync()
	want := a.files("l", "p")
	if !maps.Equal(b.files("l", "p"), want) {
		t.Fatal("b before eviction: not a's files")
	}
	bdir := b.repo.Dir()
	b.s.Settle() // the fetched pieces stored: the page is no longer in use
	before := b.repo.DiskUsage()
	freed, err := b.repo.Evict("l", "p")
	must(t, err)
	if _, err := os.Stat(pageDir(bdir, "l", "p")); !errors.Is(err, os.ErrNotExist) || freed <= 0 || b.repo.DiskUsage() >= before {
		t.Fatalf("after eviction: db dir %v, %d bytes freed, repository %d → %d bytes", err, freed, before, b.repo.DiskUsage())
	}
	if ev, err := b.repo.Evicted("l", "p"); err != nil || !ev {
		t.Fatalf("Evicted: %v, %v", ev, err)
	}
	if pages, err := b.repo.Pages("l"); err != nil || !slices.Contains(pages, "p") {
		t.Fatalf("an evicted page's name: %v, %v", pages, err)
	}

	// What may not go.
	b.write("l", "q", "g", []byte("not synced"))
	if _, err := b.repo.Evict("l", "q"); !errors.Is(err, store.ErrNotEvictable) {
		t.Fatalf("evict a page with a change not synced: %v", err)
	}
	pr := b.page("l", "r")
	must(t, pr.SetLocal("", true))
	b.repo.Release(pr)
	if _, err := b.repo.Evict("l", "r"); !errors.Is(err, store.ErrNotEvictable) {
		t.Fatalf("evict a pinned page: %v", err)
	}
	// The pin follows a rename, and goes with a delete.
	must(t, b.repo.RenamePage("l", "r", "r2"))
	pr = b.page("l", "r2")
	if kept, err := pr.LocalPrefixes(); err != nil || len(kept) != 1 {
		t.Fatalf("a pinned page renamed keeps %q (%v)", kept, err)
	}
	b.repo.Release(pr)
	must(t, b.repo.RenamePage("l", "r2", "r"))
	pr = b.page("l", "r")
	must(t, pr.SetLocal("", false))
	if _, err := b.repo.Evict("l", "r"); !errors.Is(err, store.ErrBusy) {
		t.Fatalf("evict a page in use: %v", err)
	}
	b.repo.Release(pr)

	// It comes back, as it was.
	be.take()
	if got := b.files("l", "p"); !maps.Equal(got, want) {
		t.Fatal("the evicted page came back with other files")
	}
	b.s.Settle() // the fetches the reads started ahead are counted here
	if reqs := be.take(); reqs["range"] == 0 {
		t.Fatalf("the page came back without fetching: %v", reqs)
	}
	pg := b.page("l", "p")
	rep, err := check.Page(pg, nil)
	b.repo.Release(pg)
	must(t, err)
	if _, err := gc.CollectPage(b.repo, "l", "p", gc.PageOptions{Wait: true}); err != nil || !rep.OK() {
		t.Fatalf("check (%+v) and collection (%v) of a page that came back", rep, err)
	}
	if reqs := be.take(); len(reqs) != 0 {
		t.Fatalf("check and collection of a page that came back made requests %v", reqs)
	}
	a.write("l", "p", "docs/new", []byte("a's, after b evicted"))
	a.sync()
	b.sync()
	b.write("l", "p", "docs/b", []byte("b's, after it came back"))
	b.sync()
	a.sync()
	if got, want := b.files("l", "p"), a.files("l", "p"); !maps.Equal(got, want) || want["docs/b"] == "" {
		t.Fatal("after the page came back, a's and b's changes do not meet")
	}

	// Cut short: the row written, the db partly removed.
	b.s.Close()
	_, err = b.repo.Evict("l", "p")
	must(t, err)
	must(t, os.MkdirAll(pageDir(bdir, "l", "p"), 0o755))
	must(t, os.WriteFile(filepath.Join(pageDir(bdir, "l", "p"), "000001.vlog"), []byte("left by a crash"), 0o644))
	must(t, b.repo.Close())
	b.repo, err = store.Open(bdir, b.eng.Hooks(store.Options{}))
	must(t, err)
	t.Cleanup(func() { b.repo.Close() })
	b.s, err = New(t.Context(), b.repo, be, Options{})
	must(t, err)
	t.Cleanup(b.s.Close)
	if got := b.files("l", "p"); !maps.Equal(got, a.files("l", "p")) {
		t.Fatal("after an eviction cut short, the page came back with other files")
	}

	// EvictOver: least recently closed first, down to the budget.
	b.s.Settle()
	n, _, over, err := gc.EvictOver(b.repo, 1, nil)
	must(t, err)
	if n == 0 || !over {
		t.Fatalf("EvictOver with a budget of 1 byte evicted %d pages, over %v", n, over)
	}
	if n, _, over, err := gc.EvictOver(b.repo, uint64(b.repo.DiskUsage())+1, nil); err != nil || n != 0 || over {
		t.Fatalf("EvictOver under budget: %d, %v, %v", n, over, err)
	}
	// Evicted pages stay pages across a reopen (which drops pages whose db
	// is gone otherwise).
	b.s.Close()
	must(t, b.repo.Close())
	b.repo, err = store.Open(bdir, b.eng.Hooks(store.Options{}))
	must(t, err)
	b.s, err = New(t.Context(), b.repo, be, Options{})
	must(t, err)
	t.Cleanup(b.s.Close)
	if got := b.files("l", "r"); got["f"] != "r's" {
		t.Fatalf("an evicted page after a reopen: %v", got)
	}
}
