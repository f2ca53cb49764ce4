package journal

import (
	"fmt"
	"io"
	"log/slog"

	"github.com/ledgerfs/ledgerfs/cas"
	"github.com/ledgerfs/ledgerfs/internal/btree"
	"github.com/ledgerfs/ledgerfs/internal/synclog"
	"github.com/ledgerfs/ledgerfs/store"
)

// replayLog commits what the page's sync log holds and the head does not:
// changes an fsync made durable through the log, which a power loss took
// from the db's unsynced writes. After a crash of the process alone the
// head already holds them all, and nothing is written. The log is
// checkpointed after, so that its records are never replayed again.
func (e *Engine) replayLog(p *store.Page) error {
	recs := p.LoggedRecords()
	if len(recs) == 0 {
		return nil
	}
	head, err := p.Head()
	if err != nil {
		return err
	}
	t := p.Tree(head)
	var keys []string
	byKey := map[string][]*synclog.Record{}
	for i := range recs {
		r := &recs[i]
		if _, ok := byKey[r.Key]; !ok {
			keys = append(keys, r.Key)
		}
		byKey[r.Key] = append(byKey[r.Key], r)
	}
	var ops []Op
	for _, key := range keys {
		op, ok, err := replayKey(p, t, key, byKey[key])
		if err != nil {
			return fmt.Errorf("replay sync log: %q: %w", key, err)
		}
		if ok {
			ops = append(ops, op)
		}
	}
	if len(ops) > 0 {
		j, err := e.Begin(p, false)
		if err != nil {
			return err
		}
		if err := j.Apply(ops...); err != nil {
			return err
		}
		if _, err := j.Commit(); err != nil {
			return err
		}
		slog.Info("replayed changes the sync log held and the db had lost", "page", p.Ledger+"/"+p.Name, "changes", len(ops))
	}
	return p.Sync()
}

// replayKey returns the change that brings key from what t holds to what
// its records end with, if any.
func replayKey(p *store.Page, t *btree.Tree, key string, rs []*synclog.Record) (Op, bool, error) {
	cur, found, err := t.Get(key)
	if err != nil {
		return Op{}, false, err
	}
	last := rs[len(rs)-1]
	if last.Delete {
		return Op{Key: key, Delete: true}, found, nil
	}
	want, err := DecodeOp(key, last.Op)
	if err != nil {
		return Op{}, false, err
	}
	if found && cur.Value == want.Entry.Value && sameMeta(cur.Meta, want.Entry.Meta) {
		return Op{}, false, nil
	}
	// Records chain from the last that needs nothing before it: one
	// without base bytes, or built from a durable value rather than the
	// previous record's result.
	start := len(rs) - 1
	for start > 0 && rs[start].Keep > 0 && !rs[start-1].Delete && string(rs[start].Base) == string(rs[start-1].Result) {
		start--
	}
	for _, r := range rs[start:] {
		id, err := rebuild(p, r)
		if err != nil {
			return Op{}, false, err
		}
		if string(id.Digest) != string(r.Result) {
			return Op{}, false, fmt.Errorf("record rebuilds value %s, not the %s it names", id, cas.Digest(r.Result))
		}
	}
	if want.Entry.Value.Digest != cas.Digest(last.Result) {
		return Op{}, false, fmt.Errorf("record names value %s and puts %s", cas.Digest(last.Result), want.Entry.Value)
	}
	return want, true, nil
}

// sameMeta compares metadata but for the access time, which a later read
// may have moved.
func sameMeta(a, b btree.Meta) bool {
	a.AtimeNs, a.HasAtime, b.AtimeNs, b.HasAtime = 0, false, 0, false
	return a == b
}

// rebuild stores the value a put record describes and returns its id.
func rebuild(p *store.Page, r *synclog.Record) (cas.ObjectIdentifier, error) {
	c := &recordContent{r: r}
	if r.Keep > 0 {
		base := cas.ObjectIdentifier{Digest: cas.Digest(r.Base)}
		br, err := p.OpenValue(base)
		if err != nil {
			return cas.ObjectIdentifier{}, fmt.Errorf("open the record's base %s: %w", base, err)
		}
		c.base = br
		changed := make([]cas.Range, 0, len(r.Extents)+1)
		for _, e := range r.Extents {
			changed = append(changed, cas.Range{Start: e.Off, End: e.Off + uint64(len(e.Data))})
		}
		if r.Size > r.Keep {
			changed = append(changed, cas.Range{Start: r.Keep, End: r.Size})
		}
		// As a file's commit passes them: unsorted, the last range
		// overlapping extents past Keep; cas.Edit sorts and clips.
		w, id, err := p.EditValue(base, c, r.Size, changed)
		if err != nil {
			return cas.ObjectIdentifier{}, err
		}
		return id, w.Commit()
	}
	w := p.NewValueWriter()
	if _, err := io.Copy(w, io.NewSectionReader(c, 0, int64(r.Size))); err != nil {
		w.Abort()
		return cas.ObjectIdentifier{}, err
	}
	id, _, err := w.Close()
	return id, err
}

// recordContent reads the content a put record describes: the base's
// first Keep bytes, zeros up to Size, the extents over them.
type recordContent struct {
	r    *synclog.Record
	base *cas.Reader
}

func (c *recordContent) ReadAt(b []byte, off int64) (int, error) {
	size := int64(c.r.Size)
	if off >= size {
		return 0, io.EOF
	}
	want := len(b)
	b = b[:min(int64(len(b)), size-off)]
	end := off + int64(len(b))
	clear(b)
	if keep := int64(c.r.Keep); off < keep {
		n := min(end, keep) - off
		if _, err := c.base.ReadAt(b[:n], off); err != nil && err != io.EOF {
			return 0, err
		}
	}
	for _, e := range c.r.Extents {
		s, t := int64(e.Off), int64(e.Off)+int64(len(e.Data))
		if t <= off || s >= end {
			continue
		}
		lo, hi := max(s, off), min(t, end)
		copy(b[lo-off:hi-off], e.Data[lo-s:hi-s])
	}
	if len(b) < want {
		return len(b), io.EOF
	}
	return len(b), nil
}
