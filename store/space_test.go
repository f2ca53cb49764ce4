package store

import (
	"errors"
	"strings"
	"syscall"
	"testing"

	"golang.org/x/sys/unix"
)

// freeBytes is what statfs says is free where dir lives.
func freeBytes(t *testing.T, dir string) uint64 {
	t.Helper()
	var st unix.Statfs_t
	if err := unix.Statfs(dir, &st); err != nil {
		t.Fatal(err)
	}
	return st.Bavail * uint64(st.Bsize)
}

// The reserves are set against the real free space of the test's directory,
// with margins wide enough for whatever else writes to that filesystem.
func TestSpaceKeepsTheReserve(t *testing.T) {
	dir := t.TempDir()
	free := freeBytes(t, dir)
	if free < 64<<20 {
		t.Fatalf("%d bytes free in %s: too little to test with", free, dir)
	}

	// A reserve above what is free refuses every change, with ENOSPC.
	s := &space{dir: dir, reserve: 4 * free}
	for _, bulk := range []bool{true, false} {
		err := s.claim(0, bulk)
		if !errors.Is(err, syscall.ENOSPC) {
			t.Fatalf("claim(bulk=%v) with reserve 4 x free: %v, want ENOSPC", bulk, err)
		}
		if !strings.Contains(err.Error(), dir) {
			t.Errorf("error does not name the directory: %v", err)
		}
	}

	// Between the two thresholds: new content is refused, other changes
	// (which must leave only half the reserve) pass.
	s = &space{dir: dir, reserve: free + free/2}
	if err := s.claim(1, true); !errors.Is(err, syscall.ENOSPC) {
		t.Fatalf("bulk claim with 1.5 x free reserved: %v, want ENOSPC", err)
	}
	if err := s.claim(0, false); err != nil {
		t.Fatalf("small change with 1.5 x free reserved (half of it kept): %v", err)
	}

	// Content is taken while it leaves the reserve.
	s = &space{dir: dir, reserve: free / 4}
	if err := s.claim(free/4, true); err != nil {
		t.Fatalf("claim of a quarter with a quarter reserved: %v", err)
	}
	if err := s.claim(free, true); !errors.Is(err, syscall.ENOSPC) {
		t.Fatalf("claim of all that is free: %v, want ENOSPC", err)
	}

	// A read-only repository has no space to keep.
	var none *space
	if err := none.claim(1<<62, true); err != nil {
		t.Fatalf("nil space: %v", err)
	}
}

// A refusal checks again first: space freed since the last statfs is
// seen at once, not after spaceRefresh.
func TestSpaceSeesFreedSpaceAtOnce(t *testing.T) {
	dir := t.TempDir()
	free := freeBytes(t, dir)
	s := &space{dir: dir, reserve: free / 4}
	if err := s.claim(0, true); err != nil {
		t.Fatal(err)
	}
	// As if the statfs had been taken when the disk was nearly full.
	s.free = free / 8
	if err := s.claim(free/4, true); err != nil {
		t.Fatalf("claim after space was freed: %v", err)
	}
}
