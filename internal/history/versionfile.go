package history

import (
	"bytes"
	"cmp"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"io/fs"
	"os"
	"slices"

	"github.com/ledgerfs/ledgerfs/internal/btree"
	"github.com/ledgerfs/ledgerfs/internal/wire"
	"github.com/ledgerfs/ledgerfs/journal"
	"github.com/ledgerfs/ledgerfs/store"
)

// The version file (store.VersionsFileName, beside the page's db) keeps a
// VersionIndex across mounts: the first listing of versions/ walked and
// diffed every commit (6–7 s for 20,000), and now reads what earlier walks
// and landings learned, walking only the commits no record covers. It is a
// cache: any record may be missing (a commit made where nobody indexed it,
// a crash before the append, a torn tail), and a missing one is walked
// again; no record describes a pruned commit (store.Page.DeleteCommits
// removes the file first).
//
// Layout: the magic, then records, each a 4-byte little-endian payload
// length, the CRC-32C of the payload, and the payload: the commit's id, the
// length-prefixed commit row (CommitStorage; empty for the first commit),
// the count of the parents the commit was compared with, each an id (a
// walk past pruned history compares a commit with the next older one kept,
// see Walk), the count of versions the commit made, and each as the
// length-prefixed key and the length-prefixed journal entry row value of a
// put of the entry (journal.EncodeOp). Lengths and counts are unsigned
// varints. A reader takes records up to the first that is short or whose
// CRC does not match.
const versionsMagic = "LFVERS01"

const recordHeader = 8 // length and CRC

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// versionRecord is what indexing one commit found: the parents it was
// compared with and the versions it made.
type versionRecord struct {
	c        *indexedCommit
	parents  []store.CommitID
	versions []indexed
}

// commitOrder is what orders commits (newer): time, generation, id.
type commitOrder struct {
	ts  int64
	gen uint64
	id  store.CommitID
}

func orderOf(c *store.Commit) commitOrder { return commitOrder{c.Timestamp, c.Generation, c.ID} }

// compare is positive if a is newer than b.
func (a commitOrder) compare(b commitOrder) int {
	return cmp.Or(cmp.Compare(a.ts, b.ts), cmp.Compare(a.gen, b.gen), bytes.Compare(a.id[:], b.id[:]))
}

// indexedCommit is a commit as the index holds it: what orders its
// versions, and its row, decoded once one of its versions is asked for.
type indexedCommit struct {
	commitOrder
	row []byte
	c   *store.Commit // nil until decoded
}

func walkedCommit(c *store.Commit) *indexedCommit {
	return &indexedCommit{commitOrder: orderOf(c), row: c.Bytes, c: c}
}

func (c *indexedCommit) commit() (*store.Commit, error) {
	if c.c != nil {
		return c.c, nil
	}
	if c.id == store.FirstCommitID {
		c.c = store.FirstCommit()
		return c.c, nil
	}
	d, err := store.DecodeCommit(c.id, c.row)
	if err != nil {
		return nil, err
	}
	if orderOf(d) != c.commitOrder {
		return nil, fmt.Errorf("version file: commit %s is not as its record says", c.id)
	}
	c.c = d
	return d, nil
}

// indexed is a version as the index holds it: its entry is decoded from
// its journal row once it is asked for (e nil until then).
type indexed struct {
	c   *indexedCommit
	key string
	row []byte
	e   *btree.Entry
}

func (v *indexed) version() (Version, error) {
	c, err := v.c.commit()
	if err != nil {
		return Version{}, err
	}
	if v.e == nil {
		op, err := journal.DecodeOp(v.key, v.row)
		if err != nil {
			return Version{}, err
		}
		if op.IsDelete() || op.Kind == store.OpAtime {
			return Version{}, fmt.Errorf("version file: a version of %q is no put", v.key)
		}
		v.e, v.row = &op.Entry, nil
	}
	return Version{Commit: c, Entry: *v.e}, nil
}

