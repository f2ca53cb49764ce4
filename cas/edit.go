package cas

import (
	"cmp"
	"errors"
	"fmt"
	"io"
	"slices"

	"github.com/restic/chunker"
)

// Editing a value.
//
// Chunks are cut by content and the index levels above them close by the
// fingerprint at each cut (split.go), so both are local: an edit changes
// the cuts only from the chunk holding its first changed byte until the new
// cuts meet old ones again, a chunk or two after its last, and the index
// pieces only on the paths down to those chunks. Edit builds the edited
// value that way. It reads and hashes the chunks it cuts anew and the old
// index pieces on its paths, not the whole value, and it gives the id a
// Writer would give the new content (TestEditMatchesWriter): the cost of a
// small write's commit follows the write, not the file.
//
// It replays the splitter over the new stream, pushing whole old subtrees
// where the stream is the old one. Pushing a subtree at level k is the same
// as pushing its chunks if the levels below k are empty, as they were when
// the old splitter began it; what follows depends only on how many levels
// the cut at its last chunk closes. The old tree's shape says that (a node
// that is not its parent's last child closed nothing above it; one that is,
// closed its parent), except at the value's end and under a parent closed
// for being full, where the old chunk's own bytes are chunked to learn it.

// Range is the span [Start, End) of bytes.
type Range struct{ Start, End uint64 }

// EditStats says what an edit read and hashed.
type EditStats struct {
	Chunked uint64 // bytes of new content chunked and hashed
	Probed  uint64 // bytes of old chunks chunked again to learn their cuts
	Reused  int    // old chunks and subtrees kept whole
	// Kept are those subtrees' roots: everything under them is the old
	// value's.
	Kept []Digest
}

// errNotSplit: the old value's tree is not one the splitter makes at these
// parameters (chunks at different depths, a chunk that does not end at its
// cut). Edit then chunks the new content whole.
var errNotSplit = errors.New("cas: old value not split at these parameters")

// Edit stores the value old becomes when its content is content, size bytes
// long, given that every byte outside the changed ranges and below both
// sizes is old's. It returns the new value's identifier; only pieces that
// are new reach sink. Index pieces are looked up in shared, if not nil, and
// the new ones kept there: the next edit of the value walks down the same
// paths.
func Edit(src Source, shared *IndexCache, sink Sink, pol chunker.Pol, old ObjectIdentifier, content io.ReaderAt, size uint64, changed []Range) (ObjectIdentifier, EditStats, error) {
	e := &editor{pol: pol, content: content, size: size, s: &splitter{kind: KindBlob, sink: sink, indexes: shared}}
	t, err := openTree(src, shared, old.Digest, pol)
	if err == nil {
		e.t = t
		e.regions, err = t.regions(changed, size)
	}
	if err == nil {
		var id ObjectIdentifier
		id, err = e.run()
		if err == nil {
			return id, e.stats(), nil
		}
	}
	if !errors.Is(err, errNotSplit) {
		return ObjectIdentifier{}, e.stats(), err
	}
	// Not a tree to edit (a value of one chunk, or split otherwise): cut
	// the new content whole.
	whole := &editor{pol: pol, content: content, size: size, s: &splitter{kind: KindBlob, sink: sink, indexes: shared},
		t: &oldTree{done: true}, regions: []region{{Range{0, size}, true}}}
	id, err := whole.run()
	st := whole.stats()
	st.Probed += e.stats().Probed
	return id, st, err
}

// region is a changed range of the new stream; toEnd marks one after which
// the stream never meets the old one again (its size changed).
type region struct {
	Range
	toEnd bool
}

type editor struct {
	pol     chunker.Pol
	content io.ReaderAt
	size    uint64
	s       *splitter
	t       *oldTree
	regions []region
	chunked uint64
	kept    []Digest
	zero    map[Digest]bool // old subtrees known to hold only zeros, or not
}

func (e *editor) stats() EditStats {
	st := EditStats{Chunked: e.chunked, Reused: len(e.kept), Kept: e.kept}
	if e.t != nil {
		st.Probed = e.t.probed
	}
	return st
}

