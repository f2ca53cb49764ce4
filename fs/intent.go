package fs

import (
	"io"
	"log/slog"
	"time"

	"github.com/ledgerfs/ledgerfs/cas"
	"github.com/ledgerfs/ledgerfs/internal/btree"
	"github.com/ledgerfs/ledgerfs/journal"
	"github.com/ledgerfs/ledgerfs/store"
)

// An fsync of a small change is made durable by an intent in the page's
// sync log (store.Durability.LogIntent) before its value is computed: one
// record and one sync of the log, no chunking, hashing or db write on the
// way. The file stays written, not committed; its commit follows at its
// close, intentDelay after its first intent, or as soon as the page's
// intents fill their share of its log, whichever comes first — so history
// and sync see it soon, and several fsyncs share one commit. An fsync whose
// changes since the last intent exceed maxIntent commits them instead.
const (
	maxIntent   = 64 << 10
	intentDelay = time.Second
)

// logIntent makes the file's changes durable by an intent, if they are
// small enough and the page's log takes it: the first since the file's
// base holds every change since it, each next one the changes since the
// last. Called with f.pg.keys and f.mu held, the file changed and at key.
func (f *fileNode) logIntent(key string) (bool, error) {
	c := f.c
	if btree.IsLinkKey(key) {
		return false, nil // a link's count of names is read at commit
	}
	d := c.p.Durability()
	var src *store.LogSource
	if c.intentOn {
		if extentBytes(c.sinceIntent) > maxIntent {
			return false, nil
		}
		ext, err := c.copyExtents(c.sinceIntent)
		if err != nil {
			return false, err
		}
		src = &store.LogSource{Keep: uint64(c.intentMin), Extents: ext}
	} else {
		if extentBytes(c.ext) > maxIntent {
			return false, nil
		}
		var err error
		if src, err = f.logSource(d, key); err != nil || src == nil {
			return false, err
		}
		if src.Base == "" {
			// No durable base: the record holds the whole content.
			if c.size > maxIntent {
				return false, nil
			}
			b := make([]byte, c.size)
			if _, err := c.readAt(b, 0); err != nil && err != io.EOF {
				return false, err
			}
			src.Extents = []store.Extent{{Data: b}}
		}
	}
	m := f.meta
	m.Size = uint64(c.size)
	// The row names the base (a new file's: the empty value); the replay
	// puts the value it rebuilds.
	named := c.baseID
	if named.Digest == "" {
		named.Digest = cas.ComputeDigest(cas.KindBlob, false, nil)
	}
	row := journal.EncodeOp(journal.Op{Key: key, Entry: btree.Entry{Key: key, Value: named, Meta: m}})
	mark, full, err := d.LogIntent(key, row, uint64(c.size), src, c.intentOn)
	if mark.IsZero() {
		return false, err
	}
	c.intentLogged()
	f.pg.noteIntent(f, full)
	return true, nil
}

// noteIntent arms the page's timer that commits files with intents, unless
// it is armed or the filesystem is closing; soon, if the page's intents
// fill their share of its log.
func (pg *pageRef) noteIntent(f *fileNode, soon bool) {
	pg.mu.Lock()
	defer pg.mu.Unlock()
	if pg.intents == nil {
		pg.intents = map[*fileNode]struct{}{}
	}
	pg.intents[f] = struct{}{}
	delay := intentDelay
	if soon {
		delay = 0
	}
	if pg.intentTimer != nil {
		if soon && pg.intentTimer.Stop() {
			pg.intentTimer.Reset(0)
		}
		return
	}
	if !pg.fs.startBackground() {
		return
	}
	pg.intentTimer = time.AfterFunc(delay, func() {
		defer pg.fs.background.Done()
		pg.commitIntents()
	})
}

// commitIntents commits the files with intents the page holds.
func (pg *pageRef) commitIntents() {
	pg.mu.Lock()
	files := pg.intents
	pg.intents, pg.intentTimer = nil, nil
	pg.mu.Unlock()
	for f := range files {
		if eno := f.commit(commitQueue); eno != 0 {
			// The intent stays in the log: the change is durable, and
			// the file's close commits it.
			slog.Warn("commit of an fsynced change failed; its close retries", "errno", eno)
		}
	}
}

// stopIntents stops the page's timer and commits its files with intents
// now, for Close.
func (pg *pageRef) stopIntents() {
	pg.mu.Lock()
	t := pg.intentTimer
	pg.mu.Unlock()
	if t != nil && t.Stop() {
		pg.fs.background.Done()
	}
	pg.commitIntents()
}
