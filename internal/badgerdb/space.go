package badgerdb

import (
	"fmt"
	"log/slog"
	"sync"
	"syscall"
	"time"

	"github.com/dustin/go-humanize"
	"golang.org/x/sys/unix"
)

// The free space kept on the repository's filesystem when Options.Reserve
// is 0: 5 % of the filesystem (ext4 keeps as much for root), between
// MinReserve and MaxDefaultReserve.
const (
	MinReserve        = 16 << 20
	MaxDefaultReserve = 128 << 20
)

// DefaultReserve is the reserve for the filesystem holding dir.
func DefaultReserve(dir string) (uint64, error) {
	_, size, err := Statfs(dir)
	if err != nil {
		return 0, err
	}
	return min(max(size/20, MinReserve), MaxDefaultReserve), nil
}

// Statfs returns the bytes available to us and the size of the
// filesystem holding dir.
func Statfs(dir string) (free, size uint64, err error) {
	var st unix.Statfs_t
	if err := unix.Statfs(dir, &st); err != nil {
		return 0, 0, fmt.Errorf("store: free space of %s: %w", dir, err)
	}
	return st.Bavail * uint64(st.Bsize), st.Blocks * uint64(st.Bsize), nil
}

// ClaimKind says how much of the reserve a claim must leave free.
type ClaimKind uint

const (
	ForContent ClaimKind = iota // new file content: all of it
	ForChange                   // changes without content: half
	ForOpen                     // opening a page's db for changes: a quarter
)

// Space keeps free space on the filesystem that holds a set of dbs.
// Badger writes every file it makes (value logs, memtable logs, tables)
// through a shared mapping of a file created sparse: on a full filesystem
// the write faults and the kernel kills the process with SIGBUS, from any
// of Badger's goroutines, where no error can be returned (badger#1682). So
// ledgerfs refuses changes with ENOSPC while there is still room for what
// Badger does with the changes it has taken: new file content while less
// than the reserve is free, any other change (names, journal rows, a new
// page) while less than half of it is; a page opened while less than a
// quarter is (opening for changes writes a little) is opened read-only,
// so that files stay readable on a full disk. Commits of changes already
// taken, memtable flushes and compactions use the rest.
type Space struct {
	dir     string
	reserve uint64

	mu   sync.Mutex
	free uint64    // bytes available at the last statfs
	at   time.Time // of the last statfs
	// inflight is content taken and not yet in the db's files, which
	// statfs cannot see: a piece batch holds up to 8 MiB before Badger
	// writes it. since is content taken since the last statfs.
	inflight, since uint64
	full            bool // new content was refused; logged once until it has room
}

// NewSpace keeps reserve bytes free on the filesystem holding dir.
func NewSpace(dir string, reserve uint64) *Space { return &Space{dir: dir, reserve: reserve} }

// Reserve is the free space kept; 0 for nil.
func (s *Space) Reserve() uint64 {
	if s == nil {
		return 0
	}
	return s.reserve
}

// Free returns the bytes free on the filesystem, less the content taken
// and not yet written, from a statfs made now: a figure taken while a write
// was still landing, or before space was given back, would mislead a
// decision about history.
func (s *Space) Free() (uint64, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if err := s.statfs(); err != nil {
		return 0, err
	}
	return s.left(), nil
}

// spaceRefresh bounds how long a statfs result is trusted.
const spaceRefresh = 100 * time.Millisecond

// Claim takes n bytes, to be given back with settled once they are written,
// leaving the part of the reserve that kind keeps. A refusal wraps
// syscall.ENOSPC, and is confirmed by a fresh statfs, so space freed on the
// filesystem is seen at once.
func (s *Space) Claim(n uint64, kind ClaimKind) error {
	if s == nil {
		return nil
	}
	keep := s.reserve >> kind
	s.mu.Lock()
	defer s.mu.Unlock()
	// A stale figure is taken again, and so is one that would refuse.
	if time.Since(s.at) > spaceRefresh || s.since > s.reserve/8 || s.left() < keep+n {
		if err := s.statfs(); err != nil {
			return err
		}
	}
	left := s.left()
	if left < keep+n {
		if !s.full {
			s.full = true
			slog.Warn("repository filesystem is nearly full: refusing changes", "dir", s.dir,
				"free", humanize.IBytes(left), "reserve", humanize.IBytes(s.reserve))
		}
		return fmt.Errorf("store: %s free on the filesystem of %s, %s kept for the database's own writes: %w",
			humanize.IBytes(left), s.dir, humanize.IBytes(keep), syscall.ENOSPC)
	}
	if s.full && left >= s.reserve+n {
		s.full = false
		slog.Info("repository filesystem has room again", "dir", s.dir)
	}
	s.inflight += n
	s.since += n
	return nil
}

// left is the space free beyond the content in flight. Called with s.mu
// held.
func (s *Space) left() uint64 { return s.free - min(s.free, s.inflight) }

// Settled gives back n bytes taken by claim once they are in the db's files
// (where statfs sees them) or dropped.
func (s *Space) Settled(n uint64) {
	if s == nil {
		return
	}
	s.mu.Lock()
	s.inflight -= min(s.inflight, n)
	s.mu.Unlock()
}

func (s *Space) statfs() error {
	free, _, err := Statfs(s.dir)
	if err != nil {
		return err
	}
	s.free = free
	s.at = time.Now()
	s.since = 0
	return nil
}

// Room reports whether n bytes can be written by Badger's own work (a value
// log rewritten to give space back) and leave half the reserve, what
// changes without content keep; it says once when there is not.
func (s *Space) Room(n uint64) bool {
	if s == nil {
		return true
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if err := s.statfs(); err != nil {
		return false
	}
	if s.left() >= s.reserve/2+n {
		return true
	}
	slog.Warn("too little free space to rewrite a value log and give its space back", "dir", s.dir,
		"free", humanize.IBytes(s.left()), "needed", humanize.IBytes(s.reserve/2+n))
	return false
}
