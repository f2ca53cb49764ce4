package fs

import (
	"github.com/ledgerfs/ledgerfs/store"
)

// maxLoggedChange bounds the bytes of a change recorded in a page's sync
// log: a larger one is made durable by syncing the page's db, whose cost
// it outweighs.
const maxLoggedChange = 1 << 20

// logSource returns what the sync log's record of the change being
// committed holds, or nil if the change is too large to log: the extents
// written since the committed base, copied now, when the base is durable
// or logged (store.Durability.CanLog); else the whole content, which the
// record reads back from the value once its rows are written. Called with
// f.mu held, before c.value(), which may move the base and close the
// spool the extents are read from.
func (f *fileNode) logSource(d *store.Durability, key string) (*store.LogSource, error) {
	c := f.c
	if c.stream == nil && !c.fromStream() && c.baseSize > 0 && d.CanLog(key, c.baseID.Digest) {
		if extentBytes(c.ext) > maxLoggedChange {
			return nil, nil
		}
		return c.sinceBase()
	}
	if c.size > maxLoggedChange {
		return nil, nil
	}
	return &store.LogSource{}, nil
}

// sinceBase copies the changes since the base, as a LogSource over it.
func (c *content) sinceBase() (*store.LogSource, error) {
	ext, err := c.copyExtents(c.ext)
	if err != nil {
		return nil, err
	}
	return &store.LogSource{Base: c.baseID.Digest, Keep: uint64(c.baseSize), Extents: ext}, nil
}
