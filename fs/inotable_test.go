package fs

import (
	"fmt"
	"runtime"
	"testing"
)

// TestInoTableShrinks: once the kernel forgets most inodes of a large
// directory, the table gives their memory back, and keeps the numbers of
// the inodes still known.
func TestInoTableShrinks(t *testing.T) {
	heap := func() uint64 {
		runtime.GC()
		var m runtime.MemStats
		runtime.ReadMemStats(&m)
		return m.HeapAlloc
	}
	key := func(i int) string { return fmt.Sprintf("/ledger/page/dir/file%07d", i) }
	const n, kept = 200_000, 10
	base := heap()
	tab := newInoTable()
	inos := make([]uint64, n)
	for i := range n {
		inos[i] = tab.get(key(i))
	}
	full := heap()
	for _, ino := range inos[kept:] {
		tab.forget(ino)
	}
	after := heap()
	t.Logf("table of %d: %d KiB; after forgetting all but %d: %d KiB", n, (full-base)>>10, kept, (after-base)>>10)
	// What stays is the slice of numbers (8 bytes each) and a small table.
	if limit := base + n*8 + 1<<20; after > limit {
		t.Fatalf("heap %d KiB above the start after forgetting, want at most %d KiB", (after-base)>>10, (limit-base)>>10)
	}
	for i := range kept {
		if got := tab.get(key(i)); got != inos[i] {
			t.Fatalf("%s: ino %d after shrinking, was %d", key(i), got, inos[i])
		}
		if got := tab.peek(key(i)); got != inos[i] {
			t.Fatalf("%s: peek %d, want %d", key(i), got, inos[i])
		}
	}
	runtime.KeepAlive(inos)
}
