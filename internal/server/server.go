// Package server serves a repository at a mount point: it owns the FUSE
// server, the repository, the mount's collector and every background loop
// (value-log collection, the metrics HTTP server, the unmount that follows
// a cancelled context), and stops them all before the repository closes.
//
// Layer: above fs, gc, journal and store; cmd/ledgerfs runs it.
package server

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"path/filepath"
	"sync"
	"time"

	gofs "github.com/hanwen/go-fuse/v2/fs"
	"github.com/hanwen/go-fuse/v2/fuse"

	"github.com/ledgerfs/ledgerfs/fs"
	"github.com/ledgerfs/ledgerfs/internal/cloudsync"
	"github.com/ledgerfs/ledgerfs/internal/gc"
	"github.com/ledgerfs/ledgerfs/internal/history"
	"github.com/ledgerfs/ledgerfs/internal/metrics"
	"github.com/ledgerfs/ledgerfs/internal/piececache"
	"github.com/ledgerfs/ledgerfs/internal/remote"
	"github.com/ledgerfs/ledgerfs/internal/scrub"
	"github.com/ledgerfs/ledgerfs/journal"
	"github.com/ledgerfs/ledgerfs/store"
)

// Config says what a Server serves and how.
type Config struct {
	Repo       string // the repository's directory
	Mountpoint string
	// Store opens the repository; its OnOpen and OnClose are the
	// server's journal engine's.
	Store store.Options
	// FS configures the filesystem; its Journals, Collector, Pressure and
	// Stats are the server's.
	FS fs.Options
	// Mount configures the FUSE server and the kernel mount.
	Mount gofs.Options
	// MetricsAddr, if set, serves Prometheus metrics at /metrics there.
	MetricsAddr string
	// CollectEvery and CollectAfter schedule the background collection
	// (gc.Collector's Every and After); not for a read-only mount.
	CollectEvery time.Duration
	CollectAfter uint64
	// PruneBelow returns the free space under which history yields to
	// live data on the repository's filesystem (gc.Pressure; 0: never).
	PruneBelow func(*store.Repository) (uint64, error)
	// ScrubEvery is how often each page's pieces are hashed against their
	// digests in the background (scrub.Scrubber), at most ScrubRate bytes
	// a second; 0: never. Not for a read-only mount.
	ScrubEvery time.Duration
	ScrubRate  int
	// GCInterval is how often open pages' value logs are collected
	// (store.Repository.RunGC); 0: never.
	GCInterval time.Duration
	// Mounted, if set, is called once the mount serves; Stopping once
	// Run's context ended and unmounting begins.
	Mounted, Stopping func()
	// Detach, if set, asks a busy unmount to detach the mount instead (a
	// second signal): each receive is one request.
	Detach <-chan struct{}
	// Remote, if set, returns the remote store the mount syncs with (nil:
	// none); it is called, and retried until it succeeds, once the mount
	// serves. SyncEvery is how often the mount pulls other devices'
	// commits; it pushes its own soon after each lands (and pulls first).
	Remote    func(context.Context, *store.Repository) (remote.Backend, error)
	SyncEvery time.Duration
	// Sync says how to unlock an encrypted remote, or make a new one.
	Sync cloudsync.Options
	// CacheSize, if not 0, is the size the repository is kept under by
	// evicting closed, synced pages (gc.EvictOver) after sync rounds.
	CacheSize uint64
	// CollectStore, if not 0, is how often the mount collects its remote
	// store (cloudsync.Collect), with StoreGrace.
	CollectStore time.Duration
	StoreGrace   time.Duration
}

// Server is one repository served at one mount point.
type Server struct {
	cfg       Config
	repo      *store.Repository
	journals  *journal.Engine
	fsys      *fs.FS
	metrics   *metrics.Metrics
	collector *gc.Collector
	scrubber  *scrub.Scrubber // nil: none
	syncKick  chan struct{}   // a commit landed: push soon
	syncer    *syncer         // nil: no remote
	listener  net.Listener    // for metrics, if any
	closeOnce sync.Once
	closeErr  error
}

