package main

import (
	"fmt"
	"os"
	"path/filepath"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/ledgerfs/ledgerfs/store"
)

// Pruning for space starts at what writes need, not at a share of the
// disk: on an 8 GiB filesystem the default is 4 reserves (512 MiB), where
// 10 % of a large disk pruned history with tens of GiB free.
func TestPruneBelowDefaultFollowsTheReserve(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("mounting a filesystem needs root")
	}
	for _, size := range []uint64{300 << 20, 8 << 30, 64 << 30} {
		t.Run(fmt.Sprintf("%dMiB", size>>20), func(t *testing.T) {
			disk := t.TempDir()
			// An empty tmpfs takes no memory, whatever its size.
			if err := unix.Mount("tmpfs", disk, "tmpfs", 0, fmt.Sprintf("size=%d", size)); err != nil {
				t.Fatal(err)
			}
			defer unix.Unmount(disk, unix.MNT_DETACH)
			repo, err := store.Open(filepath.Join(disk, "repo"), store.Options{})
			if err != nil {
				t.Fatal(err)
			}
			defer repo.Close()
			def := newMount().Flags().Lookup("prune-below").DefValue
			got, err := pruneThreshold(repo, def)
			if err != nil {
				t.Fatal(err)
			}
			if want := 4 * repo.Reserve(); got != want || got > 4*store.MaxDefaultReserve {
				t.Fatalf("--prune-below %s on a filesystem of %d MiB: %d MiB, want 4 reserves (%d MiB)", def, size>>20, got>>20, want>>20)
			}
			// A share given is a share, never below 4 reserves.
			if got, _ := pruneThreshold(repo, "1%"); got != max(size/100, 4*repo.Reserve()) {
				t.Fatalf("--prune-below 1%% on %d MiB: %d bytes", size>>20, got)
			}
		})
	}
}
