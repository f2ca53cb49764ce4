package main

import (
	"fmt"
	"io"
	"strings"

	"github.com/spf13/cobra"

	"github.com/ledgerfs/ledgerfs/internal/gc"
	"github.com/ledgerfs/ledgerfs/internal/retention"
	"github.com/ledgerfs/ledgerfs/store"
)

func newRetention() *cobra.Command {
	var unset bool
	var pf policyFlags
	cmd := &cobra.Command{
		Use:   "retention REPO [LEDGER [PAGE]]",
		Short: "Show or set which commits a collection keeps",
		Long: `Retention shows the retention policy of a page (or a ledger, or the
repository) and where it is set; with --keep-* flags it sets the policy of
that scope, and with --unset it removes it, so that the next wider scope's
applies. A page's policy overrides its ledger's, which overrides the
repository's; with none set, the default applies:

  ` + retention.Default.String() + `

that is every commit of the last hour, then the newest of each hour for two
days, of each day for a month and of each week for twelve weeks. The rules
are restic's forget rules; a commit any rule keeps is kept, and heads are
always kept. Buckets (hours, days, weeks, months) are in UTC.

On a mounted repository, a page's policy is read from and written to its
.ledger/retention file: echo keep-daily=7 > PAGE/.ledger/retention.`,
		Example: "  ledgerfs retention ~/.ledgerfs notes inbox\n  ledgerfs retention ~/.ledgerfs --keep-within 7d --keep-daily 90\n  ledgerfs retention ~/.ledgerfs notes --unset",
		Args:    cobra.RangeArgs(1, 3),
		RunE: func(cmd *cobra.Command, args []string) error {
			p, given, err := pf.policy(cmd)
			if err != nil {
				return err
			}
			if given && unset {
				return fmt.Errorf("--unset takes no --keep-* flag")
			}
			text := ""
			if given {
				text = p.String()
			}
			return retentionCmd(cmd.OutOrStdout(), args[0], args[1:], text, given || unset)
		},
	}
	cmd.Flags().BoolVar(&unset, "unset", false, "remove the policy of this scope")
	pf.register(cmd)
	return cmd
}

func retentionCmd(w io.Writer, repoDir string, scope []string, text string, set bool) error {
	repo, err := openUnmounted(repoDir, writable(), "a page's policy is its file .ledger/retention under %s/LEDGER/PAGE")
	if err != nil {
		return err
	}
	defer repo.Close()
	ledger, page := "", ""
	if len(scope) > 0 {
		ledger = scope[0]
	}
	if len(scope) > 1 {
		page = scope[1]
	}
	// A scope that does not exist has no policy to show or set.
	if err := repo.CheckScope(ledger, page); err != nil {
		return fmt.Errorf("%w of %s", err, repoDir)
	}
	if set {
		if err := repo.SetRetention(ledger, page, text); err != nil {
			return err
		}
	}
	p, from, err := gc.PolicyOf(repo, ledger, page)
	if err != nil {
		return err
	}
	fmt.Fprintf(w, "%s\t(%s)\n", p, describeScope(from, ledger, page))
	return nil
}

// describeScope says where a policy comes from.
func describeScope(s store.Scope, ledger, page string) string {
	switch s {
	case store.ScopePage:
		return "set for page " + ledger + "/" + page
	case store.ScopeLedger:
		return "set for ledger " + ledger
	case store.ScopeRepository:
		return "set for the repository"
	}
	return strings.TrimSpace("the default")
}
