package cloudsync

import (
	"context"
	"fmt"
	"testing"

	"github.com/ledgerfs/ledgerfs/internal/remote"
)

// BenchmarkPullBatches pulls, on a new device, 300 batches of one small
// commit each into one page: the per-batch work of a pull (reading the
// batch, finding where it lands, landing one commit), which a device that
// follows a busy page does all day. ns/op is per pull of all 300.
func BenchmarkPullBatches(b *testing.B) {
	const batches = 300
	dir, err := remote.NewDir(b.TempDir())
	must(b, err)
	a := newDevice(b, "a", dir)
	for i := range batches {
		a.write("l", "p", fmt.Sprintf("f%d", i%20), random(uint64(i), 2<<10))
		if _, err := a.s.Sync(context.Background()); err != nil {
			b.Fatal(err)
		}
	}
	firstSyncs(b, dir, batches)
	b.ReportMetric(float64(b.Elapsed().Microseconds())/float64(b.N*batches), "µs/batch")
}

// BenchmarkFirstSync is a new device's first sync of a store of 100 pages,
// each holding 20 files of 2 KiB, whose history is 1 or 100 commits per
// page, pushed in as many syncs (a batch each, of every page's commit of
// that round): what a join costs against the content, and against the
// history; with the store collected after (checkpoint=true: the join
// lands the collection's checkpoint, every commit kept, and reads no
// batch) or not (it reads and lands every batch). ns/op is per first sync.
func BenchmarkFirstSync(b *testing.B) {
	const pages, files = 100, 20
	for _, c := range []struct {
		history    int
		checkpoint bool
	}{{1, false}, {100, false}, {1, true}, {100, true}} {
		history := c.history
		b.Run(fmt.Sprintf("history=%d/checkpoint=%v", history, c.checkpoint), func(b *testing.B) {
			dir, err := remote.NewDir(b.TempDir())
			must(b, err)
			a := newDevice(b, "a", dir)
			writeHistory(b, a, pages, files, history, false)
			if c.checkpoint {
				if _, err := a.s.Collect(context.Background(), CollectOptions{Grace: DefaultGrace}); err != nil {
					b.Fatal(err)
				}
			}
			firstSyncs(b, dir, pages*history)
			b.ReportMetric(float64(b.Elapsed().Milliseconds())/float64(b.N), "ms/join")
		})
	}
}

// writeHistory has a write pages pages of files files of 2 KiB in rounds
// rounds (all files in the first, one file of each page in each round
// after), syncing after each round, or, perPage, after each page's write.
func writeHistory(b *testing.B, a *device, pages, files, rounds int, perPage bool) {
	b.Helper()
	sync := func() {
		if _, err := a.s.Sync(context.Background()); err != nil {
			b.Fatal(err)
		}
	}
	for round := range rounds {
		for p := range pages {
			page := fmt.Sprint("p", p)
			if round == 0 {
				for f := range files {
					a.write("l", page, fmt.Sprint("f", f), random(uint64(p*files+f), 2<<10))
				}
			} else {
				a.write("l", page, fmt.Sprint("f", round%files), random(uint64(round*pages+p), 2<<10))
			}
			if perPage {
				sync()
			}
		}
		if !perPage {
			sync()
		}
	}
}

// firstSyncs times b.N first syncs of new devices of the store in dir,
// each of which must pull at least commits commits.
func firstSyncs(b *testing.B, dir remote.Backend, commits int) {
	b.Helper()
	c := &counting{Backend: dir}
	var gets, down int64
	b.ResetTimer()
	for range b.N {
		b.StopTimer()
		d := newDevice(b, "b", c)
		c.take()
		b.StartTimer()
		st, err := d.s.Sync(context.Background())
		if err != nil {
			b.Fatal(err)
		}
		if st.CommitsDown < commits {
			b.Fatalf("pulled %d commits, want %d", st.CommitsDown, commits)
		}
		_, moved, _ := c.moved()
		n := c.take()
		gets, down = gets+int64(n["get"]+n["range"]), down+moved
	}
	// The requests and bytes are what a join costs on a remote store,
	// where each request is a round trip.
	b.ReportMetric(float64(gets)/float64(b.N), "gets/join")
	b.ReportMetric(float64(down)/float64(b.N), "B/join")
}

// BenchmarkJoinManyPacks is a new device's join from a checkpoint of a
// store whose history went up a page at a time: 20 pages of 20 files of
// 2 KiB, 50 rounds, each page's write of a round pushed alone (1,000
// batches, each with a pack of its own), as a mount that syncs as it goes
// writes it. ns/op is per join; bench/firstsync.sh measures the same
// against MinIO.
func BenchmarkJoinManyPacks(b *testing.B) {
	const pages, files, rounds = 20, 20, 50
	dir, err := remote.NewDir(b.TempDir())
	must(b, err)
	a := newDevice(b, "a", dir)
	writeHistory(b, a, pages, files, rounds, true)
	if _, err := a.s.Collect(context.Background(), CollectOptions{Grace: DefaultGrace}); err != nil {
		b.Fatal(err)
	}
	firstSyncs(b, dir, pages*rounds)
	b.ReportMetric(float64(b.Elapsed().Milliseconds())/float64(b.N), "ms/join")
}
