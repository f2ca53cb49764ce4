// Command ledgerfs mounts a repository of ledgers and pages as a FUSE
// filesystem and inspects repositories.
package main

import (
	"errors"
	"fmt"
	"log/slog"
	"os"

	"github.com/spf13/cobra"

	"github.com/ledgerfs/ledgerfs/store"
)

func main() {
	root := newRoot()
	args := commandLine()
	root.SetArgs(args)
	// An unknown command is a mistake, never a mount: cobra says so, with
	// the commands it may have meant. Its help and completion commands
	// are added at Execute; shell completion's hidden requests are
	// answered there too.
	root.InitDefaultHelpCmd()
	root.InitDefaultCompletionCmd()
	if _, _, err := root.Find(args); err != nil && !completionRequest(args) {
		fmt.Fprintln(os.Stderr, "ledgerfs:", err)
		fmt.Fprintln(os.Stderr, "Run 'ledgerfs --help' for the commands.")
		os.Exit(2)
	}
	if err := root.Execute(); err != nil {
		var usage usageError
		if errors.As(err, &usage) {
			fmt.Fprintln(os.Stderr, "ledgerfs:", err)
			os.Exit(2)
		}
		reportFailure(err)
		fmt.Fprintln(os.Stderr, "ledgerfs:", err)
		var status exitStatus
		switch {
		case errors.As(err, &status):
			os.Exit(status.code)
		case errors.Is(err, store.ErrLocked):
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
		Version:       version(),
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
	root.SetFlagErrorFunc(func(cmd *cobra.Command, err error) error {
		return usageError{fmt.Errorf("%w\nRun '%s --help' for usage.", err, cmd.CommandPath())}
	})
	root.AddCommand(newVersion(), newMount(), newUmount(), newStats(), newFsck(), newGC(), newRetention(), newConfig(), newDu(), newLog(), newCat(), newBench(), newSync(), newStatus(), newGuard(), newPin(), newEvict(), newKey(), newScrub())
	return root
}

// usageError is a command line the commands do not take: exit status 2,
// as for other commands' usage errors.
type usageError struct{ error }

func (e usageError) Unwrap() error { return e.error }

// completionRequest reports whether args are a shell completion script's
// request (cobra's hidden __complete commands), which Execute answers.
func completionRequest(args []string) bool {
	return len(args) > 0 && (args[0] == cobra.ShellCompRequestCmd || args[0] == cobra.ShellCompNoDescRequestCmd)
}

// exitStatus is an error with the exit status the command ends with: a
// background server's, passed on by mount -d.
type exitStatus struct {
	error
	code int
}

func (e exitStatus) Unwrap() error { return e.error }
