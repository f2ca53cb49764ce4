package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strings"

	"github.com/spf13/cobra"

	"github.com/ledgerfs/ledgerfs/internal/check"
	"github.com/ledgerfs/ledgerfs/internal/cloudsync"
	"github.com/ledgerfs/ledgerfs/journal"
	"github.com/ledgerfs/ledgerfs/store"
)

// errFsck is fsck's error when it found problems: they are printed, and the
// exit status says the rest.
var errFsck = errors.New("problems found")

func newFsck() *cobra.Command {
	var repair, remote bool
	cmd := &cobra.Command{
		Use:   "fsck REPO [LEDGER [PAGE]]",
		Short: "Check a repository that is not mounted: every row, object and reference",
		Long: `Fsck reads every page of the repository (or of one ledger, or one page)
as no mount does: every row against the documented schema and every object
against its digest; every commit the heads reach and their parents; every
tree node and every piece of every value those commits name; and the status
rows. It prints a line per page and exits 1 if any page has a problem.

Journals not committed and transient pieces are what a crash leaves and the
next mount settles; fsck lists them, passes the page (exit 0 if nothing else
is wrong), and --repair settles them as a mount
would (commits the journals of accepted changes, drops transactions that
never committed, keeps the transient pieces a commit reaches and deletes the
rest), and fixes status rows that disagree with the objects (deletes rows
of objects not stored and extra rows, makes an object without one local).
Damage — a piece missing or not matching its digest, a broken tree — is
reported, never repaired: copy the repository aside first.

With --remote it also checks the repository's remote (ledgerfs config
REPO remote=URL): every piece marked synced must be in a pack a batch of
the remote names, and every commit not marked unsynced in a batch; it says
what is missing. It reads the remote's listings and batches, not the
packs' bytes.`,
		Example: "  ledgerfs fsck ~/.ledgerfs\n  ledgerfs fsck --repair ~/.ledgerfs notes inbox",
		Args:    cobra.RangeArgs(1, 3),
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := fsck(cmd.OutOrStdout(), args[0], args[1:], repair); err != nil || !remote {
				return err
			}
			return fsckRemote(cmd.Context(), cmd.OutOrStdout(), args[0])
		},
	}
	cmd.Flags().BoolVar(&repair, "repair", false, "settle what a crash left (journals, transient pieces), as a mount would")
	cmd.Flags().BoolVar(&remote, "remote", false, "also check that the repository's remote holds every piece and commit marked synced")
	return cmd
}

func fsck(w io.Writer, repoDir string, only []string, repair bool) error {
	opts := store.Options{ReadOnly: true}
	if repair {
		opts = writable()
	}
	repo, names, err := openPages(repoDir, opts, "unmount it first (ledgerfs umount %[1]s)", only)
	if err != nil {
		return err
	}
	defer repo.Close()
	bar := newBar(int64(len(names)), "checking pages")
	bad := 0
	for _, n := range names {
		bar.Describe("checking " + n[0] + "/" + n[1])
		// The bar is cleared and redrawn around each page's lines.
		bar.Clear()
		if !fsckPage(w, repo, n[0], n[1], repair) {
			bad++
		}
		bar.Add(1)
	}
	bar.Finish()
	if bad > 0 {
		return fmt.Errorf("%s with problems: %w", count(bad, "page"), errFsck)
	}
	return nil
}

// fsckPage checks one page and prints what it found; it reports whether
// the page is sound.
func fsckPage(w io.Writer, repo *store.Repository, ledger, page string, repair bool) bool {
	name := ledger + "/" + page
	p, err := repo.Acquire(ledger, page)
	if err != nil {
		fmt.Fprintf(w, "%s: cannot be opened: %v\n", name, err)
		return false
	}
	defer repo.Release(p)
	decodeOp := func(key string, v []byte) error {
		_, err := journal.DecodeOp(key, v)
		return err
	}
	r, err := check.Page(p, decodeOp)
	if err == nil && repair && r.Status.Count() > 0 {
		// The only fault fsck repairs itself; recovery at the open has
		// settled journals and transient pieces.
		if err = p.RepairStatus(r.Status); err == nil {
			fmt.Fprintf(w, "%s: repaired %d status rows\n", name, r.Status.Count())
			r, err = check.Page(p, decodeOp)
		}
	}
	if err != nil {
		fmt.Fprintf(w, "%s: check failed: %v\n", name, err)
		return false
	}
	if r.OK() {
		fmt.Fprintf(w, "%s: ok (%d commits, %d tree nodes, %d values, %d pieces)\n", name, r.Commits, r.Nodes, r.Values, r.Pieces)
		if r.Remote > 0 {
			fmt.Fprintf(w, "  %d pieces in the remote only, fetched when read\n", r.Remote)
		}
		for _, n := range r.Notes {
			fmt.Fprintf(w, "  %s\n", n)
		}
		if r.Unreached > 0 {
			fmt.Fprintf(w, "  %d pieces no commit reaches (left by a collection that stopped; the next one deletes them)\n", r.Unreached)
		}
		return true
	}
	if len(r.Problems) == 0 {
		// What a crash leaves is no damage: the next mount settles it.
		fmt.Fprintf(w, "%s: ok, with %s left by a crash, which the next mount or fsck --repair settles (%d commits, %d tree nodes, %d values, %d pieces)\n",
			name, count(len(r.Leftovers), "kind of leftover"), r.Commits, r.Nodes, r.Values, r.Pieces)
	} else {
		fmt.Fprintf(w, "%s: %s, %s left by a crash (%d commits, %d tree nodes, %d values, %d pieces read)\n",
			name, count(len(r.Problems), "problem"), count(len(r.Leftovers), "kind of leftover"), r.Commits, r.Nodes, r.Values, r.Pieces)
	}
	for _, s := range r.Problems {
		fmt.Fprintf(w, "  problem: %s\n", s)
	}
	for _, s := range r.Leftovers {
		fmt.Fprintf(w, "  left by a crash: %s\n", s)
	}
	return len(r.Problems) == 0
}

// count is n thing, or n things.
func count(n int, thing string) string {
	if n == 1 {
		return "1 " + thing
	}
	if strings.HasSuffix(thing, " of leftover") {
		return fmt.Sprintf("%d kinds of leftover", n)
	}
	return fmt.Sprintf("%d %ss", n, thing)
}

// fsckRemote checks the repository's remote against its status rows.
func fsckRemote(ctx context.Context, w io.Writer, repoDir string) error {
	repo, err := openUnmounted(repoDir, store.Options{ReadOnly: true}, "unmount it first (ledgerfs umount %[1]s)")
	if err != nil {
		return err
	}
	defer repo.Close()
	var rf remoteFlags
	be, opt, err := rf.open(ctx, repo)
	if err != nil {
		return err
	}
	problems, err := cloudsync.Verify(ctx, repo, be, opt)
	if err != nil {
		return syncError(err)
	}
	if len(problems) == 0 {
		fmt.Fprintf(w, "remote %s: holds every piece and commit marked synced\n", be.Location())
		return nil
	}
	fmt.Fprintf(w, "remote %s: %s\n", be.Location(), count(len(problems), "problem"))
	for _, s := range problems {
		fmt.Fprintf(w, "  missing: %s\n", s)
	}
	return fmt.Errorf("the remote lacks what the repository says it holds: %w", errFsck)
}
