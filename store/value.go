package store

import (
	"fmt"
	"io"

	"github.com/dgraph-io/badger/v4"

	"github.com/ledgerfs/ledgerfs/cas"
)

// ValueWriter streams a value into a page's pieces.
type ValueWriter struct {
	pw   *PieceWriter
	w    *cas.Writer
	kept []cas.Digest
}

// NewValueWriter starts writing a value. The pieces are transient until a
// commit uses the value.
func (p *Page) NewValueWriter() *ValueWriter {
	pw := p.NewPieceWriter()
	pw.bulk = true
	return &ValueWriter{pw: pw, w: p.repo.cutters.NewWriter(pw, p.Polynomial(), cas.KindBlob)}
}

// EditValue stores the value base becomes when its content is content,
// size bytes long, every byte outside the changed ranges and below both
// sizes being base's (cas.Edit): the cost follows the change, not the
// value. Like End, it leaves the last pieces in the returned writer for
// Commit, CommitJournal or Discard.
func (p *Page) EditValue(base cas.ObjectIdentifier, content io.ReaderAt, size uint64, changed []cas.Range) (*ValueWriter, cas.ObjectIdentifier, error) {
	if err := p.check(); err != nil {
		return nil, cas.ObjectIdentifier{}, err
	}
	pw := p.NewPieceWriter()
	pw.bulk = true
	id, st, err := cas.Edit(p, p.repo.indexes, pw, p.Polynomial(), base, content, size, changed)
	c := &p.repo.counters
	c.editChunked.Add(st.Chunked)
	c.editProbed.Add(st.Probed)
	if err != nil {
		pw.Discard()
		return nil, cas.ObjectIdentifier{}, fmt.Errorf("edit value: %w", err)
	}
	c.edits.Add(1)
	return &ValueWriter{pw: pw, kept: st.Kept}, id, nil
}

// Kept returns the roots of the base's subtrees an edited value reuses
// whole (nil for a value written whole).
func (v *ValueWriter) Kept() []cas.Digest { return v.kept }

// Write adds bytes to the value.
func (v *ValueWriter) Write(b []byte) (int, error) { return v.w.Write(b) }

// WriteZeros adds n zero bytes to the value without copying them
// (cas.Writer.WriteZeros).
func (v *ValueWriter) WriteZeros(n uint64) error { return v.w.WriteZeros(n) }

// Close ends the value and returns its identifier and size once its pieces
// are stored.
func (v *ValueWriter) Close() (cas.ObjectIdentifier, uint64, error) {
	id, size, err := v.End()
	if err != nil {
		return id, 0, err
	}
	if err := v.Commit(); err != nil {
		return id, 0, err
	}
	return id, size, nil
}

// End ends the value and returns its identifier and size, leaving its last
// pieces for Commit, which lands them with the rows that refer to the value:
// a close's journal entry costs no db transaction of its own. After End,
// either Commit or Discard must be called.
func (v *ValueWriter) End() (cas.ObjectIdentifier, uint64, error) {
	id, size, err := v.w.Close()
	if err != nil {
		v.pw.Discard()
		return id, 0, fmt.Errorf("write value: %w", err)
	}
	return id, size, nil
}

// Commit stores the ended value's last pieces and waits for them.
func (v *ValueWriter) Commit() error { return v.pw.flushWith(nil) }

// CommitJournal stores the ended value's last pieces in one db transaction
// with entry rows of journal id that refer to the value, and waits for it:
// the entry never names a value whose pieces are missing.
func (v *ValueWriter) CommitJournal(id JournalID, es []JournalEntry) error {
	return v.pw.flushWith(func(txn *badger.Txn) error { return setJournalEntries(txn, id, es) })
}

// Discard drops the pieces of an ended value that Commit did not store;
// after Commit it does nothing.
func (v *ValueWriter) Discard() { v.pw.Discard() }

// Abort drops the value.
func (v *ValueWriter) Abort() {
	if v.w != nil {
		v.w.Abort()
	}
	v.pw.Discard()
}

// OpenValue returns a reader of a value stored in the page.
func (p *Page) OpenValue(id cas.ObjectIdentifier) (*cas.Reader, error) {
	if err := p.check(); err != nil {
		return nil, err
	}
	return cas.NewReader(p, id, p.repo.indexes)
}

// OpenValueAround returns a reader of a value stored in the page for reads
// around scattered places, an edit's: it never streams. A stream has the
// kernel read the value log in, megabytes around each chunk, and an edit's
// few reads around each change looked like one: the edits of a 1 GiB file
// committing ~150 fsynced changes a second read 300–900 MB/s from the
// disk, and every fsync beside them waited for it.
func (p *Page) OpenValueAround(id cas.ObjectIdentifier) (*cas.Reader, error) {
	if err := p.check(); err != nil {
		return nil, err
	}
	return cas.NewReader(pieces{p}, id, p.repo.indexes)
}

// pieces is a page as a cas.Source alone, without its streaming form.
type pieces struct{ p *Page }

func (s pieces) Get(d cas.Digest, buf []byte) ([]byte, error) { return s.p.Get(d, buf) }

func (pieces) ChecksPieces() {}

// ChecksPieces makes a page a cas.CheckedSource: Badger checks the CRC-32C
// of every value-log entry and table block the page reads, and a piece
// fetched from the remote store or the piece cache was hashed against its
// digest as it arrived.
func (p *Page) ChecksPieces() {}
