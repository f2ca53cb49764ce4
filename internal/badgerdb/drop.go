package badgerdb

import (
	"fmt"
	"os"
	"sync"
	"unsafe"

	"golang.org/x/sys/unix"
)

// A random read of a value from a mapped value log maps the pages around
// it too (ValueReadAround), and the Trimmer, finding the process over its
// budget, takes such pages out with MADV_PAGEOUT, which takes them out of
// the page cache as well: a random reader of a file larger than the budget
// made the disk read much of it twice. A Dropper takes the pages a random
// read mapped out of the process as soon as the value is copied, with
// MADV_DONTNEED, which leaves them in the page cache (a later read of them
// takes a minor fault, not the disk), and keeps the Trimmer from having
// to. That advice zeroes anonymous memory, so it is given only within a
// mapping known to be the value log's as it is now: one read from
// /proc/self/maps (which the mapping of a value the read holds cannot
// leave: Badger unmaps a value log only once no read holds it), or one
// found earlier that /proc/self/map_files still lists with the same bounds
// and that holds the value (mappings do not overlap, so it is the one the
// value lies in, a shared file mapping of Badger's). Unmapping a page of a
// shared file mapping loses nothing; a dirty one stays in the page cache
// for writeback.
type Dropper struct {
	mu    sync.Mutex
	known []mapping // the shared value-log mappings, as last read
}

var pageSize = uintptr(os.Getpagesize())

// Drop takes the pages around v (ValueReadAround, what a read of it may
// have mapped) out of the process if v lies in a shared mapping of a value
// log, and reports whether it did. Call it from Badger's Item.Value
// callback, after v is copied.
func (d *Dropper) Drop(v []byte) bool {
	if len(v) < ValueThreshold {
		return false // in a table or the memtable: no value log to look for
	}
	addr := uintptr(unsafe.Pointer(unsafe.SliceData(v)))
	m, ok := d.mappingOf(addr)
	if !ok {
		return false
	}
	start := max(addr&^(ValueReadAround-1), m.start)
	end := min((addr+uintptr(len(v))+ValueReadAround-1)&^(ValueReadAround-1), m.end)
	_, _, e := unix.Syscall(unix.SYS_MADVISE, start, end-start, unix.MADV_DONTNEED)
	return e == 0
}

// mappingOf returns the shared value-log mapping addr lies in, as it is
// now.
func (d *Dropper) mappingOf(addr uintptr) (mapping, bool) {
	d.mu.Lock()
	defer d.mu.Unlock()
	for _, m := range d.known {
		if m.contains(addr) && current(m) {
			return m, true
		}
	}
	// A value log new since the last read of the mappings, or one
	// unmapped and mapped again.
	d.known, _ = sharedMappings("", ".vlog")
	for _, m := range d.known {
		if m.contains(addr) {
			return m, true
		}
	}
	return mapping{}, false
}

// current reports whether a file mapping with m's bounds exists now.
func current(m mapping) bool {
	var st unix.Stat_t
	return unix.Lstat(fmt.Sprintf("/proc/self/map_files/%x-%x", m.start, m.end), &st) == nil
}