// New opens the repository and builds the filesystem; nothing serves and
// no goroutine runs until Run. A failure closes what it opened.
func New(cfg Config) (s *Server, err error) {
	s = &Server{cfg: cfg, journals: journal.NewEngine(), syncKick: make(chan struct{}, 1)}
	s.repo, err = store.Open(cfg.Repo, s.journals.Hooks(cfg.Store))
	if err != nil {
		if errors.Is(err, store.ErrLocked) {
			return nil, fmt.Errorf("repository %s is already served by another process: %w", cfg.Repo, store.ErrLocked)
		}
		return nil, err
	}
	opened := s // s is nil once a failure returns
	defer func() {
		if err != nil {
			opened.Close()
		}
	}()
	if s.repo.Created() {
		slog.Info("created a new repository", "repo", cfg.Repo)
	}
	s.metrics = metrics.New(s.repo)
	observers := journal.Observers{Commit: func(ledger, page string, explicit bool, changes int) {
		s.metrics.ObserveCommit(explicit, changes)
		if y := s.syncer; y != nil {
			y.changed(ledger, page)
		}
		select {
		case s.syncKick <- struct{}{}:
		default:
		}
	}}
	// Versions are indexed as commits land: a listing of a long history's
	// versions reads the index rather than diffing every commit.
	observers.Landed = history.IndexLanded
	fo := cfg.FS
	fo.Journals, fo.Stats = s.journals, s.metrics.Text
	fo.SyncStatus = func(p *store.Page) (string, error) {
		rs, err := cloudsync.StatusOf(s.repo)
		if err != nil {
			return "", err
		}
		ps, err := cloudsync.PageStatusOf(p)
		return cloudsync.Text(rs, ps), err
	}
	if !cfg.Store.ReadOnly && cfg.ScrubEvery > 0 {
		s.scrubber = &scrub.Scrubber{Repo: s.repo, Every: cfg.ScrubEvery, Rate: cfg.ScrubRate, Observe: s.metrics.ObserveScrub}
	}
	if !cfg.Store.ReadOnly {
		s.collector = &gc.Collector{Repo: s.repo, Every: cfg.CollectEvery, After: cfg.CollectAfter, Observe: s.metrics.ObserveCollection}
		fo.Collector = s.collector
		observers.Removed = s.collector.Removed
		if cfg.PruneBelow != nil {
			below, err := cfg.PruneBelow(s.repo)
			if err != nil {
				return nil, err
			}
			if below > 0 {
				pressure := &gc.Pressure{Repo: s.repo, Below: below, Collector: s.collector}
				fo.Pressure = pressure
				observers.Removed = func(ledger, page string, n uint64) {
					s.collector.Removed(ledger, page, n)
					pressure.Removed(ledger, page, n)
				}
			}
		}
	}
	s.journals.Observe(observers)
	if s.fsys, err = fs.New(s.repo, fo); err != nil {
		return nil, err
	}
	if s.collector != nil {
		s.collector.Busy = s.fsys.Busy
		s.collector.Pinned = s.fsys.Pinned
		if fo.Pressure != nil {
			fo.Pressure.Pinned = s.fsys.Pinned
		}
	}
	if cfg.Remote != nil && !cfg.Store.ReadOnly {
		s.syncer = &syncer{s: s, ready: make(chan struct{})}
		if cfg.CacheSize > 0 {
			// What reads fetch goes to a cache of its own, within
			// the cache size, not into the page dbs.
			c, err := piececache.Open(filepath.Join(s.repo.Dir(), "cache"), int64(cfg.CacheSize))
			if err != nil {
				return nil, err
			}
			s.cfg.Sync.Cache = c
			s.syncer.sizeCache()
		}
		s.repo.SetFetcher(s.syncer)
		if err := s.syncer.joinFirst(); err != nil {
			return nil, err
		}
	}
	if cfg.MetricsAddr != "" {
		if s.listener, err = net.Listen("tcp", cfg.MetricsAddr); err != nil {
			return nil, fmt.Errorf("--metrics: %w", err)
		}
	}
	return s, nil
}

