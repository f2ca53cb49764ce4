package cloudsync

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/ledgerfs/ledgerfs/internal/remote"
)

// logReads is a Backend that counts the batches read from the logs, but
// the one named skip.
type logReads struct {
	remote.Backend
	n    atomic.Int64
	skip string
}

func (r *logReads) Get(ctx context.Context, name string) ([]byte, error) {
	if strings.HasPrefix(name, logsDir) && name != r.skip {
		r.n.Add(1)
	}
	return r.Backend.Get(ctx, name)
}

// TestJoinFromCheckpoint: a device that joins after a collection reads
// the collection's checkpoint, not the logs it covers, and ends as the
// others are: the same names, heads, files and history, who made each
// version, a deleted page known as deleted; and it merges the others'
// later changes with the bases that history gives (a change to another
// file of a page is no conflict), and theirs with its own.
func TestJoinFromCheckpoint(t *testing.T) {
	for kind, be := range stores(t) {
		t.Run(kind, func(t *testing.T) {
			a, b := newDevice(t, "a", be), newDevice(t, "b", be)
			for r := range 6 {
				for p := range 3 {
					a.write("l", fmt.Sprint("p", p), fmt.Sprint("f", r%3), random(uint64(r*10+p), 3<<10))
				}
				b.write("l", "shared", fmt.Sprint("b", r%2), random(uint64(100+r), 5<<10))
				round(a, b)
			}
			a.write("l", "gone", "f", []byte("soon deleted"))
			round(a, b)
			gone, ok, err := a.repo.PageNaming("l", "gone")
			must(t, err)
			if !ok {
				t.Fatal("page l/gone has no naming")
			}
			must(t, b.repo.DeletePage("l", "gone"))
			must(t, a.repo.RenamePage("l", "p2", "renamed"))
			round(a, b)
			if cs := a.collectStore(DefaultGrace); cs.Small == 0 {
				t.Error("the collection repacked no small pack") // as a store's history is
			}
			// The batch of the collection's repack comes after the
			// checkpoint's positions: the join reads it.
			records, err := a.s.records(context.Background(), "")
			must(t, err)
			reads := &logReads{Backend: be, skip: records[len(records)-1].rec.Moved}
			c := newDevice(t, "c", reads)
			st := c.sync()
			if n := reads.n.Load(); n != 0 {
				t.Errorf("the join read %d batches of the logs the checkpoint covers", n)
			}
			if st.CommitsDown == 0 {
				t.Fatal("the join landed no commit")
			}
			same(t, a, b, c)
			// What it holds, the store holds: fsck --remote finds nothing.
			if problems, err := Verify(context.Background(), c.repo, be, Options{}); err != nil || len(problems) != 0 {
				t.Errorf("fsck --remote of the joiner: %v, %v", problems, err)
			}
			for _, lp := range a.pageNames() {
				if got, want := c.commits(lp[0], lp[1]), a.commits(lp[0], lp[1]); got != want {
					t.Errorf("page %s/%s: %d commits of history on the joiner, %d on a", lp[0], lp[1], got, want)
				}
			}
			// Who made b's versions.
			pg := c.page("l", "shared")
			by, ok, err := pg.SyncMetadata(deviceKey(c.head("l", "shared")))
			c.repo.Release(pg)
			must(t, err)
			if !ok || string(by) != b.s.Device() {
				t.Errorf("the head of l/shared made by %q on the joiner, want b's %q", by, b.s.Device())
			}
			named, ok, err := c.repo.IncarnationNamed(gone.IDs[0])
			must(t, err)
			if !ok || !named.Deleted || named.Live {
				t.Errorf("the deleted page's incarnation on the joiner: %+v (known %v), want deleted", named, ok)
			}

			// Later changes merge on the bases the checkpoint's history
			// gives: different files of one page are no conflict.
			a.write("l", "shared", "from-a", []byte("a's"))
			c.write("l", "shared", "from-c", []byte("c's"))
			b.write("l", "p0", "f0", []byte("b's"))
			round(a, b, c)
			same(t, a, b, c)
			files := c.files("l", "shared")
			for k := range files {
				if strings.Contains(k, "sync-conflict") {
					t.Fatalf("a conflict after the join: %v", slices.Sorted(maps.Keys(files)))
				}
			}
			if files["from-a"] != "a's" || files["from-c"] != "c's" {
				t.Fatalf("l/shared after the join holds %v", slices.Sorted(maps.Keys(files)))
			}
			if reads.n.Load() == 0 {
				t.Error("the joiner read no batch after its join")
			}
		})
	}
}

