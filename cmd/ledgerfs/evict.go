package main

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"

	"github.com/dustin/go-humanize"
	"github.com/spf13/cobra"
)

func newEvict() *cobra.Command {
	return &cobra.Command{
		Use:   "evict PAGE-DIR... | evict REPO LEDGER/PAGE...",
		Short: "Remove synced pages from this machine; they come back from the remote when next opened",
		Long: `Evict removes pages from this machine while keeping their names: a page's
database is deleted, and the page comes back from the remote, its tree and
contents fetched as they are read, the next time it is opened (its history
then starts at the version it had). Only a page whose every change is synced
and that nothing uses or pins is evicted; others are refused with the
reason.

PAGE-DIR is a page's directory in a mount (the mount evicts it); with a
repository that is not mounted, name it first, then LEDGER/PAGE. A mount
with --cache-size evicts by itself, least recently used pages first.`,
		Example: "  ledgerfs evict /mnt/l/home/archive-2024\n  ledgerfs evict ~/.ledgerfs home/archive-2024",
		Args:    cobra.MinimumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if fi, err := os.Stat(filepath.Join(args[0], "page_usage_db")); err == nil && fi.IsDir() {
				return evictUnmounted(cmd, args[0], args[1:])
			}
			for _, dir := range args {
				ctl := filepath.Join(dir, ".ledger", "local")
				if fi, err := os.Stat(ctl); err != nil || !fi.Mode().IsRegular() {
					return fmt.Errorf("%s is not a page's directory in a ledgerfs mount (nor a repository)", dir)
				}
				if err := os.WriteFile(ctl, []byte("evict\n"), 0); errors.Is(err, syscall.EBUSY) {
					return fmt.Errorf("evict %s: the page is in use, pinned (ledgerfs pin --remove), or holds changes not synced yet; the mount's log says which", dir)
				} else if err != nil {
					return fmt.Errorf("evict %s: %w", dir, err)
				}
				fmt.Fprintf(cmd.OutOrStdout(), "evicted %s\n", dir)
			}
			return nil
		},
	}
}

func evictUnmounted(cmd *cobra.Command, repoDir string, names []string) error {
	if len(names) == 0 {
		return fmt.Errorf("name the pages to evict: ledgerfs evict %s LEDGER/PAGE...", repoDir)
	}
	repo, err := openUnmounted(repoDir, writable(), "evict its pages through the mount: ledgerfs evict %s/LEDGER/PAGE")
	if err != nil {
		return err
	}
	defer repo.Close()
	for _, name := range names {
		l, p, ok := strings.Cut(name, "/")
		if !ok {
			return fmt.Errorf("%q: want LEDGER/PAGE", name)
		}
		n, err := repo.Evict(l, p)
		if err != nil {
			return err
		}
		fmt.Fprintf(cmd.OutOrStdout(), "evicted %s/%s (%s)\n", l, p, humanize.IBytes(uint64(n)))
	}
	return repo.Close()
}
