package fs

import (
	"fmt"
	"io"
	"syscall"

	"github.com/google/btree"

	"github.com/ledgerfs/ledgerfs/cas"
	lbtree "github.com/ledgerfs/ledgerfs/internal/btree"
	"github.com/ledgerfs/ledgerfs/store"
)

// content is the content of an open file while it is written: the last
// committed value (base) with the changes since. Writes that start at
// offset 0 of an empty file and go on in order stream into the chunker once
// they pass memSpool bytes. Any other write goes to a spool (memory, then a
// file on local disk) at its offset, with the written ranges kept as
// extents; on commit the base and the spool are merged into a new value. A
// file rewritten in order from offset 0 (fio and databases lay a file out
// before they write it) streams too, once the spool holds streamAfter bytes
// from offset 0 and nothing else: the rest of the base follows the stream
// when it ends. Memory stays bounded whatever the file size: the data is in
// the chunker's pipeline, the base's pieces or the spool (memSpool bytes in
// memory at most).
type content struct {
	p      *store.Page
	tmpDir string
	// streamAfter is where a rewrite from offset 0 starts to stream.
	streamAfter int64

	// state is what the base is (see baseState).
	state    baseState
	base     *cas.Reader // nil: no base bytes
	baseID   cas.ObjectIdentifier
	baseSize int64 // bytes of base still visible (a truncate shortens it)
	baseFull bool  // baseSize is the whole base value
	baseLen  int64 // the whole base value's size
	// kept lists, in state baseLanded, the base's subtrees the value being
	// committed reuses (journal.Op.Local).
	kept []cas.Digest
	size int64
	// dirty is set by a write or truncate: the content differs from the
	// last commit (the base, or the base with the changes over it).
	dirty bool

	// stream, if not nil, holds the content's first streamPos bytes; the
	// bytes from streamPos to size are the base's (zeros past baseSize).
	stream    *store.ValueWriter
	streamPos int64
	// failed is why, in state baseFailed, every use fails.
	failed error

	spool *spool
	ext   *btree.BTreeG[extent]

	// intent is what changed since the last intent of these changes
	// (fileNode.logIntent), nil before the first; lastIntent names it.
	intent     *since
	lastIntent store.Intent
	// intentKey and intentMeta are the key and metadata of the last
	// intent's row.
	intentKey  string
	intentMeta lbtree.Meta
	// copied is what changed since a commit copied the content to compute
	// its value without the file's lock (fileNode.commitFromCopy), nil
	// when none is under way; copyDone is closed when that commit ends.
	// soon is set when an intent logged meanwhile found the page's intents
	// full: the file's next commit is due at once.
	copied   *since
	copyDone <-chan struct{}
	soon     bool
	// changes counts writes and truncations, for fileNode.intentsDue to
	// see the file quiet. due is set when the intents timer left the
	// file's commit to its next fsync; dueChanges is changes then.
	changes    uint64
	due        bool
	dueChanges uint64
}

func newExtents() *btree.BTreeG[extent] {
	return btree.NewG(16, func(a, b extent) bool { return a.start < b.start })
}

// since is what changed in a content after a point: the ranges written and
// the least size it had.
type since struct {
	ext *btree.BTreeG[extent]
	min int64
}

func newSince(size int64) *since { return &since{ext: newExtents(), min: size} }

// none reports whether the content of size bytes is as it was.
func (s *since) none(size int64) bool { return s.ext.Len() == 0 && s.min == size }

func (s *since) truncate(n int64) {
	s.min = min(s.min, n)
	clipExtents(s.ext, n)
}

// intentLogged starts what the next intent follows from: nothing written
// since mark, the intent just logged.
func (c *content) intentLogged(mark store.Intent) {
	c.intent, c.lastIntent = newSince(c.size), mark
}

// noteWrite records [s, e) as written since the last intent and the copy,
// if any.
func (c *content) noteWrite(s, e int64) {
	c.changes++
	for _, t := range []*since{c.intent, c.copied} {
		if t != nil {
			addExtent(t.ext, s, e)
		}
	}
}

type extent struct{ start, end int64 }

