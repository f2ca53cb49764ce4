package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/dustin/go-humanize"
	"github.com/spf13/cobra"

	"github.com/ledgerfs/ledgerfs/internal/cloudsync"
	"github.com/ledgerfs/ledgerfs/internal/gc"
	"github.com/ledgerfs/ledgerfs/internal/retention"
	"github.com/ledgerfs/ledgerfs/journal"
	"github.com/ledgerfs/ledgerfs/store"
)

// policyFlags are restic's forget flags; set, they replace the stored
// policy for one run.
type policyFlags struct {
	all                                  bool
	last, hourly, daily, weekly, monthly int
	within                               string
}

func (f *policyFlags) register(cmd *cobra.Command) {
	fl := cmd.Flags()
	fl.BoolVar(&f.all, "keep-all", false, "keep every commit")
	fl.IntVar(&f.last, "keep-last", 0, "keep the `N` newest commits")
	fl.StringVar(&f.within, "keep-within", "", "keep every commit within `DURATION` of the newest (30d, 2y5m7d3h, 90m)")
	fl.IntVar(&f.hourly, "keep-hourly", 0, "keep the newest commit of each of the last `N` hours that have one")
	fl.IntVar(&f.daily, "keep-daily", 0, "… of each of the last `N` days")
	fl.IntVar(&f.weekly, "keep-weekly", 0, "… of each of the last `N` weeks")
	fl.IntVar(&f.monthly, "keep-monthly", 0, "… of each of the last `N` months")
}

// policy returns the flags' policy, and whether any flag was given.
func (f *policyFlags) policy(cmd *cobra.Command) (retention.Policy, bool, error) {
	given := false
	for _, n := range []string{"keep-all", "keep-last", "keep-within", "keep-hourly", "keep-daily", "keep-weekly", "keep-monthly"} {
		given = given || cmd.Flags().Changed(n)
	}
	if !given {
		return retention.Policy{}, false, nil
	}
	p := retention.Policy{All: f.all, Last: f.last, Hourly: f.hourly, Daily: f.daily, Weekly: f.weekly, Monthly: f.monthly}
	if f.within != "" {
		d, err := retention.ParseDuration(f.within)
		if err != nil {
			return p, true, err
		}
		p.Within = d
	}
	// Through Parse, for its checks (keep-all alone, not all zero).
	p, err := retention.Parse(p.String())
	return p, true, err
}

// openUnmounted opens a repository that no mount serves, or says how to
// reach it through the mount that does (how, with the mount point for %s).
func openUnmounted(repoDir string, opts store.Options, how string) (*store.Repository, error) {
	if _, err := os.Stat(repoDir); err != nil {
		return nil, fmt.Errorf("repository: %w", err)
	}
	repo, err := store.Open(repoDir, opts)
	if errors.Is(err, store.ErrLocked) {
		if at := mountOf(repoDir); at != "" {
			return nil, fmt.Errorf("repository %s is mounted at %s: %s (%w)", repoDir, at, fmt.Sprintf(how, at), store.ErrLocked)
		}
	}
	return repo, err
}

// openPages opens an unmounted repository (see openUnmounted) and lists
// the pages a command names (see pagesOf).
func openPages(repoDir string, opts store.Options, how string, only []string) (*store.Repository, [][2]string, error) {
	repo, err := openUnmounted(repoDir, opts, how)
	if err != nil {
		return nil, nil, err
	}
	names, err := pagesOf(repo, only)
	if err != nil {
		repo.Close()
		return nil, nil, err
	}
	return repo, names, nil
}

// writable returns the options of a command that changes a repository:
// pages are recovered on open, and their journals committed on close, as a
// mount does.
func writable() store.Options { return journal.NewEngine().Hooks(store.Options{}) }

