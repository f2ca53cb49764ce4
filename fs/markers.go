package fs

import (
	"strings"
	"syscall"

	"github.com/ledgerfs/ledgerfs/internal/btree"
	"github.com/ledgerfs/ledgerfs/journal"
	"github.com/ledgerfs/ledgerfs/store"
)

// isMarker reports whether an entry only keeps an empty directory.
func isMarker(e btree.Entry) bool {
	return strings.HasSuffix(e.Key, "/") && e.Meta.Size == 0 && (e.Meta.Mode == 0 || e.Meta.IsDir())
}

// dirMarker is the entry that keeps a directory, with its metadata m.
func dirMarker(m btree.Meta) btree.Entry {
	m.Mode = syscall.S_IFDIR | m.Mode&0o7777
	return btree.Entry{Value: emptyValue, Meta: m}
}

// keepParent returns the op that keeps directory prefix in existence once
// the keys in gone are removed from it, or nil: POSIX directories outlive
// their last file.
func keepParent(t *btree.Tree, prefix string, gone ...string) ([]journal.Op, error) {
	if prefix == "" || !strings.HasSuffix(prefix, "/") {
		return nil, nil
	}
	it := t.Prefix(prefix)
	for it.Next() {
		k := it.Entry().Key
		if k == prefix {
			return nil, nil // has a marker
		}
		kept := true
		for _, g := range gone {
			if k == g || strings.HasPrefix(k, g+"/") {
				kept = false
			}
		}
		if kept {
			return nil, it.Err()
		}
	}
	if it.Err() != nil {
		return nil, it.Err()
	}
	return []journal.Op{{Key: prefix, Kind: store.OpMarker, Entry: dirMarker(btree.Meta{Mode: 0o755, MtimeNs: nowNs(), HasMtime: true})}}, nil
}

// keepsItself reports whether the directory at prefix has a marker whose
// commit is queued: it outlives its last entry without a marker from
// keepParent, which reads only the head and would replace the queued one
// (a mkdir -m 0700 whose last file went before the marker landed showed
// 0755). Ask before reading the head: a marker that lands in between is
// then in it.
func (pg *pageRef) keepsItself(prefix string) bool {
	if !pg.v.queues() {
		return false
	}
	_, ok := pg.queuedMarker(prefix)
	return ok
}

// queueRemoveDir queues the deletion of the marker of the empty directory
// dir, which shows gone until it lands. A marker of dir still queued (a
// mkdir or chmod just before) stops showing at once: it lands first, and
// the deletion after it; a touch of dir waiting for a change then rides
// with none (takeTouches finds its marker gone).
func (pg *pageRef) queueRemoveDir(parent, dir string) error {
	return pg.queueShown(journal.Op{Key: dir, Kind: store.OpDelete}, func(seq uint64) {
		pg.ov.markers.Delete(dir)
		pg.ov.showGone(dir, seq)
		pg.dirShownLocked(parent, dir, -1)
	}, func(seq uint64) {
		pg.ov.landGone(dir, seq)
	})
}

// queuedMarker returns the directory marker at key whose commit is queued.
func (pg *pageRef) queuedMarker(key string) (btree.Entry, bool) {
	pg.mu.Lock()
	defer pg.mu.Unlock()
	return pg.ov.marker(key)
}

// queuedMarkersUnder lists the keys of the queued directory markers under
// prefix (prefix's own included).
func (pg *pageRef) queuedMarkersUnder(prefix string) []string {
	pg.mu.Lock()
	defer pg.mu.Unlock()
	return pg.ov.markersUnder(prefix)
}

// queueMarker queues the commit of a directory's new or changed marker,
// which shows until it lands: mkdir, chmod and utimes of a directory need
// not wait for a commit (cp -a does all three for every directory it
// copies). Lookups, listings and name checks see a queued marker as the
// directory it keeps.
func (pg *pageRef) queueMarker(key string, e btree.Entry) error {
	return pg.queueShown(journal.Op{Key: key, Kind: store.OpMarker, Entry: e}, func(seq uint64) {
		pg.ov.showMarker(key, e, seq)
	}, func(seq uint64) {
		pg.ov.landMarker(key, seq)
	})
}

