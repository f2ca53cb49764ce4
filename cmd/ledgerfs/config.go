package main

import (
	"fmt"
	"io"
	"strings"

	"github.com/spf13/cobra"

	"github.com/ledgerfs/ledgerfs/store"
)

func newConfig() *cobra.Command {
	return &cobra.Command{
		Use:   "config REPO [compression=zstd|none] [remote=URL] [remote-endpoint=URL] [remote-region=REGION] [fetch=lazy|all]",
		Short: "Show or set a repository's options",
		Long: `Config shows the options of an unmounted repository, or sets one.

compression  how new content is stored: zstd (the default) compresses each
             chunk at zstd's fastest level and keeps the result when it saves
             at least an eighth; none stores chunks as they are. Content
             already stored stays as it is; both read the same.
remote       the store ledgerfs sync shares the pages through:
             s3://BUCKET[/PREFIX] or file:///PATH (empty: none). A
             repository with a remote keeps every commit not yet synced
             when it collects.
remote-endpoint, remote-region
             the S3 server and the bucket's region, when not given by
             --endpoint and --region or AWS_ENDPOINT_URL and AWS_REGION.
fetch        lazy (the default): a sync brings other devices' commits and
             trees, and a file's content is fetched from the remote when
             first read, then kept; all: a sync brings every file's
             content too, for a machine that must read offline.`,
		Example: "  ledgerfs config ~/.ledgerfs\n  ledgerfs config ~/.ledgerfs compression=none\n" +
			"  ledgerfs config ~/.ledgerfs remote=s3://ledgerfs/home remote-endpoint=http://nas:9000",
		Args: cobra.MinimumNArgs(1),
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
		k, v, ok := strings.Cut(kv, "=")
		switch {
		case !ok:
			return fmt.Errorf("%q: want NAME=VALUE", kv)
		case k == "compression":
			if v != "zstd" && v != "none" {
				return fmt.Errorf("compression=%q: want zstd or none", v)
			}
			if err := repo.SetCompression(v == "zstd"); err != nil {
				return err
			}
		case k == store.SettingRemote:
			if v != "" {
				if err := (&remoteFlags{url: v}).check(); err != nil {
					return err
				}
			}
			fallthrough
		case k == store.SettingFetch && v != "lazy" && v != "all":
			return fmt.Errorf("fetch=%q: want lazy or all", v)
		case k == store.SettingRemoteEndpoint || k == store.SettingRemoteRegion || k == store.SettingFetch:
			if err := repo.SetSetting(k, v); err != nil {
				return err
			}
		default:
			return fmt.Errorf("unknown option %q (compression, remote, remote-endpoint, remote-region, fetch)", k)
		}
	}
	on, err := repo.Compression()
	if err != nil {
		return err
	}
	fmt.Fprintf(w, "compression=%s\n", map[bool]string{true: "zstd", false: "none"}[on])
	for _, k := range []string{store.SettingRemote, store.SettingRemoteEndpoint, store.SettingRemoteRegion, store.SettingFetch} {
		v, err := repo.Setting(k)
		if err != nil {
			return err
		}
		if v != "" {
			fmt.Fprintf(w, "%s=%s\n", k, v)
		}
	}
	return nil
}
