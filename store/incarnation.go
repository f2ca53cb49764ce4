package store

import (
	"bytes"
	"crypto/rand"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"slices"
	"strings"
	"time"

	"github.com/dgraph-io/badger/v4"
)

// An Incarnation names one life of a page across devices: made at random
// when a device creates the page, kept through its renames and moves, gone
// with it. A name reused for a new page gets a new one, so a device that
// still knows the page under its old name, or learns of a rename late,
// lands the page's changes in the page that holds them wherever it is
// named here, never in a stranger under the same name. Two incarnations
// that meet under one name (pages made under it on two devices, a rename
// onto a taken name) become one page holding both.
type Incarnation [16]byte

// newIncarnation returns a new random incarnation.
func (r *Repository) newIncarnation() (Incarnation, error) {
	var i Incarnation
	r.randMu.Lock()
	defer r.randMu.Unlock()
	src := r.opts.Rand
	if src == nil {
		src = rand.Reader
	}
	if _, err := io.ReadFull(src, i[:]); err != nil {
		return i, fmt.Errorf("new page incarnation: %w", err)
	}
	return i, nil
}

func (i Incarnation) String() string { return hex.EncodeToString(i[:]) }

// ParseIncarnation parses an incarnation's String.
func ParseIncarnation(s string) (Incarnation, error) {
	var i Incarnation
	if len(s) != 2*len(i) {
		return i, fmt.Errorf("incarnation %q: want %d hex digits", s, 2*len(i))
	}
	if _, err := hex.Decode(i[:], []byte(s)); err != nil {
		return i, fmt.Errorf("incarnation %q: %w", s, err)
	}
	return i, nil
}

// ParseIncarnations parses incarnations' Strings, skipping none.
func ParseIncarnations(ss []string) ([]Incarnation, error) {
	out := make([]Incarnation, 0, len(ss))
	for _, s := range ss {
		i, err := ParseIncarnation(s)
		if err != nil {
			return nil, err
		}
		out = append(out, i)
	}
	return out, nil
}

// IncarnationStrings returns ids' Strings.
func IncarnationStrings(ids []Incarnation) []string {
	out := make([]string, len(ids))
	for i, id := range ids {
		out[i] = id.String()
	}
	return out
}

// A Naming is who a page is and since when it has its name: the
// incarnations it holds (sorted) and the change that gave it its name (its
// create, or the latest rename or move applied to it). Of two renames of
// one page made apart, the later wins on every device.
type Naming struct {
	IDs []Incarnation
	At  NamedAt
}

// NamedAt is when a change named a page, and whether it was a rename (of
// the page or its ledger) rather than a create: a rename, which a user
// asked for, wins over a create of the old name made apart (a write on a
// device that did not know the page), whatever their times; of two of a
// kind, the later wins.
type NamedAt struct {
	Time    time.Time
	Renamed bool
}

// After reports whether a wins over b.
func (a NamedAt) After(b NamedAt) bool {
	if a.Renamed != b.Renamed {
		return a.Renamed
	}
	return a.Time.After(b.Time)
}

// IsZero reports whether a names nothing (a page named by a batch alone).
func (a NamedAt) IsZero() bool { return a.Time.IsZero() && !a.Renamed }

// Holds reports whether n holds id.
func (n Naming) Holds(id Incarnation) bool {
	_, ok := slices.BinarySearchFunc(n.IDs, id, compareIncarnations)
	return ok
}

// Union returns n with the incarnations of o too, named since the later
// of the two times.
func (n Naming) Union(o Naming) Naming {
	ids := slices.Concat(n.IDs, o.IDs)
	slices.SortFunc(ids, compareIncarnations)
	ids = slices.Compact(ids)
	at := n.At
	if o.At.After(at) {
		at = o.At
	}
	return Naming{IDs: ids, At: at}
}

func compareIncarnations(a, b Incarnation) int { return bytes.Compare(a[:], b[:]) }