// baseState is what a content's base is. Its transitions:
//
//	any            --reset(id)-------------> baseCommitted
//	baseCommitted  --its commit applied----> baseLanded     (fileNode.commitLocked)
//	any live       --endStreamLater--------> baseUnstored
//	baseUnstored   --stored(nil)-----------> baseStreamed
//	baseUnstored   --stored(err)-----------> baseFailed
//	any            --fail(err)-------------> baseFailed     (a stream's write failed)
//
// baseFailed ends only with the content (the file's last handle closes):
// every read, write, truncate and commit fails with its error.
type baseState uint8

const (
	// baseCommitted: the value last committed, or read from the tree;
	// its pieces may still be transient (its commit queued).
	baseCommitted baseState = iota
	// baseLanded: the value of a commit that landed, so every piece
	// under it is local: an edit need not look up the pieces it keeps.
	baseLanded
	// baseStreamed: a value streamed since the last commit, all stored.
	baseStreamed
	// baseUnstored: a value streamed since the last commit whose last
	// pieces wait in the writer endStreamLater returned: if they are not
	// stored, the base names pieces that do not exist.
	baseUnstored
	// baseFailed: a stream failed. The bytes it took are gone, and the
	// content would read and commit as zeros in their place (or name
	// pieces never stored).
	baseFailed
)

// fromStream reports whether the base is a value streamed since the last
// commit, not a committed one.
func (c *content) fromStream() bool { return c.state == baseStreamed || c.state == baseUnstored }

// err is the error every use of a failed content returns, else nil.
func (c *content) err() error {
	if c.state == baseFailed {
		return c.failed
	}
	return nil
}

// MaxFileSize is the largest file: a write or truncation past it is EFBIG,
// as past ext4's 16 TiB. A commit stores every byte of a changed file,
// zeros included (chunked and deduplicated, at about 1 GiB/s for zeros
// here), so a file grown by a truncation to this size takes a quarter of
// an hour to commit, and one of ext4's maximum would take four hours.
const MaxFileSize = 1 << 40

// emptyValue is the identifier of empty content (inline, never stored).
var emptyValue = cas.ObjectIdentifier{Digest: cas.ComputeDigest(cas.KindBlob, false, nil)}

// streamAfter is where a rewrite from offset 0 of a file starts to stream
// (content.streamAfter): past the rewrites of a database's first pages,
// which belong in the spool and a commit's edit.
const streamAfter = 4 << 20

func newContent(p *store.Page, tmpDir string, id cas.ObjectIdentifier, size int64) *content {
	c := &content{p: p, tmpDir: tmpDir, streamAfter: streamAfter}
	c.reset(id, size)
	return c
}

// reset makes the committed value id the base, dropping every change.
func (c *content) reset(id cas.ObjectIdentifier, size int64) {
	c.dropSpool()
	c.state, c.failed = baseCommitted, nil
	c.base, c.baseID, c.baseSize, c.size, c.dirty = nil, id, size, size, false
	c.baseFull, c.baseLen = true, size
	c.kept = nil
	c.intent, c.lastIntent, c.copied, c.due = nil, store.Intent{}, nil, false
}

// rebase makes id, the value committed from a copy of the content taken
// when s began (size bytes), the base, with what changed since over it: the
// spool holds the bytes of every range written.
func (c *content) rebase(id cas.ObjectIdentifier, size int64, s *since) {
	c.state, c.kept, c.due = baseCommitted, nil, false
	c.base, c.baseID, c.baseLen = nil, id, size
	c.baseSize = min(size, s.min)
	c.baseFull = c.baseSize == size
	c.dirty = !s.none(size) || c.size != size
	if s.ext.Len() == 0 {
		c.dropSpool()
		return
	}
	c.ext = s.ext
}

// baseReader opens the base value at its first read: after a close, reading
// back the root piece just written cost 8 % of a small file's create.
func (c *content) baseReader() (*cas.Reader, error) {
	if c.base == nil {
		r, err := c.p.OpenValue(c.baseID)
		if err != nil {
			return nil, err
		}
		c.base = r
	}
	return c.base, nil
}

func (c *content) dropSpool() {
	if c.stream != nil {
		c.stream.Abort()
		c.stream = nil
	}
	if c.spool != nil {
		c.spool.Close()
		c.spool = nil
	}
	c.ext = nil
}

