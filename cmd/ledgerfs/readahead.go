package main

import (
	"fmt"
	"os"
	"path/filepath"
	"strconv"

	"github.com/moby/sys/mountinfo"
)

// readAheadKiB is the kernel read-ahead set for the mount, as large as the
// server's largest read (MaxReadAhead).
const readAheadKiB = 1024

// setReadAhead sets the kernel's read-ahead for the FUSE mount at mnt. The
// kernel caps a FUSE mount's read-ahead at its 128 KiB default whatever the
// server's init reply asks for, so sequential reads reached the server as
// 128 KiB requests: a cold 1 GiB read went from 301 and 313 MB/s to 383
// and 381 MB/s at 1 MiB. Only root may change it (sysfs). The device is
// read from /proc/self/mountinfo rather than by stat, which would be a
// request to this process's own mount.
func setReadAhead(mnt string, kb int) error {
	ms, err := mountinfo.GetMounts(mountinfo.SingleEntryFilter(mnt))
	if err != nil {
		return err
	}
	if len(ms) == 0 {
		return fmt.Errorf("%s is not in /proc/self/mountinfo", mnt)
	}
	m := ms[len(ms)-1] // the topmost, if something was mounted under it
	path := filepath.Join("/sys/class/bdi", fmt.Sprintf("%d:%d", m.Major, m.Minor), "read_ahead_kb")
	if err := os.WriteFile(path, []byte(strconv.Itoa(kb)), 0); err != nil {
		return fmt.Errorf("set read-ahead of %s: %w", mnt, err)
	}
	return nil
}