func appendRecord(b []byte, r versionRecord) []byte {
	start := len(b)
	b = append(b, make([]byte, recordHeader)...)
	b = append(b, r.c.id[:]...)
	b = binary.AppendUvarint(b, r.c.gen)
	b = binary.AppendVarint(b, r.c.ts)
	b = wire.AppendBytes(b, r.c.row)
	b = binary.AppendUvarint(b, uint64(len(r.parents)))
	for _, id := range r.parents {
		b = append(b, id[:]...)
	}
	b = binary.AppendUvarint(b, uint64(len(r.versions)))
	for _, v := range r.versions {
		row := v.row
		if v.e != nil {
			row = journal.EncodeOp(journal.Op{Key: v.key, Entry: *v.e})
		}
		b = wire.AppendBytes(wire.AppendBytes(b, []byte(v.key)), row)
	}
	payload := b[start+recordHeader:]
	binary.LittleEndian.PutUint32(b[start:], uint32(len(payload)))
	binary.LittleEndian.PutUint32(b[start+4:], crc32.Checksum(payload, castagnoli))
	return b
}

func commitID(r *wire.Reader) (id store.CommitID) {
	copy(id[:], r.Fixed(uint64(len(id))))
	return id
}

// A decoder takes records apart, their commit rows and versions' journal
// rows left slices of the file's bytes until asked for (indexed.version):
// a page of 20,000 commits has as many records, read at a mount's first
// listing of versions. It allocates commits and versions in slabs, and
// each key's string once.
type decoder struct {
	commits  []indexedCommit
	versions []indexed
	keys     map[string]string
}

func (d *decoder) decode(payload []byte) (versionRecord, error) {
	if len(d.commits) == cap(d.commits) {
		d.commits = make([]indexedCommit, 0, 1024)
	}
	d.commits = d.commits[:len(d.commits)+1]
	c := &d.commits[len(d.commits)-1]
	r := &wire.Reader{B: payload}
	c.id = commitID(r)
	c.gen = r.Uvarint()
	c.ts = r.Varint()
	c.row = r.Bytes()
	rec := versionRecord{c: c}
	np := r.Uvarint()
	if np > 2 {
		return rec, fmt.Errorf("%d parents", np)
	}
	for range np {
		rec.parents = append(rec.parents, commitID(r))
	}
	nv := r.Uvarint()
	if r.Err == nil && nv > uint64(len(r.B)) {
		return rec, fmt.Errorf("%d versions in %d bytes", nv, len(r.B))
	}
	if int(nv) > cap(d.versions)-len(d.versions) {
		d.versions = make([]indexed, 0, max(4096, nv))
	}
	start := len(d.versions)
	for range nv {
		key, row := r.Bytes(), r.Bytes()
		if r.Err != nil {
			break
		}
		k, ok := d.keys[string(key)]
		if !ok {
			if d.keys == nil {
				d.keys = map[string]string{}
			}
			k = string(key)
			d.keys[k] = k
		}
		d.versions = append(d.versions, indexed{c: c, key: k, row: row})
	}
	rec.versions = d.versions[start:len(d.versions):len(d.versions)]
	switch {
	case r.Err != nil:
		return rec, r.Err
	case len(r.B) != 0:
		return rec, fmt.Errorf("%d bytes past the record", len(r.B))
	case (c.id == store.FirstCommitID) != (len(c.row) == 0):
		return rec, errors.New("a commit row where none is, or none where one is")
	}
	return rec, nil
}

