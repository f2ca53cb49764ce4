package shrink

import (
	"maps"
	"runtime"
	"testing"

	"github.com/ledgerfs/ledgerfs/internal/testutil"
)

// A map rebuilt when Due says so gives its memory back; the map itself
// would not.
func TestDueGivesMemoryBack(t *testing.T) {
	const n = 100_000
	for _, rebuild := range []bool{false, true} {
		base := testutil.LiveHeap()
		var p Peak
		m := map[int]string{}
		for i := range n {
			m[i] = "x"
		}
		p.Grew(len(m))
		full := testutil.LiveHeap() - base
		for i := range n - 10 {
			delete(m, i)
			if p.Due(len(m)) && rebuild {
				m = maps.Collect(maps.All(m))
			}
		}
		left := testutil.LiveHeap() - base
		runtime.KeepAlive(m)
		if rebuild && left > full/10 {
			t.Errorf("rebuilt when due: %d of the full map's %d bytes still held", left, full)
		}
		if !rebuild && left < full/2 {
			t.Errorf("never rebuilt: %d of %d bytes held; the test no longer shows what it guards against", left, full)
		}
	}
}

// Due holds off below From and until three quarters of the peak are gone,
// and counts from the rebuilt size after.
func TestDue(t *testing.T) {
	var p Peak
	p.Grew(From - 1)
	if p.Due(0) {
		t.Fatal("due below From")
	}
	p.Grew(From * 4)
	if p.Due(From) {
		t.Fatal("due at a quarter of the peak")
	}
	if !p.Due(From - 1) {
		t.Fatal("not due under a quarter of the peak")
	}
	if p.Due(0) {
		t.Fatal("due again before the map grew back to From")
	}
}
