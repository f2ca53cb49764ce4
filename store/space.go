package store

import (
	"fmt"
	"log/slog"
	"sync"
	"syscall"
	"time"

	"github.com/dustin/go-humanize"
	"golang.org/x/sys/unix"
)

// DefaultReserve is the free space kept on the repository's filesystem when
// Options.Reserve is 0.
const DefaultReserve = 128 << 20

// space keeps free space on the filesystem that holds the repository.
// Badger writes every file it makes (value logs, memtable logs, tables)
// through a shared mapping of a file created sparse: on a full filesystem
// the write faults and the kernel kills the process with SIGBUS, from any
// of Badger's goroutines, where no error can be returned (badger#1682). So
// ledgerfs refuses changes with ENOSPC while there is still room for what
// Badger does with the changes it has taken: new file content while less
// than the reserve is free, any other change (names, journal rows, a new
// page) while less than half of it is. Commits of changes already taken,
// memtable flushes and compactions use the rest.
type space struct {
	dir     string
	reserve uint64

	mu      sync.Mutex
	free    uint64    // bytes available at the last statfs
	at      time.Time // of the last statfs
	claimed uint64    // bytes taken since
	full    bool      // new content was refused; logged once until it has room
}

// spaceRefresh bounds how long a statfs result is trusted.
const spaceRefresh = 100 * time.Millisecond

// claim takes n bytes of new content (bulk) or checks that a smaller
// change still has room. A refusal wraps syscall.ENOSPC, and is confirmed
// by a fresh statfs, so space freed on the filesystem is seen at once.
func (s *space) claim(n uint64, bulk bool) error {
	if s == nil {
		return nil
	}
	keep := s.reserve / 2
	if bulk {
		keep = s.reserve
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	stale := time.Since(s.at) > spaceRefresh || s.claimed > s.reserve/8
	for {
		if stale {
			if err := s.statfs(); err != nil {
				return err
			}
		}
		left := s.free - min(s.free, s.claimed)
		if left >= keep+n {
			if s.full && left >= s.reserve+n {
				s.full = false
				slog.Info("repository filesystem has room again", "dir", s.dir)
			}
			break
		}
		if !stale {
			stale = true
			continue
		}
		if !s.full {
			s.full = true
			slog.Warn("repository filesystem is nearly full: refusing changes", "dir", s.dir,
				"free", humanize.IBytes(left), "reserve", humanize.IBytes(s.reserve))
		}
		return fmt.Errorf("store: %s free on the filesystem of %s, %s kept for the database's own writes: %w",
			humanize.IBytes(left), s.dir, humanize.IBytes(keep), syscall.ENOSPC)
	}
	s.claimed += n
	return nil
}

func (s *space) statfs() error {
	var st unix.Statfs_t
	if err := unix.Statfs(s.dir, &st); err != nil {
		return fmt.Errorf("store: free space of %s: %w", s.dir, err)
	}
	s.free = st.Bavail * uint64(st.Bsize)
	s.at = time.Now()
	s.claimed = 0
	return nil
}

// available is the space left for content beyond the reserve, for statfs
// on the mount.
func (s *space) available() (uint64, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if err := s.statfs(); err != nil {
		return 0, err
	}
	return s.free - min(s.free, s.reserve), nil
}
