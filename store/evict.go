package store

import (
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"syscall"

	"github.com/dgraph-io/badger/v4"

	"github.com/ledgerfs/ledgerfs/cas"
)

// prefixEvicted rows of the repository db hold, for each page evicted
// from the device, the CommitStorage bytes of its head:
// evicted/{ledger}{page id} → the head. The page's db is gone; it comes
// back, its history starting at that head, when next opened.
const prefixEvicted = "evicted/"

func evictedKey(ledger string, id PageID) []byte {
	return append([]byte(prefixEvicted+ledger), id[:]...)
}

// ErrNotEvictable reports a page that cannot leave the device: it has
// changes not synced, a journal or a sync log, pins, or no synced head.
var ErrNotEvictable = errors.New("store: the page holds what is not in the remote")

// Evicted reports whether the page was evicted and has not come back.
func (r *Repository) Evicted(ledger, page string) (bool, error) {
	_, ok, err := getRow(r.db.View, evictedKey(ledger, PageIDFor(page)))
	return ok, err
}

// Evict removes a closed page's db from the device, keeping its name and
// its head: it comes back when next opened (Acquire), with its history
// starting at that head and its contents fetched when read. Only a page
// whose every commit and piece is synced, with no journal, sync log or
// pin, and no open file, is evicted: ErrBusy, ErrNotEvictable otherwise.
// It returns the bytes the db held.
func (r *Repository) Evict(ledger, page string) (int64, error) {
	key := ledger + "/" + page
	id := PageIDFor(page)
	if ok, err := r.HasPage(ledger, page); err != nil || !ok {
		if err == nil {
			err = fmt.Errorf("page %s/%s: %w", ledger, page, ErrNotFound)
		}
		return 0, err
	}
	if ev, err := r.Evicted(ledger, page); err != nil || ev {
		return 0, err
	}
	release, err := r.seize(ledger, page)
	if err != nil {
		return 0, err
	}
	defer release()

	p, err := r.newPage(ledger, page, id, false)
	if err != nil {
		return 0, fmt.Errorf("evict %s/%s: %w", ledger, page, err)
	}
	head, why, err := p.evictable()
	if cerr := p.db.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return 0, fmt.Errorf("evict %s/%s: %w", ledger, page, err)
	}
	if why != "" {
		return 0, fmt.Errorf("evict %s/%s: %s: %w", ledger, page, why, ErrNotEvictable)
	}
	dir := r.pageDir(ledger, id)
	size := DiskUsage(dir)
	if err := r.db.Update(func(txn *badger.Txn) error {
		return txn.Set(evictedKey(ledger, id), head.Bytes)
	}); err != nil {
		return 0, fmt.Errorf("evict %s/%s: %w", ledger, page, err)
	}
	if err := r.db.Sync(); err != nil {
		return 0, err
	}
	// A crash from here leaves part of the db, which the next open
	// removes before it brings the page back.
	if err := os.RemoveAll(dir); err != nil {
		return 0, fmt.Errorf("evict %s/%s: %w", ledger, page, err)
	}
	slog.Info("page evicted: its contents are in the remote", "page", key, "bytes", size)
	return size, nil
}

// evictable returns the page's head if it may leave the device, or why
// not.
func (p *Page) evictable() (*Commit, string, error) {
	if p.dur.needsReplay() {
		return nil, "its sync log holds changes", nil
	}
	for _, c := range []struct {
		prefix, why string
	}{
		{PrefixJournals, "a journal is open"},
		{StatusPrefix(Transient), "pieces are being written"},
		{StatusPrefix(Local), "pieces are not synced"},
		{PrefixUnsyncedCommits, "commits are not synced"},
	} {
		if found, err := p.hasAny(c.prefix); err != nil || found {
			return nil, c.why, err
		}
	}
	if kept, err := p.LocalPrefixes(); err != nil || len(kept) > 0 {
		return nil, "it is pinned", err
	}
	heads, err := p.Heads()
	if err != nil {
		return nil, "", err
	}
	if len(heads) != 1 || heads[0].ID == FirstCommitID {
		return nil, "it has no synced head", nil
	}
	return heads[0], "", nil
}

// comeBack makes the db of an evicted page anew, with its head, before it
// is opened: what an eviction cut short left is removed first. Its tree
// and contents are fetched when read.
func (r *Repository) comeBack(ledger, page string, id PageID) error {
	b, ok, err := getRow(r.db.View, evictedKey(ledger, id))
	if err != nil || !ok {
		return err
	}
	if r.opts.ReadOnly {
		return fmt.Errorf("page %s/%s was evicted: open the repository for changes (a mount) to bring it back: %w", ledger, page, ErrRemoteOnly)
	}
	head, err := DecodeCommit(CommitID(cas.Hash(b)), b)
	if err != nil {
		return fmt.Errorf("page %s/%s: its evicted head: %w", ledger, page, err)
	}
	dir := r.pageDir(ledger, id)
	if err := os.RemoveAll(dir); err != nil {
		return err
	}
	p, err := r.newPage(ledger, page, id, false)
	if err != nil {
		return err
	}
	err = p.update(func(txn *badger.Txn) error {
		if err := setCommits(txn, []*Commit{head}, false); err != nil {
			return err
		}
		return txn.Set(headKey(head.ID), EncodeUint64(uint64(head.Timestamp)))
	})
	if err == nil {
		err = p.db.Sync()
	}
	if cerr := p.db.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return fmt.Errorf("bring page %s/%s back: %w", ledger, page, err)
	}
	if err := r.db.Update(func(txn *badger.Txn) error { return txn.Delete(evictedKey(ledger, id)) }); err != nil {
		return err
	}
	slog.Info("evicted page comes back: its tree and contents are fetched from the remote as they are read", "page", ledger+"/"+page, "head", head.ID)
	return nil
}

// DiskUsage is what du counts under dir: allocated blocks, in bytes (not
// file sizes: Badger's value logs are sparse until written).
func DiskUsage(dir string) int64 {
	var n int64
	filepath.WalkDir(dir, func(_ string, d fs.DirEntry, err error) error {
		if err != nil {
			return nil
		}
		if info, err := d.Info(); err == nil {
			if st, ok := info.Sys().(*syscall.Stat_t); ok {
				n += st.Blocks * 512
			}
		}
		return nil
	})
	return n
}

// DiskUsage is the disk space the repository's directory takes.
func (r *Repository) DiskUsage() int64 { return DiskUsage(r.dir) }
