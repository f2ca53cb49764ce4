package fs

import (
	"strings"
	"syscall"

	"github.com/ledgerfs/ledgerfs/internal/btree"
	"github.com/ledgerfs/ledgerfs/internal/journal"
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
	return []journal.Op{{Key: prefix, Entry: dirMarker(btree.Meta{Mode: 0o755, MtimeNs: nowNs(), HasMtime: true})}}, nil
}

type queuedMarker struct {
	e   btree.Entry
	seq uint64
}

// queuedMarker returns the directory marker at key whose commit is queued.
func (pg *pageRef) queuedMarker(key string) (btree.Entry, bool) {
	pg.mu.Lock()
	defer pg.mu.Unlock()
	m, ok := pg.q.markers.Get(key)
	return m.e, ok
}

// queuedMarkersUnder lists the keys of the queued directory markers under
// prefix (prefix's own included).
func (pg *pageRef) queuedMarkersUnder(prefix string) []string {
	pg.mu.Lock()
	defer pg.mu.Unlock()
	var out []string
	pg.q.markers.Under(prefix, func(k string, _ queuedMarker) bool {
		out = append(out, k)
		return true
	})
	return out
}

// queueMarker queues the commit of a directory's new or changed marker,
// which shows until it lands: mkdir, chmod and utimes of a directory need
// not wait for a commit (cp -a does all three for every directory it
// copies). Lookups, listings and name checks see a queued marker as the
// directory it keeps.
func (pg *pageRef) queueMarker(key string, e btree.Entry) error {
	return pg.queueShown(journal.Op{Key: key, Entry: e}, func(seq uint64) {
		pg.q.markers.Set(key, queuedMarker{e, seq})
	}, func(seq uint64) {
		if m, ok := pg.q.markers.Get(key); ok && m.seq == seq {
			pg.q.markers.Delete(key)
		}
	})
}
