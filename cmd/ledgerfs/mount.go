package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"net/http"
	_ "net/http/pprof"
	"os"
	"os/signal"
	"path/filepath"
	"runtime/debug"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/coreos/go-systemd/v22/daemon"
	"github.com/dustin/go-humanize"
	gofs "github.com/hanwen/go-fuse/v2/fs"
	"github.com/hanwen/go-fuse/v2/fuse"
	"github.com/moby/sys/mountinfo"
	"github.com/spf13/cobra"

	"github.com/ledgerfs/ledgerfs/fs"
	"github.com/ledgerfs/ledgerfs/internal/cloudsync"
	"github.com/ledgerfs/ledgerfs/internal/remote"
	"github.com/ledgerfs/ledgerfs/internal/server"
	"github.com/ledgerfs/ledgerfs/store"
)

// DefaultRepo is where a repository lives when none is named.
func defaultRepo() string {
	if d := os.Getenv("LEDGERFS_REPO"); d != "" {
		return d
	}
	home, err := os.UserHomeDir()
	if err != nil {
		return ".ledgerfs"
	}
	return filepath.Join(home, ".ledgerfs")
}

func newMount() *cobra.Command {
	var (
		readOnly     bool
		allowOther   bool
		nonEmpty     bool
		idlePages    int
		cacheSecs    float64
		gcInterval   time.Duration
		pprofAddr    string
		memLimit     int64
		gcPercent    int
		nodeCache    int64
		closeWait    time.Duration
		reserve      string
		showUID      int64
		showGID      int64
		daemonMode   bool
		logFile      string
		options      []string
		metricsAt    string
		collectEvery time.Duration
		collectAfter string
		cacheSize    string
		pruneBelow   string
		scrubEvery   time.Duration
		scrubRate    string
		trimMapped   bool
		rf           remoteFlags
		syncEvery    time.Duration
		collectStore time.Duration
		storeGrace   time.Duration
	)
	cmd := &cobra.Command{
		Use:   "mount [flags] [REPO] MOUNTPOINT",
		Short: "Serve a repository at a mount point until unmounted or interrupted",
		Long: `Mount serves the repository REPO at MOUNTPOINT in the foreground, until the
filesystem is unmounted (umount, fusermount3 -u) or the process receives
SIGINT or SIGTERM; then it commits what is pending and unmounts cleanly.
REPO defaults to $LEDGERFS_REPO or ~/.ledgerfs. Both are created when
missing. As root the mount is made directly; otherwise through fusermount3.`,
		Example: `  ledgerfs mount ~/.ledgerfs /mnt/l
  ledgerfs mount /mnt/l                 # the default repository`,
		Args: cobra.RangeArgs(1, 2),
		RunE: func(cmd *cobra.Command, args []string) error {
			repoDir, mnt := defaultRepo(), args[0]
			if len(args) == 2 {
				repoDir, mnt = args[0], args[1]
			}
			kernelOpts, err := applyOptions(cmd.Flags(), options)
			if err != nil {
				return err
			}
			if daemonMode && !background() {
				if logFile == "" {
					logFile = defaultLogFile(mnt)
				}
				return daemonize(logFile)
			}
			debugLog, _ := cmd.Flags().GetBool("debug") // registered below: no error
			if gcPercent <= 0 {
				return fmt.Errorf("--gc-percent %d: must be positive", gcPercent)
			}
			for _, id := range []struct {
				flag string
				v    int64
			}{{"--uid", showUID}, {"--gid", showGID}} {
				if id.v < -1 || id.v >= math.MaxUint32 {
					return fmt.Errorf("%s %d: not an id (0 to %d)", id.flag, id.v, uint32(math.MaxUint32-1))
				}
			}
			if nodeCache <= 0 {
				return fmt.Errorf("--node-cache %d: must be positive", nodeCache)
			}
			var reserveBytes uint64 // 0: the store's default
			if reserve != "" {
				var err error
				if reserveBytes, err = parseSize("--reserve", reserve); err != nil {
					return err
				}
				if reserveBytes < store.MinReserve {
					return fmt.Errorf("--reserve %s: must be at least %s", reserve, humanize.IBytes(store.MinReserve))
				}
			}
			// A soft limit makes the garbage collector give memory back
			// before the heap doubles; GOMEMLIMIT, when set, wins.
			if _, set := os.LookupEnv("GOMEMLIMIT"); !set && memLimit > 0 {
				debug.SetMemoryLimit(memLimit << 20)
			}
			// The heap holds ~90 MiB that stays live (Badger's pooled
			// allocators, decoded tree nodes); at Go's default of 100 the
			// collector lets garbage double that. GOGC, when set, wins.
			if _, set := os.LookupEnv("GOGC"); !set {
				debug.SetGCPercent(gcPercent)
			}
			if pprofAddr != "" {
				go func() {
					slog.Info("pprof listening", "addr", pprofAddr)
					slog.Warn("pprof server stopped", "err", http.ListenAndServe(pprofAddr, nil))
				}()
			}
			after, err := parseSize("--collect-after", collectAfter)
			if err != nil {
				return err
			}
			cacheBytes, err := parseSize("--cache-size", cacheSize)
			if err != nil {
				return err
			}
			scrubBytes, err := parseSize("--scrub-rate", scrubRate)
			if err != nil {
				return err
			}
			if storeGrace != 0 && storeGrace < cloudsync.MinGrace {
				return fmt.Errorf("--collect-store-grace %s: at least %s (a device's push may take that long to see a collection's record), or 0", storeGrace, cloudsync.MinGrace)
			}
			if pruneBelow != pruneAuto {
				if _, _, err := parseShare("--prune-below", pruneBelow); err != nil {
					return err
				}
			}
			if rf.url != "" {
				if err := rf.check(); err != nil {
					return err
				}
			}
			syncOpt, err := rf.options()
			if err != nil {
				return err
			}
			return serve(serveConfig{
				syncOpt:    syncOpt,
				pruneBelow: pruneBelow,
				scrubEvery: scrubEvery, scrubRate: int(scrubBytes), trimMapped: trimMapped,
				collectEvery: collectEvery, collectAfter: after, cacheSize: cacheBytes,
				remote: rf, syncEvery: syncEvery, collectStore: collectStore, storeGrace: storeGrace,
				repo: repoDir, mnt: mnt, readOnly: readOnly, allowOther: allowOther, nonEmpty: nonEmpty,
				debug: debugLog, idlePages: idlePages, cache: time.Duration(cacheSecs * float64(time.Second)),
				gcInterval: gcInterval, nodeCache: nodeCache << 20, closeTimeout: closeWait,
				reserve: reserveBytes, showUID: showUID, showGID: showGID, kernelOpts: kernelOpts, metricsAddr: metricsAt,
			})
		},
	}
	f := cmd.Flags()
	f.BoolVarP(&readOnly, "read-only", "r", false, "mount read-only")
	f.BoolVarP(&daemonMode, "daemon", "d", false, "serve in the background: return once the mount serves (exit 0) or failed (exit 1, with the reason), logging to --log-file")
	f.StringVar(&logFile, "log-file", "", "where the background server (-d) logs (default /var/log/ledgerfs/MOUNTPOINT.log as root, ~/.local/state/ledgerfs/MOUNTPOINT.log otherwise, MOUNTPOINT's slashes as dashes)")
	f.StringSliceVarP(&options, "option", "o", nil, "mount options as mount(8) passes them: any flag of this command with _ for - (cache_timeout=2, allow_other, ro, uid=1000), and rw, ro, dev, suid; _netdev, defaults, noauto, nofail, x-systemd.* and the like are for mount(8) and systemd and are ignored")
	f.BoolVar(&nonEmpty, "allow-non-empty", false, "mount over a directory that holds files, hiding them while mounted")
	f.BoolVar(&allowOther, "allow-other", false, "let other users access the mount (needs user_allow_other in /etc/fuse.conf unless root); the kernel checks every access against the files' owners and modes")
	f.Int64Var(&showUID, "uid", -1, "show every file as owned by this user id, whatever owner it stores (a single-user mount of files other users own)")
	f.Int64Var(&showGID, "gid", -1, "show every file's group as this group id, whatever group it stores")
	f.IntVar(&idlePages, "max-idle-pages", 16, "page databases kept open while no file of theirs is in use")
	f.Float64Var(&cacheSecs, "cache-timeout", 60, "seconds the kernel may cache names and attributes; changes it did not make (sync, transactions) are dropped from its cache at once")
	f.Int64Var(&memLimit, "memory-limit", 256, "soft limit of the server's Go heap in MiB (0: none; GOMEMLIMIT overrides)")
	f.IntVar(&gcPercent, "gc-percent", 50, "garbage the server's Go heap may add before a collection, in percent of what is live (Go's default is 100; GOGC overrides)")
	f.Int64Var(&nodeCache, "node-cache", 16, "MiB of decoded tree nodes kept in memory; more makes long history listings faster")
	f.StringVar(&metricsAt, "metrics", "", "serve Prometheus metrics at http://ADDR/metrics, e.g. localhost:9567 (FUSE operations, bytes, commits, deduplication, page dbs)")
	f.StringVar(&pprofAddr, "pprof", "", "serve Go profiles (net/http/pprof) on this address, e.g. localhost:6060")
	f.DurationVar(&gcInterval, "gc-interval", 10*time.Minute, "how often to reclaim value-log space of open pages")
	f.StringVar(&reserve, "reserve", "", fmt.Sprintf("free space to keep on the repository's filesystem, at least %s (default 5 %% of the filesystem, at most %s); changes fail with ENOSPC (\"no space left on device\") rather than fill it, since the database cannot survive a full disk", humanize.IBytes(store.MinReserve), humanize.IBytes(store.MaxDefaultReserve)))
	f.DurationVar(&collectEvery, "collect-every", time.Hour, "how often to collect the pages changed since their last collection: prune the commits their retention policy does not keep and delete what no kept commit reaches (0: only when --collect-after or .collect says)")
	f.StringVar(&pruneBelow, "prune-below", pruneAuto, "when less than this, beyond the size of the file being opened, is free on the repository's filesystem (auto: 4 times --reserve; or a size, or a share of the filesystem, at least 4 times --reserve), a page is pruned to its newest 2 commits before a file of it is written; 0: never")
	f.DurationVar(&scrubEvery, "scrub-every", 30*24*time.Hour, "how often to hash every piece of each page against its digest in the background (reads check Badger's checksums only); damage is logged (0: never)")
	f.BoolVar(&trimMapped, "trim-mapped", false, "drop the page dbs' mapped file pages from the server once its RSS passes 192 MiB (they are page cache, which the kernel reclaims on its own; this costs reads from the disk)")
	f.StringVar(&scrubRate, "scrub-rate", "32MiB", "bytes a second the background scrub reads at most (0: no limit)")
	f.StringVar(&collectAfter, "collect-after", "256MiB", "collect a page soon after its changes deleted or replaced this much content (0: never)")
	f.StringVar(&cacheSize, "cache-size", "0", "with a remote, keep the repository under this size: closed pages whose every change is synced are evicted, least recently used first, and come back from the remote when next opened (0: never)")
	f.DurationVar(&closeWait, "close-timeout", 30*time.Second, "how long to wait for one page database to close (at unmount or when idle) before giving up on it")
	rf.register(cmd)
	f.DurationVar(&collectStore, "collect-store-every", 24*time.Hour, "with a remote, how often to collect the remote store as ledgerfs gc --remote does (0: never)")
	f.DurationVar(&storeGrace, "collect-store-grace", cloudsync.DefaultGrace, "how long a pack the store's collection found unreached stays before a later collection deletes it (0: at once, only when no other device pushes)")
	f.DurationVar(&syncEvery, "sync-every", 2*time.Second, "with a remote (--remote, or ledgerfs config REPO remote=URL), how often an idle mount pulls other devices' commits (every 0.5 s for 30 s after a change here or there); the mount pushes its own soon after each lands")
	return cmd
}

