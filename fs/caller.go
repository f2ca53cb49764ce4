package fs

import (
	"context"
	"os"
	"strconv"

	"github.com/hanwen/go-fuse/v2/fuse"
)

// callerPid is the thread that made the request, 0 if the kernel could
// not say (a caller outside the server's pid namespace).
func callerPid(ctx context.Context) uint32 {
	if c, ok := fuse.FromContext(ctx); ok {
		return c.Pid
	}
	return 0
}

// sameProcess reports whether thread pid belongs to the process of thread
// opener, as /proc tells. The kernel flushes a file at every close of a
// descriptor, also of a copy a child inherited: a forked child closes its
// copies at exec or exit, which is no close of the opener's. When it
// cannot tell (either pid unknown, the opener gone), it says yes.
func sameProcess(opener, pid uint32) bool {
	if opener == 0 || pid == 0 || opener == pid {
		return true
	}
	// /proc/TID/task lists the threads of TID's process, also for a
	// thread that is not its leader.
	o := "/proc/" + strconv.FormatUint(uint64(opener), 10)
	if _, err := os.Lstat(o + "/task/" + strconv.FormatUint(uint64(pid), 10)); err == nil {
		return true
	}
	_, err := os.Lstat(o)
	return err != nil
}
