package mount_test

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"
)

// BenchmarkCreateDuringCollection measures what a collection costs the
// writers of other pages: the latency of creates (4 KiB, closed) in one
// page while the mount collects another whose history holds many small
// files and large ones, against the same creates with no collection. It
// reports the p50 and p99 of each and their ratio (the target: p99 under
// 2x).
func BenchmarkCreateDuringCollection(b *testing.B) {
	s := mountPlain(b, b.TempDir(), "--collect-every", "0")
	old := s.page("l", "old")
	fill := func(round int) {
		for i := range 4 {
			must(b, os.WriteFile(filepath.Join(old, fmt.Sprintf("big%d", i)), content(round*10+i, 32<<20), 0o644))
		}
		dir := filepath.Join(old, "many")
		must(b, os.MkdirAll(dir, 0o755))
		for i := range 4000 {
			must(b, os.WriteFile(filepath.Join(dir, fmt.Sprint(i)), content(round*100000+i, 2000), 0o644))
		}
		syncDir(b, old)
		run(b, old, "sh", "-c", "rm -rf -- *")
		syncDir(b, old)
	}
	must(b, os.WriteFile(filepath.Join(old, ".ledger", "retention"), []byte("keep-last=1\n"), 0))
	pg := s.page("l", "new")
	data := content(1, 4096)
	creates := func(n int, tag string) []time.Duration {
		lat := make([]time.Duration, n)
		for i := range n {
			start := time.Now()
			must(b, os.WriteFile(filepath.Join(pg, fmt.Sprintf("%s-%d", tag, i)), data, 0o644))
			lat[i] = time.Since(start)
		}
		return lat
	}
	pct := func(l []time.Duration, p int) time.Duration {
		slices.Sort(l)
		return l[(len(l)-1)*p/100]
	}
	var quiet, busy []time.Duration
	for i := 0; i < b.N; i++ {
		fill(i)
		quiet = append(quiet, creates(2000, fmt.Sprintf("q%d", i))...)
		done := make(chan error, 1)
		start := time.Now()
		go func() { done <- os.WriteFile(filepath.Join(s.mnt, ".collect"), []byte("l/old\n"), 0) }()
		var took time.Duration
		for took == 0 {
			busy = append(busy, creates(100, fmt.Sprintf("b%d-%d", i, len(busy)))...)
			select {
			case err := <-done:
				must(b, err)
				took = time.Since(start)
			default:
			}
		}
		b.Logf("collection took %v, %d creates ran during it", took, len(busy))
	}
	q99, b99 := pct(quiet, 99), pct(busy, 99)
	b.ReportMetric(float64(pct(quiet, 50).Microseconds()), "quiet-p50-µs")
	b.ReportMetric(float64(q99.Microseconds()), "quiet-p99-µs")
	b.ReportMetric(float64(pct(busy, 50).Microseconds()), "collecting-p50-µs")
	b.ReportMetric(float64(b99.Microseconds()), "collecting-p99-µs")
	b.ReportMetric(float64(b99)/float64(q99), "p99-ratio")
}
