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

// A commit from a copy under way drops its file's intents when it lands:
// Crowded sets them apart, so that they hurry no other file's commit, and
// judges the others against the room they leave.
func TestCrowdedSetsApartIntentsUnderCommit(t *testing.T) {
	d := testPage(t).Durability()
	logIntent := func(key string, n int) Intent {
		t.Helper()
		src := &LogSource{Extents: []Extent{{Off: 0, Data: make([]byte, n)}}}
		mark, _, err := d.LogIntent(key, nil, uint64(n), src, false)
		if err != nil || mark.IsZero() {
			t.Fatalf("intent of %s, %d bytes: %v (logged: %v)", key, n, err, !mark.IsZero())
		}
		return mark
	}
	db := logIntent("db", 900<<10) // a database's checkpoint, its commit under way
	logIntent("wal", 200<<10)
	if !d.Crowded(nil) {
		t.Fatal("1.1 MiB of intents, more than half of the 2 MiB they may take: not crowded")
	}
	pending := map[string]Intent{"db": db}
	if d.Crowded(pending) {
		t.Fatal("200 KiB beside a commit under way of 900 KiB: crowded")
	}
	if !d.Crowded(map[string]Intent{"db": {}}) {
		t.Fatal("a pending commit through no intent of the key set its intents apart")
	}
	logIntent("wal", 400<<10) // the WAL's chain, anew: 400 KiB of the 1.1 MiB left
	if d.Crowded(pending) {
		t.Fatal("400 KiB of the 1.1 MiB a commit under way leaves: crowded")
	}
	logIntent("other", 200<<10) // 600 KiB, over half of the room left
	if !d.Crowded(pending) {
		t.Fatal("600 KiB of the 1.1 MiB a commit under way leaves: not crowded")
	}
}
