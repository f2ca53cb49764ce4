package main

import (
	"fmt"
	"io"
	"strings"

	"github.com/spf13/cobra"
)

func newConfig() *cobra.Command {
	return &cobra.Command{
		Use:   "config REPO [compression=zstd|none]",
		Short: "Show or set a repository's options",
		Long: `Config shows the options of an unmounted repository, or sets one.

compression  how new content is stored: zstd (the default) compresses each
             chunk at zstd's fastest level and keeps the result when it saves
             at least an eighth; none stores chunks as they are. Content
             already stored stays as it is; both read the same.`,
		Example: "  ledgerfs config ~/.ledgerfs\n  ledgerfs config ~/.ledgerfs compression=none",
		Args:    cobra.RangeArgs(1, 2),
		RunE: func(cmd *cobra.Command, args []string) error {
			return config(cmd.OutOrStdout(), args[0], args[1:])
		},
	}
}

func config(w io.Writer, repoDir string, set []string) error {
	repo, err := openUnmounted(repoDir, writable(), "unmount it to change its options (ledgerfs umount %s)")
	if err != nil {
		return err
	}
	defer repo.Close()
	for _, kv := range set {
		k, v, _ := strings.Cut(kv, "=")
		switch {
		case k != "compression":
			return fmt.Errorf("unknown option %q (compression)", k)
		case v != "zstd" && v != "none":
			return fmt.Errorf("compression=%q: want zstd or none", v)
		}
		if err := repo.SetCompression(v == "zstd"); err != nil {
			return err
		}
	}
	on, err := repo.Compression()
	if err != nil {
		return err
	}
	fmt.Fprintf(w, "compression=%s\n", map[bool]string{true: "zstd", false: "none"}[on])
	return nil
}
