package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

const statsBefore = `# TYPE ledgerfs_fuse_op_duration_seconds histogram
ledgerfs_fuse_op_duration_seconds_bucket{op="write",le="+Inf"} 10
ledgerfs_fuse_op_duration_seconds_sum{op="write"} 0.01
ledgerfs_fuse_op_duration_seconds_count{op="write"} 10
# TYPE ledgerfs_written_bytes_total counter
ledgerfs_written_bytes_total 1000
# TYPE ledgerfs_commit_changes histogram
ledgerfs_commit_changes_bucket{kind="queued",le="+Inf"} 1
ledgerfs_commit_changes_sum{kind="queued"} 4
ledgerfs_commit_changes_count{kind="queued"} 1
# TYPE ledgerfs_piece_bytes_written_total counter
ledgerfs_piece_bytes_written_total{result="stored"} 0
ledgerfs_piece_bytes_written_total{result="deduplicated"} 0
# TYPE ledgerfs_open_pages gauge
ledgerfs_open_pages 1
`

// A stats line shows what changed between two readings of .stats, per
// second.
func TestStatsLine(t *testing.T) {
	dir := t.TempDir()
	after := strings.NewReplacer(
		`_sum{op="write"} 0.01`, `_sum{op="write"} 0.05`, `_count{op="write"} 10`, `_count{op="write"} 30`,
		"_bucket{op=\"write\",le=\"+Inf\"} 10", "_bucket{op=\"write\",le=\"+Inf\"} 30",
		"ledgerfs_written_bytes_total 1000", "ledgerfs_written_bytes_total 2098152",
		`_sum{kind="queued"} 4`, `_sum{kind="queued"} 44`, `_count{kind="queued"} 1`, `_count{kind="queued"} 3`,
		"_bucket{kind=\"queued\",le=\"+Inf\"} 1", "_bucket{kind=\"queued\",le=\"+Inf\"} 3",
		`{result="deduplicated"} 0`, `{result="deduplicated"} 1048576`,
		"ledgerfs_open_pages 1", "ledgerfs_open_pages 2",
	).Replace(statsBefore)
	read := func(name, text string) metricsText {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
		m, err := readStats(p)
		if err != nil {
			t.Fatal(err)
		}
		return m
	}
	line := statsLine(read("a", statsBefore), read("b", after), 2)
	// 20 ops in 2 s at 2 ms each; 2 MiB written; 2 commits of 20 changes;
	// 1 MiB deduplicated; 2 pages.
	for _, want := range []string{" 10 ", " 2.00 ", "1.0 MiB", " 1.0 ", " 20.0 ", "512 KiB", " 2 "} {
		if !strings.Contains(line, want) {
			t.Errorf("line %q lacks %q", line, want)
		}
	}
}
