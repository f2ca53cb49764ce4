package store

import (
	"fmt"
	"io"

	"github.com/ledgerfs/ledgerfs/cas"
	"github.com/ledgerfs/ledgerfs/internal/synclog"
)

// A Replayed is the change the records a crash left in the sync log end
// with for one key: a delete, or the put of Row, whose value (Result) the
// replay has stored again. The Row of an intent (Durability.LogIntent)
// names another value: the put is of Result.
type Replayed struct {
	Key    string
	Delete bool
	Intent bool
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
		if len(r.Journal) > 0 {
			// Stood in for a journal row, which recovery has written
			// (Queue): no change for a replay to make.
			continue
		}
		if _, ok := byKey[r.Key]; !ok {
			keys = append(keys, r.Key)
		}
		byKey[r.Key] = append(byKey[r.Key], r)
	}
	var out []Replayed
	for _, key := range keys {
		rs := byKey[key]
		last := rs[len(rs)-1]
		c := Replayed{Key: key, Delete: last.Delete, Intent: isIntent(last), Row: last.Op, Result: cas.Digest(last.Result)}
		if c.Intent {
			// Its value is known once rebuilt.
			id, err := d.rebuildChain(rs)
			if err != nil {
				return fmt.Errorf("replay sync log: %q: %w", key, err)
			}
			c.Result = id.Digest
		}
		if ok, err := holds(c); err != nil || ok {
			if err != nil {
				return fmt.Errorf("replay sync log: %q: %w", key, err)
			}
			continue
		}
		if !c.Delete && !c.Intent {
			if _, err := d.rebuildChain(rs); err != nil {
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

// isIntent reports whether r is an intent: a put whose value is computed
// when it is replayed.
func isIntent(r *synclog.Record) bool { return !r.Delete && r.Intent }

// rebuildChain stores again the values the last of a key's records needs,
// and returns the id of its value. A record builds on a durable value, on
// the value another record made (its Result), or, an intent that Follows,
// on the one before it; each of those is rebuilt first. Intents the last
// does not build on are passed over: a later record of the key supersedes
// them.
func (d *Durability) rebuildChain(rs []*synclog.Record) (cas.ObjectIdentifier, error) {
	var units [][]*synclog.Record // each a record and the intents that follow it
	i := len(rs) - 1
	for {
		j := i
		for rs[j].Follows {
			if j == 0 || !isIntent(rs[j-1]) {
				return cas.ObjectIdentifier{}, fmt.Errorf("intent follows no intent")
			}
			j--
		}
		units = append(units, rs[j:i+1])
		if rs[j].Keep == 0 {
			break
		}
		k := j - 1
		for k >= 0 && !rs[k].Delete && (isIntent(rs[k]) || string(rs[k].Result) != string(rs[j].Base)) {
			k--
		}
		if k < 0 || rs[k].Delete {
			break // built on a durable value
		}
		i = k
	}
	var id cas.ObjectIdentifier
	for u := len(units) - 1; u >= 0; u-- {
		unit := units[u]
		var err error
		if id, err = d.rebuild(unit); err != nil {
			return id, err
		}
		if r := unit[0]; !isIntent(r) && string(id.Digest) != string(r.Result) {
			return id, fmt.Errorf("record rebuilds value %s, not the %s it names", id, cas.Digest(r.Result))
		}
	}
	return id, nil
}

// rebuild stores the value put records describe, the first built on its
// base (if it keeps bytes of one) and each other following the one before,
// and returns its id.
func (d *Durability) rebuild(rs []*synclog.Record) (cas.ObjectIdentifier, error) {
	p := d.p
	first, last := rs[0], rs[len(rs)-1]
	var src io.ReaderAt
	base := cas.ObjectIdentifier{Digest: cas.Digest(first.Base)}
	if first.Keep > 0 {
		br, err := p.OpenValue(base)
		if err != nil {
			return cas.ObjectIdentifier{}, fmt.Errorf("open the record's base %s: %w", base, err)
		}
		src = br
	}
	keep := first.Keep
	var changed []cas.Range
	for _, r := range rs {
		src = &recordContent{r: r, prev: src}
		keep = min(keep, r.Keep)
		for _, e := range r.Extents {
			changed = append(changed, cas.Range{Start: e.Off, End: e.Off + uint64(len(e.Data))})
		}
	}
	if first.Keep == 0 {
		w := p.NewValueWriter()
		if _, err := io.Copy(w, io.NewSectionReader(src, 0, int64(last.Size))); err != nil {
			w.Abort()
			return cas.ObjectIdentifier{}, err
		}
		id, _, err := w.Close()
		return id, err
	}
	w, id, err := p.editOver(base, src, keep, last.Size, changed)
	if err != nil {
		return cas.ObjectIdentifier{}, err
	}
	return id, w.Commit()
}

// editOver stores content, size bytes, as an edit of base: its first keep
// bytes are base's but for the ranges changed.
func (p *Page) editOver(base cas.ObjectIdentifier, content io.ReaderAt, keep, size uint64, changed []cas.Range) (*ValueWriter, cas.ObjectIdentifier, error) {
	if size > keep {
		changed = append(changed, cas.Range{Start: keep, End: size})
	}
	// As a file's commit passes them: unsorted, ranges overlapping and
	// past the end; cas.Edit sorts and clips.
	return p.EditValue(base, content, size, changed)
}

// EditExtents stores a value of size bytes as an edit of base: its first
// keep bytes (keep > 0), zeros up to size, the extents over them. It reads
// nothing but base and the extents, so a file's commit can compute its
// value from a copy of its changes while the file is written. The last
// pieces are left in the writer, as EditValue leaves them.
func (p *Page) EditExtents(base cas.ObjectIdentifier, keep, size uint64, extents []Extent) (*ValueWriter, cas.ObjectIdentifier, error) {
	if keep == 0 {
		return nil, cas.ObjectIdentifier{}, fmt.Errorf("store: edit a value: no byte of its base kept")
	}
	br, err := p.OpenValueAround(base)
	if err != nil {
		return nil, cas.ObjectIdentifier{}, fmt.Errorf("store: open the edit's base %s: %w", base, err)
	}
	r := &synclog.Record{Keep: keep, Size: size, Extents: recordExtents(extents)}
	changed := make([]cas.Range, 0, len(extents)+1)
	for _, x := range extents {
		changed = append(changed, cas.Range{Start: x.Off, End: x.Off + uint64(len(x.Data))})
	}
	return p.editOver(base, &recordContent{r: r, prev: br}, keep, size, changed)
}

// recordContent reads the content a put record describes: the first Keep
// bytes of what it builds on (prev), zeros up to Size, the extents over
// them.
type recordContent struct {
	r    *synclog.Record
	prev io.ReaderAt
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
		if _, err := c.prev.ReadAt(b[:n], off); err != nil && err != io.EOF {
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
