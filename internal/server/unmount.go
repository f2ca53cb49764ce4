package server

import (
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/hanwen/go-fuse/v2/fuse"
)

// unmountWhenDone unmounts once done is closed (Run's context ended),
// retrying while the mount is busy and saying which processes hold it.
// detach (a second signal) detaches the mount (a lazy unmount): it
// disappears from the namespace at once, and the server keeps serving the
// files still open until they are closed, then ends as after any unmount.
// It returns once unmounted or detached, or once the serving ended
// (served is closed).
func unmountWhenDone(server *fuse.Server, mnt string, done, detach <-chan struct{}, served <-chan struct{}, stopping func()) {
	select {
	case <-served:
		return
	case <-done:
	}
	if stopping != nil {
		stopping()
	}
	slog.Info("unmounting", "mountpoint", mnt)
	for i := 0; ; i++ {
		err := server.Unmount()
		if err == nil {
			return
		}
		if i%20 == 0 { // at once, then every 10 s
			slog.Warn("the mount is in use; retrying. Close what uses it, or send the signal again to detach it now",
				"mountpoint", mnt, "err", err, "users", strings.Join(Holders(mnt), ", "))
		}
		select {
		case <-served:
			return
		case <-detach:
			if err := DetachMount(mnt); err != nil {
				slog.Error("detach failed", "mountpoint", mnt, "err", err)
				continue
			}
			slog.Warn("detached: the mount is gone from the namespace; its open files are served until they are closed", "mountpoint", mnt)
			return
		case <-time.After(500 * time.Millisecond):
		}
	}
}

// DetachMount is a lazy unmount: umount -l as root, fusermount3 -u -z
// otherwise.
func DetachMount(mnt string) error {
	if os.Geteuid() == 0 {
		return syscall.Unmount(mnt, syscall.MNT_DETACH)
	}
	if out, err := exec.Command("fusermount3", "-u", "-z", mnt).CombinedOutput(); err != nil {
		return fmt.Errorf("fusermount3 -u -z: %v: %s", err, strings.TrimSpace(string(out)))
	}
	return nil
}

// Holders lists the processes that use a path under mnt, as "pid (name,
// how)": their working or root directory, an open file or a mapping. The
// paths come from /proc and never reach the mount, which this process must
// not touch.
func Holders(mnt string) []string {
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