// readVersionFile returns the whole records of the version file at path
// from offset from on (0: its first), and the offset after the last. A file
// that does not exist, or does not begin with the magic, holds none, and
// end is then 0: writeRecords starts it anew.
func readVersionFile(path string, from int64) (recs []versionRecord, end int64, err error) {
	f, err := os.Open(path)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, 0, nil
	}
	if err != nil {
		return nil, 0, fmt.Errorf("history: version file: %w", err)
	}
	defer f.Close()
	magic := make([]byte, len(versionsMagic))
	if _, err := io.ReadFull(f, magic); err != nil || string(magic) != versionsMagic {
		return nil, 0, nil
	}
	from = max(from, int64(len(versionsMagic)))
	st, err := f.Stat()
	if err != nil {
		return nil, 0, fmt.Errorf("history: version file: %w", err)
	}
	if st.Size() < from {
		return nil, 0, nil // not the file that was read: begin anew
	}
	buf := make([]byte, st.Size()-from)
	if _, err := io.ReadFull(io.NewSectionReader(f, from, int64(len(buf))), buf); err != nil {
		return nil, 0, fmt.Errorf("history: version file: %w", err)
	}
	var d decoder
	off := 0
	for off+recordHeader <= len(buf) {
		n := int(binary.LittleEndian.Uint32(buf[off:]))
		sum := binary.LittleEndian.Uint32(buf[off+4:])
		if n == 0 || n > len(buf)-off-recordHeader {
			break
		}
		payload := buf[off+recordHeader : off+recordHeader+n]
		if crc32.Checksum(payload, castagnoli) != sum {
			break
		}
		rec, err := d.decode(payload)
		if err != nil {
			break // whole, but not a record we can use: what follows is no record either
		}
		recs = append(recs, rec)
		off += recordHeader + n
	}
	return recs, from + int64(off), nil
}

// writeRecords writes recs to the version file at path and returns the
// offset after them: at offset at, cutting off what follows (bytes past the
// last whole record, which a torn append left: records after them would
// never be read), or, if at is -1, after what the file holds. A file that
// is empty, or at 0, is begun anew with the magic. It creates the file only
// if create. The caller holds the page's lock, so that no other write is
// under way.
func writeRecords(path string, recs []versionRecord, create bool, at int64) (int64, error) {
	flags := os.O_WRONLY
	if create {
		flags |= os.O_CREATE
	}
	f, err := os.OpenFile(path, flags, 0o644)
	if errors.Is(err, fs.ErrNotExist) {
		return 0, nil
	}
	if err != nil {
		return 0, fmt.Errorf("history: version file: %w", err)
	}
	defer f.Close()
	size, err := f.Seek(0, io.SeekEnd)
	if err != nil {
		return 0, fmt.Errorf("history: version file: %w", err)
	}
	if at < 0 {
		at = size
	}
	var b []byte
	if at < int64(len(versionsMagic)) {
		b, at = append(b, versionsMagic...), 0
	}
	for _, r := range recs {
		b = appendRecord(b, r)
	}
	if _, err := f.WriteAt(b, at); err != nil {
		return 0, fmt.Errorf("history: version file: %w", err)
	}
	end := at + int64(len(b))
	if end < size {
		if err := f.Truncate(end); err != nil {
			return 0, fmt.Errorf("history: version file: %w", err)
		}
	}
	if err := f.Close(); err != nil {
		return 0, fmt.Errorf("history: version file: %w", err)
	}
	return end, nil
}

// covered returns the records of recs whose history good covers, or they
// do, and adds them to good: those whose every parent is in good or such a
// record. A record past a hole (a commit nobody indexed) is left out, for a
// walk to find its commit again; so is a record of a commit in good.
func covered(recs []versionRecord, good map[store.CommitID]bool) []versionRecord {
	// Oldest first: a record after its parents'.
	slices.SortStableFunc(recs, func(a, b versionRecord) int { return a.c.compare(b.c.commitOrder) })
	out := recs[:0]
	for _, r := range recs {
		if good[r.c.id] {
			continue
		}
		whole := true
		for _, id := range r.parents {
			whole = whole && good[id]
		}
		if whole {
			good[r.c.id] = true
			out = append(out, r)
		}
	}
	return out
}