// close releases the spool and any unfinished stream.
func (c *content) close() { c.dropSpool() }

// fail drops the stream after its error err.
func (c *content) fail(err error) error {
	if c.stream != nil {
		c.stream.Abort()
		c.stream = nil
	}
	c.state, c.failed = baseFailed, fmt.Errorf("content lost by an earlier failed write: %w", err)
	return err
}

func (c *content) write(data []byte, off int64) error {
	if err := c.err(); err != nil {
		return err
	}
	end := off + int64(len(data))
	if end > MaxFileSize || end < off {
		return syscall.EFBIG
	}
	c.dirty = true
	if c.stream != nil && off == c.streamPos {
		if _, err := c.stream.Write(data); err != nil {
			return c.fail(err)
		}
		c.streamPos = end
		c.size = max(c.size, end)
		c.noteWrite(off, end)
		return nil
	}
	if c.stream != nil {
		if err := c.endStream(); err != nil {
			return err
		}
	}
	if off == 0 && c.size == 0 && c.ext == nil && end > memSpool {
		c.base, c.baseSize, c.baseFull = nil, 0, false
		c.stream, c.streamPos = c.p.NewValueWriter(), 0
		return c.write(data, off)
	}
	// A new (or emptied) file written in order streams once it outgrows
	// the spool's memory; a rewrite of a base, past streamAfter.
	if c.spoolIsPrefix(off) && (off >= c.streamAfter || c.baseSize == 0 && end > memSpool) {
		if err := c.streamSpool(off); err != nil {
			return err
		}
		return c.write(data, off)
	}
	if c.spool == nil {
		c.spool, c.ext = &spool{dir: c.tmpDir}, newExtents()
	}
	// The spool is on the repository's filesystem: it must leave the
	// reserve to Badger as the db's own writes do.
	if err := c.p.CheckContentSpace(len(data)); err != nil {
		return err
	}
	if _, err := c.spool.WriteAt(data, off); err != nil {
		return fmt.Errorf("spool: %w", err)
	}
	addExtent(c.ext, off, end)
	c.noteWrite(off, end)
	c.size = max(c.size, end)
	return nil
}

// spoolIsPrefix reports whether the spool holds the content's first n
// bytes and nothing else.
func (c *content) spoolIsPrefix(n int64) bool {
	if c.ext == nil || c.ext.Len() != 1 {
		return false
	}
	x, _ := c.ext.Min()
	return x.start == 0 && x.end == n
}

// streamSpool starts a stream with the spool's first n bytes, all it holds,
// and drops the spool: the content is a rewrite from offset 0 in order.
func (c *content) streamSpool(n int64) error {
	w := c.p.NewValueWriter()
	buf := make([]byte, min(n, 1<<20))
	for pos := int64(0); pos < n; {
		m, err := c.spool.ReadAt(buf[:min(int64(len(buf)), n-pos)], pos)
		if err == nil {
			_, err = w.Write(buf[:m])
		}
		if err != nil {
			w.Abort()
			return fmt.Errorf("stream the spool: %w", err)
		}
		pos += int64(m)
	}
	c.spool.Close()
	c.spool, c.ext = nil, nil
	c.stream, c.streamPos = w, n
	return nil
}

// endStream finishes the streamed value, stores it and makes it the base.
func (c *content) endStream() error {
	w, err := c.endStreamLater()
	if err != nil {
		return err
	}
	return c.stored(w.Commit())
}

// stored is told whether the last pieces of the base that endStreamLater
// left to the caller were stored (err is nil) or not, and returns err.
func (c *content) stored(err error) error {
	if c.state != baseUnstored {
		return err
	}
	if err != nil {
		return c.fail(err)
	}
	c.state = baseStreamed
	return nil
}

