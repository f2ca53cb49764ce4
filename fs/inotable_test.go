package fs

import (
	"fmt"
	"runtime"
	"testing"

	"github.com/ledgerfs/ledgerfs/internal/testutil"
)

// TestInoTableShrinks: once the kernel forgets most inodes of a large
// directory, the table gives their memory back, and keeps the numbers of
// the inodes still known.
func TestInoTableShrinks(t *testing.T) {
	key := func(i int) string { return fmt.Sprintf("/ledger/page/dir/file%07d", i) }
	const n, kept = 200_000, 10
	base := testutil.LiveHeap()
	tab := newInoTable()
	inos := make([]uint64, n)
	for i := range n {
		inos[i] = tab.get(key(i))
	}
	full := testutil.LiveHeap()
	for _, ino := range inos[kept:] {
		tab.forget(ino)
	}
	after := testutil.LiveHeap()
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

// An inode unlinked or replaced while the kernel still holds it keeps its
// number until forgotten; a new file at its key gets another, and keeps it
// when the old inode is forgotten.
func TestInoTableReleaseAndReplace(t *testing.T) {
	tab := newInoTable()
	old := tab.get("k")
	tab.release("k")
	fresh := tab.get("k")
	if fresh == old {
		t.Fatalf("new file at a released key got the live inode's number %d", old)
	}
	tab.forget(old)
	if got := tab.get("k"); got != fresh {
		t.Fatalf("forgetting the unlinked inode moved the new file's number %d to %d", fresh, got)
	}

	// A rename over "k": the replaced number stays taken until forgotten.
	src := tab.get("tmp")
	tab.move("tmp", "k", false)
	if got := tab.get("k"); got != src {
		t.Fatalf("renamed file's number %d, want %d", got, src)
	}
	if id, taken := tab.byIno[fresh]; !taken {
		t.Fatalf("replaced inode's number %d freed while the kernel holds it (id %q)", fresh, id)
	}
	tab.forget(fresh)
	if _, taken := tab.byIno[fresh]; taken {
		t.Fatalf("replaced inode's number %d still taken after forget", fresh)
	}
	if got := tab.get("k"); got != src {
		t.Fatalf("forgetting the replaced inode moved the renamed file's number %d to %d", src, got)
	}
}
