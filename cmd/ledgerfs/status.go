package main

import (
	"fmt"
	"io"
	"strings"
	"text/tabwriter"

	"github.com/spf13/cobra"

	"github.com/ledgerfs/ledgerfs/internal/cloudsync"
	"github.com/ledgerfs/ledgerfs/store"
)

func newStatus() *cobra.Command {
	return &cobra.Command{
		Use:   "status REPO",
		Short: "Show how an unmounted repository's sync stands",
		Long: `Status shows the repository's remote and device, when its last pull and push
went through and the last error since, and for each page what waits to
be uploaded (commits, and pieces with the bytes they take) and when the
page was last pushed and pulled.`,
		Example: "  ledgerfs status ~/.ledgerfs",
		Args:    cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			return status(cmd.OutOrStdout(), args[0])
		},
	}
}

func status(w io.Writer, repoDir string) error {
	repo, err := openUnmounted(repoDir, store.Options{ReadOnly: true}, "a mounted repository's status is not shown yet; unmount %s first")
	if err != nil {
		return err
	}
	defer repo.Close()
	rs, err := cloudsync.StatusOf(repo)
	if err != nil {
		return err
	}
	or := func(s, none string) string {
		if s == "" {
			return none
		}
		return s
	}
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintf(tw, "remote:\t%s\n", or(rs.Remote, "none (ledgerfs config REPO remote=URL, or ledgerfs sync --remote URL)"))
	fmt.Fprintf(tw, "last pull:\t%s\n", or(rs.PulledAt, "never"))
	fmt.Fprintf(tw, "last push:\t%s\n", or(rs.PushedAt, "never"))
	fmt.Fprintf(tw, "last error:\t%s\n", or(rs.Error, "none"))
	tw.Flush()
	names, err := pagesOf(repo, nil)
	if err != nil {
		return err
	}
	tw = tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "\nPAGE\tTO UPLOAD\tPUSHED\tPULLED")
	for _, n := range names {
		p, err := repo.Acquire(n[0], n[1])
		if err != nil {
			return fmt.Errorf("%s/%s: %w", n[0], n[1], err)
		}
		ps, err := cloudsync.PageStatusOf(p)
		repo.Release(p)
		if err != nil {
			return fmt.Errorf("%s/%s: %w", n[0], n[1], err)
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\n", strings.Join(n[:], "/"), ps.Waiting(), or(ps.PushedAt, "never"), or(ps.PulledAt, "never"))
	}
	return tw.Flush()
}
