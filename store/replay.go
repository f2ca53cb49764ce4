package store

import (
	"fmt"
	"io"

	"github.com/ledgerfs/ledgerfs/cas"
	"github.com/ledgerfs/ledgerfs/internal/synclog"
)

// A Replayed is the change the records a crash left in the sync log end
// with for one key: a delete, or the put of Row, whose value (Result) the
// replay has stored again.
type Replayed struct {
	Key    string
	Delete bool
	Row    []byte
	Result cas.Digest
}

// Replay brings back what the records a crash left in the log hold and the
// head does not: changes an fsync made durable through the log, which a
// power loss took from the db's unsynced writes. holds reports whether the
// head already holds a key's last change (after a crash of the process
// alone it holds them all); the others' values are rebuilt from their
// records and handed to commit, in one call. The log is checkpointed
// after, so that its records are never replayed again.
func (d *Durability) Replay(holds func(Replayed) (bool, error), commit func([]Replayed) error) error {
	d.mu.Lock()
	recs := d.found
	d.mu.Unlock()
	if len(recs) == 0 {
		return nil
	}
	var keys []string
	byKey := map[string][]*synclog.Record{}
	for i := range recs {
		r := &recs[i]
		if _, ok := byKey[r.Key]; !ok {
			keys = append(keys, r.Key)
		}
		byKey[r.Key] = append(byKey[r.Key], r)
	}
	var out []Replayed
	for _, key := range keys {
		rs := byKey[key]
		last := rs[len(rs)-1]
		c := Replayed{Key: key, Delete: last.Delete, Row: last.Op, Result: cas.Digest(last.Result)}
		if ok, err := holds(c); err != nil || ok {
			if err != nil {
				return fmt.Errorf("replay sync log: %q: %w", key, err)
			}
			continue
		}
		if !c.Delete {
			if err := d.rebuildChain(rs); err != nil {
				return fmt.Errorf("replay sync log: %q: %w", key, err)
			}
		}
		out = append(out, c)
	}
	if len(out) > 0 {
		if err := commit(out); err != nil {
			return err
		}
	}
	return d.Checkpoint()
}

// rebuildChain stores again the values of a key's records, from the last
// that needs nothing before it (one without base bytes, or built from a
// durable value rather than the previous record's result) to the end.
func (d *Durability) rebuildChain(rs []*synclog.Record) error {
	start := len(rs) - 1
	for start > 0 && rs[start].Keep > 0 && !rs[start-1].Delete && string(rs[start].Base) == string(rs[start-1].Result) {
		start--
	}
	for _, r := range rs[start:] {
		id, err := d.rebuild(r)
		if err != nil {
			return err
		}
		if string(id.Digest) != string(r.Result) {
			return fmt.Errorf("record rebuilds value %s, not the %s it names", id, cas.Digest(r.Result))
		}
	}
	return nil
}

// rebuild stores the value a put record describes and returns its id.
func (d *Durability) rebuild(r *synclog.Record) (cas.ObjectIdentifier, error) {
	p := d.p
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