// TestCheckpointsOfOldRecordsGo: a collection deletes the checkpoints of
// the records it deletes, and the newest record's stays.
func TestCheckpointsOfOldRecordsGo(t *testing.T) {
	be, err := remote.NewDir(t.TempDir())
	must(t, err)
	a := newDevice(t, "a", be)
	sets := func() map[string]bool {
		out := map[string]bool{}
		for _, o := range objects(t, be) {
			if rest, ok := strings.CutPrefix(o.Name, checkpointsDir); ok {
				set, _, _ := strings.Cut(rest, "/")
				out[set] = true
			}
		}
		return out
	}
	for i := range 3 {
		a.write("l", "p", "f", random(uint64(i), 1<<10))
		a.sync()
		a.collectStore(0)
		recs, err := a.s.records(context.Background(), "")
		must(t, err)
		if len(recs) != 1 {
			t.Fatalf("%d records after a collection with no grace", len(recs))
		}
		if got := sets(); len(got) != 1 || !got[recs[0].rec.Checkpoint] {
			t.Fatalf("checkpoint sets %v, want only the record's %q", got, recs[0].rec.Checkpoint)
		}
	}
	if v := layout(t, be); v != remote.VersionCheckpoints {
		t.Fatalf("the store's layout after a checkpoint: %d, want %d", v, remote.VersionCheckpoints)
	}
}

// failOnce is a Backend whose first read of a pack fails.
type failOnce struct {
	logReads
	failed atomic.Bool
}

func (f *failOnce) Get(ctx context.Context, name string) ([]byte, error) {
	if strings.HasPrefix(name, packsDir) && f.failed.CompareAndSwap(false, true) {
		return nil, fmt.Errorf("a read of %s cut short", name)
	}
	return f.logReads.Get(ctx, name)
}

func (f *failOnce) GetRange(ctx context.Context, name string, off, n int64) ([]byte, error) {
	if strings.HasPrefix(name, packsDir) && f.failed.CompareAndSwap(false, true) {
		return nil, fmt.Errorf("a read of %s cut short", name)
	}
	return f.logReads.GetRange(ctx, name, off, n)
}

// TestJoinCutShortJoinsAgain: a join that fails after it made the
// checkpoint's ledgers joins again at the next sync, from the checkpoint,
// rather than take the device for one with pages of its own.
func TestJoinCutShortJoinsAgain(t *testing.T) {
	be, err := remote.NewDir(t.TempDir())
	must(t, err)
	a := newDevice(t, "a", be)
	for r := range 4 {
		a.write("l", "p", fmt.Sprint("f", r), random(uint64(r), 4<<10))
		a.sync()
	}
	a.collectStore(DefaultGrace)
	f := &failOnce{logReads: logReads{Backend: be}}
	c := newDevice(t, "c", f)
	if _, err := c.s.Sync(context.Background()); err == nil {
		t.Fatal("a join whose pack read failed reported no error")
	}
	if ls, err := c.repo.Ledgers(); err != nil || len(ls) == 0 {
		t.Fatalf("the join cut short made no ledger (%v, %v): the test does not test what it says", ls, err)
	}
	c.sync()
	if n := f.n.Load(); n != 0 {
		t.Errorf("the join, again, read %d batches of the logs the checkpoint covers", n)
	}
	same(t, a, c)
}