// run builds the new stream: old subtrees up to each changed region, new
// chunks from the last old cut before it until the cuts meet again.
func (e *editor) run() (ObjectIdentifier, error) {
	var pos uint64
	ri := 0
	for pos < e.size {
		limit := e.size
		if ri < len(e.regions) {
			limit = e.regions[ri].Start
		}
		var err error
		if pos, err = e.replay(pos, limit); err != nil {
			return ObjectIdentifier{}, err
		}
		if ri == len(e.regions) {
			break
		}
		if pos, ri, err = e.rechunk(pos, ri); err != nil {
			return ObjectIdentifier{}, err
		}
	}
	if pos != e.size {
		return ObjectIdentifier{}, fmt.Errorf("%w: the old value ends at %d of %d bytes", errNotSplit, pos, e.size)
	}
	id, _, err := e.s.finish()
	return id, err
}

// replay pushes the old stream's subtrees from pos, an old cut, as long as
// they end by limit, each the largest that starts there and fits. It reads
// the old tree only down to the subtrees it pushes.
func (e *editor) replay(pos, limit uint64) (uint64, error) {
	t, s := e.t, e.s
	for !t.done && pos < limit {
		if t.pos() != pos {
			return 0, fmt.Errorf("%w: old tree at %d, stream at %d", errNotSplit, t.pos(), pos)
		}
		if s.have {
			if err := s.flushHeld(); err != nil {
				return 0, err
			}
		}
		k := t.startLevel()
		for k > t.level() || pos+t.node(k).Size > limit || !s.emptyBelow(k) {
			if k > t.level() {
				k--
				continue
			}
			if k == 0 {
				return pos, nil // the chunk here goes on past limit
			}
			if err := t.down(); err != nil {
				return 0, err
			}
			k--
		}
		n := t.node(k)
		if n.ID.Digest.IsIndex() != (k > 0) {
			return 0, fmt.Errorf("%w: a piece at level %d is not what that level holds", errNotSplit, k)
		}
		lv, err := t.cutLevel(k)
		if err != nil {
			return 0, err
		}
		if err := s.push(k, n, lv); err != nil {
			return 0, err
		}
		s.size += n.Size
		pos += n.Size
		e.kept = append(e.kept, n.ID.Digest)
		t.skip(k)
	}
	return pos, nil
}

// rechunk cuts the new stream from pos, the last old cut before region ri,
// until a cut after the region's end is an old cut (or to the stream's
// end), taking in the regions it reaches. It returns where it stopped and
// the next region.
func (e *editor) rechunk(pos uint64, ri int) (uint64, int, error) {
	t, s := e.t, e.s
	hi, toEnd := e.regions[ri].End, e.regions[ri].toEnd
	ri++
	c := getChunker(nil, e.pol)
	defer chunkers.Put(c)
	buf := chunkBufs.Get().(*[]byte)
	defer chunkBufs.Put(buf)
	span := chunkBufs.Get().(*[]byte)
	defer chunkBufs.Put(span)
	w := window{r: e.content, size: e.size, buf: (*span)[:0]}
	for pos < e.size {
		var zeros uint64
		if !toEnd && pos >= hi {
			next := e.size
			if ri < len(e.regions) {
				next = e.regions[ri].Start
			}
			var err error
			if zeros, err = e.zeroChunks(&w, pos, next); err != nil {
				return 0, 0, err
			}
		}
		if zeros > 0 {
			// A run of zeros the change moved the cuts of: its chunks
			// are alike wherever they fall (zeroCut), so they are
			// added as a run rather than chunked to the run's end.
			if err := s.addRun(zeroPage[:MinChunkSize:MinChunkSize], cutLevels(0), zeros); err != nil {
				return 0, 0, err
			}
			pos += zeros * MinChunkSize
		} else {
			// Each chunk is cut from its own start (the chunker would
			// read ahead half a MiB), in what the window read.
			b, err := w.at(pos)
			if err != nil {
				return 0, 0, err
			}
			ch := firstCut(c, e.pol, b, buf)
			if err := s.add(chunkOf(b[:ch.end], ch.fp), cutLevels(ch.fp)); err != nil {
				return 0, 0, err
			}
			pos += ch.end
			e.chunked += ch.end
		}
		for ri < len(e.regions) && e.regions[ri].Start < pos {
			hi = max(hi, e.regions[ri].End)
			toEnd = toEnd || e.regions[ri].toEnd
			ri++
		}
		if toEnd {
			continue
		}
		// Move the old tree's cursor to the first old cut at or after pos.
		for !t.done && t.pos() < pos {
			if err := t.toChunk(); err != nil {
				return 0, 0, err
			}
			if t.pos()+t.node(0).Size > pos {
				break
			}
			t.skip(0)
		}
		if pos >= hi && !t.done && t.pos() == pos {
			return pos, ri, nil // the cuts from here on are the old ones
		}
	}
	return pos, ri, nil
}

