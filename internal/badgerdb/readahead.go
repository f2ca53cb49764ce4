package badgerdb

import (
	"strings"
	"sync"
	"sync/atomic"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"
)

// Badger writes a transaction's entries in the order of a Go map, so the
// chunks of one 8 MiB batch of pieces lie in its stretch of the value log in
// no particular order, and a file read from start to end jumps about within
// each stretch. The kernel's read-ahead for the mapped value log follows
// page faults and does not keep ahead of such a reader: a cold read waited
// ~0.8 s per GiB for the disk. A page therefore asks the kernel to read in
// and map the value log around the values a streaming reader gets, region
// by region, ahead of the reader, on a goroutine of its own.
const (
	raRegion = 4 << 20 // value log asked for at a time
	raAround = 2       // regions on each side of a value's: its batch and the next
	// ReadAheadFresh is how long a region asked for is not asked for
	// again: the pages may have left the page cache by the next read of
	// the file.
	ReadAheadFresh = time.Second
)

// ReadAheads advises the kernel to read value-log regions in, on one
// goroutine the repository owns (run, until stop): allocating the pages
// and starting their reads costs the reader nothing. A request that finds
// the goroutine busy with many is dropped, as advice may be.
type ReadAheads struct {
	reqs chan raRequest
	stop chan struct{}
	// noPopulate is set once the kernel turned MADV_POPULATE_READ down
	// (before Linux 5.14). Populating maps the pages in ahead of the
	// reader, where MADV_WILLNEED only reads them into the page cache:
	// the reader then takes no fault of its own, where each fault of a
	// cold read mapped at most 64 KiB (14 % of the mount's CPU).
	noPopulate atomic.Bool
	// done, when set by a test, is called once a read-ahead has been
	// asked for.
	done func()
	// clock tells when a region was asked for; a test moves it on past
	// ReadAheadFresh.
	clock func() time.Time
}

// raRequest is the address ranges of one read-ahead.
type raRequest struct {
	n      int
	ranges [2*raAround + 1][2]uintptr
}

// NewReadAheads returns a worker; Run it on a goroutine of its own, and
// Stop it.
func NewReadAheads() *ReadAheads {
	return &ReadAheads{reqs: make(chan raRequest, 64), stop: make(chan struct{}), clock: time.Now}
}

// Stop ends Run.
func (w *ReadAheads) Stop() { close(w.stop) }

// SetDone sets what is called once a read-ahead has been asked for (tests;
// nil: nothing). Set it before asking for the read-aheads it is to see.
func (w *ReadAheads) SetDone(done func()) { w.done = done }

// SetClock sets the clock that tells when a region was asked for (tests).
func (w *ReadAheads) SetClock(clock func() time.Time) { w.clock = clock }

// Populates reports whether the kernel takes MADV_POPULATE_READ.
func (w *ReadAheads) Populates() bool { return !w.noPopulate.Load() }

// Run advises what is asked until Stop.
func (w *ReadAheads) Run() {
	for {
		select {
		case <-w.stop:
			return
		case req := <-w.reqs:
			for _, t := range req.ranges[:req.n] {
				// A mapping gone meanwhile makes madvise fail: harmless,
				// and so is advice for memory mapped there since.
				advice := uintptr(unix.MADV_POPULATE_READ)
				if w.noPopulate.Load() {
					advice = unix.MADV_WILLNEED
				}
				_, _, e := unix.Syscall(unix.SYS_MADVISE, t[0], t[1]-t[0], advice)
				if e == unix.EINVAL && advice == unix.MADV_POPULATE_READ {
					w.noPopulate.Store(true)
					unix.Syscall(unix.SYS_MADVISE, t[0], t[1]-t[0], unix.MADV_WILLNEED)
				}
			}
			if w.done != nil {
				w.done()
			}
		}
	}
}

// ask queues a read-ahead, unless the worker has many or has stopped.
func (w *ReadAheads) ask(req raRequest) {
	select {
	case w.reqs <- req:
	case <-w.stop:
	default:
	}
}

// ReadAhead is a page's record of the value-log regions it asked for.
type ReadAhead struct {
	mu   sync.Mutex
	done [16]asked // regions asked for lately
	next int
	m    mapping // the mapping of the last value
}

type asked struct {
	region uintptr // address / raRegion
	at     time.Time
}

// Near asks the kernel, through w, to read in the regions around v, a
// value in a mapped value log, that it was not asked for lately.
func (ra *ReadAhead) Near(w *ReadAheads, v []byte) {
	if len(v) == 0 {
		return
	}
	addr := uintptr(unsafe.Pointer(unsafe.SliceData(v)))
	ra.mu.Lock()
	if !ra.m.contains(addr) {
		m, ok := mappingOf(addr)
		if !ok || !strings.HasSuffix(m.path, ".vlog") {
			ra.mu.Unlock()
			return
		}
		ra.m = m
	}
	var req raRequest
	r, now := addr/raRegion, w.clock()
	for b := r - raAround; b <= r+raAround; b++ {
		start, end := max(b*raRegion, ra.m.start), min((b+1)*raRegion, ra.m.end)
		if start >= end || ra.askedLately(b, now) {
			continue
		}
		ra.done[ra.next] = asked{b, now}
		ra.next = (ra.next + 1) % len(ra.done)
		req.ranges[req.n] = [2]uintptr{start, end}
		req.n++
	}
	ra.mu.Unlock()
	if req.n > 0 {
		w.ask(req)
	}
}

func (ra *ReadAhead) askedLately(region uintptr, now time.Time) bool {
	for _, a := range ra.done {
		if a.region == region && now.Sub(a.at) < ReadAheadFresh {
			return true
		}
	}
	return false
}

// mappingOf finds the file mapping that holds addr.
func mappingOf(addr uintptr) (found mapping, ok bool) {
	eachMapping(func(m mapping) bool {
		if m.contains(addr) {
			found, ok = m, true
		}
		return !ok
	})
	return found, ok
}
