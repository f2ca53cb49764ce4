package main

import (
	"encoding/json"
	"fmt"
	"os"
	"strings"
	"time"

	"github.com/dustin/go-humanize"
	"github.com/spf13/cobra"

	"github.com/ledgerfs/ledgerfs/internal/bench"
)

func newBench() *cobra.Command {
	o := bench.Defaults()
	var (
		bigSize string
		asJSON  bool
		noDrop  bool
	)
	cmd := &cobra.Command{
		Use:   "bench [flags] DIR",
		Short: "Measure a filesystem with standard workloads",
		Long: `Bench runs standard workloads in a new directory under DIR, which may be a
ledgerfs page or any other directory, and removes it afterwards:

  one big file written at 1 MiB blocks (and fsynced), then read back;
  many 128 KiB files, then many 4 KiB files: created, stat'ed, read, deleted.

File contents are random, so nothing deduplicates. As root the kernel's
caches are dropped between phases (reads are cold); otherwise they are not,
and the table says so. While it runs, a progress bar is drawn on standard
error when that is a terminal; a table (or JSON) goes to standard output at
the end.`,
		Example: `  ledgerfs bench /mnt/l/bench/page
  ledgerfs bench --big-file-size 4G --json /tmp`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			n, err := parseSize("--big-file-size", bigSize)
			if err != nil {
				return err
			}
			if n == 0 {
				return fmt.Errorf("--big-file-size %q: must not be 0", bigSize)
			}
			o.BigFileSize = int64(n)
			o.DropCaches = os.Geteuid() == 0 && !noDrop
			if fi, err := os.Stat(args[0]); err != nil || !fi.IsDir() {
				return fmt.Errorf("%s is not a directory", args[0])
			}
			var progress phases
			o.Progress = progress.update
			rep, err := bench.Run(cmd.Context(), args[0], o)
			progress.done()
			if err != nil {
				return err
			}
			if asJSON {
				enc := json.NewEncoder(cmd.OutOrStdout())
				enc.SetIndent("", "  ")
				return enc.Encode(rep)
			}
			switch {
			case noDrop:
				fmt.Fprintln(cmd.OutOrStdout(), "kernel caches were not dropped between phases (--no-drop-caches)")
			case !o.DropCaches:
				fmt.Fprintln(cmd.OutOrStdout(), "kernel caches were not dropped between phases (run as root to drop them)")
			}
			if err := rep.WriteTable(cmd.OutOrStdout()); err != nil {
				return err
			}
			_, err = fmt.Fprintf(cmd.OutOrStdout(), "total %s\n", time.Duration(rep.TotalTimeNs).Round(time.Millisecond))
			return err
		},
	}
	f := cmd.Flags()
	f.StringVar(&bigSize, "big-file-size", "1G", "size of the big file")
	f.IntVar(&o.BlockSize, "block-size", o.BlockSize, "bytes per read and write of the big file")
	f.IntVar(&o.SmallFiles, "small-files", o.SmallFiles, "number of 128 KiB files")
	f.IntVar(&o.TinyFiles, "tiny-files", o.TinyFiles, "number of 4 KiB files")
	f.BoolVar(&noDrop, "no-drop-caches", false, "do not drop the kernel's caches between phases")
	f.BoolVar(&asJSON, "json", false, "print the results as JSON")
	return cmd
}

// parseSize reads a size flag: 512M and 1G are binary units, as for dd and
// fio; 512MB is decimal.
func parseSize(flag, v string) (uint64, error) {
	sz := v
	if sz != "" && strings.ContainsAny(sz[len(sz)-1:], "KkMmGgTt") {
		sz += "iB"
	}
	n, err := humanize.ParseBytes(sz)
	if err != nil {
		return 0, fmt.Errorf("%s %q: want a size such as 512M or 1G", flag, v)
	}
	return n, nil
}