// zeroChunks returns how many chunks of MinChunkSize zeros the new stream
// has from pos, a new cut past the changes before limit. The old tree's
// cursor is at the old chunk that holds pos (rechunk keeps it there), or
// at an old cut after pos: that chunk, or the bytes up to that cut, must
// be zeros, and the old subtrees after it that hold only zeros (zeroTree),
// up to limit, are the rest of the run. It moves the cursor past those
// subtrees; 0 if the run holds fewer than two chunks.
func (e *editor) zeroChunks(w *window, pos, limit uint64) (uint64, error) {
	t := e.t
	if t == nil || t.done {
		return 0, nil
	}
	switch {
	case t.pos() < pos:
		if t.level() != 0 {
			return 0, nil
		}
		n := t.node(0)
		zero, err := e.zeroTree(n)
		if err != nil || !zero || t.pos()+n.Size > limit {
			return 0, err
		}
		t.skip(0)
	case t.pos() > pos:
		b, err := w.at(pos)
		if err != nil {
			return 0, err
		}
		if n := t.pos() - pos; n > uint64(len(b)) || !allZero(b[:n]) {
			return 0, nil
		}
	}
	for !t.done {
		k := t.startLevel()
		for {
			n := t.node(k)
			zero, err := e.zeroTree(n)
			if err != nil {
				return 0, err
			}
			if zero && t.pos()+n.Size <= limit {
				t.skip(k)
				break
			}
			if k > t.level() {
				k--
				continue
			}
			if k == 0 {
				return e.runOf(pos), nil
			}
			if err := t.down(); err != nil {
				return 0, err
			}
			k--
		}
	}
	return e.runOf(pos), nil
}

// runOf returns the chunks of MinChunkSize zeros from pos to the old
// tree's cursor, if there are two or more.
func (e *editor) runOf(pos uint64) uint64 {
	end := e.t.size
	if !e.t.done {
		end = e.t.pos()
	}
	if n := (end - pos) / MinChunkSize; n >= 2 {
		return n
	}
	return 0
}

// zeroTree reports whether the old subtree n holds only zeros.
func (e *editor) zeroTree(n IndexChild) (bool, error) {
	d := n.ID.Digest
	if z, ok := e.zero[d]; ok {
		return z, nil
	}
	var z bool
	if !d.IsIndex() {
		// A chunk of zeros is at most MinChunkSize long (zeroCut cuts
		// zeros there): the chunks rechunk passes in other content are
		// longer, and none of them costs a hash of zeros to compare.
		z = n.Size <= MinChunkSize && ComputeDigest(KindBlob, false, zeroPage[:n.Size]) == d
	} else {
		ix, err := e.t.load(d)
		if err != nil {
			return false, err
		}
		z = true
		for _, c := range ix.Children {
			if z, err = e.zeroTree(c); err != nil || !z {
				break
			}
		}
		if err != nil {
			return false, err
		}
	}
	if e.zero == nil {
		e.zero = map[Digest]bool{}
	}
	e.zero[d] = z
	return z, nil
}

// A window reads an edit's new content ahead of where it is cut, in
// reads that double from a chunk's worth up to maxWindow: an edit that
// stops a few chunks after its change reads what it did with one read a
// chunk, and one that chunks on through a long run (the zeros after a
// write inside a file grown by truncate) reads 1 MiB at a time instead of
// 64 KiB for every 4 KiB chunk.
type window struct {
	r    io.ReaderAt
	size uint64 // the content's
	buf  []byte // the content from off on
	off  uint64
}

const maxWindow = 1 << 20

