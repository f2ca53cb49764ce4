package gc_test

import (
	"strings"
	"testing"

	"github.com/ledgerfs/ledgerfs/internal/gc"
)

// The background loop lists the due pages, then waits for the collection
// running: when that was an explicit request for one of them, the page is
// no longer due and the background leaves it alone.
func TestBackgroundSkipsAPageCollectedMeanwhile(t *testing.T) {
	runs := 0
	c := &gc.Collector{Repo: newRepo(t), Observe: func(gc.Result, error) { runs++ }}
	if err := c.Request("l", "p"); err != nil {
		t.Fatal(err)
	}
	// What the background's list holds.
	if st := string(c.Status()); !strings.Contains(st, "l/p: due\n") {
		t.Fatalf("a requested page is not due: %q", st)
	}
	if err := c.Now("l", "p"); err != nil {
		t.Fatal(err)
	}
	if runs != 1 {
		t.Fatalf("an explicit collection ran %d times", runs)
	}
	if err := c.CollectInBackground("l", "p"); err != nil {
		t.Fatal(err)
	}
	if runs != 1 {
		t.Fatalf("the background collected a page an explicit request had just collected (%d collections)", runs)
	}
	if st := string(c.Status()); st == "" {
		t.Fatal(".collect is empty after a collection")
	}
}
