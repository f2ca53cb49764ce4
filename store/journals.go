package store

import (
	"bytes"
	"errors"
	"fmt"

	"github.com/dgraph-io/badger/v4"

	"github.com/ledgerfs/ledgerfs/cas"
)

// This file owns the rows of journals (journals/…), of commits landing
// (commits/, unsynced/commits/, heads/, journals/implicit_metadata/) and the
// scans of them that recovery and history need. Their invariants:
//
//   - An implicit journal has a journals/implicit_metadata/{id} row naming
//     its base from Begin until its commit lands; the row is what tells
//     recovery to commit the journal. An explicit journal has none, so a
//     restart drops it.
//   - A commit lands in one db transaction (Land): its commits/ row, its
//     unsynced/commits/ row, the heads/ rows replaced by the new head, and
//     the journal's metadata row deleted. Before that transaction the page
//     is at its old state, after it at the new one; the heads cache is set
//     from the same values.
//   - Pieces are written transient before the commit that references them
//     lands, and marked local after it (SetStatus), children before
//     parents: a local piece never has a transient piece below it.

// JournalEntry is an entry row of a journal: a user key and its encoded
// change ('A'… for a put, 'D' for a delete, see package journal).
type JournalEntry struct {
	Key   string
	Value []byte
}

// BeginImplicit records implicit journal id's base, so that recovery
// commits the journal if a crash interrupts it.
func (p *Page) BeginImplicit(id JournalID, base CommitID) error {
	return p.update(func(txn *badger.Txn) error {
		return txn.Set(implicitMetaKey(id), base[:])
	})
}

// PutJournalEntries writes entry rows of journal id. They need not land in
// one db transaction: an implicit journal only gets groups small enough for
// one, and an explicit journal is dropped whole by a crash.
func (p *Page) PutJournalEntries(id JournalID, es []JournalEntry) error {
	return batched(p.db, len(es), func(txn *badger.Txn, i int) error {
		return txn.Set(journalEntryKey(id, es[i].Key), es[i].Value)
	})
}

// setJournalEntries writes entry rows of journal id in txn.
func setJournalEntries(txn *badger.Txn, id JournalID, es []JournalEntry) error {
	for _, e := range es {
		if err := txn.Set(journalEntryKey(id, e.Key), e.Value); err != nil {
			return err
		}
	}
	return nil
}

// ClearJournal records that journal id clears the page.
func (p *Page) ClearJournal(id JournalID) error {
	return p.update(func(txn *badger.Txn) error {
		return txn.Set(journalClearKey(id), nil)
	})
}

// JournalCleared reports whether journal id clears the page.
func (p *Page) JournalCleared(id JournalID) (bool, error) {
	err := p.view(func(txn *badger.Txn) error {
		_, err := txn.Get(journalClearKey(id))
		return err
	})
	if errors.Is(err, badger.ErrKeyNotFound) {
		return false, nil
	}
	return err == nil, err
}

// JournalEntry returns the value of journal id's entry row for key.
func (p *Page) JournalEntry(id JournalID, key string) (v []byte, found bool, err error) {
	err = p.view(func(txn *badger.Txn) error {
		it, err := txn.Get(journalEntryKey(id, key))
		if errors.Is(err, badger.ErrKeyNotFound) {
			return nil
		}
		if err != nil {
			return err
		}
		found = true
		v, err = it.ValueCopy(nil)
		return err
	})
	return v, found, err
}

// JournalEntries calls fn with journal id's entry rows whose keys start
// with prefix, in key order.
func (p *Page) JournalEntries(id JournalID, prefix string, fn func(key string, v []byte) error) error {
	return scanRows(p.view, journalEntryPrefix(id), prefix, fn)
}

// DeleteJournalRows deletes journal id's entry rows for keys and its clear
// row; nil keys deletes every row of the journal.
func (p *Page) DeleteJournalRows(id JournalID, keys []string) error {
	if keys == nil {
		return p.deletePrefix([]byte(journalPrefix(id)))
	}
	rows := make([][]byte, 0, len(keys)+1)
	for _, k := range keys {
		rows = append(rows, journalEntryKey(id, k))
	}
	rows = append(rows, journalClearKey(id))
	if err := batched(p.db, len(rows), func(txn *badger.Txn, i int) error {
		return txn.Delete(rows[i])
	}); err != nil {
		return fmt.Errorf("store: delete rows of journal %s: %w", id, err)
	}
	return nil
}

