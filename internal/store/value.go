package store

import (
	"fmt"

	"github.com/dgraph-io/badger/v4"

	"github.com/ledgerfs/ledgerfs/internal/cas"
)

// ValueWriter streams a value into a page's pieces.
type ValueWriter struct {
	pw *PieceWriter
	w  *cas.Writer
}

// NewValueWriter starts writing a value. The pieces are transient until a
// commit uses the value.
func (p *Page) NewValueWriter() *ValueWriter {
	pw := p.NewPieceWriter()
	pw.bulk = true
	return &ValueWriter{pw: pw, w: cas.NewWriter(pw, p.pol, cas.KindBlob)}
}

// Write adds bytes to the value.
func (v *ValueWriter) Write(b []byte) (int, error) { return v.w.Write(b) }

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
	v.w.Abort()
	v.pw.Discard()
}

// OpenValue returns a reader of a value stored in the page.
func (p *Page) OpenValue(id cas.ObjectIdentifier) (*cas.Reader, error) {
	if err := p.check(); err != nil {
		return nil, err
	}
	return cas.NewReader(p, id, p.repo.indexes)
}
