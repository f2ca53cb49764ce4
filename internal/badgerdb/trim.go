package badgerdb

import (
	"errors"
	"log/slog"
	"os"
	"path/filepath"
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
// read by compactions added ~150 MiB more. After every checkEvery bytes of
// value-log traffic, the repository reads its RSS, and above a limit drops
// the pages of both from the process with madvise(MADV_PAGEOUT) (see
// advise): dirty data stays in the page cache and is written back as usual,
// clean pages leave the page cache, and a later read faults them back from
// the disk.
const checkEvery = 8 << 20

// readAround is what one random read of a mapped table makes resident, at
// the kernel's default read-around and fault-around sizes.
const readAround = 128 << 10

// ValueReadAround is what one random read of a mapped value log may make
// resident: the page cache holds a value log written in full in huge
// folios, and the kernel maps a whole 2 MiB folio at a fault (Linux 6.18 on
// ext4; FilePmdMapped in smaps). Counted as readAround, a random read of
// 2 GiB took the file-backed RSS 75 MiB past the limit between two checks.
const ValueReadAround = 2 << 20

// TrimCheck is how often the repository reads its file-backed RSS (statm),
// for what traffic does not count: Badger's compactions and flushes read and
// write tables through mappings too, ~75 MiB within a second of a 4 GiB
// write, and after 100,000 files were created and removed they left 125 MiB
// resident as the next write began.
const TrimCheck = 100 * time.Millisecond

// TrimAbove is the file-backed RSS the Trimmer always allows.
const TrimAbove = 32 << 20

// rssBudget is the RSS up to which mapped file pages may stay: a reader
// whose pages fit in what the Go heap leaves of it faults nothing in again,
// and a process whose heap takes all of it still keeps TrimAbove.
const rssBudget = 192 << 20

// A Trimmer takes the resident pages of the mapped value logs and tables
// of the dbs under one directory out of the process when the file-backed
// RSS is above its limit (see checkEvery). Run it on a goroutine of its
// own; count traffic with Add and AddWritten.
type Trimmer struct {
	dir     string // only mappings of files under dir are trimmed
	traffic atomic.Int64
	running sync.Mutex
	off     atomic.Bool  // set, with running held, once trimming must stop
	above   atomic.Int64 // a fixed limit instead of limit's (tests)
	wrote   atomic.Bool  // writes counted since the last periodic check
	// pressed: at the last check, the file-backed RSS was past half the
	// readers' limit (Pressed).
	pressed atomic.Bool
}

// NewTrimmer returns a trimmer of the mappings of files under dir.
func NewTrimmer(dir string) *Trimmer {
	if abs, err := filepath.Abs(dir); err == nil {
		dir = abs
	}
	return &Trimmer{dir: dir + string(filepath.Separator)}
}

// Hold stops trims until Release: no trim may run while a db unmaps its
// files, since one that read a mapping's address before could drop pages
// someone else mapped there since.
func (t *Trimmer) Hold() { t.running.Lock() }

// Release ends a Hold.
func (t *Trimmer) Release() { t.running.Unlock() }

// Disabled reports whether Disable was called.
func (t *Trimmer) Disabled() bool { return t.off.Load() }

// Disable stops trimming for good; call it within a Hold. A db whose close
// was given up on may unmap its files at any later time.
func (t *Trimmer) Disable() { t.off.Store(true) }

// SetLimit fixes the file-backed RSS from which the trimmer trims (0: the
// computed limit), and tells Pressed anew against it; tests use it.
func (t *Trimmer) SetLimit(n int64) {
	t.above.Store(n)
	t.over(false)
}

// Traffic is the value-log traffic counted since the last trim check.
func (t *Trimmer) Traffic() int64 { return t.traffic.Load() }

// Dir is the directory under which mappings are trimmed, with a trailing
// separator.
func (t *Trimmer) Dir() string { return t.dir }

// Trim trims now, whatever the traffic: the value-log mappings, then the
// tables' if the file-backed RSS is still above the limit (a writer's, if
// writing). The caller holds the trimmer (Hold).
func (t *Trimmer) Trim(writing bool) error { return t.trim(writing) }

// AddValueRead counts a read of n bytes of a value from a mapped value
// log. It maps the pages around it too (read-around, fault-around): count
// at least that much, unless only n stay: the read streams, or its pages
// were dropped (Dropper). A streaming reader's next values lie in the
// pages already mapped around this one; counting the read-around for each
// of them (chunks average 16 KiB) trimmed every 4 MiB read, 8 % of the
// mount's CPU in a cold sequential read.
func (t *Trimmer) AddValueRead(n int, onlyN bool) {
	if !onlyN {
		n = max(n, ValueReadAround)
	}
	t.Add(n)
}

// AddLookup counts a lookup of a row at no place the tables know, as a
// writer's: each maps a block and the pages the kernel maps around it
// (a large value's commit looks up the status of each of its chunks: 150
// MiB of RSS for 4 GiB before the next trim, uncounted).
func (t *Trimmer) AddLookup() { t.AddWritten(readAround) }

// Add counts value-log traffic of reads and trims once enough has passed
// and the file-backed RSS is above the limit: a reader whose pages fit
// keeps them mapped. A page fault that maps a page back cost ~50 µs in the
// virtual machines we measured, where reading it from the page cache costs
// 4 µs.
func (t *Trimmer) Add(n int) { t.count(n, false) }

// AddWritten counts traffic of writes and commits, which trim above
// TrimAbove: what they map is not read again soon, and the heap of a long
// write grows between two checks (with the readers' limit, writing 4 GiB
// peaked at 254 MiB of RSS, 157-166 MiB with TrimAbove).
func (t *Trimmer) AddWritten(n int) {
	t.wrote.Store(true)
	t.count(n, true)
}

func (t *Trimmer) count(n int, writing bool) {
	if t.traffic.Add(int64(n)) < checkEvery {
		return
	}
	if !t.running.TryLock() {
		return
	}
	// The caller trims: random gets map 2 MiB each, and while a trim
	// waited for a goroutine of its own a random read of 4 GiB took the
	// RSS to 357-404 MiB (200 MiB when the caller trims, at more IOPS).
	defer t.running.Unlock()
	t.trimLocked(writing)
}

// over reports whether the file-backed RSS is above the limit, or above
// TrimAbove for a writer, and notes whether it is past half the readers'
// limit (Pressed).
func (t *Trimmer) over(writing bool) bool {
	total, file := RSS()
	l, fixed := t.above.Load(), true
	if l == 0 {
		l, fixed = limit(total, file), false
	}
	t.pressed.Store(file >= l/2)
	if writing && !fixed {
		return file >= TrimAbove
	}
	return file >= l
}

// Pressed reports whether, at the last check, the file-backed RSS was past
// half the readers' limit: a random read's pages should then leave the
// process as soon as it is done with them (Dropper), which keeps them in
// the page cache, rather than stay until a trim, which takes them out of
// it. Below, a reader whose pages fit keeps them mapped: a fault costs more
// than the read (4,600 against 6,200-7,200 random 4 KiB reads a second of
// a 64 MiB file read again).
func (t *Trimmer) Pressed() bool { return t.pressed.Load() }

// limit returns the file-backed RSS from which the Trimmer drops pages, for
// a process of total bytes resident of which file are file-backed: what the
// rest of the process leaves of rssBudget, and at least TrimAbove.
func limit(total, file int64) int64 {
	return max(TrimAbove, rssBudget-(total-file))
}

// trimLocked trims, with t.running held, if the file-backed RSS is above
// the limit (of a writer, if writing), and starts counting traffic anew.
func (t *Trimmer) trimLocked(writing bool) {
	// The count starts anew even when there is nothing to trim, or every
	// later get would read the RSS again.
	t.traffic.Store(0)
	if t.off.Load() || !t.over(writing) {
		return
	}
	if err := t.trim(writing); err != nil {
		slog.Debug("trim value-log mappings", "err", err)
	}
}

// Run trims every TrimCheck while the file-backed RSS is above the limit
// (TrimAbove while something writes), until stop is closed.
func (t *Trimmer) Run(stop <-chan struct{}) {
	tk := time.NewTicker(TrimCheck)
	defer tk.Stop()
	for {
		select {
		case <-stop:
			return
		case <-tk.C:
		}
		writing := t.wrote.Swap(false)
		if !t.over(writing) || !t.running.TryLock() {
			continue
		}
		t.trimLocked(writing)
		t.running.Unlock()
	}
}

// RSS returns the process's resident memory and the file-backed and shared
// part of it in bytes (statm's second and third fields), or zeros if it
// cannot tell. statm is read from counters the kernel keeps: cheap.
func RSS() (total, file int64) {
	b, err := os.ReadFile("/proc/self/statm")
	if err != nil {
		return 0, 0
	}
	f := strings.Fields(string(b))
	if len(f) < 3 {
		return 0, 0
	}
	t, err1 := strconv.ParseInt(f[1], 10, 64)
	s, err2 := strconv.ParseInt(f[2], 10, 64)
	if err1 != nil || err2 != nil {
		return 0, 0
	}
	page := int64(os.Getpagesize())
	return t * page, s * page
}

// settleAfter is the value-log traffic after which a commit trims at once.
// Below it, the next periodic trim will do: a trim reads /proc/self/maps,
// and trimming after every few small commits cost 6 % of a file create.
const settleAfter = 8 << 20

// Settle trims now if there was much value-log traffic since the last trim:
// committing a large value touches much of it again.
func (t *Trimmer) Settle() {
	if t.traffic.Load() < settleAfter || !t.running.TryLock() {
		return
	}
	defer t.running.Unlock()
	t.trimLocked(true)
}

// trim drops the resident pages of every value-log mapping under t.dir, and
// of every table mapping if the file-backed RSS is still above the limit
// (of a writer, if writing).
// Tables go last: every get reads their indexes and blocks through the
// mappings, so a get after a trim of the tables faults several pages in
// again, and their size follows the number of rows, not the data's.
func (t *Trimmer) trim(writing bool) error {
	err := t.drop(".vlog")
	if !t.over(writing) {
		return err
	}
	return errors.Join(err, t.drop(".sst"))
}

// drop drops the resident pages of the shared mappings of files under t.dir
// whose names end in suffix.
func (t *Trimmer) drop(suffix string) error {
	ranges, err := t.mappings(suffix)
	advise(ranges)
	return err
}

// mappings lists the shared mappings of files under t.dir whose names end
// in suffix, as /proc/self/maps shows them now.
func (t *Trimmer) mappings(suffix string) ([]mapping, error) { return sharedMappings(t.dir, suffix) }

// advise takes the resident pages of ranges out of the process with
// MADV_PAGEOUT. The ranges were read from /proc/self/maps earlier, and
// Badger unmaps tables (compaction) and value logs (GC) whenever it likes:
// by now an address may hold other memory, the Go heap's say. So the advice
// must be one that cannot lose data whatever it lands on. MADV_DONTNEED
// would zero private anonymous memory mapped at a freed address; PAGEOUT
// only reclaims: a page of a shared file mapping is unmapped (a dirty one
// stays in the page cache for writeback, a clean one leaves the cache and
// is read from disk if needed again), and anonymous memory is swapped out
// if there is swap, else left as it is. A range with nothing mapped any
// more makes madvise fail with ENOMEM: harmless.
func advise(ranges []mapping) {
	for _, m := range ranges {
		unix.Syscall(unix.SYS_MADVISE, m.start, m.end-m.start, unix.MADV_PAGEOUT)
	}
}
