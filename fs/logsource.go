package fs

import (
	"io"

	"github.com/ledgerfs/ledgerfs/store"
)

// maxLoggedChange bounds the bytes of a change recorded in a page's sync
// log: a larger one is made durable by syncing the page's db, whose cost
// it outweighs.
const maxLoggedChange = 1 << 20

// logSource returns what the sync log's record of the change being
// committed holds, or nil if the change is more than limit bytes (a
// commit's record: maxLoggedChange; an intent: maxEditIntent): the extents
// written since the committed base, copied now, when the base is durable
// or logged (store.Durability.CanLog); else the whole content, copied now
// if it is all in the spool's memory, or read back from the value by the
// record once its rows are written. Called with
// f.mu held, before c.value(), which may move the base and close the
// spool the extents are read from.
func (f *fileNode) logSource(d *store.Durability, key string, limit int64) (*store.LogSource, error) {
	c := f.c
	if c.stream == nil && !c.fromStream() && c.baseSize > 0 && d.CanLog(key, c.baseID.Digest) {
		if extentBytes(c.ext) > limit {
			return nil, nil
		}
		return c.sinceBase()
	}
	if c.size > limit {
		return nil, nil
	}
	if c.stream == nil && c.baseSize == 0 && c.size <= memSpool {
		// Every byte is in the spool's memory (or a hole): copied now
		// rather than read back from the value the commit stores.
		return c.wholeSource()
	}
	return &store.LogSource{}, nil
}

// wholeSource copies the whole content, as a LogSource with no base.
func (c *content) wholeSource() (*store.LogSource, error) {
	b := make([]byte, c.size)
	if _, err := c.readAt(b, 0); err != nil && err != io.EOF {
		return nil, err
	}
	return &store.LogSource{Extents: []store.Extent{{Data: b}}}, nil
}

// sinceBase copies the changes since the base, as a LogSource over it.
func (c *content) sinceBase() (*store.LogSource, error) {
	ext, err := c.copyExtents(c.ext)
	if err != nil {
		return nil, err
	}
	return &store.LogSource{Base: c.baseID.Digest, Keep: uint64(c.baseSize), Extents: ext}, nil
}
