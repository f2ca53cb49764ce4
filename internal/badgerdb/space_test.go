package badgerdb

import (
	"errors"
	"strings"
	"syscall"
	"testing"
	"time"

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

	// A reserve far above what is free refuses everything, with ENOSPC.
	s := &Space{dir: dir, reserve: 8 * free}
	for _, kind := range []ClaimKind{ForContent, ForChange, ForOpen} {
		err := s.Claim(0, kind)
		if !errors.Is(err, syscall.ENOSPC) {
			t.Fatalf("claim(kind %d) with reserve 8 x free: %v, want ENOSPC", kind, err)
		}
		if !strings.Contains(err.Error(), dir) {
			t.Errorf("error does not name the directory: %v", err)
		}
	}

	// Between the two thresholds: new content is refused, other changes
	// (which must leave only half the reserve) pass.
	s = &Space{dir: dir, reserve: free + free/2}
	if err := s.Claim(1, ForContent); !errors.Is(err, syscall.ENOSPC) {
		t.Fatalf("bulk claim with 1.5 x free reserved: %v, want ENOSPC", err)
	}
	if err := s.Claim(0, ForChange); err != nil {
		t.Fatalf("small change with 1.5 x free reserved (half of it kept): %v", err)
	}

	// Opening a page, so that files stay readable, leaves only a quarter.
	s = &Space{dir: dir, reserve: 3 * free}
	if err := s.Claim(0, ForChange); !errors.Is(err, syscall.ENOSPC) {
		t.Fatalf("change with 3 x free reserved: %v, want ENOSPC", err)
	}
	if err := s.Claim(0, ForOpen); err != nil {
		t.Fatalf("open with 3 x free reserved (a quarter of it kept): %v", err)
	}

	// Content is taken while it leaves the reserve.
	s = &Space{dir: dir, reserve: free / 4}
	if err := s.Claim(free/4, ForContent); err != nil {
		t.Fatalf("claim of a quarter with a quarter reserved: %v", err)
	}
	if err := s.Claim(free, ForContent); !errors.Is(err, syscall.ENOSPC) {
		t.Fatalf("claim of all that is free: %v, want ENOSPC", err)
	}

	// Content taken counts until it lands, across statfs calls: statfs
	// does not see a batch Badger has not written yet.
	s = &Space{dir: dir, reserve: free / 2}
	if err := s.Claim(free/4, ForContent); err != nil {
		t.Fatalf("claim of a quarter with half reserved: %v", err)
	}
	s.at = time.Time{} // the next claim takes a fresh statfs
	if err := s.Claim(free/4+free/8, ForContent); !errors.Is(err, syscall.ENOSPC) {
		t.Fatalf("claim beyond the reserve with a quarter in flight: %v, want ENOSPC", err)
	}
	s.Settled(free / 4)
	if err := s.Claim(free/4+free/8, ForContent); err != nil {
		t.Fatalf("the same claim once the quarter landed: %v", err)
	}

	// A read-only repository has no space to keep.
	var none *Space
	if err := none.Claim(1<<62, ForContent); err != nil {
		t.Fatalf("nil space: %v", err)
	}
}

// A refusal checks again first: space freed since the last statfs is
// seen at once, not after spaceRefresh.
func TestSpaceSeesFreedSpaceAtOnce(t *testing.T) {
	dir := t.TempDir()
	free := freeBytes(t, dir)
	s := &Space{dir: dir, reserve: free / 4}
	if err := s.Claim(0, ForContent); err != nil {
		t.Fatal(err)
	}
	// As if the statfs had been taken when the disk was nearly full.
	s.free = free / 8
	if err := s.Claim(free/4, ForContent); err != nil {
		t.Fatalf("claim after space was freed: %v", err)
	}
}

func TestDefaultReserve(t *testing.T) {
	dir := t.TempDir()
	got, err := DefaultReserve(dir)
	if err != nil {
		t.Fatal(err)
	}
	var st unix.Statfs_t
	if err := unix.Statfs(dir, &st); err != nil {
		t.Fatal(err)
	}
	size := st.Blocks * uint64(st.Bsize)
	if got < MinReserve || got > MaxDefaultReserve {
		t.Fatalf("default reserve %d outside [%d, %d]", got, MinReserve, MaxDefaultReserve)
	}
	if got != MinReserve && got != MaxDefaultReserve && got != size/20 {
		t.Fatalf("default reserve %d on a %d-byte filesystem, want 5 %% of it", got, size)
	}
}
