package main

import (
	"fmt"
	"io"
	"text/tabwriter"

	"github.com/dustin/go-humanize"
	"github.com/spf13/cobra"

	"github.com/ledgerfs/ledgerfs/internal/gc"
	"github.com/ledgerfs/ledgerfs/store"
)

func newDu() *cobra.Command {
	return &cobra.Command{
		Use:   "du REPO [LEDGER [PAGE]]",
		Short: "Show where a repository's space goes, page by page",
		Long: `Du shows, for every page of an unmounted repository (or of one ledger, or
one page): its commits and stored pieces, the bytes the pieces' rows hold,
what the head reaches (stored, and its content before compression, with
their ratio), what only history holds (older commits, and garbage the next
collection deletes), and when the page was last collected. It reads every
piece's row, so it takes time in proportion to what is stored.

On a mounted repository each page's .ledger/stats file shows the same.`,
		Example: "  ledgerfs du ~/.ledgerfs\n  ledgerfs du ~/.ledgerfs notes inbox",
		Args:    cobra.RangeArgs(1, 3),
		RunE: func(cmd *cobra.Command, args []string) error {
			return du(cmd.OutOrStdout(), args[0], args[1:])
		},
	}
}

func du(w io.Writer, repoDir string, only []string) error {
	repo, names, err := openPages(repoDir, store.Options{ReadOnly: true}, "read LEDGER/PAGE/.ledger/stats under %s", only)
	if err != nil {
		return err
	}
	defer repo.Close()
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "page\tcommits\tpieces\tstored\thead stored\thead content\tratio\thistory\tcollected\t")
	var total gc.Usage
	for _, n := range names {
		p, err := repo.Acquire(n[0], n[1])
		if err != nil {
			return fmt.Errorf("%s/%s: %w", n[0], n[1], err)
		}
		u, err := gc.PageUsage(repo, p)
		repo.Release(p)
		if err != nil {
			return fmt.Errorf("%s/%s: %w", n[0], n[1], err)
		}
		collected := "never"
		if !u.Collected.IsZero() {
			collected = humanize.Time(u.Collected)
		}
		fmt.Fprintf(tw, "%s/%s\t%d\t%d\t%s\t%s\t%s\t%.2f\t%s\t%s\t\n", n[0], n[1], u.Commits, u.Objects,
			humanize.IBytes(uint64(u.Stored)), humanize.IBytes(uint64(u.HeadStored)), humanize.IBytes(uint64(u.HeadContent)),
			u.Ratio(), humanize.IBytes(uint64(u.History)), collected)
		total.Add(u)
	}
	if len(names) > 1 {
		fmt.Fprintf(tw, "total\t%d\t%d\t%s\t%s\t%s\t%.2f\t%s\t\t\n", total.Commits, total.Objects,
			humanize.IBytes(uint64(total.Stored)), humanize.IBytes(uint64(total.HeadStored)), humanize.IBytes(uint64(total.HeadContent)),
			total.Ratio(), humanize.IBytes(uint64(total.History)))
	}
	return tw.Flush()
}