// endStreamLater finishes the streamed value and makes it the base, leaving
// its last pieces for the caller to commit or discard.
func (c *content) endStreamLater() (*store.ValueWriter, error) {
	w, n := c.stream, c.streamPos
	c.stream = nil
	tail := c.size - n
	// The base's bytes after the stream: an edit of the base keeps them
	// at the cost of chunking the streamed bytes again, following them
	// through the stream costs their own chunking. Whichever is less.
	edit := n < c.baseSize && tail > n && c.baseLen >= editMin
	if tail > 0 && !edit {
		if err := c.writeFrom(w, n); err != nil {
			w.Abort()
			return nil, c.fail(err)
		}
	}
	id, _, err := w.End()
	if err != nil {
		return nil, c.fail(err)
	}
	if edit {
		if err := w.Commit(); err != nil {
			return nil, c.fail(err)
		}
		if w, id, err = c.editPrefix(id, n); err != nil {
			return nil, c.fail(err)
		}
	}
	c.base, c.baseID, c.baseSize, c.baseFull = nil, id, c.size, true
	c.baseLen, c.state, c.kept = c.size, baseUnstored, nil
	return w, nil
}

// writeFrom writes the content from n on to w. Called with no stream. Its
// holes, the bytes past the base that no write reached (a file grown by
// truncate, a sparse one), go to w as a count of zeros.
func (c *content) writeFrom(w *store.ValueWriter, n int64) error {
	var buf []byte // made for the first bytes that are not a hole
	for n < c.size {
		if z := c.holeAt(n); z > 0 {
			if err := w.WriteZeros(uint64(z)); err != nil {
				return err
			}
			n += z
			continue
		}
		if buf == nil {
			buf = make([]byte, min(c.size-n, 1<<20))
		}
		m, err := c.readAt(buf[:min(int64(len(buf)), c.nextHole(n)-n)], n)
		if err != nil && err != io.EOF {
			return err
		}
		if _, err := w.Write(buf[:m]); err != nil {
			return err
		}
		n += int64(m)
	}
	return nil
}

// holeAt returns how many bytes from off on are a hole: past the base,
// written by no write, before the end.
func (c *content) holeAt(off int64) int64 {
	if off < c.baseSize || off >= c.size {
		return 0
	}
	end := c.size
	if c.ext != nil {
		c.ext.DescendLessOrEqual(extent{start: off}, func(x extent) bool {
			if x.end > off {
				end = off // in an extent
			}
			return false
		})
		c.ext.AscendGreaterOrEqual(extent{start: off}, func(x extent) bool {
			end = min(end, x.start)
			return false
		})
	}
	return end - off
}

// nextHole returns where the first hole at or after off begins (the end
// of the content if none does). Extents never touch (addExtent), so the
// end of the one that holds a byte is a hole's start.
func (c *content) nextHole(off int64) int64 {
	pos := max(off, c.baseSize)
	if c.ext != nil {
		c.ext.DescendLessOrEqual(extent{start: pos}, func(x extent) bool {
			pos = max(pos, x.end)
			return false
		})
	}
	return min(pos, c.size)
}

// editPrefix stores the content whose first n bytes are the value prefix
// and the rest the base's, by editing the base. Called with the stream
// ended and no spool.
func (c *content) editPrefix(prefix cas.ObjectIdentifier, n int64) (*store.ValueWriter, cas.ObjectIdentifier, error) {
	pre, err := c.p.OpenValue(prefix)
	if err != nil {
		return nil, cas.ObjectIdentifier{}, err
	}
	base, err := c.p.OpenValueAround(c.baseID)
	if err != nil {
		return nil, cas.ObjectIdentifier{}, err
	}
	changed := []cas.Range{{Start: 0, End: uint64(n)}}
	if c.size > c.baseSize {
		changed = append(changed, cas.Range{Start: uint64(c.baseSize), End: uint64(c.size)})
	}
	r := prefixReader{pre: pre, n: n, rest: contentReader{c, base}}
	return c.p.EditValue(c.baseID, r, uint64(c.size), changed)
}

// prefixReader reads pre's first n bytes, then rest's from n on.
type prefixReader struct {
	pre  io.ReaderAt
	n    int64
	rest io.ReaderAt
}

func (r prefixReader) ReadAt(p []byte, off int64) (int, error) {
	done := 0
	if off < r.n {
		m, err := r.pre.ReadAt(p[:min(int64(len(p)), r.n-off)], off)
		if done = m; err != nil && err != io.EOF {
			return done, err
		}
		if done < len(p) && off+int64(done) < r.n {
			return done, io.ErrUnexpectedEOF
		}
	}
	if done == len(p) {
		return done, nil
	}
	m, err := r.rest.ReadAt(p[done:], off+int64(done))
	return done + m, err
}

