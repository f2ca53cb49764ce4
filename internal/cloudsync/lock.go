package cloudsync

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/ledgerfs/ledgerfs/internal/remote"
)

// The bucket's collection is exclusive: one device at a time, holding the
// newest lock object, locks/GEN (GEN: 16 hex digits, increasing). A device
// takes it by creating the next generation with a conditional create, so
// that of two devices that find the same lock stale one wins, and nobody
// deletes a lock another holds. The holder rewrites its object (Refresh)
// at least every lockExpiry/4; a lock not refreshed for lockExpiry, or
// held by a process of this host that is gone (kill -9), is stale, as
// restic's locks are. Before each step that deletes, the holder checks that
// its lock is still the newest and was refreshed within lockExpiry/2.
const (
	locksDir   = "locks/"
	lockExpiry = 30 * time.Minute
)

// ErrLocked reports a bucket another device is collecting.
var ErrLocked = errors.New("cloudsync: another device is collecting the store")

// lockInfo is a lock object's body (sealed in an encrypted store).
type lockInfo struct {
	Device    string    `json:"device"`
	Host      string    `json:"host"`
	PID       int       `json:"pid"`
	Created   time.Time `json:"created"`
	Refreshed time.Time `json:"refreshed"`
}

// A lock is the bucket's collection lock, held.
type lock struct {
	s    *Syncer
	name string
	info lockInfo
}

func lockName(gen uint64) string { return fmt.Sprintf("%s%016x", locksDir, gen) }

// takeLock takes the collection lock, or says who holds it (ErrLocked).
func (s *Syncer) takeLock(ctx context.Context) (*lock, error) {
	host, _ := os.Hostname()
	for {
		var newest remote.Object
		var gens []string
		err := s.be.List(ctx, locksDir, "", func(o remote.Object) error {
			newest = o
			gens = append(gens, o.Name)
			return nil
		})
		if err != nil {
			return nil, err
		}
		var gen uint64
		if newest.Name != "" {
			g, err := strconv.ParseUint(strings.TrimPrefix(newest.Name, locksDir), 16, 64)
			if err != nil {
				return nil, fmt.Errorf("cloudsync: lock object %s: not a lock of ledgerfs", newest.Name)
			}
			info, err := s.readLock(ctx, newest.Name)
			switch {
			case errors.Is(err, remote.ErrNotFound):
				continue // released meanwhile
			case err != nil:
				return nil, err
			case !info.stale(s.now(), host):
				return nil, fmt.Errorf("%w: device %s (host %s, process %d) since %s, refreshed %s",
					ErrLocked, info.Device, info.Host, info.PID, info.Created.Format(time.RFC3339), info.Refreshed.Format(time.RFC3339))
			}
			gen = g + 1
		}
		now := s.now().UTC()
		l := &lock{s: s, name: lockName(gen), info: lockInfo{Device: s.device, Host: host, PID: os.Getpid(), Created: now, Refreshed: now}}
		body, err := json.Marshal(l.info)
		if err != nil {
			return nil, err
		}
		err = s.be.Create(ctx, l.name, s.seal(l.name, body))
		if errors.Is(err, remote.ErrExists) {
			continue // another device took it first: see whether it holds it
		}
		if err != nil {
			return nil, err
		}
		// The stale generations below ours go; nobody holds them.
		for _, g := range gens {
			if err := s.be.Delete(ctx, g); err != nil {
				return nil, err
			}
		}
		return l, nil
	}
}

func (s *Syncer) readLock(ctx context.Context, name string) (lockInfo, error) {
	var info lockInfo
	body, err := s.get(ctx, name)
	if err == nil {
		err = json.Unmarshal(body, &info)
	}
	return info, err
}

// stale reports whether a lock is no longer held: not refreshed within
// lockExpiry, or its process, on this host, is gone.
func (i lockInfo) stale(now time.Time, host string) bool {
	if now.Sub(i.Refreshed) > lockExpiry {
		return true
	}
	if i.Host != host || i.PID <= 0 {
		return false
	}
	err := syscall.Kill(i.PID, 0)
	return errors.Is(err, syscall.ESRCH)
}

// refresh rewrites the lock's object with the time now, if lockExpiry/4
// passed since it last did.
func (l *lock) refresh(ctx context.Context) error {
	now := l.s.now().UTC()
	if now.Sub(l.info.Refreshed) < lockExpiry/4 {
		return nil
	}
	if err := l.check(ctx); err != nil {
		return err
	}
	info := l.info
	info.Refreshed = now
	body, err := json.Marshal(info)
	if err != nil {
		return err
	}
	if err := l.s.be.Put(ctx, l.name, l.s.seal(l.name, body)); err != nil {
		return err
	}
	l.info = info
	return nil
}

// check says whether the lock is still held: its object the newest, and
// refreshed within half its expiry (a device that finds it stale takes the
// next generation only after a whole one).
func (l *lock) check(ctx context.Context) error {
	if l.s.now().Sub(l.info.Refreshed) > lockExpiry/2 {
		return fmt.Errorf("%w: this device's lock was last refreshed at %s", ErrLocked, l.info.Refreshed.Format(time.RFC3339))
	}
	var newest string
	if err := l.s.be.List(ctx, locksDir, "", func(o remote.Object) error { newest = o.Name; return nil }); err != nil {
		return err
	}
	if newest != l.name {
		return fmt.Errorf("%w: this device's lock %s was taken over (%s)", ErrLocked, l.name, newest)
	}
	return nil
}

// release deletes the lock's object.
func (l *lock) release(ctx context.Context) error { return l.s.be.Delete(ctx, l.name) }
