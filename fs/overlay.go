package fs

import (
	"slices"

	"github.com/ledgerfs/ledgerfs/internal/btree"
	"github.com/ledgerfs/ledgerfs/journal"
	"github.com/ledgerfs/ledgerfs/store"
)

// overlay is what the live view of a page has accepted and not yet
// committed: files created and not committed yet, or closed with their
// commit queued; directory markers and deletions whose commits are queued;
// access times and directory times waiting to ride with the next change;
// and the count of queued commits. Lookups, listings and name checks show
// them as if committed, so that a close, an unlink or a mkdir need not wait
// for its commit.
//
// Each queued change has a number (seq): a change that lands stops showing
// only what it showed itself, never what a later change of the same key
// shows. The overlay knows nothing of FUSE or of the page's db: the
// pageRef that owns it queues the commits and calls it with its mu held.
type overlay struct {
	// files are created and not yet committed, or with a commit queued,
	// by key.
	files keyMap[*fileNode]
	// markers are directory markers (mode and mtime) whose commit is
	// queued, by key.
	markers keyMap[queuedMarker]
	// gone holds the keys whose deletion is queued, with the change's
	// number. A view keeps a clone of it (see keyMap.Clone): a copy of the
	// whole set per unlink was a third of what rm -rf of a large directory
	// allocated.
	gone keyMap[uint64]
	// atimes are access times reads gave files, by key, until they are
	// kept in the repository db (see pageRef.noteAtime).
	atimes keyMap[queuedAtime]
	// touched holds the directory markers whose new times (see
	// pageRef.touch) wait to ride with the page's next change, by key, with
	// the number of the change that shows them in markers.
	touched map[string]uint64
	seq     uint64
	// inflight counts the commits queued that have not landed; ending,
	// the landed ones whose node has yet to drop its content.
	inflight, ending int
}

type queuedMarker struct {
	e   btree.Entry
	seq uint64
}

type queuedAtime struct {
	ns int64
	// saving is set while the time is being kept: it shows until that
	// lands, and a newer time replaces it.
	saving bool
}

// maxWaitingAtimes bounds the access times a page keeps waiting (about
// 100 bytes each): reads of more files while the times wait leave the
// others' as they were, rather than grow the server's memory.
const maxWaitingAtimes = 1 << 16

// next numbers a new queued change.
func (o *overlay) next() uint64 {
	o.seq++
	return o.seq
}

// showGone shows key deleted until the change numbered seq lands.
func (o *overlay) showGone(key string, seq uint64) { o.gone.Set(key, seq) }

// landGone stops showing key deleted, if the change numbered seq is the
// latest to show it.
func (o *overlay) landGone(key string, seq uint64) {
	if s, ok := o.gone.Get(key); ok && s == seq {
		o.gone.Delete(key)
	}
}

// goneNow returns the keys shown deleted now, for a view to hide from the
// head it reads after: one that lands in between is in the head already.
func (o *overlay) goneNow() keyMap[uint64] {
	if o.gone.Len() == 0 {
		return keyMap[uint64]{}
	}
	return o.gone.Clone()
}

// showMarker shows e as the directory marker at key until the change
// numbered seq lands.
func (o *overlay) showMarker(key string, e btree.Entry, seq uint64) {
	o.markers.Set(key, queuedMarker{e, seq})
}

// landMarker stops showing the marker at key, if the change numbered seq
// is the latest to show it.
func (o *overlay) landMarker(key string, seq uint64) {
	if m, ok := o.markers.Get(key); ok && m.seq == seq {
		o.markers.Delete(key)
	}
}

// marker returns the directory marker shown at key.
func (o *overlay) marker(key string) (btree.Entry, bool) {
	m, ok := o.markers.Get(key)
	return m.e, ok
}

// markersUnder lists the keys of the markers shown under prefix (prefix's
// own included).
func (o *overlay) markersUnder(prefix string) []string {
	var out []string
	o.markers.Under(prefix, func(k string, _ queuedMarker) bool {
		out = append(out, k)
		return true
	})
	return out
}

// showTouch shows e, a directory marker with new times, until a change
// that carries it lands (takeTouches).
func (o *overlay) showTouch(key string, e btree.Entry) {
	seq := o.next()
	o.showMarker(key, e, seq)
	if o.touched == nil {
		o.touched = map[string]uint64{}
	}
	o.touched[key] = seq
}

// touchesWaiting reports whether touches wait for a change to carry them.
func (o *overlay) touchesWaiting() bool { return len(o.touched) > 0 }

// touchTaken is a touch taken into a change: it shows until that change
// lands (landTouches).
type touchTaken struct {
	key string
	seq uint64
}

