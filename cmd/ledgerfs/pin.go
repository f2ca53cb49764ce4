package main

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"

	"github.com/spf13/cobra"
)

func newPin() *cobra.Command {
	var remove bool
	cmd := &cobra.Command{
		Use:   "pin PATH...",
		Short: "Keep files or directories of a mounted page local: fetch their contents now and after every sync",
		Long: `Pin keeps what PATH holds, a file, a directory or a whole page of a
mount, local: the contents a sync left in the remote (to be fetched when
first read) are fetched before pin returns, and those of later changes as
each sync brings them. A pinned path reads offline. --remove lets a path
be fetched when read again; what is held stays.

The same is written to the page's .ledger/local as "pin PATH" or
"unpin PATH"; reading that file lists what is pinned.`,
		Example: "  ledgerfs pin /mnt/l/home/work/projects\n  ledgerfs pin /mnt/l/home/music\n  ledgerfs pin --remove /mnt/l/home/music",
		Args:    cobra.MinimumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			verb := "pin"
			if remove {
				verb = "unpin"
			}
			for _, path := range args {
				if err := pin(path, verb); err != nil {
					return err
				}
			}
			return nil
		},
	}
	cmd.Flags().BoolVar(&remove, "remove", false, "let the paths be fetched when read again")
	return cmd
}

// pin writes "VERB PATH" to the control file of the page PATH is in.
func pin(path, verb string) error {
	abs, err := filepath.Abs(path)
	if err != nil {
		return err
	}
	if _, err := os.Lstat(abs); err != nil {
		return err
	}
	page := abs
	for {
		fi, err := os.Stat(filepath.Join(page, ".ledger", "local"))
		if err == nil && fi.Mode().IsRegular() {
			break
		}
		if err != nil && !errors.Is(err, fs.ErrNotExist) && !errors.Is(err, fs.ErrPermission) {
			return err
		}
		up := filepath.Dir(page)
		if up == page {
			return fmt.Errorf("%s is not in a page of a ledgerfs mount", path)
		}
		page = up
	}
	rel, err := filepath.Rel(page, abs)
	if err != nil {
		return err
	}
	f, err := os.OpenFile(filepath.Join(page, ".ledger", "local"), os.O_WRONLY|os.O_TRUNC, 0)
	if err != nil {
		return err
	}
	_, err = fmt.Fprintf(f, "%s %s\n", verb, filepath.ToSlash(rel))
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return fmt.Errorf("%s %s: %w", verb, path, err)
	}
	return nil
}