// DropImplicitMeta deletes an implicit journal's metadata row: recovery
// then leaves the journal's rows for deletion instead of committing them.
func (p *Page) DropImplicitMeta(id JournalID) error {
	return p.update(func(txn *badger.Txn) error {
		return txn.Delete(implicitMetaKey(id))
	})
}

// ImplicitJournals returns the implicit journals that have metadata, with
// their bases: those a crash left uncommitted.
func (p *Page) ImplicitJournals() (map[JournalID]CommitID, error) {
	out := map[JournalID]CommitID{}
	err := p.view(func(txn *badger.Txn) error {
		it := txn.NewIterator(badger.IteratorOptions{Prefix: []byte(PrefixImplicitMeta)})
		defer it.Close()
		for it.Rewind(); it.Valid(); it.Next() {
			id := JournalID(it.Item().Key()[len(PrefixImplicitMeta):])
			v, err := it.Item().ValueCopy(nil)
			if err != nil {
				return err
			}
			if !id.Valid() || len(v) != len(CommitID{}) {
				return fmt.Errorf("store: malformed implicit journal row %q", it.Item().Key())
			}
			out[id] = CommitID(v)
		}
		return nil
	})
	return out, err
}

// DropJournals deletes every row of every explicit journal (explicit set)
// or of every implicit journal.
func (p *Page) DropJournals(explicit bool) error {
	if explicit {
		return p.deletePrefix([]byte(PrefixExplicitJournal))
	}
	return p.deletePrefix([]byte(PrefixImplicitJournal))
}

// Land makes a journal's commits the page's state in one db transaction:
// the rows of commits (each also unsynced), head as the only head unless
// it is nil (the journal changed nothing), and journal id's metadata row
// deleted. The caller holds Lock.
func (p *Page) Land(id JournalID, commits []*Commit, head *Commit) error {
	old, err := p.headsReplaced(head)
	if err != nil {
		return err
	}
	err = p.update(func(txn *badger.Txn) error {
		if err := setCommits(txn, commits, true); err != nil {
			return err
		}
		if err := replaceHeads(txn, old, head); err != nil {
			return err
		}
		return txn.Delete(implicitMetaKey(id))
	})
	if err != nil {
		return fmt.Errorf("store: land %s: %w", id, err)
	}
	if head != nil {
		p.setHeads([]*Commit{head})
	}
	return nil
}

// setCommits writes the rows of commits, and their unsynced rows if
// unsynced (commits of this device, not in the remote yet).
func setCommits(txn *badger.Txn, commits []*Commit, unsynced bool) error {
	for _, c := range commits {
		if err := txn.Set(commitKey(c.ID), c.Bytes); err != nil {
			return err
		}
		if !unsynced {
			continue
		}
		if err := txn.Set(unsyncedCommitKey(c.ID), EncodeUint64(c.Generation)); err != nil {
			return err
		}
	}
	return nil
}

// headsReplaced returns the heads a new head replaces: none if head is nil.
func (p *Page) headsReplaced(head *Commit) ([]*Commit, error) {
	if head == nil {
		return nil, nil
	}
	return p.Heads()
}

// replaceHeads makes head the only head instead of old (the first commit's
// among them: an empty page holds its row); nil changes nothing.
func replaceHeads(txn *badger.Txn, old []*Commit, head *Commit) error {
	if head == nil {
		return nil
	}
	for _, h := range old {
		if h.ID != head.ID {
			if err := txn.Delete(headKey(h.ID)); err != nil {
				return err
			}
		}
	}
	return txn.Set(headKey(head.ID), EncodeUint64(uint64(head.Timestamp)))
}

// HasTransient reports whether any piece is marked transient.
func (p *Page) HasTransient() (bool, error) {
	return p.hasAny(StatusPrefix(Transient))
}

// needsRecovery reports whether a crash left work for recovery: journal
// rows, transient pieces or records in the sync log.
func (p *Page) needsRecovery() (bool, error) {
	if p.dur.needsReplay() {
		return true, nil
	}
	return p.hasAny(PrefixJournals, StatusPrefix(Transient))
}

// HasJournals reports whether the page has rows of any journal.
func (p *Page) HasJournals() (bool, error) { return p.hasAny(PrefixJournals) }

