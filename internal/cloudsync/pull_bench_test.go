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
	b.ResetTimer()
	for range b.N {
		b.StopTimer()
		d := newDevice(b, "b", dir)
		b.StartTimer()
		st, err := d.s.Sync(context.Background())
		if err != nil {
			b.Fatal(err)
		}
		if st.CommitsDown < batches {
			b.Fatalf("pulled %d commits, want %d", st.CommitsDown, batches)
		}
	}
	b.ReportMetric(float64(b.Elapsed().Microseconds())/float64(b.N*batches), "µs/batch")
}
