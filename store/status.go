package store

import (
	"fmt"
	"sort"

	"github.com/dgraph-io/badger/v4"

	"github.com/ledgerfs/ledgerfs/cas"
)

// StatusFaults are the disagreements between a page's objects and their
// status rows: every object has exactly one status row, and every status
// row names an object.
type StatusFaults struct {
	// Missing are objects with no status row.
	Missing []cas.Digest
	// Orphans are status rows of objects that are not stored.
	Orphans [][]byte
	// Doubled are objects with more than one status row: the rows that
	// are not the most advanced status (synced, then local).
	Doubled [][]byte
}

// Count is the number of faults.
func (f *StatusFaults) Count() int { return len(f.Missing) + len(f.Orphans) + len(f.Doubled) }

// CheckStatus reads every object's key and every status row.
func (p *Page) CheckStatus() (*StatusFaults, error) {
	f := &StatusFaults{}
	statuses := map[cas.Digest][]PieceStatus{}
	err := p.view(func(txn *badger.Txn) error {
		for _, s := range []PieceStatus{Synced, Local, Transient} {
			prefix := []byte(StatusPrefix(s))
			it := txn.NewIterator(badger.IteratorOptions{Prefix: prefix})
			for it.Rewind(); it.Valid(); it.Next() {
				d := cas.Digest(it.Item().KeyCopy(nil)[len(prefix):])
				statuses[d] = append(statuses[d], s)
			}
			it.Close()
		}
		it := txn.NewIterator(badger.IteratorOptions{Prefix: []byte(PrefixObjects)})
		defer it.Close()
		for it.Rewind(); it.Valid(); it.Next() {
			d := cas.Digest(it.Item().KeyCopy(nil)[len(PrefixObjects):])
			ss, ok := statuses[d]
			switch {
			case !ok:
				f.Missing = append(f.Missing, d)
			case len(ss) > 1:
				for _, s := range ss[1:] { // ss[0] is the most advanced
					f.Doubled = append(f.Doubled, statusKey(s, d))
				}
			}
			delete(statuses, d)
		}
		return nil
	})
	for d, ss := range statuses {
		for _, s := range ss {
			f.Orphans = append(f.Orphans, statusKey(s, d))
		}
	}
	return f, err
}

// RepairStatus fixes the faults f found, losing nothing: orphan and doubled
// rows are deleted, and an object with no status becomes local, kept as a
// commit's piece is (if no commit uses it, collecting garbage removes it).
func (p *Page) RepairStatus(f *StatusFaults) error {
	if err := p.SetStatus(Local, f.Missing); err != nil {
		return err
	}
	rows := append(append([][]byte(nil), f.Orphans...), f.Doubled...)
	if err := batched(p.db, len(rows), func(txn *badger.Txn, i int) error { return txn.Delete(rows[i]) }); err != nil {
		return fmt.Errorf("store: repair status rows: %w", err)
	}
	return nil
}

// TransientLookup tells a walk over many pieces whether each is transient.
// A landing's walk asks it of each piece it reaches: a 1 GiB value reaches
// ~57,000, and a point lookup of each through the page's tables took 20–30
// µs (1.2–1.8 s of that value's landing). Past ScanTransientAfter point
// lookups it reads the page's transient rows in one scan, in key order, and
// answers from that (transientScan); a small commit, which reaches a few
// pieces, never reads the rows of every write not yet committed.
type TransientLookup struct {
	p       *Page
	lookups int
	scan    *transientScan
}

// ScanTransientAfter is the point lookups after which a TransientLookup
// scans.
const ScanTransientAfter = 1024

// maxScanned bounds the digests a scan holds: 4.3 MiB, a 2 GiB value's
// pieces; the rest are looked up one at a time.
const maxScanned = 1 << 17

// NewTransientLookup starts a walk's lookups of the page's piece statuses.
func (p *Page) NewTransientLookup() *TransientLookup { return &TransientLookup{p: p} }

// IsTransient is Page.IsTransient, from the scan once there is one.
func (l *TransientLookup) IsTransient(d cas.Digest) (bool, error) {
	if l.scan == nil {
		if l.lookups++; l.lookups <= ScanTransientAfter {
			return l.p.IsTransient(d)
		}
		scan, err := l.p.scanTransient(maxScanned)
		if err != nil {
			return false, err
		}
		l.scan = scan
	}
	if transient, known := l.scan.lookup(d); known {
		return transient, nil
	}
	return l.p.IsTransient(d)
}

// transientScan is the digests of a page's transient pieces, read in one
// scan of their status rows, in key order.
//
// It is a snapshot, taken by a walk that holds the page's lock (a landing,
// or recovery before anyone uses the page): no other landing marks a piece
// local meanwhile. A pull's pieces are marked synced without the lock; one
// that a local write stored too may be marked local again by the walk,
// which a point lookup allowed as well, between it and the walk's next
// batch of marks: the piece is pushed again, and nothing is lost.
type transientScan struct {
	digests []byte // sorted, scanDigest bytes each
	// through is the last digest the scan read when it stopped at its
	// bound; the scan says nothing of digests after it. Empty: it read
	// every transient row.
	through string
}

// scanDigest is the size of the digest of a piece held in its own row
// (cas.Digest: a flag byte and a hash); inline pieces have no status row.
const scanDigest = 1 + cas.HashSize

// scanRowsPerLookup is how many rows a scan reads per point lookup's worth
// of mapped table pages (the 128 KiB the kernel maps around one fault).
const scanRowsPerLookup = 100

// scanTransient reads the digests of up to max transient pieces, in key
// order: memory is bounded at max × 33 bytes whatever the page holds.
func (p *Page) scanTransient(max int) (*transientScan, error) {
	if err := p.check(); err != nil {
		return nil, err
	}
	s := &transientScan{}
	prefix := []byte(StatusPrefix(Transient))
	err := p.view(func(txn *badger.Txn) error {
		it := txn.NewIterator(badger.IteratorOptions{Prefix: prefix})
		defer it.Close()
		for it.Rewind(); it.Valid(); it.Next() {
			d := it.Item().Key()[len(prefix):]
			if len(d) != scanDigest {
				continue
			}
			if len(s.digests) >= max*scanDigest {
				s.through = string(s.digests[len(s.digests)-scanDigest:])
				return nil
			}
			s.digests = append(s.digests, d...)
			if len(s.digests)%(scanRowsPerLookup*scanDigest) == 0 {
				// The rows are read through the tables' mappings, in
				// runs the kernel maps around each fault: counted as
				// traffic, or a scan of 57,000 rows left ~40 MiB more
				// of them resident than a walk's point lookups did.
				p.repo.trim.AddLookup()
			}
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("store: scan transient pieces: %w", err)
	}
	return s, nil
}

// lookup reports whether d was transient at the scan, and whether the scan
// can tell (known false: look d up instead).
func (s *transientScan) lookup(d cas.Digest) (transient, known bool) {
	if len(d) != scanDigest || s.through != "" && string(d) > s.through {
		return false, false
	}
	n := len(s.digests) / scanDigest
	i := sort.Search(n, func(i int) bool { return string(s.digests[i*scanDigest:(i+1)*scanDigest]) >= string(d) })
	return i < n && string(s.digests[i*scanDigest:(i+1)*scanDigest]) == string(d), true
}
