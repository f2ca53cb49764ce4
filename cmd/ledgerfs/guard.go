package main

import (
	"errors"
	"fmt"
	"log/slog"
	"math"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"

	"github.com/moby/sys/mountinfo"
	"github.com/spf13/cobra"
	"golang.org/x/sys/unix"
)

// A server killed with SIGKILL can be left unable to finish exiting: a
// thread writing a cache invalidation to /dev/fuse waits, uninterruptibly,
// for a directory lock that a client holds while it waits for a reply only
// the dead server could send. The connection would end when the server's
// /dev/fuse descriptor is released, which waits for that thread: every
// process touching the mount hangs. Only an abort through fusectl ends it,
// and a dead process cannot ask for one; a small guard process does.

// startGuard starts the guard of the mount at mnt served by this process.
// It needs root (fusectl is root's); without it there is no guard.
func startGuard(mnt string) {
	if os.Geteuid() != 0 {
		return
	}
	ms, err := mountinfo.GetMounts(mountinfo.SingleEntryFilter(mnt))
	if err != nil || len(ms) == 0 {
		slog.Warn("no guard for the mount: it is not in the mount table", "mountpoint", mnt, "err", err)
		return
	}
	self, err := os.Executable()
	if err != nil {
		slog.Warn("no guard for the mount", "err", err)
		return
	}
	// go-fuse opens /dev/fuse without O_CLOEXEC: a guard holding it would
	// keep the connection alive after the server died.
	if err := unix.CloseRange(3, math.MaxUint32, unix.CLOSE_RANGE_CLOEXEC); err != nil {
		slog.Warn("no guard for the mount", "err", err)
		return
	}
	cmd := exec.Command(self, "guard", strconv.Itoa(os.Getpid()), strconv.Itoa(ms[len(ms)-1].Minor))
	cmd.Dir = "/"
	cmd.Stderr = os.Stderr
	// Its own process group: a Ctrl-C meant for the server is not for it.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		slog.Warn("no guard for the mount", "err", err)
		return
	}
	go cmd.Wait() // reaped when it ends, after this process
}

func newGuard() *cobra.Command {
	return &cobra.Command{
		Use:    "guard PID CONNECTION",
		Short:  "Abort a FUSE connection whose server died but cannot finish exiting",
		Hidden: true, // started by mount
		Args:   cobra.ExactArgs(2),
		RunE: func(cmd *cobra.Command, args []string) error {
			pid, err := strconv.Atoi(args[0])
			if err != nil {
				return err
			}
			return guard(pid, args[1])
		},
	}
}

// guard waits for process pid to end. If its main thread has exited while
// other threads live on for some seconds (a SIGKILL that could not
// complete), it aborts FUSE connection conn, which frees them.
func guard(pid int, conn string) error {
	signal.Ignore(syscall.SIGINT, syscall.SIGTERM, syscall.SIGHUP)
	fd, err := unix.PidfdOpen(pid, 0)
	if err != nil {
		return fmt.Errorf("guard: %w", err)
	}
	defer unix.Close(fd)
	stuck := 0
	for {
		// Readable once every thread of the process has exited.
		n, err := unix.Poll([]unix.PollFd{{Fd: int32(fd), Events: unix.POLLIN}}, 1000)
		if n > 0 {
			return nil
		}
		if err != nil && !errors.Is(err, unix.EINTR) {
			return fmt.Errorf("guard: %w", err)
		}
		if !mainThreadExited(pid) {
			stuck = 0
			continue
		}
		if stuck++; stuck < 3 {
			continue
		}
		slog.Error("the server was killed but cannot finish exiting: aborting its FUSE connection", "pid", pid, "connection", conn)
		if err := abortConnection(conn); err != nil {
			return fmt.Errorf("guard: %w", err)
		}
		stuck = -1000 // once
	}
}

// mainThreadExited reports whether process pid's main thread is a zombie.
func mainThreadExited(pid int) bool {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return false
	}
	// pid (comm) state ...: comm may hold spaces and parentheses.
	s := string(b)
	i := strings.LastIndexByte(s, ')')
	return i >= 0 && i+2 < len(s) && s[i+2] == 'Z'
}

// abortConnection writes to fusectl's abort file of connection conn,
// mounting fusectl first if needed.
func abortConnection(conn string) error {
	const ctl = "/sys/fs/fuse/connections"
	if es, _ := os.ReadDir(ctl); len(es) == 0 {
		if err := syscall.Mount("fusectl", ctl, "fusectl", 0, ""); err != nil {
			return fmt.Errorf("mount fusectl: %w", err)
		}
	}
	return os.WriteFile(filepath.Join(ctl, conn, "abort"), []byte("1"), 0)
}
