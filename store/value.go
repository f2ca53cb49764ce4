package store

import (
	"fmt"

	"github.com/ledgerfs/ledgerfs/cas"
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
	return &ValueWriter{pw: pw, w: cas.NewWriter(pw, p.pol, cas.KindBlob)}
}

// Write adds bytes to the value.
func (v *ValueWriter) Write(b []byte) (int, error) { return v.w.Write(b) }

// Close ends the value and returns its identifier and size once its pieces
// are stored.
func (v *ValueWriter) Close() (cas.ObjectIdentifier, uint64, error) {
	id, size, err := v.w.Close()
	if err != nil {
		v.pw.Discard()
		return id, 0, fmt.Errorf("write value: %w", err)
	}
	if err := v.pw.Flush(); err != nil {
		return id, 0, err
	}
	return id, size, nil
}

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
	return cas.NewReader(p, id)
}