// Run mounts the filesystem and serves it until it is unmounted from
// outside (umount, fusermount3 -u) or ctx ends, which unmounts it (retrying
// while the mount is busy). Every goroutine it starts has ended when it
// returns, and the filesystem has committed what was pending.
func (s *Server) Run(ctx context.Context) error {
	raw := s.metrics.Wrap(gofs.NewNodeFS(s.fsys.Root(), &s.cfg.Mount))
	srv, err := mount(s.cfg.Mountpoint, raw, &s.cfg.Mount.MountOptions)
	if err != nil {
		return fmt.Errorf("mount %s: %w", s.cfg.Mountpoint, err)
	}
	var loops sync.WaitGroup
	stop := make(chan struct{})
	if s.collector != nil {
		loops.Go(s.collector.Run)
	}
	if s.scrubber != nil {
		loops.Go(s.scrubber.Run)
	}
	if s.cfg.GCInterval > 0 && !s.cfg.Store.ReadOnly {
		loops.Go(func() {
			t := time.NewTicker(s.cfg.GCInterval)
			defer t.Stop()
			for {
				select {
				case <-stop:
					return
				case <-t.C:
					s.repo.RunGC()
				}
			}
		})
	}
	var web *http.Server
	if s.listener != nil {
		mux := http.NewServeMux()
		mux.Handle("/metrics", s.metrics.Handler())
		web = &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}
		l := s.listener
		s.listener = nil // Serve closes it
		loops.Go(func() {
			if err := web.Serve(l); !errors.Is(err, http.ErrServerClosed) {
				slog.Warn("metrics server stopped", "err", err)
			}
		})
		slog.Info("metrics listening", "addr", l.Addr().String())
	}
	syncCtx, stopSync := context.WithCancel(context.Background())
	sy := s.syncer
	if sy != nil {
		loops.Go(func() { sy.run(syncCtx) })
	}
	served := make(chan struct{})
	loops.Go(func() { unmountWhenDone(srv, s.cfg.Mountpoint, ctx.Done(), s.cfg.Detach, served, s.cfg.Stopping) })
	if s.cfg.Mounted != nil {
		s.cfg.Mounted()
	}
	srv.Wait()
	close(served)
	slog.Info("unmounted", "mountpoint", s.cfg.Mountpoint)
	close(stop)
	stopSync()
	if s.collector != nil {
		s.collector.Close()
	}
	if s.scrubber != nil {
		s.scrubber.Close()
	}
	if web != nil {
		sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		web.Shutdown(sctx)
		cancel()
	}
	loops.Wait()
	s.fsys.Close()
	if sy != nil {
		// What was written up to the unmount goes up now, if the
		// remote answers within a while; else the next sync sends it.
		sy.last()
	}
	return nil
}

// Close closes the repository, and what New opened for Run if Run did not
// run. Call it after Run has returned.
func (s *Server) Close() error {
	s.closeOnce.Do(func() {
		if s.listener != nil {
			s.listener.Close()
		}
		if s.repo != nil {
			s.closeErr = s.repo.Close()
		}
	})
	return s.closeErr
}

// mount mounts raw at mnt and serves it. It is go-fuse's fs.Mount without
// WaitMount, whose poll hack opens a file on the new mount from this
// process: a kill -9 that lands while that request is being served leaves
// a process that can neither finish exiting (its thread waits,
// uninterruptibly, for a reply only it could send) nor serve, and every
// process that touches the mount hangs with it. The server never touches
// its own mount: on Linux the mount exists once NewServer returns, and the
// kernel stops sending POLL after the first ENOSYS, which go-fuse answers.
// The serving goroutine ends when the mount goes; Wait waits for it.
func mount(mnt string, raw fuse.RawFileSystem, opts *fuse.MountOptions) (*fuse.Server, error) {
	srv, err := fuse.NewServer(raw, mnt, opts)
	if err != nil {
		return nil, err
	}
	go srv.Serve()
	return srv, nil
}
