package main

import (
	"context"
	"errors"
	"fmt"
	"os/signal"
	"syscall"
	"text/tabwriter"

	"github.com/spf13/cobra"

	"github.com/ledgerfs/ledgerfs/internal/cloudsync"
	"github.com/ledgerfs/ledgerfs/internal/remote"
	"github.com/ledgerfs/ledgerfs/store"
)

func newKey() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "key list|add|passwd|remove [REPO] [--remote URL]",
		Short: "List, add, change or remove the passphrases and key files of an encrypted remote",
		Long: `An encrypted remote keeps its master key in key objects, each the key
wrapped under one passphrase or key file; any of them lets a new device
join. The key commands manage them, as restic's key command does:

  list     the key objects: id, kind (argon2id: a passphrase; key-file),
           when made, and * by the one the secret given opens
  add      a key object under the new passphrase (--new-password-file)
           or key file (--new-key-file)
  passwd   adds the new one, then removes those the current secret opens
  remove   the key object ID (or a unique prefix of it); the last one is
           refused, since no device could join after it

The remote is the repository's (REPO, not mounted), or --remote with
--endpoint and --region. A repository that joined the remote keeps its key,
so add, list and remove need no current secret there; otherwise, and for
passwd always, the current one is given as for sync ($LEDGERFS_PASSWORD,
$LEDGERFS_PASSWORD_FILE, --password-file or --key-file). The master key
never changes: devices that joined sync on without a secret.`,
		Example: "  LEDGERFS_PASSWORD_FILE=~/.old-pass ledgerfs key passwd ~/.ledgerfs --new-password-file ~/.new-pass\n" +
			"  ledgerfs key add ~/.ledgerfs --new-key-file ~/ledgerfs.key\n" +
			"  ledgerfs key list --remote s3://my-bucket/laptop --key-file ~/ledgerfs.key\n" +
			"  ledgerfs key remove ~/.ledgerfs 3f9a2c",
	}
	cmd.AddCommand(keyCommand("list", "List the key objects of an encrypted remote", cobra.MaximumNArgs(1), runKeyList),
		keyCommand("add", "Add a key object under a new passphrase or key file", cobra.MaximumNArgs(1), runKeyAdd),
		keyCommand("passwd", "Replace the key objects the current secret opens with one under a new secret", cobra.MaximumNArgs(1), runKeyPasswd),
		keyCommand("remove", "Remove a key object", cobra.RangeArgs(1, 2), runKeyRemove))
	return cmd
}

// keyFlags are a key command's: where the remote is, what opens it now,
// and the new secret.
type keyFlags struct {
	remoteFlags
	newPasswordFile, newKeyFile string
}

// A keyRun is a key command's work, given its remote and arguments.
type keyRun func(ctx context.Context, cmd *cobra.Command, k *keyCommandEnv, args []string) error

// keyCommandEnv is what a key command works with: the repository (nil if
// only --remote was given), the remote, what opens it now, and the flags.
type keyCommandEnv struct {
	repo  *store.Repository
	be    remote.Backend
	opt   cloudsync.Options
	flags *keyFlags
}

func keyCommand(name, short string, args cobra.PositionalArgs, run keyRun) *cobra.Command {
	var f keyFlags
	use := name + " [REPO]"
	if name == "remove" {
		use = "remove [REPO] ID"
	}
	cmd := &cobra.Command{
		Use:   use,
		Short: short,
		Args:  args,
		RunE: func(cmd *cobra.Command, args []string) error {
			ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
			defer stop()
			env := &keyCommandEnv{flags: &f}
			rest := args
			if name != "remove" && len(args) == 1 || name == "remove" && len(args) == 2 {
				repo, err := openUnmounted(args[0], writable(), "give --remote and the current passphrase instead of the repository, or unmount %s first")
				if err != nil {
					return err
				}
				defer repo.Close()
				env.repo, rest = repo, args[1:]
				// Its settings name the remote unless --remote does.
				if f.url == "" {
					if err := f.fromRepository(repo); err != nil {
						return err
					}
				}
			}
			if f.url == "" {
				return errors.New("no remote: name a repository that keeps one, or give --remote s3://BUCKET[/PREFIX] or file:///PATH")
			}
			var err error
			if env.be, err = f.backend(ctx); err != nil {
				return err
			}
			if env.opt, err = f.options(); err != nil {
				return err
			}
			return syncError(run(ctx, cmd, env, rest))
		},
	}
	f.register(cmd)
	if name == "add" || name == "passwd" {
		cmd.Flags().StringVar(&f.newPasswordFile, "new-password-file", "", "a file that holds the new passphrase")
		cmd.Flags().StringVar(&f.newKeyFile, "new-key-file", "", "a file of at least 32 random bytes to keep the key under instead of a passphrase (head -c 32 /dev/urandom > FILE)")
		cmd.MarkFlagsMutuallyExclusive("new-password-file", "new-key-file")
		cmd.MarkFlagsOneRequired("new-password-file", "new-key-file")
	}
	// What belongs to sync and mount only.
	for _, n := range []string{"fetch-timeout", "no-encryption"} {
		cmd.Flags().MarkHidden(n)
	}
	return cmd
}

func runKeyList(ctx context.Context, cmd *cobra.Command, k *keyCommandEnv, _ []string) error {
	keys, err := cloudsync.Keys(ctx, k.repo, k.be, k.opt)
	if err != nil {
		return err
	}
	w := tabwriter.NewWriter(cmd.OutOrStdout(), 0, 4, 2, ' ', 0)
	fmt.Fprintln(w, "ID\tKIND\tCREATED\t")
	for _, key := range keys {
		if key.Err != nil {
			fmt.Fprintf(w, "%s\t?\t?\tdoes not read: %v\n", key.ID, key.Err)
			continue
		}
		mark := ""
		if key.Opens {
			mark = "*"
		}
		fmt.Fprintf(w, "%s\t%s\t%s\t%s\n", key.ID, key.Kind, key.Created.Local().Format("2006-01-02 15:04:05"), mark)
	}
	return w.Flush()
}

func runKeyAdd(ctx context.Context, cmd *cobra.Command, k *keyCommandEnv, _ []string) error {
	secret, err := readSecret(k.flags.newKeyFile, k.flags.newPasswordFile)
	if err != nil {
		return err
	}
	id, err := cloudsync.AddKey(ctx, k.repo, k.be, k.opt, secret)
	if err != nil {
		return err
	}
	fmt.Fprintf(cmd.OutOrStdout(), "added key object %s to %s\n", id, k.be.Location())
	return nil
}

func runKeyPasswd(ctx context.Context, cmd *cobra.Command, k *keyCommandEnv, _ []string) error {
	secret, err := readSecret(k.flags.newKeyFile, k.flags.newPasswordFile)
	if err != nil {
		return err
	}
	added, removed, err := cloudsync.ChangeKey(ctx, k.be, k.opt, secret)
	if err != nil {
		return err
	}
	fmt.Fprintf(cmd.OutOrStdout(), "added key object %s to %s", added, k.be.Location())
	for _, id := range removed {
		fmt.Fprintf(cmd.OutOrStdout(), "; removed %s", id)
	}
	fmt.Fprintln(cmd.OutOrStdout())
	return nil
}

func runKeyRemove(ctx context.Context, cmd *cobra.Command, k *keyCommandEnv, args []string) error {
	id, err := cloudsync.RemoveKey(ctx, k.repo, k.be, k.opt, args[0])
	if err != nil {
		return err
	}
	fmt.Fprintf(cmd.OutOrStdout(), "removed key object %s of %s\n", id, k.be.Location())
	return nil
}