// Rows of the repository db: a page's naming (prefixNaming + ledger + "/" +
// page: its NamedAt as encodeAt writes it, then the incarnations), moved
// with the page's other rows; and, for every incarnation this repository
// has known, where it was last named (prefixIncarnation + hex: a NamedAt,
// a byte of flags (namedLive, namedDeleted), ledger + "/" + page, and, if
// deletes here saw commits, a NUL and their ids). The second outlives the
// page: an incarnation that comes back (a change another device made to a
// page deleted here) comes back under the last name it had, and goes again
// if a delete here saw everything it brings.
const (
	prefixNaming      = "naming/"
	prefixIncarnation = "incarnation/"
)

func namingKey(ledger, page string) []byte { return []byte(prefixNaming + ledger + "/" + page) }

func incarnationKey(id Incarnation) []byte { return []byte(prefixIncarnation + id.String()) }

// encodeAt appends at to b: 8 bytes of Unix nanoseconds, big-endian (0: no
// time), and a byte that is 1 for a rename.
func encodeAt(b []byte, at NamedAt) []byte {
	var ns uint64
	if !at.Time.IsZero() {
		ns = uint64(at.Time.UnixNano())
	}
	b = binary.BigEndian.AppendUint64(b, ns)
	if at.Renamed {
		return append(b, 1)
	}
	return append(b, 0)
}

func decodeAt(b []byte) NamedAt {
	var at NamedAt
	if ns := binary.BigEndian.Uint64(b); ns != 0 {
		at.Time = time.Unix(0, int64(ns)).UTC()
	}
	at.Renamed = b[8] == 1
	return at
}

func encodeNaming(n Naming) []byte {
	b := encodeAt(make([]byte, 0, 9+16*len(n.IDs)), n.At)
	for _, id := range n.IDs {
		b = append(b, id[:]...)
	}
	return b
}

func decodeNaming(b []byte) (Naming, error) {
	if len(b) < 9 || (len(b)-9)%16 != 0 {
		return Naming{}, fmt.Errorf("naming row of %d bytes", len(b))
	}
	n := Naming{At: decodeAt(b)}
	for b = b[9:]; len(b) > 0; b = b[16:] {
		n.IDs = append(n.IDs, Incarnation(b[:16]))
	}
	return n, nil
}

// A Named is where an incarnation was last named, and whether a page here
// holds it (Live) or held it until it was deleted here (Deleted).
type Named struct {
	Ledger, Page string
	At           NamedAt
	Live         bool
	Deleted      bool
	// Seen are the commits the deletes here of its page saw (their
	// NameChanges'), kept when the page comes back: a page that comes
	// back holding nothing newer than what one of them saw goes again.
	Seen []CommitID
}

const (
	namedLive    = 1
	namedDeleted = 2
)

func encodeNamed(n Named) []byte {
	b := encodeAt(nil, n.At)
	var flags byte
	if n.Live {
		flags |= namedLive
	}
	if n.Deleted {
		flags |= namedDeleted
	}
	b = append(append(b, flags), n.Ledger+"/"+n.Page...)
	if len(n.Seen) > 0 {
		b = append(b, 0)
		for _, id := range n.Seen {
			b = append(b, id[:]...)
		}
	}
	return b
}

func decodeNamed(b []byte) (Named, error) {
	if len(b) < 10 {
		return Named{}, fmt.Errorf("incarnation row of %d bytes", len(b))
	}
	name, seen, _ := bytes.Cut(b[10:], []byte{0})
	l, p, ok := strings.Cut(string(name), "/")
	if !ok || len(seen)%len(CommitID{}) != 0 {
		return Named{}, fmt.Errorf("incarnation row names %q", b[10:])
	}
	n := Named{Ledger: l, Page: p, At: decodeAt(b), Live: b[9]&namedLive != 0, Deleted: b[9]&namedDeleted != 0}
	for ; len(seen) > 0; seen = seen[len(CommitID{}):] {
		n.Seen = append(n.Seen, CommitID(seen[:len(CommitID{})]))
	}
	return n, nil
}