func newGC() *cobra.Command {
	var dry bool
	var pf policyFlags
	var rf remoteFlags
	var grace time.Duration
	cmd := &cobra.Command{
		Use:   "gc REPO [LEDGER [PAGE]]",
		Short: "Prune history outside the retention policy and give the space back",
		Long: `Gc collects every page of an unmounted repository (or of one ledger, or one
page): it removes the commits the page's retention policy does not keep
(see ledgerfs retention), deletes every tree node, index piece and chunk
that no kept commit reaches, and has the page's db give the space back to
the filesystem (compaction and value-log rewriting). Heads are always kept.
Kept commits whose parents were removed stay valid; the log shows those
parents as pruned.

The --keep-* flags replace the stored policies for this run only:
--keep-last 1 keeps only each page's head. --dry-run says what a run would
remove and changes nothing.

A mounted repository collects itself: idle pages are collected in the
background; writing a page's path (LEDGER/PAGE) to the .collect file at the
mount's root collects it now.

In a repository that syncs, a page keeps what any device's retention policy
keeps (each device's policy for a page comes with its commits), and never a
commit not pushed yet (--keep-* flags given to a run replace them all).
--remote then collects the remote store too, after
the repository: it pulls and pushes, finds the packs no commit this
repository holds reaches, records them in the store, and deletes those a
collection recorded at least --grace ago (1h) and nothing reaches since.
Every device reads the records before it pushes and sends again what it
still needs of a recorded pack. --grace 0 deletes at once: only when no
other device is pushing. One device collects the store at a time (a lock
object in it).`,
		Example: "  ledgerfs gc ~/.ledgerfs\n  ledgerfs gc --dry-run --keep-daily 7 ~/.ledgerfs notes\n  ledgerfs gc --keep-last 1 ~/.ledgerfs notes inbox\n" +
			"  ledgerfs gc --remote ~/.ledgerfs",
		Args: cobra.RangeArgs(1, 3),
		RunE: func(cmd *cobra.Command, args []string) error {
			override, given, err := pf.policy(cmd)
			if err != nil {
				return err
			}
			var p *retention.Policy
			if given {
				p = &override
			}
			bucket := cmd.Flags().Changed("remote")
			if bucket && len(args) > 1 {
				return fmt.Errorf("--remote collects the whole repository and its store: give no ledger or page")
			}
			if bucket && grace != 0 && grace < cloudsync.MinGrace {
				return fmt.Errorf("--grace %s: at least %s (a device's push may take that long to see a collection's record), or 0", grace, cloudsync.MinGrace)
			}
			if err := collect(cmd.OutOrStdout(), args[0], args[1:], p, dry); err != nil || !bucket {
				return err
			}
			if rf.url == keptRemote {
				rf.url = ""
			}
			return collectStore(cmd, args[0], &rf, cloudsync.CollectOptions{Grace: grace, DryRun: dry})
		},
	}
	cmd.Flags().BoolVarP(&dry, "dry-run", "n", false, "say what would be removed, remove nothing")
	pf.register(cmd)
	rf.register(cmd)
	cmd.Flags().Lookup("remote").NoOptDefVal = keptRemote
	cmd.Flags().Lookup("remote").Usage = "collect the remote store too: the repository's, or --remote=URL"
	cmd.Flags().DurationVar(&grace, "grace", cloudsync.DefaultGrace, "with --remote: how long a pack recorded as unreached stays before it is deleted (0: at once)")
	return cmd
}

// keptRemote is --remote given without a value: the repository's.
const keptRemote = "kept"

// collectStore collects the repository's remote store (cloudsync.Collect).
func collectStore(cmd *cobra.Command, repoDir string, rf *remoteFlags, o cloudsync.CollectOptions) error {
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	start := time.Now()
	repo, err := openUnmounted(repoDir, writable(), "the mount syncs; unmount %s to collect its remote store")
	if err != nil {
		return err
	}
	defer repo.Close()
	be, opt, err := rf.open(ctx, repo)
	if err != nil {
		return err
	}
	s, err := cloudsync.New(ctx, repo, be, opt)
	if err != nil {
		return syncError(err)
	}
	defer s.Close()
	var ph phases
	s.Progress = ph.update
	cs, err := s.Collect(ctx, o)
	ph.done()
	if err != nil {
		return err
	}
	s.Close()
	if err := repo.Close(); err != nil {
		return err
	}
	verb := "deleted"
	if o.DryRun {
		verb = "would delete"
	}
	recorded := "recorded"
	if cs.Waiting || o.DryRun {
		recorded = "not recorded"
	}
	repacked := "repacked"
	if o.DryRun || cs.Waiting {
		repacked = "not repacked"
	}
	fmt.Fprintf(cmd.OutOrStdout(), "store %s: %d packs (%s): %d reached, %d mostly unreached and %d small (%s, %s of reached pieces), %d not yet in a batch, %d unreached (%s); %s %d packs (%s)%s; %d commits kept, in %s\n",
		be.Location(), cs.Packs, humanize.IBytes(uint64(cs.Bytes)), cs.Live, cs.Repacked-cs.Small, cs.Small, repacked, humanize.IBytes(uint64(cs.RepackedBytes)), cs.Unknown, cs.Recorded, recorded,
		verb, cs.Deleted, humanize.IBytes(uint64(cs.DeletedBytes)),
		map[bool]string{true: " (batches of other devices wait to apply here: try again later)"}[cs.Waiting], cs.Kept, time.Since(start).Round(time.Millisecond))
	return nil
}