type serveConfig struct {
	repo, mnt            string
	readOnly, allowOther bool
	nonEmpty             bool // mount over a directory with files in it
	debug                bool
	idlePages            int
	nodeCache            int64 // bytes
	cache, gcInterval    time.Duration
	closeTimeout         time.Duration
	reserve              uint64
	showUID, showGID     int64    // -1: the stored owner
	kernelOpts           []string // mount options for the kernel (dev, suid)
	metricsAddr          string
	collectEvery         time.Duration
	collectAfter         uint64
	cacheSize            uint64
	pruneBelow           string // a size or a share of the filesystem
	scrubEvery           time.Duration
	scrubRate            int // bytes a second
	trimMapped           bool
	remote               remoteFlags
	syncOpt              cloudsync.Options
	syncEvery            time.Duration
	collectStore         time.Duration
	storeGrace           time.Duration
}

// serve mounts the repository and serves it until the mount ends or a
// signal stops it: it checks the paths (preparePaths), takes the signals
// (stopOnSignals), and runs a server.Server with the options made from c
// (fsOptions, mountOptions).
func serve(c serveConfig) error {
	mnt, made, err := preparePaths(&c)
	if err != nil {
		return err
	}
	serving := false
	defer func() {
		if !serving {
			removeMade(made)
		}
	}()
	ctx, detach, stop := stopOnSignals()
	defer stop()
	srv, err := server.New(server.Config{
		Repo: c.repo, Mountpoint: mnt,
		Store: store.Options{
			MaxIdlePages:   c.idlePages,
			NodeCacheBytes: c.nodeCache,
			ReadOnly:       c.readOnly,
			CloseTimeout:   c.closeTimeout,
			Reserve:        c.reserve,
			Trim:           c.trimMapped,
		},
		FS:           fsOptions(c),
		Mount:        mountOptions(c),
		MetricsAddr:  c.metricsAddr,
		CollectEvery: c.collectEvery,
		CollectAfter: c.collectAfter,
		PruneBelow:   func(repo *store.Repository) (uint64, error) { return pruneThreshold(repo, c.pruneBelow) },
		GCInterval:   c.gcInterval,
		ScrubEvery:   c.scrubEvery,
		ScrubRate:    c.scrubRate,
		Remote: func(ctx context.Context, repo *store.Repository) (remote.Backend, error) {
			rf := c.remote
			if rf.url == "" {
				if kept, err := repo.Setting(store.SettingRemote); err != nil || kept == "" {
					return nil, err // no remote: no sync
				}
			}
			if err := rf.fromRepository(repo); err != nil {
				return nil, err
			}
			return rf.backend(ctx)
		},
		SyncEvery:    c.syncEvery,
		Sync:         c.syncOpt,
		CacheSize:    c.cacheSize,
		CollectStore: c.collectStore,
		StoreGrace:   c.storeGrace,
		Mounted: func() {
			startGuard(mnt)
			if err := setReadAhead(mnt, readAheadKiB); err != nil {
				slog.Info("kernel read-ahead left at its default", "err", err)
			}
			serving = true
			slog.Info("serving", "repo", c.repo, "mountpoint", mnt)
			reportReady()
		},
		Stopping: func() { notifySystemd(daemon.SdNotifyStopping) },
		Detach:   detach,
	})
	if err != nil {
		return syncError(err)
	}
	defer srv.Close()
	if err := srv.Run(ctx); err != nil {
		return err
	}
	notifySystemd(daemon.SdNotifyStopping)
	return srv.Close()
}