// hasAny reports whether the page has a row under any of the prefixes.
func (p *Page) hasAny(prefixes ...string) (bool, error) {
	found := false
	err := p.view(func(txn *badger.Txn) error {
		for _, prefix := range prefixes {
			it := txn.NewIterator(badger.IteratorOptions{Prefix: []byte(prefix)})
			it.Rewind()
			found = it.Valid()
			it.Close()
			if found {
				return nil
			}
		}
		return nil
	})
	return found, err
}

// DeleteTransient deletes every piece still marked transient, with its
// status row, and returns how many it deleted. Recovery calls it once the
// reachable transient pieces are local: the rest are garbage.
//
// Each batch goes on from the key after the last one deleted: a rewind
// walked every row deleted before it again, tombstones until a compaction
// drops them, and closing a page after 27,000 SQLite transactions took
// 38 s.
func (p *Page) DeleteTransient() (int, error) {
	prefix := []byte(StatusPrefix(Transient))
	from := prefix
	total := 0
	for {
		var ds []cas.Digest
		err := p.view(func(txn *badger.Txn) error {
			it := txn.NewIterator(badger.IteratorOptions{Prefix: prefix})
			defer it.Close()
			for it.Seek(from); it.Valid() && len(ds) < 2000; it.Next() {
				ds = append(ds, cas.Digest(it.Item().Key()[len(prefix):]))
			}
			return nil
		})
		if err != nil || len(ds) == 0 {
			return total, err
		}
		err = batched(p.db, len(ds), func(txn *badger.Txn, i int) error {
			if err := txn.Delete(statusKey(Transient, ds[i])); err != nil {
				return err
			}
			return txn.Delete(objectKey(ds[i]))
		})
		if err != nil {
			return total, fmt.Errorf("store: delete transient pieces: %w", err)
		}
		total += len(ds)
		from = append(statusKey(Transient, ds[len(ds)-1]), 0)
	}
}

// CommitIDs calls fn with the id of every stored commit whose id starts
// with the bytes of prefix, in id order; it reads keys only. The first
// commit has no row and is not among them.
func (p *Page) CommitIDs(prefix []byte, fn func(CommitID) error) error {
	return p.commitRows(prefix, false, func(id CommitID, _ *badger.Item) error { return fn(id) })
}

// Commits calls fn with every stored commit, in id order: a scan of the
// commit rows, where reading each commit by id from the heads costs a
// lookup per commit (a history of 20,000 commits: 4 times as long).
func (p *Page) Commits(fn func(*Commit) error) error {
	return p.commitRows(nil, true, func(id CommitID, item *badger.Item) error {
		var c *Commit
		err := item.Value(func(v []byte) error {
			var err error
			c, err = DecodeCommit(id, bytes.Clone(v))
			return err
		})
		if err != nil {
			return err
		}
		return fn(c)
	})
}

// commitRows calls fn with the id and row of every commit whose id starts
// with prefix, in id order; values says whether fn reads the rows' values.
func (p *Page) commitRows(prefix []byte, values bool, fn func(CommitID, *badger.Item) error) error {
	return p.view(func(txn *badger.Txn) error {
		it := txn.NewIterator(badger.IteratorOptions{Prefix: append([]byte(PrefixCommits), prefix...), PrefetchValues: values})
		defer it.Close()
		for it.Rewind(); it.Valid(); it.Next() {
			k := it.Item().Key()[len(PrefixCommits):]
			var id CommitID
			if len(k) != len(id) {
				return fmt.Errorf("store: malformed commit row %q", it.Item().Key())
			}
			copy(id[:], k)
			if err := fn(id, it.Item()); err != nil {
				return err
			}
		}
		return nil
	})
}

// deletePrefix deletes every row with the prefix, in bounded transactions.
func (p *Page) deletePrefix(prefix []byte) error {
	for {
		var keys [][]byte
		err := p.view(func(txn *badger.Txn) error {
			it := txn.NewIterator(badger.IteratorOptions{Prefix: prefix})
			defer it.Close()
			for it.Rewind(); it.Valid() && len(keys) < 5000; it.Next() {
				keys = append(keys, it.Item().KeyCopy(nil))
			}
			return nil
		})
		if err != nil || len(keys) == 0 {
			return err
		}
		if err := batched(p.db, len(keys), func(txn *badger.Txn, i int) error {
			return txn.Delete(keys[i])
		}); err != nil {
			return fmt.Errorf("store: delete rows %q: %w", prefix, err)
		}
	}
}
