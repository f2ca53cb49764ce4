package main

import (
	"fmt"
	"io"
	"strings"
	"text/tabwriter"

	"github.com/dustin/go-humanize"
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
	url, err := repo.Setting(store.SettingRemote)
	if err != nil {
		return err
	}
	if url == "" {
		url = "none (ledgerfs config REPO remote=URL, or ledgerfs sync --remote URL)"
	}
	state := func(key string) string {
		v, ok, err := repo.SyncState(key)
		if err != nil {
			return "? (" + err.Error() + ")"
		}
		if !ok || len(v) == 0 {
			return "never"
		}
		return string(v)
	}
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintf(tw, "remote:\t%s\n", url)
	fmt.Fprintf(tw, "last pull:\t%s\n", state(cloudsync.StatePulledAt))
	fmt.Fprintf(tw, "last push:\t%s\n", state(cloudsync.StatePushedAt))
	errText := state(cloudsync.StateError)
	if errText == "never" {
		errText = "none"
	}
	fmt.Fprintf(tw, "last error:\t%s\n", errText)
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
		commits := 0
		err = p.UnsyncedCommits(func(store.CommitID) error { commits++; return nil })
		var pieces int
		var bytes int64
		if err == nil {
			pieces, bytes, err = p.PiecesSize(store.Local)
		}
		meta := func(key string) string {
			v, ok, merr := p.SyncMetadata(key)
			if merr != nil || !ok {
				return "never"
			}
			return string(v)
		}
		pushed, pulled := meta("pushed_at"), meta("pulled_at")
		repo.Release(p)
		if err != nil {
			return fmt.Errorf("%s/%s: %w", n[0], n[1], err)
		}
		waiting := "nothing"
		if commits > 0 || pieces > 0 {
			waiting = fmt.Sprintf("%s, %s (%s)", count(commits, "commit"), count(pieces, "piece"), humanize.IBytes(uint64(bytes)))
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\n", strings.Join(n[:], "/"), waiting, pushed, pulled)
	}
	return tw.Flush()
}