// preparePaths makes c.repo absolute and returns the absolute mount point,
// created if missing (made lists what was created, for a failed mount to
// remove), once both are checked: apart from each other, the mount point a
// directory, not mounted on, and empty unless c.nonEmpty.
func preparePaths(c *serveConfig) (mnt string, made []string, err error) {
	if mnt, err = filepath.Abs(c.mnt); err != nil {
		return "", nil, err
	}
	if c.repo, err = filepath.Abs(c.repo); err != nil {
		return "", nil, err
	}
	if err := checkApart(c.repo, mnt); err != nil {
		return "", nil, err
	}
	if made, err = checkMountpoint(mnt); err != nil {
		return "", nil, err
	}
	if !c.nonEmpty {
		if es, err := os.ReadDir(mnt); err != nil {
			removeMade(made)
			return "", nil, fmt.Errorf("mount point: %w", err)
		} else if len(es) > 0 {
			removeMade(made)
			return "", nil, fmt.Errorf("mount point %s is not empty: its files would be hidden while mounted (--allow-non-empty mounts over them)", mnt)
		}
	}
	return mnt, made, nil
}

// stopOnSignals takes SIGINT and SIGTERM from now on: the first cancels
// ctx, which ends the server cleanly; each later one is sent on detach,
// which detaches a busy mount. A signal that came once the mount was
// visible but before this would kill the process and leave a dead mount.
// stop ends it.
func stopOnSignals() (ctx context.Context, detach chan struct{}, stop func()) {
	signals := make(chan os.Signal, 2)
	signal.Notify(signals, syscall.SIGINT, syscall.SIGTERM)
	ctx, cancel := context.WithCancel(context.Background())
	detach = make(chan struct{})
	served := make(chan struct{}) // ends the signal loop
	done := make(chan struct{})
	go func() {
		defer close(done)
		select {
		case <-signals:
		case <-served:
			return
		}
		cancel()
		for {
			select {
			case <-signals:
				select {
				case detach <- struct{}{}:
				case <-served:
					return
				}
			case <-served:
				return
			}
		}
	}()
	return ctx, detach, func() {
		signal.Stop(signals)
		close(served)
		<-done
		cancel()
	}
}