// queueMkdir is queueMarker of a new directory at key in the directory at
// parent, which counts one more subdirectory from when it shows.
func (pg *pageRef) queueMkdir(parent, key string, e btree.Entry) error {
	return pg.queueShown(journal.Op{Key: key, Kind: store.OpMarker, Entry: e}, func(seq uint64) {
		pg.ov.showMarker(key, e, seq)
		pg.dirShownLocked(parent, key, 1)
	}, func(seq uint64) {
		pg.ov.landMarker(key, seq)
	})
}

// touchOp returns the op that gives the directory at prefix mtime and ctime
// now, as adding or removing an entry does on a native filesystem; false if
// it has no marker. A directory without one (the page root, or one that
// exists by its keys) shows the page's latest change, which this one is.
func (pg *pageRef) touchOp(prefix string) (journal.Op, bool, error) {
	if !strings.HasSuffix(prefix, "/") {
		return journal.Op{}, false, nil
	}
	e, ok := pg.queuedMarker(prefix) // before the tree; see listDir
	if !ok {
		err := pg.view(func(p *store.Page, head *store.Commit, t *btree.Tree) error {
			var err error
			e, ok, err = t.Get(prefix)
			ok = ok && e.Meta.IsDir()
			return err
		})
		if err != nil || !ok {
			return journal.Op{}, false, err
		}
	}
	now := nowNs()
	e.Meta.MtimeNs, e.Meta.HasMtime, e.Meta.CtimeNs, e.Meta.HasCtime = now, true, now, true
	return journal.Op{Key: prefix, Kind: store.OpMarker, Entry: e}, true, nil
}

// touch gives the directory at prefix mtime and ctime now (see touchOp). A
// failure is logged: the entry's own change has been made. On the live page
// the new times show at once, as a queued marker, and ride with the page's
// next change (see takeTouches): the entry's own close, or the next unlink
// of an rm. A commit of their own per entry doubled the db writes of
// removing a directory's files.
func (pg *pageRef) touch(prefix string) {
	op, ok, err := pg.touchOp(prefix)
	if err == nil && ok {
		if pg.v.queues() {
			err = pg.noteTouch(op)
		} else {
			err = pg.apply(false, op)
		}
	}
	if err != nil {
		errno("directory times", err)
	}
}

// noteTouch shows op, a directory marker with new times, until the change
// that carries it lands. With no change in flight, none may come for a
// while (a file created and kept open), so it is queued at once; otherwise
// the next change carries it, or the landing of the last one in flight
// queues it (see queueWith).
func (pg *pageRef) noteTouch(op journal.Op) error {
	pg.mu.Lock()
	pg.ov.showTouch(op.Key, op.Entry)
	idle := pg.ov.inflight == 0
	pg.mu.Unlock()
	if idle {
		return pg.sendTouches()
	}
	return nil
}

// takeTouches returns up to room of the touches waiting, as ops to ride
// with ops (see overlay.takeTouches), and the function that stops showing
// them once their change has landed or failed. Called with pg.mu held.
func (pg *pageRef) takeTouches(ops []journal.Op, room int) ([]journal.Op, func()) {
	out, taken := pg.ov.takeTouches(ops, room)
	return out, func() {
		pg.mu.Lock()
		defer pg.mu.Unlock()
		pg.ov.landTouches(taken)
	}
}

// sendTouches queues the touches waiting, if any, in a change of their own:
// when nothing else will carry them, or before a wait for what is queued.
func (pg *pageRef) sendTouches() error {
	pg.mu.Lock()
	waiting := pg.ov.touchesWaiting()
	pg.mu.Unlock()
	if !waiting {
		return nil
	}
	return pg.queue(func(error) {})
}

// withTouch returns ops with the op that touches the directory at prefix,
// if it has a marker and ops do not already change it.
func (pg *pageRef) withTouch(prefix string, ops []journal.Op) ([]journal.Op, error) {
	for _, op := range ops {
		if op.Key == prefix {
			return ops, nil
		}
	}
	op, ok, err := pg.touchOp(prefix)
	if err != nil || !ok {
		return ops, err
	}
	return append(ops, op), nil
}