func getNamed(txn *badger.Txn, id Incarnation) (Named, bool, error) {
	return getDecoded(txn, incarnationKey(id), decodeNamed)
}

// getNaming reads ledger/page's naming row in txn.
func getNaming(txn *badger.Txn, ledger, page string) (Naming, bool, error) {
	return getDecoded(txn, namingKey(ledger, page), decodeNaming)
}

// getDecoded reads the row at key in txn, decoded.
func getDecoded[T any](txn *badger.Txn, key []byte, decode func([]byte) (T, error)) (T, bool, error) {
	var v T
	it, err := txn.Get(key)
	if errors.Is(err, badger.ErrKeyNotFound) {
		return v, false, nil
	}
	if err != nil {
		return v, false, err
	}
	err = it.Value(func(b []byte) error {
		var err error
		v, err = decode(b)
		return err
	})
	return v, err == nil, err
}

// setNaming replaces ledger/page's naming (none: the page goes) and the
// rows of the incarnations it had and has.
func setNaming(txn *badger.Txn, ledger, page string, n *Naming) error {
	old, _, err := getNaming(txn, ledger, page)
	if err != nil {
		return err
	}
	// What deletes here saw stays with every incarnation, held or not:
	// a page that came back is checked against it (cloudsync's
	// goneAgain).
	set := func(id Incarnation, named Named) error {
		was, _, err := getNamed(txn, id)
		if err != nil {
			return err
		}
		named.Seen = was.Seen
		return txn.Set(incarnationKey(id), encodeNamed(named))
	}
	for _, id := range old.IDs {
		if n != nil && n.Holds(id) {
			continue
		}
		// Gone from here: where it was last named stays.
		if err := set(id, Named{Ledger: ledger, Page: page, At: old.At, Deleted: n == nil}); err != nil {
			return err
		}
	}
	if n == nil {
		return txn.Delete(namingKey(ledger, page))
	}
	for _, id := range n.IDs {
		if err := set(id, Named{Ledger: ledger, Page: page, At: n.At, Live: true}); err != nil {
			return err
		}
	}
	return txn.Set(namingKey(ledger, page), encodeNaming(*n))
}

// moveNaming moves ledger/page's naming to toLedger/toPage (none: drops
// it), named since at unless at is zero.
func moveNaming(txn *badger.Txn, ledger, page, toLedger, toPage string, at NamedAt) error {
	n, ok, err := getNaming(txn, ledger, page)
	if err != nil || !ok {
		return err
	}
	if err := setNaming(txn, ledger, page, nil); err != nil {
		return err
	}
	if toPage == "" {
		return nil
	}
	if !at.IsZero() {
		n.At = at
	}
	return setNaming(txn, toLedger, toPage, &n)
}

// PageNaming returns the naming of ledger/page; ok is false for a page
// that has none yet (made before incarnations, or by a sync not finished).
func (r *Repository) PageNaming(ledger, page string) (n Naming, ok bool, err error) {
	err = r.db.View(func(txn *badger.Txn) error {
		n, ok, err = getNaming(txn, ledger, page)
		return err
	})
	return n, ok, err
}

// SetPageNaming sets the naming of ledger/page, which must exist: a sync
// gives a page the incarnations another device's page holds, and the time
// of the change that named it there.
func (r *Repository) SetPageNaming(ledger, page string, n Naming) error {
	slices.SortFunc(n.IDs, compareIncarnations)
	n.IDs = slices.Compact(n.IDs)
	n.At.Time = n.At.Time.UTC()
	return r.db.Update(func(txn *badger.Txn) error {
		if _, err := txn.Get(pageKey(ledger, page)); err != nil {
			if errors.Is(err, badger.ErrKeyNotFound) {
				return fmt.Errorf("page %s/%s: %w", ledger, page, ErrNotFound)
			}
			return err
		}
		return setNaming(txn, ledger, page, &n)
	})
}