// at returns the content from pos on, MaxChunkSize bytes of it or up to
// the end.
func (w *window) at(pos uint64) ([]byte, error) {
	want := min(w.size-pos, MaxChunkSize)
	if pos >= w.off && pos+want <= w.off+uint64(len(w.buf)) {
		return w.buf[pos-w.off : pos-w.off+want], nil
	}
	n := uint64(MaxChunkSize)
	if len(w.buf) > 0 {
		n = min(2*uint64(cap(w.buf)), maxWindow)
	}
	n = min(n, w.size-pos)
	if uint64(cap(w.buf)) < n {
		w.buf = make([]byte, n)
	}
	w.buf, w.off = w.buf[:n], pos
	if _, err := w.r.ReadAt(w.buf, int64(pos)); err != nil && !(err == io.EOF && pos+n == w.size) {
		return nil, fmt.Errorf("cas: read edited content: %w", err)
	}
	return w.buf[:want], nil
}

// emptyBelow reports whether the levels below k hold nothing.
func (s *splitter) emptyBelow(k int) bool {
	for j := 0; j < k && j < len(s.levels); j++ {
		if len(s.levels[j]) > 0 {
			return false
		}
	}
	return true
}

// oldTree is a cursor over the old value's tree, at an old cut: the path of
// index pieces from the root down to a subtree that starts there, read
// down only as far as needed.
type oldTree struct {
	src    Source
	shared *IndexCache
	pol    chunker.Pol
	h      int     // the root's level; chunks are at level 0
	stack  []frame // stack[f] is the node at level h-f
	done   bool    // past the last chunk
	size   uint64
	// cache keeps the index pieces read lately: a probe reads down the
	// right edge of a subtree that the cursor then walks.
	cache  map[Digest]FileIndex
	buf    []byte
	probed uint64
}

type frame struct {
	ix  FileIndex
	i   int    // the child on the path
	off uint64 // where child i starts in the value
}

// openTree opens a cursor at the start of the value root; if root is a
// single chunk there is no tree to edit (errNotSplit).
func openTree(src Source, shared *IndexCache, root Digest, pol chunker.Pol) (*oldTree, error) {
	if !root.IsIndex() {
		return nil, errNotSplit
	}
	t := &oldTree{src: src, shared: shared, pol: pol, cache: map[Digest]FileIndex{}}
	ix, err := t.load(root)
	if err != nil {
		return nil, err
	}
	t.size = ix.Size
	// The root's level is the depth of its chunks, the first one's here;
	// down checks every other against it.
	d := root
	for d.IsIndex() {
		if t.h++; t.h > maxIndexDepth {
			return nil, fmt.Errorf("cas: index of %s is too deep", root)
		}
		ix, err := t.load(d)
		if err != nil {
			return nil, err
		}
		d = ix.Children[0].ID.Digest
	}
	t.stack = []frame{{ix: ix}}
	return t, nil
}

// regions turns the changed ranges into sorted regions of a new stream of
// size bytes. If the size changed, the stream differs from the old last
// chunk on: where the old stream ends is no cut.
func (t *oldTree) regions(changed []Range, size uint64) ([]region, error) {
	var rs []region
	for _, r := range changed {
		if r.End > size {
			r.End = size
		}
		if r.Start < r.End {
			rs = append(rs, region{Range: r})
		}
	}
	if size != t.size {
		last, err := t.lastChunkStart()
		if err != nil {
			return nil, err
		}
		rs = append(rs, region{Range{min(size, last), size}, true})
	}
	slices.SortFunc(rs, func(a, b region) int { return cmp.Compare(a.Start, b.Start) })
	return rs, nil
}

// lastChunkStart returns where the old value's last chunk starts.
func (t *oldTree) lastChunkStart() (uint64, error) {
	ix := t.stack[0].ix
	off := uint64(0)
	for {
		last := ix.Children[len(ix.Children)-1]
		off += ix.Size - last.Size
		if !last.ID.Digest.IsIndex() {
			return off, nil
		}
		var err error
		if ix, err = t.load(last.ID.Digest); err != nil {
			return 0, err
		}
	}
}

func (t *oldTree) load(d Digest) (FileIndex, error) {
	if ix, ok := t.cache[d]; ok {
		return ix, nil
	}
	c, ok := t.shared.get(d)
	if !ok {
		var err error
		if c, err = decodePiece(t.src, d, nil); err != nil {
			return FileIndex{}, err
		}
		if c.index == nil {
			return FileIndex{}, fmt.Errorf("%w: piece %s is no index", errNotSplit, d)
		}
		t.shared.set(c)
	}
	if len(t.cache) >= 256 {
		clear(t.cache)
	}
	t.cache[d] = *c.index
	return *c.index, nil
}

