package main

import (
	"bufio"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/moby/sys/mountinfo"
	"github.com/spf13/cobra"
	"golang.org/x/sys/unix"

	"github.com/ledgerfs/ledgerfs/internal/server"
)

func newUmount() *cobra.Command {
	var timeout time.Duration
	cmd := &cobra.Command{
		Use:   "umount MOUNTPOINT",
		Short: "Unmount a ledgerfs mount and wait until its server has committed and exited",
		Long: `Umount unmounts a ledgerfs mount (umount as root, fusermount3 -u
otherwise) and waits until the server serving it has committed what is
pending and exited, so that the repository can be used at once: by another
mount, ledgerfs log or a backup. A mount still in use is left mounted, and
the processes using it are named.`,
		Example: "  ledgerfs umount /mnt/l",
		Args:    cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			return umount(args[0], timeout)
		},
	}
	cmd.Flags().DurationVar(&timeout, "timeout", time.Minute, "how long to wait for the server to exit")
	return cmd
}

func umount(mnt string, timeout time.Duration) error {
	mnt, err := filepath.Abs(mnt)
	if err != nil {
		return err
	}
	ms, err := mountinfo.GetMounts(mountinfo.SingleEntryFilter(mnt))
	if err != nil {
		return err
	}
	if len(ms) == 0 || !strings.HasPrefix(ms[len(ms)-1].Source, "ledgerfs:") {
		return fmt.Errorf("%s is not a ledgerfs mount", mnt)
	}
	repo := strings.TrimPrefix(ms[len(ms)-1].Source, "ledgerfs:")
	pid, err := lockHolder(filepath.Join(repo, "page_usage_db"))
	if err != nil {
		return fmt.Errorf("find the server of %s: %w", mnt, err)
	}
	if os.Geteuid() == 0 {
		err = syscall.Unmount(mnt, 0)
	} else if out, e := exec.Command("fusermount3", "-u", mnt).CombinedOutput(); e != nil {
		err = fmt.Errorf("fusermount3 -u: %v: %s", e, strings.TrimSpace(string(out)))
	}
	if errors.Is(err, syscall.EBUSY) || err != nil && strings.Contains(err.Error(), "busy") {
		return fmt.Errorf("%s is in use by %s: close what uses it and try again", mnt, strings.Join(server.Holders(mnt), ", "))
	}
	if err != nil {
		return fmt.Errorf("unmount %s: %w", mnt, err)
	}
	if pid == 0 {
		return nil // the server has exited already
	}
	for deadline := time.Now().Add(timeout); syscall.Kill(pid, 0) == nil; time.Sleep(20 * time.Millisecond) {
		if time.Now().After(deadline) {
			return fmt.Errorf("unmounted %s, but its server (pid %d) is still committing after %v", mnt, pid, timeout)
		}
	}
	return nil
}

// lockHolder returns the process that holds the flock on path (Badger
// locks a db's directory), from /proc/locks; 0 if none does.
func lockHolder(path string) (int, error) {
	var st unix.Stat_t
	if err := unix.Stat(path, &st); err != nil {
		return 0, err
	}
	want := fmt.Sprintf("%02x:%02x:%d", unix.Major(st.Dev), unix.Minor(st.Dev), st.Ino)
	f, err := os.Open("/proc/locks")
	if err != nil {
		return 0, err
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		// 1: FLOCK  ADVISORY  WRITE 27687 fe:00:9978095 0 EOF
		fields := strings.Fields(sc.Text())
		if len(fields) >= 6 && fields[5] == want {
			return strconv.Atoi(fields[4])
		}
	}
	return 0, sc.Err()
}