// addExtent records [s, e) in t, merging with touching extents.
func addExtent(t *btree.BTreeG[extent], s, e int64) {
	var drop []extent
	t.DescendLessOrEqual(extent{start: s}, func(x extent) bool {
		if x.end >= s {
			drop = append(drop, x)
		}
		return false
	})
	t.AscendGreaterOrEqual(extent{start: s}, func(x extent) bool {
		if x.start > e {
			return false
		}
		drop = append(drop, x)
		return true
	})
	for _, x := range drop {
		s, e = min(s, x.start), max(e, x.end)
		t.Delete(x)
	}
	t.ReplaceOrInsert(extent{s, e})
}

// extentBytes is the bytes the extents of t (nil: none) cover.
func extentBytes(t *btree.BTreeG[extent]) int64 {
	var n int64
	if t != nil {
		t.Ascend(func(x extent) bool {
			n += x.end - x.start
			return true
		})
	}
	return n
}

// copyExtents copies the current content of each extent of t (nil: none).
func (c *content) copyExtents(t *btree.BTreeG[extent]) ([]store.Extent, error) {
	var out []store.Extent
	var err error
	if t != nil {
		t.Ascend(func(x extent) bool {
			b := make([]byte, x.end-x.start)
			if _, err = c.readAt(b, x.start); err == io.EOF {
				err = nil
			}
			out = append(out, store.Extent{Off: uint64(x.start), Data: b})
			return err == nil
		})
	}
	return out, err
}

// clipExtents cuts the extents of t at n.
func clipExtents(t *btree.BTreeG[extent], n int64) {
	var drop []extent
	t.AscendGreaterOrEqual(extent{}, func(x extent) bool {
		if x.end > n {
			drop = append(drop, x)
		}
		return true
	})
	for _, x := range drop {
		t.Delete(x)
		if x.start < n {
			t.ReplaceOrInsert(extent{x.start, n})
		}
	}
}

func (c *content) truncate(n int64) error {
	if err := c.err(); err != nil {
		return err
	}
	if n > MaxFileSize {
		return syscall.EFBIG
	}
	if c.stream != nil && n < c.streamPos {
		if err := c.endStream(); err != nil {
			return err
		}
	}
	if n == c.size {
		return nil
	}
	c.dirty = true
	c.changes++
	for _, t := range []*since{c.intent, c.copied} {
		if t != nil {
			t.truncate(n)
		}
	}
	if n == 0 {
		c.dropSpool()
		c.base, c.baseSize, c.baseFull, c.size = nil, 0, false, 0
		return nil
	}
	if n < c.size && c.ext != nil {
		clipExtents(c.ext, n)
	}
	if n < c.baseSize {
		c.baseSize, c.baseFull = n, false
	}
	c.size = n
	return nil
}

// readAt reads the current content; bytes past the end read as EOF.
func (c *content) readAt(p []byte, off int64) (int, error) { return c.readFrom(c.baseReader, p, off) }

// readFrom is readAt reading the base through base.
func (c *content) readFrom(base func() (*cas.Reader, error), p []byte, off int64) (int, error) {
	if err := c.err(); err != nil {
		return 0, err
	}
	if c.stream != nil && off < c.streamPos {
		if err := c.endStream(); err != nil {
			return 0, err
		}
	}
	if off >= c.size {
		return 0, io.EOF
	}
	p = p[:min(int64(len(p)), c.size-off)]
	end := off + int64(len(p))
	pos := off
	fill := func(upTo int64) error { // base bytes, then zeros, up to upTo
		for pos < upTo {
			dst := p[pos-off : upTo-off]
			if pos < c.baseSize {
				r, err := base()
				if err != nil {
					return err
				}
				n := min(int64(len(dst)), c.baseSize-pos)
				if _, err := r.ReadAt(dst[:n], pos); err != nil && err != io.EOF {
					return err
				}
				pos += n
				continue
			}
			clear(dst)
			pos = upTo
		}
		return nil
	}
	var err error
	if c.ext != nil {
		c.ext.DescendLessOrEqual(extent{start: off}, func(x extent) bool {
			if x.end > off {
				_, err = c.spool.ReadAt(p[:min(x.end, end)-off], off)
				pos = min(x.end, end)
			}
			return false
		})
		if err != nil {
			return 0, err
		}
		c.ext.AscendGreaterOrEqual(extent{start: pos}, func(x extent) bool {
			if x.start >= end {
				return false
			}
			if err = fill(x.start); err != nil {
				return false
			}
			_, err = c.spool.ReadAt(p[x.start-off:min(x.end, end)-off], x.start)
			pos = min(x.end, end)
			return err == nil
		})
		if err != nil {
			return 0, fmt.Errorf("read spool: %w", err)
		}
	}
	if err := fill(end); err != nil {
		return 0, err
	}
	return len(p), nil
}