// takeTouches returns up to room of the touches waiting, as ops to ride
// with the change of ops, except those of the keys of ops, which replace
// them; and what landTouches takes once that change has landed or failed.
func (o *overlay) takeTouches(ops []journal.Op, room int) ([]journal.Op, []touchTaken) {
	var out []journal.Op
	var taken []touchTaken
	for key, seq := range o.touched {
		if len(taken) >= room {
			break
		}
		delete(o.touched, key)
		taken = append(taken, touchTaken{key, seq})
		m, ok := o.markers.Get(key)
		if ok && m.seq == seq && !slices.ContainsFunc(ops, func(op journal.Op) bool { return op.Key == key }) {
			out = append(out, journal.Op{Key: key, Kind: store.OpMarker, Entry: m.e})
		}
	}
	return out, taken
}

// landTouches stops showing the touches taken, unless later changes show
// their keys.
func (o *overlay) landTouches(taken []touchTaken) {
	for _, t := range taken {
		o.landMarker(t.key, t.seq)
	}
}

// noteAtime records a read's new access time of the file at key, unless
// maxWaitingAtimes are waiting already.
func (o *overlay) noteAtime(key string, ns int64) {
	if _, ok := o.atimes.Get(key); !ok && o.atimes.Len() >= maxWaitingAtimes {
		return
	}
	o.atimes.Set(key, queuedAtime{ns: ns})
}

// takeAtimes returns up to room of the access times not being kept yet;
// they show as being kept until landAtimes.
func (o *overlay) takeAtimes(room int) map[string]int64 {
	out := map[string]int64{}
	o.atimes.Under("", func(key string, a queuedAtime) bool {
		if len(out) >= room {
			return false
		}
		if !a.saving {
			out[key] = a.ns
		}
		return true
	})
	for key, ns := range out {
		o.atimes.Set(key, queuedAtime{ns: ns, saving: true})
	}
	return out
}

// landAtimes drops the access times kept, unless a newer time was noted
// since; with kept false (keeping failed) they wait again.
func (o *overlay) landAtimes(taken map[string]int64, kept bool) {
	for key, ns := range taken {
		if a, ok := o.atimes.Get(key); ok && a.saving && a.ns == ns {
			if kept {
				o.atimes.Delete(key)
			} else {
				o.atimes.Set(key, queuedAtime{ns: ns})
			}
		}
	}
}

// forgetAtimes drops the access times waiting for the keys starting with
// prefix.
func (o *overlay) forgetAtimes(prefix string) {
	var keys []string
	o.atimes.Under(prefix, func(k string, _ queuedAtime) bool {
		keys = append(keys, k)
		return true
	})
	for _, k := range keys {
		o.atimes.Delete(k)
	}
}

// atimesWaiting counts the access times not being kept.
func (o *overlay) atimesWaiting() int {
	n := 0
	o.atimes.Under("", func(_ string, a queuedAtime) bool {
		if !a.saving {
			n++
		}
		return true
	})
	return n
}

// atime returns the access time waiting for key, if any.
func (o *overlay) atime(key string) (int64, bool) {
	a, ok := o.atimes.Get(key)
	return a.ns, ok
}

// pending returns the file pending at key.
func (o *overlay) pending(key string) *fileNode {
	f, _ := o.files.Get(key)
	return f
}

// setPending shows f at key until unpend or dropPending.
func (o *overlay) setPending(key string, f *fileNode) { o.files.Set(key, f) }

// unpend drops f from key if f is the file pending there (a later create
// may have taken the key), and reports whether it did.
func (o *overlay) unpend(key string, f *fileNode) bool {
	if p, _ := o.files.Get(key); p != f {
		return false
	}
	o.files.Delete(key)
	return true
}

// dropPending drops whatever file is pending at key, and its access time:
// the file is gone.
func (o *overlay) dropPending(key string) {
	o.files.Delete(key)
	o.atimes.Delete(key)
}

// pendingUnder lists the files pending under prefix, by key; nil if none.
func (o *overlay) pendingUnder(prefix string) map[string]*fileNode {
	var out map[string]*fileNode
	o.files.Under(prefix, func(k string, f *fileNode) bool {
		if out == nil {
			out = map[string]*fileNode{}
		}
		out[k] = f
		return true
	})
	return out
}

// dirShown reports whether the directory at prefix exists by what is
// shown: a pending file or a queued marker in it. Every lookup and name
// check asks, so it stops at the first and collects nothing.
func (o *overlay) dirShown(prefix string) bool {
	return !o.markers.Under(prefix, func(string, queuedMarker) bool { return false }) ||
		!o.files.Under(prefix, func(string, *fileNode) bool { return false })
}
