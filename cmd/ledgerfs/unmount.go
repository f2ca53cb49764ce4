package main

import (
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/coreos/go-systemd/v22/daemon"
	"github.com/hanwen/go-fuse/v2/fuse"
)

// unmountOnSignal unmounts once a signal came (ctx is done), retrying while
// the mount is busy and saying which processes hold it. A second SIGINT or
// SIGTERM detaches the mount (a lazy unmount): it disappears from the
// namespace at once, and the server keeps serving the files still open
// until they are closed, then ends as after any unmount.
func unmountOnSignal(server *fuse.Server, mnt string, signalled, served <-chan struct{}) {
	select {
	case <-served:
		return
	case <-signalled:
	}
	notifySystemd(daemon.SdNotifyStopping)
	again := make(chan os.Signal, 1)
	signal.Notify(again, syscall.SIGINT, syscall.SIGTERM)
	defer signal.Stop(again)
	slog.Info("unmounting", "mountpoint", mnt)
	for i := 0; ; i++ {
		err := server.Unmount()
		if err == nil {
			return
		}
		if i%20 == 0 { // at once, then every 10 s
			slog.Warn("the mount is in use; retrying. Close what uses it, or send the signal again to detach it now",
				"mountpoint", mnt, "err", err, "users", strings.Join(holders(mnt), ", "))
		}
		select {
		case <-served:
			return
		case <-again:
			if err := detachMount(mnt); err != nil {
				slog.Error("detach failed", "mountpoint", mnt, "err", err)
				continue
			}
			slog.Warn("detached: the mount is gone from the namespace; its open files are served until they are closed", "mountpoint", mnt)
			return
		case <-time.After(500 * time.Millisecond):
		}
	}
}

// detachMount is a lazy unmount: umount -l as root, fusermount3 -u -z
// otherwise.
func detachMount(mnt string) error {
	if os.Geteuid() == 0 {
		return syscall.Unmount(mnt, syscall.MNT_DETACH)
	}
	if out, err := exec.Command("fusermount3", "-u", "-z", mnt).CombinedOutput(); err != nil {
		return fmt.Errorf("fusermount3 -u -z: %v: %s", err, strings.TrimSpace(string(out)))
	}
	return nil
}

// holders lists the processes that use a path under mnt, as "pid (name,
// how)": their working or root directory, an open file or a mapping. The
// paths come from /proc and never reach the mount, which this process must
// not touch.
func holders(mnt string) []string {
	procs, err := os.ReadDir("/proc")
	if err != nil {
		return nil
	}
	under := func(p string) bool {
		return p == mnt || strings.HasPrefix(p, mnt+"/")
	}
	self := os.Getpid()
	var out []string
	for _, e := range procs {
		pid, err := strconv.Atoi(e.Name())
		if err != nil || pid == self {
			continue
		}
		dir := filepath.Join("/proc", e.Name())
		var how []string
		for _, l := range []string{"cwd", "root", "exe"} {
			if p, err := os.Readlink(filepath.Join(dir, l)); err == nil && under(p) {
				how = append(how, l)
			}
		}
		if fds, err := os.ReadDir(filepath.Join(dir, "fd")); err == nil {
			for _, fd := range fds {
				if p, err := os.Readlink(filepath.Join(dir, "fd", fd.Name())); err == nil && under(p) {
					how = append(how, "open file")
					break
				}
			}
		}
		if maps, err := os.ReadFile(filepath.Join(dir, "maps")); err == nil && strings.Contains(string(maps), " "+mnt+"/") {
			how = append(how, "mapped file")
		}
		if len(how) == 0 {
			continue
		}
		comm, _ := os.ReadFile(filepath.Join(dir, "comm")) // gone meanwhile: no name
		out = append(out, fmt.Sprintf("%d (%s, %s)", pid, strings.TrimSpace(string(comm)), strings.Join(slices.Compact(how), ", ")))
	}
	return out
}
