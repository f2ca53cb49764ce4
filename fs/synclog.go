package fs

import (
	"io"

	"github.com/ledgerfs/ledgerfs/cas"
	"github.com/ledgerfs/ledgerfs/internal/synclog"
	"github.com/ledgerfs/ledgerfs/journal"
	"github.com/ledgerfs/ledgerfs/store"
)

// maxLoggedChange bounds the bytes of a change recorded in a page's sync
// log: a larger one is made durable by syncing the page's db, whose cost
// it outweighs.
const maxLoggedChange = 1 << 20

// logChange returns what sets a change's sync log record, if the change
// is small enough: the extents written since the committed base, when the
// base is durable or logged (store.Page.CanLog), else the whole content,
// read back from the value once its rows are written. Called with f.mu
// held, before c.value(), which may move the base; the op it is given
// must not change after.
func (f *fileNode) logChange(p *store.Page, key string) func(op *journal.Op) {
	c := f.c
	delta := c.stream == nil && !c.streamed && c.baseSize > 0 &&
		p.CanLog(key, []byte(c.baseID.Digest))
	if delta {
		var n int64
		var ext []extent
		if c.ext != nil {
			c.ext.Ascend(func(x extent) bool {
				ext = append(ext, x)
				n += x.end - x.start
				return n <= maxLoggedChange
			})
		}
		if n > maxLoggedChange {
			return nil
		}
		base, keep := []byte(c.baseID.Digest), uint64(c.baseSize)
		spool := c.spool
		return func(op *journal.Op) {
			op.LogSize = int(n) + 64*len(ext) + len(key) + 512
			op.Log = func() (*synclog.Record, error) {
				r := record(key, op)
				r.Base, r.Keep = base, keep
				for _, x := range ext {
					b := make([]byte, x.end-x.start)
					if _, err := spool.ReadAt(b, x.start); err != nil {
						return nil, err
					}
					r.Extents = append(r.Extents, synclog.Extent{Off: uint64(x.start), Data: b})
				}
				return r, nil
			}
		}
	}
	if c.size > maxLoggedChange {
		return nil
	}
	return func(op *journal.Op) {
		op.LogSize = int(c.size) + len(key) + 512
		op.Log = func() (*synclog.Record, error) {
			r := record(key, op)
			if r.Size > 0 {
				b, err := readValue(p, op.Entry.Value, r.Size)
				if err != nil {
					return nil, err
				}
				r.Extents = []synclog.Extent{{Data: b}}
			}
			return r, nil
		}
	}
}

// record is the sync log's record of op, a put of key, with no base and
// no extents yet.
func record(key string, op *journal.Op) *synclog.Record {
	return &synclog.Record{Key: key, Op: journal.EncodeOp(*op), Size: op.Entry.Meta.Size,
		Result: []byte(op.Entry.Value.Digest)}
}

func readValue(p *store.Page, id cas.ObjectIdentifier, size uint64) ([]byte, error) {
	r, err := p.OpenValue(id)
	if err != nil {
		return nil, err
	}
	b := make([]byte, size)
	if _, err := r.ReadAt(b, 0); err != nil && err != io.EOF {
		return nil, err
	}
	return b, nil
}