// fsOptions are the filesystem's options from c.
func fsOptions(c serveConfig) fs.Options {
	fo := fs.Options{ReadOnly: c.readOnly, UID: uint32(os.Getuid()), GID: uint32(os.Getgid())}
	if c.showUID >= 0 {
		id := uint32(c.showUID)
		fo.ShowUID = &id
	}
	if c.showGID >= 0 {
		id := uint32(c.showGID)
		fo.ShowGID = &id
	}
	return fo
}

// mountOptions are go-fuse's and the kernel's options from c.
func mountOptions(c serveConfig) gofs.Options {
	opts := gofs.Options{
		EntryTimeout: &c.cache,
		AttrTimeout:  &c.cache,
		// A mode of 0000 is kept: go-fuse would show it as 0644 or 0755.
		NullPermissions: true,
		UID:             uint32(os.Getuid()),
		GID:             uint32(os.Getgid()),
		MountOptions: fuse.MountOptions{
			FsName:       fsName(c.repo),
			Name:         "ledgerfs",
			DirectMount:  os.Geteuid() == 0,
			AllowOther:   c.allowOther,
			Debug:        c.debug,
			MaxWrite:     1 << 20,
			MaxReadAhead: readAheadKiB << 10,
			// The filesystem drops set-user-ID bits itself on writes,
			// truncations and chowns (fs's killPriv): the kernel then
			// asks for security.capability once per file, not at every
			// write.
			ExtraCapabilities: fuse.CAP_HANDLE_KILLPRIV_V2,
			// Reads reply with bytes, never a descriptor: go-fuse's splice
			// attempt only cost syscalls per reply, and for 1 MiB replies
			// failed (pipe too small) and logged every time.
			DisableSplice: true,
			// Without a writeback cache the kernel sets no mtime on a
			// write, so the next stat finds a new one, and with the
			// kernel's automatic invalidation it then drops every cached
			// page of the file: a database's reads between transactions
			// all came to the server. The filesystem drops them itself
			// where content changes behind the kernel (fs's catchUp: a
			// pull, a transaction, a link's other name).
			ExplicitDataCacheControl: true,
		},
		Logger: nil,
	}
	// The kernel checks permissions against the owners and modes shown,
	// as on a local filesystem: the filesystem stores owners and modes and
	// checks nothing itself.
	opts.MountOptions.Options = append(opts.MountOptions.Options, "default_permissions")
	if c.readOnly {
		opts.MountOptions.Options = append(opts.MountOptions.Options, "ro")
	}
	opts.MountOptions.Options = append(opts.MountOptions.Options, c.kernelOpts...)
	return opts
}

