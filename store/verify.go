package store

import (
	"bytes"
	"fmt"
	"strings"

	"github.com/ledgerfs/ledgerfs/internal/badgerdb"

	"github.com/dgraph-io/badger/v4"

	"github.com/ledgerfs/ledgerfs/cas"
)

// VerifyRows checks every row of the page's db against the documented
// schema: each key has one of the documented prefixes and its value the
// documented format; objects match their digests, commits their ids,
// journal values parse with decodeOp. It returns the number of rows of
// each kind.
func (p *Page) VerifyRows(decodeOp func(key string, v []byte) error) (map[string]int, error) {
	return verifyRows(p.db, decodeOp)
}

// VerifyDir is VerifyRows of the page db in dir, which no process serves:
// it opens the db with Badger's defaults, as any reader of the documented
// schema would. (Not read-only: after a crash Badger refuses a read-only
// open until its value log is truncated.)
func VerifyDir(dir string, decodeOp func(key string, v []byte) error) (map[string]int, error) {
	db, err := badgerdb.Open(badger.DefaultOptions(dir).WithLogger(nil))
	if err != nil {
		return nil, fmt.Errorf("store: open %s: %w", dir, err)
	}
	defer db.Close()
	return verifyRows(db, decodeOp)
}

func verifyRows(db *badger.DB, decodeOp func(key string, v []byte) error) (map[string]int, error) {
	counts := map[string]int{}
	err := db.View(func(txn *badger.Txn) error {
		it := txn.NewIterator(badger.IteratorOptions{PrefetchValues: false})
		defer it.Close()
		for it.Rewind(); it.Valid(); it.Next() {
			item := it.Item()
			key := item.KeyCopy(nil)
			val, err := item.ValueCopy(nil)
			if err != nil {
				return err
			}
			kind, err := verifyRow(key, val, item.UserMeta(), decodeOp)
			if err != nil {
				return fmt.Errorf("row %q: %w", key[:min(len(key), 64)], err)
			}
			counts[kind]++
		}
		if counts[PrefixHeads] == 0 {
			// Ledger's storage holds a head for every page: the first
			// commit's, until another lands.
			return fmt.Errorf("no %s row: every page has a head", PrefixHeads)
		}
		return nil
	})
	return counts, err
}

func verifyRow(key, val []byte, meta byte, decodeOp func(string, []byte) error) (string, error) {
	k := string(key)
	idLen := len(CommitID{})
	if meta != encodingRaw && !strings.HasPrefix(k, PrefixObjects) {
		return "", fmt.Errorf("an encoding (%d) on a row that is not a piece", meta)
	}
	switch {
	case strings.HasPrefix(k, PrefixCommits):
		id := k[len(PrefixCommits):]
		if len(id) != idLen {
			return "", fmt.Errorf("commit id of %d bytes", len(id))
		}
		_, err := DecodeCommit(CommitID([]byte(id)), val)
		return PrefixCommits, err
	case strings.HasPrefix(k, PrefixObjects):
		d, err := cas.ParseDigest(key[len(PrefixObjects):])
		if err != nil {
			return "", err
		}
		if d.IsInline() {
			return "", fmt.Errorf("inline piece stored as a row")
		}
		piece, err := decodePiece(nil, val, meta)
		if err != nil {
			return "", err
		}
		return PrefixObjects, d.Verify(piece)
	case strings.HasPrefix(k, PrefixImplicitMeta):
		if id := JournalID(k[len(PrefixImplicitMeta):]); !id.Valid() || id.Explicit() {
			return "", fmt.Errorf("bad implicit journal id")
		}
		if len(val) != idLen {
			return "", fmt.Errorf("base commit of %d bytes", len(val))
		}
		return PrefixImplicitMeta, nil
	case strings.HasPrefix(k, PrefixJournals):
		id, rest, ok := ParseJournalRow(key)
		if !ok {
			return "", fmt.Errorf("bad journal row key")
		}
		if rest == "C" {
			if len(val) != 0 {
				return "", fmt.Errorf("clear row with a value")
			}
			return "journals/{id}/C", nil
		}
		user, ok := strings.CutPrefix(rest, "entry/")
		if !ok {
			return "", fmt.Errorf("journal %s row %q is neither entry/ nor C", id, rest)
		}
		return "journals/{id}/entry/", decodeOp(user, val)
	case strings.HasPrefix(k, PrefixHeads):
		if len(k)-len(PrefixHeads) != idLen || len(val) != 8 {
			return "", fmt.Errorf("malformed head row")
		}
		return PrefixHeads, nil
	case strings.HasPrefix(k, PrefixUnsyncedCommits):
		if len(k)-len(PrefixUnsyncedCommits) != idLen || len(val) != 8 {
			return "", fmt.Errorf("malformed unsynced commit row")
		}
		return PrefixUnsyncedCommits, nil
	case strings.HasPrefix(k, PrefixSyncMetadata):
		return PrefixSyncMetadata, nil
	}
	for _, s := range Statuses {
		if d, ok := bytes.CutPrefix(key, []byte(StatusPrefix(s))); ok {
			if _, err := cas.ParseDigest(d); err != nil {
				return "", err
			}
			if len(val) != 0 {
				return "", fmt.Errorf("status row with a value")
			}
			return StatusPrefix(s), nil
		}
	}
	return "", fmt.Errorf("undocumented row")
}

// Scrub hashes the pieces the page stores against their digests, in key
// order from the first after after (nil: from the first), until budget
// bytes were read: the check that reads leave to Badger's checksums
// (cas.CheckedSource) and that those cannot make of a row written with
// other bytes than its digest names, or of a table changed after Badger
// read it. It returns where to go on (nil: done), the bytes read and the
// digests of the pieces that do not match or could not be read. A batch
// at a time, so that a scrub holds its page for moments only.
func (p *Page) Scrub(after []byte, budget int) (next []byte, read int, damaged [][]byte, err error) {
	if err := p.check(); err != nil {
		return nil, 0, nil, err
	}
	err = p.view(func(txn *badger.Txn) error {
		it := txn.NewIterator(badger.IteratorOptions{Prefix: []byte(PrefixObjects)})
		defer it.Close()
		start := []byte(PrefixObjects)
		if after != nil {
			start = append(objectKey(cas.Digest(after)), 0)
		}
		for it.Seek(start); it.Valid(); it.Next() {
			item := it.Item()
			key := item.KeyCopy(nil)
			d := key[len(PrefixObjects):]
			val, err := item.ValueCopy(nil)
			read += len(val)
			if err == nil {
				// fsck's check of an objects/ row, the same.
				_, err = verifyRow(key, val, item.UserMeta(), nil)
			}
			if err != nil {
				damaged = append(damaged, d)
			}
			if read >= budget {
				next = d
				return nil
			}
		}
		return nil
	})
	return next, read, damaged, err
}