// Editing the base (cas.Edit) costs a few chunks around each change and
// the index pieces above them, on one core; chunking the whole content
// again uses every core. A base smaller than editMin bytes, or changes
// over more than half the content, are chunked whole.
const editMin = 256 << 10

// edits returns the ranges of the content that may differ from the base at
// the same offsets, if editing the base is the cheaper way to store it.
func (c *content) edits() ([]cas.Range, bool) {
	if c.baseLen < editMin {
		return nil, false
	}
	var changed []cas.Range
	var n int64
	if c.ext != nil {
		c.ext.Ascend(func(x extent) bool {
			changed = append(changed, cas.Range{Start: uint64(x.start), End: uint64(x.end)})
			n += x.end - x.start
			return n <= c.size/2
		})
	}
	if c.size > c.baseSize {
		changed = append(changed, cas.Range{Start: uint64(c.baseSize), End: uint64(c.size)})
		n += c.size - c.baseSize
	}
	return changed, n <= c.size/2
}

// contentReader reads the content as an io.ReaderAt, its base through
// base if not nil.
type contentReader struct {
	c    *content
	base *cas.Reader
}

func (r contentReader) ReadAt(p []byte, off int64) (int, error) {
	read := r.c.baseReader
	if r.base != nil {
		read = func() (*cas.Reader, error) { return r.base, nil }
	}
	n, err := r.c.readFrom(read, p, off)
	if err == nil && n < len(p) {
		err = io.EOF
	}
	return n, err
}

// value returns the id and size of the current content, storing it first if
// it changed since the base. Unchanged chunks are deduplicated, so only the
// pieces around the changes add rows. The last pieces of a changed value are
// left in w, for the caller to commit with the rows that refer to the value
// (or to discard), and to report with stored; w is nil when nothing is
// left to commit.
func (c *content) value() (id cas.ObjectIdentifier, size int64, w *store.ValueWriter, err error) {
	if err := c.err(); err != nil {
		return cas.ObjectIdentifier{}, 0, nil, err
	}
	if !c.dirty {
		return c.baseID, c.size, nil, nil
	}
	if c.stream != nil {
		if w, err = c.endStreamLater(); err != nil {
			return cas.ObjectIdentifier{}, 0, nil, err
		}
	}
	if c.ext == nil && c.baseFull && c.baseSize == c.size {
		return c.baseID, c.size, w, nil
	}
	if w != nil {
		// The merge below reads the streamed value back.
		if err := c.stored(w.Commit()); err != nil {
			return cas.ObjectIdentifier{}, 0, nil, err
		}
	}
	if c.size == 0 {
		return emptyValue, 0, nil, nil
	}
	if changed, ok := c.edits(); ok {
		base, err := c.p.OpenValueAround(c.baseID)
		if err != nil {
			return cas.ObjectIdentifier{}, 0, nil, err
		}
		w, id, err := c.p.EditValue(c.baseID, contentReader{c, base}, uint64(c.size), changed)
		if err != nil {
			return cas.ObjectIdentifier{}, 0, nil, err
		}
		if c.state == baseLanded {
			c.kept = w.Kept()
		}
		return id, c.size, w, nil
	}
	w = c.p.NewValueWriter()
	if err := c.writeFrom(w, 0); err != nil {
		w.Abort()
		return cas.ObjectIdentifier{}, 0, nil, err
	}
	id, n, err := w.End()
	if err != nil {
		return cas.ObjectIdentifier{}, 0, nil, err
	}
	return id, int64(n), w, nil
}
