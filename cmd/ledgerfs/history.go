package main

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"

	"github.com/schollz/progressbar/v3"
	"github.com/spf13/cobra"
	"golang.org/x/term"

	"github.com/ledgerfs/ledgerfs/internal/history"
	"github.com/ledgerfs/ledgerfs/internal/keypath"
	"github.com/ledgerfs/ledgerfs/journal"
	"github.com/ledgerfs/ledgerfs/store"
)

func newLog() *cobra.Command {
	return &cobra.Command{
		Use:   "log REPO LEDGER PAGE [PATH]",
		Short: "Print a page's commits, or the versions of one entry",
		Long: `Log prints one line per commit of the page, newest first: commit id,
generation, time, parents and the number of keys changed; this is the
page's .ledger/log. With PATH (the entry's path inside the page, as the
mount shows it) it prints the entry's versions instead, oldest first: the
name the version has under .ledger/versions/PATH/, its size and its commit.

The repository is opened read-only; while it is mounted, read the same
history under the mount's LEDGER/PAGE/.ledger/ instead.`,
		Example: `  ledgerfs log ~/.ledgerfs notes inbox
  ledgerfs log ~/.ledgerfs notes inbox 2026/todo.txt`,
		Args: cobra.RangeArgs(3, 4),
		RunE: func(cmd *cobra.Command, args []string) error {
			return withPage(args[0], args[1], args[2], func(p *store.Page) error {
				var out io.Writer = cmd.OutOrStdout()
				if len(args) == 3 && !term.IsTerminal(int(os.Stdout.Fd())) {
					// Lines a terminal shows as they come are their own
					// progress; written to a file or a pipe, a bar is.
					bar, err := commitBar(p)
					if err != nil {
						return err
					}
					defer bar.Finish()
					out = io.MultiWriter(out, lineCounter{bar})
				}
				w := bufio.NewWriter(out)
				if err := writeHistory(w, p, args[3:]); err != nil {
					return err
				}
				return w.Flush() // a closed pipe, a full disk
			})
		},
	}
}

// writeHistory writes the page's log, or with a path the versions of that
// entry.
func writeHistory(w io.Writer, p *store.Page, path []string) error {
	if len(path) == 0 {
		return history.WriteLog(w, p)
	}
	key, err := entryKey(path[0])
	if err != nil {
		return err
	}
	// The mount's index of versions, and a walk of what it does not cover
	// (the repository is open read-only: nothing is recorded).
	x, err := history.OpenVersionIndex(p)
	if err == nil {
		err = x.Update(p)
	}
	if err != nil {
		return err
	}
	vs, err := history.OfName(p, key, x.Of)
	if err != nil {
		return err
	}
	if len(vs) == 0 {
		return fmt.Errorf("%s: no entry of this name in the page's history", path[0])
	}
	for _, v := range vs {
		if _, err := fmt.Fprintf(w, "%s %d %s\n", v.Name(), v.Entry.Meta.Size, v.Commit.ID); err != nil {
			return err
		}
	}
	return nil
}

func newCat() *cobra.Command {
	var at string
	cmd := &cobra.Command{
		Use:   "cat REPO LEDGER PAGE PATH",
		Short: "Print an entry's content, now or at an earlier commit or time",
		Long: `Cat writes the content of the entry at PATH (its path inside the page, as
the mount shows it) to standard output: as it is now, or with --at as it
was at a commit (full id or a unique prefix of at least 4 hex digits) or at
a time (RFC 3339 or Unix seconds). A symbolic link prints its target.

The repository is opened read-only; while it is mounted, read the same
content under the mount's LEDGER/PAGE/.ledger/ instead.`,
		Example: `  ledgerfs cat ~/.ledgerfs notes inbox todo.txt
  ledgerfs cat ~/.ledgerfs notes inbox todo.txt --at 3fa2b1c4
  ledgerfs cat ~/.ledgerfs notes inbox todo.txt --at 2026-11-01T09:00:00Z`,
		Args: cobra.ExactArgs(4),
		RunE: func(cmd *cobra.Command, args []string) error {
			key, err := entryKey(args[3])
			if err != nil {
				return err
			}
			return withPage(args[0], args[1], args[2], func(p *store.Page) error {
				c, err := p.Head()
				if err == nil && at != "" {
					c, err = history.Resolve(p, at)
				}
				if err != nil {
					return err
				}
				t := p.Tree(c)
				e, ok, err := t.Get(key)
				if err == nil && ok {
					e, ok, err = t.Follow(e) // a name of a file with hard links
				}
				if err != nil {
					return err
				}
				if !ok {
					return fmt.Errorf("%s: no such entry at commit %s", args[3], c.ID)
				}
				if e.Meta.Symlink != "" {
					_, err := io.WriteString(cmd.OutOrStdout(), e.Meta.Symlink+"\n")
					return err
				}
				if e.Meta.Size == 0 {
					return nil
				}
				r, err := p.OpenValue(e.Value)
				if err != nil {
					return err
				}
				_, err = io.Copy(cmd.OutOrStdout(), io.NewSectionReader(r, 0, int64(e.Meta.Size)))
				return err
			})
		},
	}
	cmd.Flags().StringVar(&at, "at", "", "a commit id, id prefix or time (RFC 3339 or Unix seconds)")
	return cmd
}

// entryKey turns a path inside a page, as the mount shows it, into its key.
func entryKey(path string) (string, error) {
	comps := strings.Split(strings.Trim(path, "/"), "/")
	key, _, err := keypath.Key(comps)
	if err != nil {
		return "", fmt.Errorf("%s: not a path the mount shows: %w", path, err)
	}
	return key, nil
}

// withPage opens the repository read-only and runs fn with a page. A
// repository being served is locked by its mount: say where to look.
func withPage(repoDir, ledger, page string, fn func(p *store.Page) error) error {
	if _, err := os.Stat(repoDir); err != nil {
		return fmt.Errorf("repository: %w", err)
	}
	// A page a crash left is recovered first, as the next mount would.
	repo, err := store.Open(repoDir, journal.NewEngine().Hooks(store.Options{ReadOnly: true}))
	if errors.Is(err, store.ErrLocked) {
		if at := mountOf(repoDir); at != "" {
			return fmt.Errorf("repository %s is mounted at %s: read its history under %s/%s/%s/.ledger/ (%w)", repoDir, at, at, ledger, page, store.ErrLocked)
		}
		return fmt.Errorf("repository %s: %w", repoDir, err)
	}
	if err != nil {
		return err
	}
	defer repo.Close()
	// What a sync left in the remote is fetched when read.
	stop, err := fetchFromRemote(repo)
	if err != nil {
		return err
	}
	defer stop()
	p, err := repo.Acquire(ledger, page)
	if errors.Is(err, store.ErrNotFound) {
		return fmt.Errorf("no page %s/%s in %s", ledger, page, repoDir)
	}
	if err != nil {
		return err
	}
	defer repo.Release(p)
	return fn(p)
}

// commitBar is a bar over the page's commits.
func commitBar(p *store.Page) (*progressbar.ProgressBar, error) {
	n := int64(1) // the first, empty commit has no row
	err := p.CommitIDs(nil, func(store.CommitID) error { n++; return nil })
	return newBar(n, "reading commits"), err
}

// lineCounter advances a bar by the lines written through it.
type lineCounter struct{ bar *progressbar.ProgressBar }

func (l lineCounter) Write(b []byte) (int, error) {
	l.bar.Add(bytes.Count(b, []byte("\n")))
	return len(b), nil
}
