package main

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"

	"github.com/coreos/go-systemd/v22/daemon"
)

// readyEnv names the descriptor on which a server started by mount -d says
// whether it serves: "ready", or the error that stopped it. Its presence
// also tells the server that it is that background process.
const readyEnv = "LEDGERFS_READY_FD"

// background reports whether this process is a server that mount -d
// started.
func background() bool { return os.Getenv(readyEnv) != "" }

// daemonize starts this command again as a background server in a session
// of its own, with its output appended to logFile, and returns once it
// serves (nil) or has failed (its error). The server is this same binary,
// not a fork: a Go process cannot fork.
func daemonize(logFile string) error {
	if err := os.MkdirAll(filepath.Dir(logFile), 0o755); err != nil {
		return fmt.Errorf("log file: %w", err)
	}
	log, err := os.OpenFile(logFile, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return fmt.Errorf("log file: %w", err)
	}
	defer log.Close()
	r, w, err := os.Pipe()
	if err != nil {
		return err
	}
	defer r.Close()
	exe, err := os.Executable()
	if err != nil {
		return err
	}
	// The command itself, not a helper's call: the server's parent is
	// this process, not mount(8) or mount.fuse3.
	cmd := exec.Command(exe, commandLine()...)
	cmd.Env = append(os.Environ(), readyEnv+"=3")
	cmd.ExtraFiles = []*os.File{w} // descriptor 3
	cmd.Stdout, cmd.Stderr = log, log
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
	if err := cmd.Start(); err != nil {
		w.Close()
		return fmt.Errorf("start the server: %w", err)
	}
	w.Close()
	line, err := bufio.NewReader(r).ReadString('\n')
	line = strings.TrimSpace(line)
	switch {
	case line == "ready":
		cmd.Process.Release()
		return nil
	case line != "":
		err := fmt.Errorf("%s (log: %s)", line, logFile)
		var exit *exec.ExitError
		if errors.As(cmd.Wait(), &exit) && exit.ExitCode() > 1 {
			// The server's own status (3: the repository is in use),
			// so that -d and the foreground mount exit alike.
			return exitStatus{err, exit.ExitCode()}
		}
		return err
	case err != nil && !errors.Is(err, io.EOF):
		return err
	}
	err = cmd.Wait()
	return fmt.Errorf("the server exited before serving (%v); see %s", err, logFile)
}

// reportReady tells whoever waits that the mount serves: mount -d's
// parent, and systemd (Type=notify) when NOTIFY_SOCKET is set.
func reportReady() {
	if f := readyFile(); f != nil {
		fmt.Fprintln(f, "ready")
		f.Close()
		// Nothing of the server uses the directory it was started in.
		os.Chdir("/")
	}
	notifySystemd(daemon.SdNotifyReady)
}

// reportFailure tells mount -d's parent why the server stops before
// serving.
func reportFailure(err error) {
	if f := readyFile(); f != nil {
		fmt.Fprintln(f, strings.ReplaceAll(err.Error(), "\n", " "))
		f.Close()
	}
}

var readyUsed bool

// readyFile returns the descriptor of readyEnv, once.
func readyFile() *os.File {
	if readyUsed || !background() {
		return nil
	}
	readyUsed = true
	fd, err := strconv.Atoi(os.Getenv(readyEnv))
	if err != nil {
		return nil
	}
	return os.NewFile(uintptr(fd), "ready")
}

// notifySystemd sends state to systemd's notification socket, if any.
func notifySystemd(state string) {
	if _, err := daemon.SdNotify(false, state); err != nil {
		slog.Warn("systemd notification failed", "state", state, "err", err)
	}
}

// defaultLogFile is where mount -d at mnt logs unless told: a file of its
// own per mount point, named after it as systemd names mount units
// (/mnt/l logs to mnt-l.log), in /var/log/ledgerfs as root and in
// $XDG_STATE_HOME/ledgerfs (~/.local/state/ledgerfs) otherwise.
func defaultLogFile(mnt string) string {
	if abs, err := filepath.Abs(mnt); err == nil {
		mnt = abs
	}
	name := strings.ReplaceAll(strings.Trim(filepath.Clean(mnt), "/"), "/", "-")
	if name == "" {
		name = "root"
	}
	dir := "/var/log/ledgerfs"
	if os.Geteuid() != 0 {
		state := os.Getenv("XDG_STATE_HOME")
		if state == "" {
			home, err := os.UserHomeDir()
			if err != nil {
				home = os.TempDir()
			}
			state = filepath.Join(home, ".local", "state")
		}
		dir = filepath.Join(state, "ledgerfs")
	}
	return filepath.Join(dir, name+".log")
}