func collect(w io.Writer, repoDir string, only []string, override *retention.Policy, dry bool) error {
	start := time.Now()
	before := store.DiskUsage(repoDir)
	repo, names, err := openPages(repoDir, writable(), "the mount collects idle pages on its own; to collect now, echo LEDGER/PAGE > %s/.collect", only)
	if err != nil {
		return err
	}
	defer repo.Close()
	var total gc.Result
	// A bar per phase of each page: a page's collection is most of the
	// time (marking, deleting, compacting), however many pages there are.
	var ph phases
	for i, n := range names {
		name := fmt.Sprintf("%s/%s (%d of %d)", n[0], n[1], i+1, len(names))
		r, err := gc.CollectPage(repo, n[0], n[1], gc.PageOptions{Policy: override, DryRun: dry, Reclaim: true, Wait: true,
			Progress: func(phase string, done, total int64) { ph.update(name+": "+phase, int(done), int(total)) }})
		ph.done()
		if err != nil {
			return fmt.Errorf("%s/%s: %w", n[0], n[1], err)
		}
		verb := "pruned"
		if dry {
			verb = "would prune"
		}
		fmt.Fprintf(w, "%s/%s: %s %d of %d commits, %d of %d pieces (%s of %s)%s\n", n[0], n[1], verb,
			r.Pruned, r.Commits, r.Deleted, r.Objects, humanize.IBytes(uint64(r.Freed)), humanize.IBytes(uint64(r.Bytes)), compressedText(r))
		total.Add(r)
	}
	if err := repo.Close(); err != nil {
		return err
	}
	after := store.DiskUsage(repoDir)
	fmt.Fprintf(w, "%s: %d of %d commits and %d of %d pieces (%s) %s; on disk %s -> %s in %s\n", count(len(names), "page"),
		total.Pruned, total.Commits, total.Deleted, total.Objects, humanize.IBytes(uint64(total.Freed)),
		map[bool]string{true: "would be removed", false: "removed"}[dry],
		humanize.IBytes(uint64(before)), humanize.IBytes(uint64(after)), time.Since(start).Round(time.Millisecond))
	return nil
}

// pagesOf lists the pages a command names: all, a ledger's, or one.
func pagesOf(repo *store.Repository, only []string) ([][2]string, error) {
	if len(only) > 0 {
		page := ""
		if len(only) > 1 {
			page = only[1]
		}
		if err := repo.CheckScope(only[0], page); err != nil {
			return nil, err
		}
	}
	ledgers := only[:min(len(only), 1)]
	if len(ledgers) == 0 {
		var err error
		if ledgers, err = repo.Ledgers(); err != nil {
			return nil, err
		}
	}
	var names [][2]string
	for _, l := range ledgers {
		pages := only[min(len(only), 1):]
		if len(pages) == 0 {
			var err error
			if pages, err = repo.Pages(l); err != nil {
				return nil, fmt.Errorf("ledger %s: %w", l, err)
			}
		}
		for _, pg := range pages {
			names = append(names, [2]string{l, pg})
		}
	}
	return names, nil
}

// compressedText says what a collection compressed, if anything.
func compressedText(r gc.Result) string {
	if r.Compressed == 0 {
		return ""
	}
	return fmt.Sprintf("; compressed %d pieces, saving %s", r.Compressed, humanize.IBytes(uint64(r.CompressSaved)))
}
