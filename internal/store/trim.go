package store

import (
	"log/slog"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/sys/unix"
)

// Badger writes and reads its value logs and tables through shared file
// mappings, so every chunk written or read stays resident in this process
// until the kernel needs the memory: writing 1 GiB left ~900 MiB of
// value-log pages in the mount's RSS, and after a long run the tables held
// read by compactions added ~150 MiB more. After every trimEvery bytes of
// value-log traffic, the repository drops the pages of both from the process
// with madvise(MADV_DONTNEED). For a shared file mapping that only unmaps the
// pages: dirty data stays in the page cache and is written back as usual,
// and a later read faults the page back from the page cache.
const trimEvery = 32 << 20

// readAround is what one random read of a mapped file makes resident, at
// the kernel's default read-around and fault-around sizes.
const readAround = 128 << 10

// trimCheck is how often the repository reads its file-backed RSS (statm),
// for what traffic does not count: Badger's compactions and flushes read and
// write tables through mappings too, ~75 MiB within a second of a 4 GiB
// write, and after 100,000 files were created and removed they left 125 MiB
// resident as the next write began.
const trimCheck = 100 * time.Millisecond

// trimAbove is the file-backed RSS from which the periodic check trims.
const trimAbove = 32 << 20

type trimmer struct {
	dir     string // only mappings of files under dir are trimmed
	traffic atomic.Int64
	running sync.Mutex
	off     atomic.Bool // set, with running held, once trimming must stop
}

// add counts value-log traffic and trims once enough has passed.
func (t *trimmer) add(n int) {
	if t.traffic.Add(int64(n)) < trimEvery {
		return
	}
	if !t.running.TryLock() {
		return
	}
	go func() {
		defer t.running.Unlock()
		t.trimLocked()
	}()
}

// trimLocked trims, with t.running held, and starts counting traffic anew.
func (t *trimmer) trimLocked() {
	// The count starts anew even when trimming is off, or every later get
	// would start a goroutine that does nothing.
	t.traffic.Store(0)
	if t.off.Load() {
		return
	}
	if err := t.trim(); err != nil {
		slog.Debug("trim value-log mappings", "err", err)
	}
}

// run trims every trimCheck while the file-backed RSS is above trimAbove,
// until stop is closed.
func (t *trimmer) run(stop <-chan struct{}) {
	tk := time.NewTicker(trimCheck)
	defer tk.Stop()
	for {
		select {
		case <-stop:
			return
		case <-tk.C:
		}
		if fileRSS() < trimAbove || !t.running.TryLock() {
			continue
		}
		t.trimLocked()
		t.running.Unlock()
	}
}

// fileRSS returns the process's resident file-backed and shared memory in
// bytes (statm's third field), or 0 if it cannot tell.
func fileRSS() int64 {
	b, err := os.ReadFile("/proc/self/statm")
	if err != nil {
		return 0
	}
	f := strings.Fields(string(b))
	if len(f) < 3 {
		return 0
	}
	pages, err := strconv.ParseInt(f[2], 10, 64)
	if err != nil {
		return 0
	}
	return pages * int64(os.Getpagesize())
}

// settleAfter is the value-log traffic after which a commit trims at once.
// Below it, the next periodic trim will do: a trim reads /proc/self/maps,
// and trimming after every few small commits cost 6 % of a file create.
const settleAfter = 8 << 20

// settle trims now if there was much value-log traffic since the last trim:
// committing a large value touches much of it again.
func (t *trimmer) settle() {
	if t.traffic.Load() < settleAfter || !t.running.TryLock() {
		return
	}
	defer t.running.Unlock()
	t.trimLocked()
}

// trim drops the resident pages of every value-log mapping under t.dir.
func (t *trimmer) trim() error {
	return eachMapping(func(m mapping) bool {
		if trimmed(m.path) && strings.HasPrefix(m.path, t.dir) && m.shared {
			// A mapping unmapped meanwhile makes madvise fail with
			// ENOMEM: harmless.
			unix.Syscall(unix.SYS_MADVISE, m.start, m.end-m.start, unix.MADV_DONTNEED)
		}
		return true
	})
}

// trimmed reports whether a mapped file is one trim drops: a value log or a
// table.
func trimmed(path string) bool {
	return strings.HasSuffix(path, ".vlog") || strings.HasSuffix(path, ".sst")
}
