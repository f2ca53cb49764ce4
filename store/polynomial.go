package store

import (
	"errors"
	"fmt"
	"strings"

	"github.com/dgraph-io/badger/v4"
	"github.com/restic/chunker"
)

// prefixPolynomial rows hold the polynomial of a page chunked with one of
// its own, not the repository's: a page made before the repository joined
// a remote of another polynomial, or one another such device made (see
// AdoptPolynomial). Chunk boundaries, and so pieces and tree nodes, depend
// on the polynomial: every device must chunk a page alike for the same
// content to make the same value.
const prefixPolynomial = "polynomial/"

func polynomialKey(ledger string, id PageID) []byte {
	return append([]byte(prefixPolynomial+ledger), id[:]...)
}

// pagePolynomial returns the polynomial the page is chunked with.
func (r *Repository) pagePolynomial(ledger string, id PageID) (chunker.Pol, error) {
	pol, err := r.storedPolynomial(polynomialKey(ledger, id))
	switch {
	case errors.Is(err, badger.ErrKeyNotFound):
		return r.Polynomial(), nil
	case err != nil:
		return 0, fmt.Errorf("store: the chunker polynomial of a page of %s: %w", ledger, err)
	}
	return pol, nil
}

// storedPolynomial reads a polynomial row: badger.ErrKeyNotFound if there
// is none.
func (r *Repository) storedPolynomial(key []byte) (chunker.Pol, error) {
	var pol chunker.Pol
	err := r.db.View(func(txn *badger.Txn) error {
		it, err := txn.Get(key)
		if err != nil {
			return err
		}
		return it.Value(func(v []byte) error {
			u, err := DecodeUint64(v)
			pol = chunker.Pol(u)
			return err
		})
	})
	return pol, err
}

// AdoptPolynomial makes pol the repository's chunker polynomial, as a
// device joining a remote must chunk as the remote's devices do. The pages
// made before keep the polynomial they were chunked with, each in a row of
// its own, so that their content keeps its pieces and tree nodes, here and
// on the devices they go to (Page.Polynomial); new pages take pol. It
// returns how many pages kept their own.
func (r *Repository) AdoptPolynomial(pol chunker.Pol) (int, error) {
	if !pol.Irreducible() {
		return 0, fmt.Errorf("store: chunker polynomial %v is not irreducible", pol)
	}
	old := r.Polynomial()
	if pol == old {
		return 0, nil
	}
	kept := 0
	err := r.db.Update(func(txn *badger.Txn) error {
		it := txn.NewIterator(badger.IteratorOptions{Prefix: []byte(prefixPages)})
		var pages [][2]string
		for it.Rewind(); it.Valid(); it.Next() {
			ledger, page, ok := strings.Cut(string(it.Item().Key()[len(prefixPages):]), "/")
			if ok {
				pages = append(pages, [2]string{ledger, page})
			}
		}
		it.Close()
		for _, lp := range pages {
			key := polynomialKey(lp[0], PageIDFor(lp[1]))
			if _, err := txn.Get(key); err == nil {
				continue // chunked with its own already
			} else if !errors.Is(err, badger.ErrKeyNotFound) {
				return err
			}
			if err := txn.Set(key, EncodeUint64(uint64(old))); err != nil {
				return err
			}
			kept++
		}
		return txn.Set([]byte(keyPolynomial), EncodeUint64(uint64(pol)))
	})
	if err != nil {
		return 0, fmt.Errorf("store: set chunker polynomial: %w", err)
	}
	r.pol.Store(uint64(pol))
	return kept, nil
}

// SetPagePolynomial makes pol the chunker polynomial of page ledger/page's
// new values and tree nodes: a page another device chunks with a
// polynomial of its own (see AdoptPolynomial), or one that joins the
// store's. What the page holds keeps its pieces: reading a value needs no
// polynomial, and an edit cuts anew only around its change. ErrBusy while
// the page is in use.
func (r *Repository) SetPagePolynomial(ledger, page string, pol chunker.Pol) error {
	if !pol.Irreducible() {
		return fmt.Errorf("store: chunker polynomial %v is not irreducible", pol)
	}
	p, err := r.AcquireIdle(ledger, page)
	if err != nil {
		return err
	}
	defer r.ReleaseIdle(p)
	if p.Polynomial() == pol {
		return nil
	}
	if err := r.db.Update(func(txn *badger.Txn) error {
		if pol == r.Polynomial() {
			return txn.Delete(polynomialKey(ledger, p.ID))
		}
		return txn.Set(polynomialKey(ledger, p.ID), EncodeUint64(uint64(pol)))
	}); err != nil {
		return fmt.Errorf("store: set the chunker polynomial of %s/%s: %w", ledger, page, err)
	}
	// Held alone: no writer chunks with the page meanwhile.
	p.pol.Store(uint64(pol))
	p.nodes.SetPolynomial(pol)
	return nil
}
