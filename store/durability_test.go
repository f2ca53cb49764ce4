package store

import (
	"testing"
	"time"
)

// Has and Empty answer while a checkpoint holds the log across its sync of
// the db: renames, closes and every queued change ask whether a key has
// records, and waited a millisecond and more behind each checkpoint.
func TestHasDuringCheckpoint(t *testing.T) {
	d := testPage(t).Durability()
	d.mu.Lock() // as checkpoint holds it
	d.setResult("k", "r")
	type answer struct{ k, other, empty bool }
	got := make(chan answer, 1)
	go func() { got <- answer{d.Has("k"), d.Has("other"), d.Empty()} }()
	select {
	case a := <-got:
		d.mu.Unlock()
		if !a.k || a.other || a.empty {
			t.Errorf("Has(k) %v, Has(other) %v, Empty %v; want true, false, false", a.k, a.other, a.empty)
		}
	case <-time.After(10 * time.Second): // a failure's bound, not a wait for an event
		d.mu.Unlock()
		t.Fatal("Has waited for the checkpoint's lock")
	}
}