// EnsurePageNaming returns the naming of ledger/page, giving it a new
// incarnation first if it has none.
func (r *Repository) EnsurePageNaming(ledger, page string) (Naming, error) {
	n, ok, err := r.PageNaming(ledger, page)
	if err != nil || ok {
		return n, err
	}
	inc, err := r.newIncarnation()
	if err != nil {
		return Naming{}, err
	}
	n = Naming{IDs: []Incarnation{inc}}
	if err := r.SetPageNaming(ledger, page, n); err != nil {
		return Naming{}, err
	}
	return n, nil
}

// FindIncarnation returns the page here that holds incarnation id.
func (r *Repository) FindIncarnation(id Incarnation) (ledger, page string, ok bool, err error) {
	n, ok, err := r.IncarnationNamed(id)
	if err != nil || !ok || !n.Live {
		return "", "", false, err
	}
	return n.Ledger, n.Page, true, nil
}

// IncarnationNamed returns where incarnation id was last named here, if it
// ever was.
func (r *Repository) IncarnationNamed(id Incarnation) (n Named, ok bool, err error) {
	err = r.db.View(func(txn *badger.Txn) error {
		n, ok, err = getNamed(txn, id)
		return err
	})
	return n, ok, err
}

// Incarnations calls fn with every incarnation this repository has known
// and where it was last named, in the order of their ids: a collection
// hands them on in its checkpoint, so that a device that joins from it
// places later batches and changes of names as this one does.
func (r *Repository) Incarnations(fn func(Incarnation, Named) error) error {
	return scanRows(r.db.View, prefixIncarnation, "", func(k string, v []byte) error {
		id, err := ParseIncarnation(k)
		if err != nil {
			return err
		}
		n, err := decodeNamed(v)
		if err != nil {
			return fmt.Errorf("incarnation %s: %w", k, err)
		}
		return fn(id, n)
	})
}

// NoteIncarnationNamed records that another device named incarnation id,
// which no page here holds, ledger/page at time at, unless it was named
// later: the page goes there if it comes.
func (r *Repository) NoteIncarnationNamed(id Incarnation, ledger, page string, at NamedAt) error {
	at.Time = at.Time.UTC()
	return r.db.Update(func(txn *badger.Txn) error {
		n, ok, err := getNamed(txn, id)
		if err != nil || ok && (n.Live || !at.After(n.At)) {
			return err
		}
		return txn.Set(incarnationKey(id), encodeNamed(Named{Ledger: ledger, Page: page, At: at, Deleted: n.Deleted, Seen: n.Seen}))
	})
}

// NoteIncarnationsDeleted records that the page of incarnations ids, no
// longer here, was deleted having seen commits seen (added to what earlier
// deletes of it saw); an incarnation never named here is recorded as last
// named ledger/page.
func (r *Repository) NoteIncarnationsDeleted(ids []Incarnation, ledger, page string, seen []CommitID) error {
	return r.db.Update(func(txn *badger.Txn) error { return markDeleted(txn, ids, ledger, page, seen) })
}

func markDeleted(txn *badger.Txn, ids []Incarnation, ledger, page string, seen []CommitID) error {
	for _, id := range ids {
		n, ok, err := getNamed(txn, id)
		if err != nil {
			return err
		}
		if !ok {
			n = Named{Ledger: ledger, Page: page}
		}
		// What every delete here saw: a page that comes back holding
		// nothing newer than one of them goes again.
		n.Deleted = !n.Live
		for _, c := range seen {
			if !slices.Contains(n.Seen, c) {
				n.Seen = append(n.Seen, c)
			}
		}
		if err := txn.Set(incarnationKey(id), encodeNamed(n)); err != nil {
			return err
		}
	}
	return nil
}
