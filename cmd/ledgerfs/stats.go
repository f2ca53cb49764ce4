package main

import (
	"bytes"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/dustin/go-humanize"
	"github.com/spf13/cobra"

	"github.com/ledgerfs/ledgerfs/internal/store"
)

func newStats() *cobra.Command {
	var (
		interval time.Duration
		count    int
	)
	cmd := &cobra.Command{
		Use:   "stats MOUNTPOINT",
		Short: "Show what a mount does, once a second",
		Long: `Stats reads the mount's .stats file (its metrics, as text) at every
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
			return showStats(cmd.OutOrStdout(), filepath.Join(args[0], store.StatsName), interval, count)
		},
	}
	cmd.Flags().DurationVar(&interval, "interval", time.Second, "time between lines")
	cmd.Flags().IntVar(&count, "count", 0, "lines to print before exiting (0: until interrupted)")
	return cmd
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

// metricsText maps each sample of Prometheus's text format, name{labels},
// to its value.
type metricsText map[string]float64

func readStats(path string) (metricsText, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("read the mount's statistics (is it a ledgerfs mount?): %w", err)
	}
	m := metricsText{}
	for _, line := range bytes.Split(b, []byte("\n")) {
		if len(line) == 0 || line[0] == '#' {
			continue
		}
		i := bytes.LastIndexByte(line, ' ')
		if i < 0 {
			continue
		}
		if v, err := strconv.ParseFloat(string(line[i+1:]), 64); err == nil {
			m[string(line[:i])] = v
		}
	}
	return m, nil
}

// sum adds the samples of name, whatever their labels; with a label
// filter ("op=\"read\""), only those that have it.
func (m metricsText) sum(name, label string) float64 {
	var s float64
	for k, v := range m {
		base, labels, _ := strings.Cut(k, "{")
		if base == name && strings.Contains(labels, label) {
			s += v
		}
	}
	return s
}

func statsLine(prev, cur metricsText, secs float64) string {
	rate := func(name, label string) float64 { return (cur.sum(name, label) - prev.sum(name, label)) / secs }
	delta := func(name, label string) float64 { return cur.sum(name, label) - prev.sum(name, label) }
	ops := delta("ledgerfs_fuse_op_duration_seconds_count", "")
	lat := 0.0
	if ops > 0 {
		lat = delta("ledgerfs_fuse_op_duration_seconds_sum", "") / ops * 1000
	}
	commits := delta("ledgerfs_commit_changes_count", "")
	perCommit := 0.0
	if commits > 0 {
		perCommit = delta("ledgerfs_commit_changes_sum", "") / commits
	}
	bytesPerSec := func(v float64) string { return humanize.IBytes(uint64(max(v, 0))) }
	return fmt.Sprintf("%8s %7.0f %7.2f %7s %8s %10.1f %11.1f %9s %8s %6.0f %8s",
		time.Now().Format("15:04:05"), ops/secs, lat,
		bytesPerSec(rate("ledgerfs_read_bytes_total", "")), bytesPerSec(rate("ledgerfs_written_bytes_total", "")),
		commits/secs, perCommit,
		bytesPerSec(rate("ledgerfs_piece_bytes_written_total", `result="stored"`)),
		bytesPerSec(rate("ledgerfs_piece_bytes_written_total", `result="deduplicated"`)),
		cur.sum("ledgerfs_open_pages", ""), bytesPerSec(cur.sum("ledgerfs_page_db_bytes", "")))
}