// checkMountpoint creates the mount point if missing and refuses one that
// is not a directory or is already a mount point. It returns the
// directories it created, deepest first, for a failed mount to remove.
func checkMountpoint(mnt string) (made []string, err error) {
	fi, err := os.Stat(mnt)
	switch {
	case errors.Is(err, os.ErrNotExist):
		for d := mnt; ; d = filepath.Dir(d) {
			if _, err := os.Lstat(d); err == nil || d == filepath.Dir(d) {
				break
			}
			made = append(made, d)
		}
		if err := os.MkdirAll(mnt, 0o755); err != nil {
			removeMade(made)
			return nil, err
		}
		return made, nil
	case err != nil:
		var errno syscall.Errno
		if errors.As(err, &errno) && errno == syscall.ENOTCONN {
			return nil, fmt.Errorf("mount point %s is a dead FUSE mount: unmount it first (fusermount3 -u %s)", mnt, mnt)
		}
		return nil, fmt.Errorf("mount point: %w", err)
	case !fi.IsDir():
		return nil, fmt.Errorf("mount point %s is not a directory", mnt)
	}
	mounted, err := isMountpoint(mnt)
	if err != nil {
		return nil, err
	}
	if mounted {
		// A dead FUSE mount can still answer stat from the kernel's cache;
		// statfs always asks its server.
		var st syscall.Statfs_t
		if err := syscall.Statfs(mnt, &st); errors.Is(err, syscall.ENOTCONN) {
			return nil, fmt.Errorf("mount point %s is a dead FUSE mount: unmount it first (fusermount3 -u %s)", mnt, mnt)
		}
		return nil, fmt.Errorf("mount point %s is busy: something is already mounted there", mnt)
	}
	return nil, nil
}

