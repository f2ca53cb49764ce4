// Command ledgerfs mounts a repository of ledgers and pages as a FUSE
// filesystem and inspects repositories.
package main

import (
	"errors"
	"fmt"
	"log/slog"
	"os"

	"github.com/spf13/cobra"

	"github.com/ledgerfs/ledgerfs/internal/store"
)

func main() {
	root := newRoot()
	if args, ok := helperArgs(os.Args); ok {
		root.SetArgs(args)
	}
	if err := root.Execute(); err != nil {
		reportFailure(err)
		fmt.Fprintln(os.Stderr, "ledgerfs:", err)
		if errors.Is(err, store.ErrLocked) {
			os.Exit(3)
		}
		os.Exit(1)
	}
}

func newRoot() *cobra.Command {
	var debug bool
	root := &cobra.Command{
		Use:   "ledgerfs",
		Short: "A versioned, content-addressed key-value store as a filesystem",
		Long: `ledgerfs serves a repository of ledgers and pages as a FUSE filesystem:
ledgers and pages are directories, a page's entries are files, every close
is a commit, and contents are deduplicated chunks.`,
		SilenceUsage:  true,
		SilenceErrors: true,
		PersistentPreRun: func(cmd *cobra.Command, args []string) {
			level := slog.LevelInfo
			if debug {
				level = slog.LevelDebug
			}
			slog.SetDefault(slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: level})))
		},
	}
	root.PersistentFlags().BoolVar(&debug, "debug", false, "log debug messages (with mount: every FUSE request)")
	root.AddCommand(newMount(), newUmount(), newStats(), newFsck(), newGC(), newRetention(), newConfig(), newDu(), newLog(), newCat(), newBench(), newGuard())
	return root
}
