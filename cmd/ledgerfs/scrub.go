package main

import (
	"context"
	"errors"
	"fmt"
	"os/signal"
	"syscall"

	"github.com/dustin/go-humanize"
	"github.com/spf13/cobra"

	"github.com/ledgerfs/ledgerfs/internal/scrub"
)

// errDamaged ends a scrub that found damage: exit status 1.
var errDamaged = errors.New("pieces do not match their digests")

func newScrub() *cobra.Command {
	var rateFlag string
	cmd := &cobra.Command{
		Use:   "scrub REPO [LEDGER [PAGE]]",
		Short: "Hash every stored piece against its digest",
		Long: `Scrub reads every piece the pages of an unmounted repository (or one ledger,
or one page) store and hashes it against its digest, and says which do not
match. Reads check Badger's checksums only, which find damage to the
disk's bytes; a scrub also finds a row written with other bytes than its
digest names. It repairs nothing: fsck says more of a damaged page, and a
page synced to a remote store is whole again once evicted and read.

A mount scrubs its pages in the background, each once every --scrub-every
(30 days), at --scrub-rate (32 MiB/s); a page scrubbed here is not scrubbed
again by the next mount until that time has passed.

Exit status: 0 if every piece matches, 1 if any does not, 3 if the
repository is mounted.`,
		Example: "  ledgerfs scrub ~/.ledgerfs\n  ledgerfs scrub --rate 50M ~/.ledgerfs notes",
		Args:    cobra.RangeArgs(1, 3),
		RunE: func(cmd *cobra.Command, args []string) error {
			rate, err := parseSize("--rate", rateFlag)
			if err != nil {
				return err
			}
			repo, names, err := openPages(args[0], writable(), "it scrubs in the background (--scrub-every); unmount it to scrub now", args[1:])
			if err != nil {
				return err
			}
			defer repo.Close()
			ctx, stop := signal.NotifyContext(cmd.Context(), syscall.SIGINT, syscall.SIGTERM)
			defer stop()
			s := &scrub.Scrubber{Repo: repo, Rate: int(rate)}
			damaged := 0
			for _, n := range names {
				r, err := s.Page(ctx, n[0], n[1])
				if err != nil {
					return err
				}
				damaged += len(r.Damaged)
				if len(r.Damaged) == 0 {
					fmt.Fprintf(cmd.OutOrStdout(), "%s/%s: ok (%s hashed in %s)\n", n[0], n[1], humanize.IBytes(uint64(r.Bytes)), r.Took.Round(1e6))
					continue
				}
				fmt.Fprintf(cmd.OutOrStdout(), "%s/%s: %d damaged pieces (of %s hashed):\n", n[0], n[1], len(r.Damaged), humanize.IBytes(uint64(r.Bytes)))
				for _, d := range r.Damaged {
					fmt.Fprintf(cmd.OutOrStdout(), "  %x\n", d)
				}
			}
			if damaged > 0 {
				return fmt.Errorf("%d %w", damaged, errDamaged)
			}
			return context.Cause(ctx)
		},
	}
	cmd.Flags().StringVar(&rateFlag, "rate", "0", "bytes a second to read at most (0: no limit)")
	return cmd
}
