package fs

import (
	"context"
	"syscall"
	"time"

	"github.com/hanwen/go-fuse/v2/fuse"

	"github.com/ledgerfs/ledgerfs/internal/btree"
)

// attrOwner shows the mount's owner, for what stores none.
func (f *FS) attrOwner(a *fuse.Attr) { f.showOwner(a, btree.Meta{}) }

// showMeta fills a's owner and times (see shownTimes) from m.
func (f *FS) showMeta(a *fuse.Attr, m btree.Meta, ts int64) {
	f.showOwner(a, m)
	atime, mtime, ctime := shownTimes(m, ts)
	at, mt, ct := time.Unix(0, atime), time.Unix(0, mtime), time.Unix(0, ctime)
	a.SetTimes(&at, &mt, &ct)
}

// showOwner fills a's owner from m, or the mount's if m stores none.
func (f *FS) showOwner(a *fuse.Attr, m btree.Meta) {
	a.Uid, a.Gid = f.opts.UID, f.opts.GID
	if m.HasOwner {
		a.Uid, a.Gid = m.Uid, m.Gid
	}
	if f.opts.ShowUID != nil {
		a.Uid = *f.opts.ShowUID
	}
	if f.opts.ShowGID != nil {
		a.Gid = *f.opts.ShowGID
	}
}

// shownTimes returns the times an entry with metadata m shows: its own
// mtime, or ts when it has none; atime and ctime default to the mtime, and
// ctime is never before it, as a write advances both.
func shownTimes(m btree.Meta, ts int64) (atime, mtime, ctime int64) {
	mtime = ts
	if m.HasMtime {
		mtime = m.MtimeNs
	}
	atime, ctime = mtime, mtime
	if m.HasAtime {
		atime = m.AtimeNs
	}
	if m.HasCtime {
		ctime = max(ctime, m.CtimeNs)
	}
	return atime, mtime, ctime
}

// setTime shows ns as every time of a, for what has one time: .ledger's
// nodes.
func setTime(a *fuse.Attr, ns int64) {
	t := time.Unix(0, ns)
	a.SetTimes(&t, &t, &t)
}

// setAttrs takes what a setattr sets — permission bits, owner, times — into
// m, a file's metadata or a directory marker's, and reports whether it set
// any. Any of them advances ctime, as on Linux. Who may change what is the
// kernel's check (default_permissions), made against the owner shown.
func (f *FS) setAttrs(m *btree.Meta, in *fuse.SetAttrIn) bool {
	changed := false
	if mode, ok := in.GetMode(); ok {
		m.Mode = m.FileMode()&syscall.S_IFMT | mode&0o7777
		changed = true
	}
	uid, hasUID := in.GetUID()
	gid, hasGID := in.GetGID()
	if hasUID || hasGID {
		if !m.HasOwner {
			m.Uid, m.Gid, m.HasOwner = f.opts.UID, f.opts.GID, true
		}
		if hasUID {
			m.Uid = uid
		}
		if hasGID {
			m.Gid = gid
		}
		changed = true
	}
	if t, ok := in.GetMTime(); ok {
		m.MtimeNs, m.HasMtime = t.UnixNano(), true
		changed = true
	}
	if t, ok := in.GetATime(); ok {
		m.AtimeNs, m.HasAtime = t.UnixNano(), true
		changed = true
	}
	if changed {
		m.CtimeNs, m.HasCtime = nowNs(), true
	}
	return changed
}

// created returns the metadata of a new entry of the given mode made by
// the caller of ctx in a directory whose metadata is parent: owned by the
// caller, with the directory's group if it is set-group-ID (and a new
// directory inherits the bit), as on Linux.
func created(ctx context.Context, mode uint32, parent btree.Meta, defaults *FS) btree.Meta {
	now := nowNs()
	m := btree.Meta{Mode: mode, MtimeNs: now, HasMtime: true}
	if c, ok := fuse.FromContext(ctx); ok {
		m.Uid, m.Gid, m.HasOwner = c.Uid, c.Gid, true
	}
	if parent.Mode&syscall.S_ISGID != 0 && parent.IsDir() {
		if !m.HasOwner {
			m.Uid = defaults.opts.UID
		}
		m.Gid, m.HasOwner = defaults.opts.GID, true
		if parent.HasOwner {
			m.Gid = parent.Gid
		}
		if m.IsDir() {
			m.Mode |= syscall.S_ISGID
		}
	}
	return m
}

// relatimeDue reports whether a read at now advances the access time of an
// entry with metadata m (shown with time ts if it has no mtime), by the
// kernel's relatime rule: the access time is not after the modification or
// change time, or is a day old.
func relatimeDue(m btree.Meta, ts, now int64) bool {
	atime, mtime, ctime := shownTimes(m, ts)
	return atime <= mtime || atime <= ctime || now-atime >= int64(24*time.Hour)
}

// killPriv drops the set-user-ID bit, and the set-group-ID bit of a
// group-executable file, as Linux does when someone without CAP_FSETID
// writes to, truncates or chowns a file; and reports whether it dropped
// any. The mount asks the kernel to leave that to the filesystem
// (FUSE_HANDLE_KILLPRIV_V2), which spares every write a request for the
// file's security.capability.
func killPriv(m *btree.Meta) bool {
	mode := m.FileMode()
	groupExec := mode&syscall.S_IXGRP != 0
	if mode&syscall.S_ISUID == 0 && !(groupExec && mode&syscall.S_ISGID != 0) {
		return false
	}
	m.Mode = mode &^ syscall.S_ISUID
	if groupExec {
		m.Mode &^= syscall.S_ISGID
	}
	return true
}

// privileged reports whether the caller of ctx may keep a file's
// set-user-ID and set-group-ID bits while changing it: root, as the
// kernel's CAP_FSETID would say for most callers.
func privileged(ctx context.Context) bool {
	c, ok := fuse.FromContext(ctx)
	return !ok || c.Uid == 0
}
