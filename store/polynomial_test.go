package store

import (
	"errors"
	"testing"

	"github.com/restic/chunker"
)

// TestAdoptPolynomialKeepsPagesChunking: a repository that takes another
// polynomial keeps each page it had on its own, across a reopen, a rename
// and a move to another ledger; a page made after takes the new one; a
// deleted page's row goes with it; SetPagePolynomial refuses a page in
// use.
func TestAdoptPolynomialKeepsPagesChunking(t *testing.T) {
	dir := t.TempDir()
	r := openRepo(t, dir, Options{})
	must := fatalOn(t)
	pol := func(r *Repository, l, p string) chunker.Pol {
		t.Helper()
		pg, err := r.Acquire(l, p)
		must(err)
		defer r.Release(pg)
		return pg.Polynomial()
	}
	must(r.CreateLedger("l"))
	must(r.CreateLedger("m"))
	for _, p := range []string{"a", "b", "c"} {
		must(r.CreatePage("l", p))
	}
	old := r.Polynomial()
	pol(r, "l", "a") // open while the polynomial changes
	next, err := chunker.RandomPolynomial()
	must(err)
	kept, err := r.AdoptPolynomial(next)
	must(err)
	if kept != 3 || r.Polynomial() != next {
		t.Fatalf("adopt: %d pages kept theirs, the repository's is %v; want 3 and %v", kept, r.Polynomial(), next)
	}
	must(r.CreatePage("l", "new"))
	must(r.RenamePage("l", "b", "b2"))
	must(r.MovePage("l", "c", "m", "c"))
	must(r.DeletePage("l", "a"))
	must(r.CreatePage("l", "a"))
	must(r.Close())

	r = openRepo(t, dir, Options{})
	defer r.Close()
	for _, c := range []struct {
		l, p string
		want chunker.Pol
	}{{"l", "b2", old}, {"m", "c", old}, {"l", "new", next}, {"l", "a", next}} {
		if got := pol(r, c.l, c.p); got != c.want {
			t.Errorf("%s/%s chunks with %v, want %v", c.l, c.p, got, c.want)
		}
	}
	if kept, err := r.AdoptPolynomial(next); err != nil || kept != 0 {
		t.Fatalf("adopting the same polynomial again: %d, %v", kept, err)
	}

	must(r.SetPagePolynomial("l", "new", old))
	if got := pol(r, "l", "new"); got != old {
		t.Fatalf("a fresh page set to chunk with %v chunks with %v", old, got)
	}
	pg, err := r.Acquire("l", "new")
	must(err)
	if err := r.SetPagePolynomial("l", "new", next); !errors.Is(err, ErrBusy) {
		t.Fatalf("set on a page in use: %v, want ErrBusy", err)
	}
	r.Release(pg)
	must(r.SetPagePolynomial("l", "new", next))
	if got := pol(r, "l", "new"); got != next {
		t.Fatalf("a page set back to the repository's chunks with %v", got)
	}
}