// pos is where the cursor is: an old cut.
func (t *oldTree) pos() uint64 { return t.stack[len(t.stack)-1].off }

// level is the level of the subtree the path ends at.
func (t *oldTree) level() int { return t.h - len(t.stack) }

// down extends the path to the first child of the subtree it ends at.
func (t *oldTree) down() error {
	fr := t.stack[len(t.stack)-1]
	c := fr.ix.Children[fr.i]
	if !c.ID.Digest.IsIndex() {
		return fmt.Errorf("%w: a chunk at level %d", errNotSplit, t.level())
	}
	ix, err := t.load(c.ID.Digest)
	if err != nil {
		return err
	}
	t.stack = append(t.stack, frame{ix: ix, off: fr.off})
	if t.level() == 0 && ix.Children[0].ID.Digest.IsIndex() {
		return fmt.Errorf("%w: chunks at different depths", errNotSplit)
	}
	return nil
}

// toChunk extends the path down to the chunk at the cursor.
func (t *oldTree) toChunk() error {
	for t.level() > 0 {
		if err := t.down(); err != nil {
			return err
		}
	}
	return nil
}

// node is the subtree at level k (0: the chunk) on the cursor's path; the
// path must reach level k.
func (t *oldTree) node(k int) IndexChild {
	fr := t.stack[t.h-k-1]
	return fr.ix.Children[fr.i]
}

// startLevel is the highest level below the root whose subtree on the
// path starts at the cursor.
func (t *oldTree) startLevel() int {
	k := t.level()
	for f := len(t.stack) - 1; f >= 1 && t.stack[f].i == 0; f-- {
		k++
	}
	return k
}

// skip moves the cursor past the subtree at level k on its path, to the
// subtree after it at level k or above.
func (t *oldTree) skip(k int) {
	t.stack = t.stack[:t.h-k]
	for {
		fr := &t.stack[len(t.stack)-1]
		fr.off += fr.ix.Children[fr.i].Size
		fr.i++
		if fr.i < len(fr.ix.Children) {
			return
		}
		if len(t.stack) == 1 {
			t.done = true
			return
		}
		t.stack = t.stack[:len(t.stack)-1]
	}
}

// cutLevel returns how many levels the cut ending the subtree at level k
// closes, as far as pushing that subtree at level k can tell: any number up
// to k acts alike.
func (t *oldTree) cutLevel(k int) (int, error) {
	j := k
	for f := t.h - k - 1; ; f-- {
		fr := t.stack[f] // the parent of the path's node at level j
		if fr.i < len(fr.ix.Children)-1 {
			// Level j stayed open after the node: the cut closed
			// levels below j only.
			return j, nil
		}
		if f == 0 || len(fr.ix.Children) >= maxIndexChildren {
			// The node ends the value, which closed every level, or
			// its parent was closed for being full: the shape does not
			// tell.
			return t.probe(k)
		}
		j++ // the cut closed level j: the node's parent is closed by it
	}
}

// probe chunks the last chunk of the subtree at level k again, from its
// start, an old cut, for the fingerprint at its end.
func (t *oldTree) probe(k int) (int, error) {
	d := t.node(k).ID.Digest
	for d.IsIndex() {
		ix, err := t.load(d)
		if err != nil {
			return 0, err
		}
		d = ix.Children[len(ix.Children)-1].ID.Digest
	}
	data, err := GetPiece(t.src, d, t.buf)
	if err != nil {
		return 0, err
	}
	if !d.IsInline() {
		t.buf = data
	}
	t.probed += uint64(len(data))
	if len(data) == 0 || len(data) > MaxChunkSize {
		return 0, fmt.Errorf("%w: chunk %s of %d bytes", errNotSplit, d, len(data))
	}
	c := getChunker(nil, t.pol)
	defer chunkers.Put(c)
	buf := chunkBufs.Get().(*[]byte)
	defer chunkBufs.Put(buf)
	ch := firstCut(c, t.pol, data, buf)
	if ch.end != uint64(len(data)) {
		return 0, fmt.Errorf("%w: chunk %s does not end at a cut", errNotSplit, d)
	}
	return cutLevels(ch.fp), nil
}
