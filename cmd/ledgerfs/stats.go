package main

import (
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/dustin/go-humanize"
	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
	"github.com/spf13/cobra"

	"github.com/ledgerfs/ledgerfs/store"
)

func newStats() *cobra.Command {
	var (
		interval time.Duration
		count    int
	)
	cmd := &cobra.Command{
		Use:   "stats MOUNTPOINT|DIR",
		Short: "Show what a mount does, once a second",
		Long: `Stats reads the .stats file (its metrics, as text) of the mount that
holds the directory given (its mount point, a ledger, a page) at every
interval and prints a line of what happened since the last: FUSE operations
per second and their mean latency, bytes read and written through the mount,
commits and the changes each carried, bytes stored and deduplicated, the open
pages and the disk space of their dbs. The whole of .stats is what
--metrics serves to Prometheus.`,
		Example: "  ledgerfs stats /mnt/l\n  cat /mnt/l/.stats",
		Args:    cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if interval <= 0 {
				return fmt.Errorf("--interval %v: must be positive", interval)
			}
			return showStats(cmd.OutOrStdout(), statsFile(args[0]), interval, count)
		},
	}
	cmd.Flags().DurationVar(&interval, "interval", time.Second, "time between lines")
	cmd.Flags().IntVar(&count, "count", 0, "lines to print before exiting (0: until interrupted)")
	return cmd
}

// statsFile is the .stats of the mount that holds dir: the mount point,
// or any directory under it (a ledger, a page). .stats is at the mount's
// root only.
func statsFile(dir string) string {
	abs, err := filepath.Abs(dir)
	if err != nil {
		return filepath.Join(dir, store.StatsName)
	}
	for d := abs; ; d = filepath.Dir(d) {
		if _, err := os.Stat(filepath.Join(d, store.StatsName)); err == nil {
			return filepath.Join(d, store.StatsName)
		}
		if d == filepath.Dir(d) {
			return filepath.Join(abs, store.StatsName) // the error names what was given
		}
	}
}

// statsHeader names showStats's columns; every 20 lines it is repeated.
const statsHeader = "    time   ops/s  lat ms  read/s  write/s  commits/s  chg/commit  stored/s  dedup/s  pages  db size"

func showStats(w io.Writer, path string, interval time.Duration, count int) error {
	prev, err := readStats(path)
	if err != nil {
		return err
	}
	t := time.NewTicker(interval)
	defer t.Stop()
	for n := 0; count == 0 || n < count; n++ {
		<-t.C
		cur, err := readStats(path)
		if err != nil {
			return err
		}
		if n%20 == 0 {
			fmt.Fprintln(w, statsHeader)
		}
		fmt.Fprintln(w, statsLine(prev, cur, interval.Seconds()))
		prev = cur
	}
	return nil
}

// metricsText is the mount's metrics, by name.
type metricsText map[string]*dto.MetricFamily

func readStats(path string) (metricsText, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("read the mount's statistics (is it a ledgerfs mount?): %w", err)
	}
	defer f.Close()
	p := expfmt.NewTextParser(model.UTF8Validation)
	m, err := p.TextToMetricFamilies(f)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return m, nil
}

// sum adds the samples of name — counters, gauges, and a histogram's
// count (name_count) or sum (name_sum) — whose labels include every pair
// of want.
func (m metricsText) sum(name string, want ...string) float64 {
	base, part := name, ""
	for _, suffix := range []string{"_count", "_sum"} {
		if mf, ok := m[strings.TrimSuffix(name, suffix)]; ok && mf.GetType() == dto.MetricType_HISTOGRAM && strings.HasSuffix(name, suffix) {
			base, part = strings.TrimSuffix(name, suffix), suffix
		}
	}
	mf, ok := m[base]
	if !ok {
		return 0
	}
	var s float64
metrics:
	for _, x := range mf.GetMetric() {
		for i := 0; i+1 < len(want); i += 2 {
			if !slices.ContainsFunc(x.GetLabel(), func(l *dto.LabelPair) bool { return l.GetName() == want[i] && l.GetValue() == want[i+1] }) {
				continue metrics
			}
		}
		switch {
		case part == "_count":
			s += float64(x.GetHistogram().GetSampleCount())
		case part == "_sum":
			s += x.GetHistogram().GetSampleSum()
		case x.Counter != nil:
			s += x.GetCounter().GetValue()
		case x.Gauge != nil:
			s += x.GetGauge().GetValue()
		}
	}
	return s
}

func statsLine(prev, cur metricsText, secs float64) string {
	delta := func(name string, labels ...string) float64 {
		return cur.sum(name, labels...) - prev.sum(name, labels...)
	}
	rate := func(name string, labels ...string) float64 { return delta(name, labels...) / secs }
	ops := delta("ledgerfs_fuse_op_duration_seconds_count")
	lat := 0.0
	if ops > 0 {
		lat = delta("ledgerfs_fuse_op_duration_seconds_sum") / ops * 1000
	}
	commits := delta("ledgerfs_commit_changes_count")
	perCommit := 0.0
	if commits > 0 {
		perCommit = delta("ledgerfs_commit_changes_sum") / commits
	}
	bytesPerSec := func(v float64) string { return humanize.IBytes(uint64(max(v, 0))) }
	return fmt.Sprintf("%8s %7.0f %7.2f %7s %8s %10.1f %11.1f %9s %8s %6.0f %8s",
		time.Now().Format("15:04:05"), ops/secs, lat,
		bytesPerSec(rate("ledgerfs_read_bytes_total")), bytesPerSec(rate("ledgerfs_written_bytes_total")),
		commits/secs, perCommit,
		bytesPerSec(rate("ledgerfs_piece_bytes_written_total", "result", "stored")),
		bytesPerSec(rate("ledgerfs_piece_bytes_written_total", "result", "deduplicated")),
		cur.sum("ledgerfs_open_pages"), bytesPerSec(cur.sum("ledgerfs_page_db_bytes")))
}