// removeMade removes the directories checkMountpoint made, deepest first,
// as long as they are empty: a mount that failed leaves no mount point
// behind that it created.
func removeMade(made []string) {
	for _, d := range made {
		if err := os.Remove(d); err != nil {
			return
		}
	}
}

// checkApart refuses a mount point inside the repository or a repository
// inside the mount point: the server would serve its own files through the
// mount, and statfs on the mount calls back into it until the server dies.
func checkApart(repo, mnt string) error {
	r, m := resolved(repo), resolved(mnt)
	if within(m, r) || within(r, m) {
		return fmt.Errorf("repository %s and mount point %s overlap: the mount point must be outside the repository, and the repository outside the mount point", repo, mnt)
	}
	return nil
}

// resolved is path with the symlinks of its longest existing prefix
// resolved, so that two names of one directory compare equal.
func resolved(path string) string {
	rest := ""
	for p := path; ; {
		if r, err := filepath.EvalSymlinks(p); err == nil {
			return filepath.Join(r, rest)
		}
		parent := filepath.Dir(p)
		if parent == p {
			return path
		}
		rest = filepath.Join(filepath.Base(p), rest)
		p = parent
	}
}

// within reports whether path is dir or below it.
func within(path, dir string) bool {
	rel, err := filepath.Rel(dir, path)
	return err == nil && rel != ".." && !strings.HasPrefix(rel, "../")
}

// isMountpoint reports whether something is mounted at dir; when
// /proc/self/mountinfo cannot be read, it cannot tell and says no.
func isMountpoint(dir string) (bool, error) {
	ms, err := mountinfo.GetMounts(mountinfo.SingleEntryFilter(dir))
	return err == nil && len(ms) > 0, nil
}

// mountOf returns where the repository at dir is mounted, or "".
func mountOf(dir string) string {
	abs, err := filepath.Abs(dir)
	if err != nil {
		return ""
	}
	ms, err := mountinfo.GetMounts(func(m *mountinfo.Info) (skip, stop bool) {
		return m.Source != fsName(abs), false
	})
	if err != nil || len(ms) == 0 {
		return ""
	}
	return ms[0].Mountpoint
}

// fsName is the source a mount of the repository at abs shows.
func fsName(abs string) string { return "ledgerfs:" + abs }

// parseShare parses a size ("2G") or a share of something ("10%"): the
// share in percent, or the size.
func parseShare(flag, v string) (pct float64, size uint64, err error) {
	if n, ok := strings.CutSuffix(v, "%"); ok {
		pct, err = strconv.ParseFloat(n, 64)
		if err != nil || pct < 0 || pct > 100 {
			return 0, 0, fmt.Errorf("%s %q: want a size such as 2G or a share such as 10%%", flag, v)
		}
		return pct, 0, nil
	}
	size, err = parseSize(flag, v)
	return 0, size, err
}

// pruneAuto, the default --prune-below, ties pruning for space to what
// writes need, not to the filesystem's size: 4 times the reserve (at most
// 512 MiB) beyond the file being opened. A share of a large disk (10 %
// was the default) pruned a user's history with tens of GiB free.
const pruneAuto = "auto"

// pruneThreshold is --prune-below in bytes for repo's filesystem: never
// below 4 times the reserve, which writes cannot use, unless 0.
func pruneThreshold(repo *store.Repository, v string) (uint64, error) {
	if v == pruneAuto {
		return 4 * repo.Reserve(), nil
	}
	pct, size, err := parseShare("--prune-below", v)
	if err != nil {
		return 0, err
	}
	if pct > 0 {
		fsSize, err := repo.FilesystemSize()
		if err != nil {
			return 0, fmt.Errorf("--prune-below: %w", err)
		}
		size = uint64(pct / 100 * float64(fsSize))
	}
	if size == 0 {
		return 0, nil
	}
	return max(size, 4*repo.Reserve()), nil
}
