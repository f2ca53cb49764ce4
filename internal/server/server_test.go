package server

import (
	"context"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	gofs "github.com/hanwen/go-fuse/v2/fs"
	"github.com/hanwen/go-fuse/v2/fuse"
	"go.uber.org/goleak"

	"github.com/ledgerfs/ledgerfs/store"
)

// A server stops every goroutine it started, the FUSE server's, the
// collector's, the value-log ticker's, the metrics server's and the
// unmount watcher's, by the time Run and Close return. The test process
// never touches the mount it serves (see mount).
func TestRunStopsItsGoroutines(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("mounting needs root")
	}
	if _, err := os.Stat("/dev/fuse"); err != nil {
		t.Skip("no /dev/fuse")
	}
	defer goleak.VerifyNone(t, goleak.IgnoreCurrent())
	dir := t.TempDir()
	mnt := filepath.Join(dir, "mnt")
	if err := os.Mkdir(mnt, 0o755); err != nil {
		t.Fatal(err)
	}
	mounted := make(chan struct{})
	s, err := New(Config{
		Repo:         filepath.Join(dir, "repo"),
		Mountpoint:   mnt,
		Mount:        gofs.Options{MountOptions: fuse.MountOptions{DirectMount: true, Name: "ledgerfs-test", FsName: "ledgerfs-test"}},
		MetricsAddr:  "127.0.0.1:0",
		CollectEvery: 10 * time.Millisecond,
		PruneBelow:   func(*store.Repository) (uint64, error) { return 1 << 20, nil },
		GCInterval:   10 * time.Millisecond,
		Mounted:      func() { close(mounted) },
	})
	if err != nil {
		t.Fatal(err)
	}
	addr := s.listener.Addr().String()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	ran := make(chan error, 1)
	go func() { ran <- s.Run(ctx) }()
	select {
	case <-mounted:
	case err := <-ran:
		t.Fatalf("Run returned before mounting: %v", err)
	}
	t.Cleanup(func() { DetachMount(mnt) }) // if the unmount below failed
	client := &http.Client{Transport: &http.Transport{DisableKeepAlives: true}}
	resp, err := client.Get("http://" + addr + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	client.CloseIdleConnections()
	if !strings.Contains(string(body), "ledgerfs_") {
		t.Fatalf("metrics served: %.200q", body)
	}
	cancel()
	select {
	case err := <-ran:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("Run did not return within 30 s of its context ending")
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if m, err := os.ReadFile("/proc/self/mountinfo"); err == nil && strings.Contains(string(m), " "+mnt+" ") {
		t.Fatalf("%s is still mounted after Run returned", mnt)
	}
}

// A New that fails after it opened the repository closes it, and returns
// the error: it does not panic, and the repository opens again.
func TestNewFailureClosesTheRepository(t *testing.T) {
	defer goleak.VerifyNone(t, goleak.IgnoreCurrent())
	repo := filepath.Join(t.TempDir(), "repo")
	for range 2 {
		s, err := New(Config{Repo: repo, Mountpoint: t.TempDir(), MetricsAddr: "127.0.0.1:-1"})
		if err == nil || s != nil || !strings.Contains(err.Error(), "--metrics") {
			t.Fatalf("New with a bad metrics address: %v, %v", s, err)
		}
	}
}
