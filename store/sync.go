package store

import (
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"strings"

	"github.com/dgraph-io/badger/v4"

	"github.com/ledgerfs/ledgerfs/cas"
)

// Rows of the repository db that sync keeps: the device id, and under
// prefixSync what the sync machinery asks to keep (positions in other
// devices' logs, where remote pieces are).
const (
	keyDevice  = "repository/device_id"
	prefixSync = "sync/"
)

// DeviceID returns the repository's device id, made (16 random bytes, in
// hex) and kept the first time it is asked for: the name of this copy of
// the pages among the devices that share a remote.
func (r *Repository) DeviceID() (string, error) {
	var id string
	err := r.db.Update(func(txn *badger.Txn) error {
		it, err := txn.Get([]byte(keyDevice))
		if err == nil {
			return it.Value(func(v []byte) error {
				id = string(v)
				return nil
			})
		}
		if !errors.Is(err, badger.ErrKeyNotFound) {
			return err
		}
		var b [16]byte
		rand.Read(b[:])
		id = hex.EncodeToString(b[:])
		return txn.Set([]byte(keyDevice), []byte(id))
	})
	if err != nil {
		return "", fmt.Errorf("store: device id: %w", err)
	}
	return id, nil
}

// SetDeviceID gives a repository that has no device id yet the id given
// (32 hex digits) instead of a random one: the sync simulation names its
// devices from its seed, as every object a device writes is named after
// it. An id set already is kept, and a different one is an error.
func (r *Repository) SetDeviceID(id string) error {
	if b, err := hex.DecodeString(id); err != nil || len(b) != 16 {
		return fmt.Errorf("store: device id %q: not 32 hex digits", id)
	}
	return r.db.Update(func(txn *badger.Txn) error {
		it, err := txn.Get([]byte(keyDevice))
		if errors.Is(err, badger.ErrKeyNotFound) {
			return txn.Set([]byte(keyDevice), []byte(id))
		}
		if err != nil {
			return err
		}
		return it.Value(func(v []byte) error {
			if string(v) != id {
				return fmt.Errorf("store: the repository's device id is %s already", v)
			}
			return nil
		})
	})
}

// SyncState returns the value the sync machinery kept at key.
func (r *Repository) SyncState(key string) ([]byte, bool, error) {
	return getRow(r.db.View, []byte(prefixSync+key))
}

// getRow reads the row at key through view; found is false for none.
func getRow(view func(func(*badger.Txn) error) error, key []byte) (v []byte, found bool, err error) {
	err = view(func(txn *badger.Txn) error {
		it, err := txn.Get(key)
		if err != nil {
			return err
		}
		v, err = it.ValueCopy(nil)
		return err
	})
	if errors.Is(err, badger.ErrKeyNotFound) {
		return nil, false, nil
	}
	return v, err == nil, err
}

// SetSyncState keeps values at keys, and deletes the keys whose value is
// nil, in one transaction (batches of it for many).
func (r *Repository) SetSyncState(kv map[string][]byte) error {
	keys := make([]string, 0, len(kv))
	for k := range kv {
		keys = append(keys, k)
	}
	return batched(r.db, len(keys), func(txn *badger.Txn, i int) error {
		key, v := []byte(prefixSync+keys[i]), kv[keys[i]]
		if v == nil {
			return txn.Delete(key)
		}
		return txn.Set(key, v)
	})
}

// DeleteSyncState deletes the values kept at keys.
func (r *Repository) DeleteSyncState(keys []string) error {
	return batched(r.db, len(keys), func(txn *badger.Txn, i int) error {
		return txn.Delete([]byte(prefixSync + keys[i]))
	})
}

// ScanSyncState calls fn with each key under prefix that the sync
// machinery kept (as SyncState names it), and its value, in key order.
func (r *Repository) ScanSyncState(prefix string, fn func(key string, v []byte) error) error {
	return scanRows(r.db.View, prefixSync, prefix, fn)
}

// ScanSyncStateAfter is ScanSyncState from the first key after after, for
// a long scan read in runs, each in a transaction of its own.
func (r *Repository) ScanSyncStateAfter(prefix, after string, fn func(key string, v []byte) error) error {
	return scanRowsAfter(r.db.View, prefixSync, prefix, after, fn)
}

// ScanSyncMetadata calls fn with each of the page's sync_metadata rows
// under prefix (keys as SyncMetadata names them), in key order.
func (p *Page) ScanSyncMetadata(prefix string, fn func(key string, v []byte) error) error {
	return scanRows(p.view, PrefixSyncMetadata, prefix, fn)
}

// scanRows calls fn with each row under base+prefix, its key without base,
// in key order.
func scanRows(view func(func(*badger.Txn) error) error, base, prefix string, fn func(key string, v []byte) error) error {
	return scanRowsAfter(view, base, prefix, "", fn)
}

// scanRowsAfter is scanRows from the first key after after ("": all).
func scanRowsAfter(view func(func(*badger.Txn) error) error, base, prefix, after string, fn func(key string, v []byte) error) error {
	return view(func(txn *badger.Txn) error {
		it := txn.NewIterator(badger.IteratorOptions{Prefix: []byte(base + prefix), PrefetchValues: true, PrefetchSize: 64})
		defer it.Close()
		if after == "" {
			it.Rewind()
		} else {
			it.Seek([]byte(base + after + "\x00"))
		}
		for ; it.Valid(); it.Next() {
			item := it.Item()
			v, err := item.ValueCopy(nil)
			if err != nil {
				return err
			}
			if err := fn(string(item.Key()[len(base):]), v); err != nil {
				return err
			}
		}
		return nil
	})
}

// SyncMetadata returns the page's sync_metadata row at key.
func (p *Page) SyncMetadata(key string) ([]byte, bool, error) {
	return getRow(p.view, []byte(PrefixSyncMetadata+key))
}

// MarkSynced records that pieces and commits are in the remote store:
// the pieces' status rows move to synced (a piece this page no longer
// holds is skipped), then the commits' unsynced rows go, and the page's
// sync_metadata rows meta are set with the last of them. Each step may be
// repeated after a crash.
func (p *Page) MarkSynced(pieces []cas.Digest, commits []CommitID, meta map[string][]byte) error {
	if err := p.check(); err != nil {
		return err
	}
	err := batched(p.db, len(pieces), func(txn *badger.Txn, i int) error {
		d := pieces[i]
		if _, err := txn.Get(objectKey(d)); errors.Is(err, badger.ErrKeyNotFound) {
			return nil
		} else if err != nil {
			return err
		}
		for _, s := range []PieceStatus{Transient, Local} {
			if err := txn.Delete(statusKey(s, d)); err != nil {
				return err
			}
		}
		return txn.Set(statusKey(Synced, d), nil)
	})
	if err != nil {
		return fmt.Errorf("store: mark pieces synced: %w", err)
	}
	// A page's first push can take tens of thousands of commits, more
	// deletes than one transaction holds; the metadata, which says the
	// push is done, comes after them all.
	err = batched(p.db, len(commits), func(txn *badger.Txn, i int) error {
		return txn.Delete(unsyncedCommitKey(commits[i]))
	})
	if err == nil {
		err = p.update(func(txn *badger.Txn) error {
			for k, v := range meta {
				if err := txn.Set([]byte(PrefixSyncMetadata+k), v); err != nil {
					return err
				}
			}
			return nil
		})
	}
	if err != nil {
		return fmt.Errorf("store: mark commits synced: %w", err)
	}
	return nil
}

// Adopt lands commits fetched from the remote store, whose pieces the page
// holds: their rows (synced: no unsynced rows), then, if head is not nil,
// merge's rows (a commit of this device: unsynced) and head as the page's
// only head, in one db transaction; or, when that is more than Badger's
// transaction holds, with every commit row but the last written first.
func (p *Page) Adopt(remote []*Commit, merge, head *Commit) error {
	return p.adopt(remote, false, merge, head)
}

// Take lands commits copied from another page of this repository, whose
// pieces the page holds, as Adopt lands a batch's, but unsynced: they go up
// with the page's next push, as its own commits do, for the devices that
// know them only under the other page's name.
func (p *Page) Take(commits []*Commit, merge, head *Commit) error {
	return p.adopt(commits, true, merge, head)
}

func (p *Page) adopt(commits []*Commit, unsynced bool, merge, head *Commit) error {
	if err := p.check(); err != nil {
		return err
	}
	if head != nil && !p.dur.Empty() {
		// A record in the sync log replays its change over the head
		// after a crash: over a remote change of the same entry, which
		// it would undo. The checkpoint drops them (the db holds their
		// changes); with the page's lock held (cloudsync holds it), no
		// commit lands meanwhile that a promotion could record.
		if err := p.dur.Checkpoint(); err != nil {
			return fmt.Errorf("store: adopt commits: %w", err)
		}
	}
	old, err := p.headsReplaced(head)
	if err != nil {
		return err
	}
	land := func(rows []*Commit) error {
		return p.update(func(txn *badger.Txn) error {
			if err := setCommits(txn, rows, unsynced); err != nil {
				return err
			}
			if merge != nil {
				if err := setCommits(txn, []*Commit{merge}, true); err != nil {
					return err
				}
			}
			return replaceHeads(txn, old, head)
		})
	}
	err = land(commits)
	if errors.Is(err, badger.ErrTxnTooBig) && len(commits) > 1 {
		// A first pull can bring a page's whole history, more rows than
		// one transaction holds. All but the last commit are written
		// ahead, in as many transactions as they need; the last lands
		// with the head. A crash between leaves that one missing, so
		// the pull finds it fresh again and lands the batch anew
		// (cloudsync's applyPage): the head never moves without it.
		ahead := commits[:len(commits)-1]
		err = batched(p.db, len(ahead), func(txn *badger.Txn, i int) error {
			return setCommits(txn, ahead[i:i+1], unsynced)
		})
		if err == nil {
			err = land(commits[len(ahead):])
		}
	}
	if err != nil {
		return fmt.Errorf("store: adopt commits: %w", err)
	}
	if head != nil {
		p.setHeads([]*Commit{head})
	}
	return nil
}

// HasCommit reports whether the page holds the commit id.
func (p *Page) HasCommit(id CommitID) (bool, error) {
	if id == FirstCommitID {
		return true, nil
	}
	err := p.view(func(txn *badger.Txn) error {
		_, err := txn.Get(commitKey(id))
		return err
	})
	if errors.Is(err, badger.ErrKeyNotFound) {
		return false, nil
	}
	return err == nil, err
}

// The repository's remote settings (ledgerfs config): the remote store's
// URL, the S3 endpoint and region to reach it with, and what a pull
// fetches.
const (
	SettingRemote         = "remote"
	SettingRemoteEndpoint = "remote-endpoint"
	SettingRemoteRegion   = "remote-region"
	// SettingFetch is "all" for a repository whose pulls fetch every
	// value; else values are fetched when read.
	SettingFetch = "fetch"
)

// settingKey is the repository db row of a remote setting.
func settingKey(name string) []byte { return []byte("repository/" + name) }

// Setting returns the repository's remote setting name ("" if unset).
func (r *Repository) Setting(name string) (string, error) {
	v, _, err := getRow(r.db.View, settingKey(name))
	return string(v), err
}

// SetSetting sets the repository's remote setting name; "" removes it.
func (r *Repository) SetSetting(name, v string) error {
	return r.db.Update(func(txn *badger.Txn) error {
		if v == "" {
			return txn.Delete(settingKey(name))
		}
		return txn.Set(settingKey(name), []byte(v))
	})
}

// Syncs reports whether the repository shares its pages through a remote:
// one is set, or it has synced (it has a device id). Its collections then
// keep every commit not yet synced, and the pieces those reach.
func (r *Repository) Syncs() (bool, error) {
	if v, err := r.Setting(SettingRemote); err != nil || v != "" {
		return v != "", err
	}
	err := r.db.View(func(txn *badger.Txn) error {
		_, err := txn.Get([]byte(keyDevice))
		return err
	})
	if errors.Is(err, badger.ErrKeyNotFound) {
		return false, nil
	}
	return err == nil, err
}

// PiecesSize counts the pieces of status s and the bytes they take stored.
func (p *Page) PiecesSize(s PieceStatus) (n int, bytes int64, err error) {
	prefix := []byte(StatusPrefix(s))
	err = p.view(func(txn *badger.Txn) error {
		it := txn.NewIterator(badger.IteratorOptions{Prefix: prefix})
		defer it.Close()
		for it.Rewind(); it.Valid(); it.Next() {
			d := it.Item().Key()[len(prefix):]
			obj, err := txn.Get(objectKey(cas.Digest(d)))
			if errors.Is(err, badger.ErrKeyNotFound) {
				continue
			}
			if err != nil {
				return err
			}
			n++
			bytes += obj.ValueSize()
		}
		return nil
	})
	return n, bytes, err
}

// A BatchHead is the head of one device's batch of a page: one that
// landed here, or, for this device, that it pushed. A device's head of a
// page only moves forward, so it is an ancestor of the heads of that
// device's later batches, and of those of every device that had applied
// the batch: the base of a merge with them even when a collection pruned
// the commits between (cloudsync's knownEdges). A page keeps them per
// device and incarnation (a page here may hold two that a device still
// keeps apart, as two pages whose batches it sends apart), the last and
// the older ones another device's next batch may still build on
// (DropBatchHeads). A page that syncs keeps these commits whatever its
// retention policy (gc).
type BatchHead struct {
	Seq  uint64   `json:"seq"`
	Head CommitID `json:"head"`
	// Inc are the page's incarnations in the batch: the head serves a
	// later batch only if that holds one of them, a batch of the same
	// page.
	Inc []string `json:"inc,omitempty"`
	// Applied is the batch's: per other device, the last batch of its
	// log its writer had applied, so whose heads are ancestors of Head.
	Applied map[string]uint64 `json:"applied,omitempty"`
}

// batchHeadPrefix (+ device "/" incarnation "/" batch number, 16 hex
// digits) is a page's sync_metadata row holding that device's BatchHead of
// that batch, which held that incarnation (JSON). Rows of builds before
// there were several a device end at the incarnation.
const batchHeadPrefix = "headof/"

// BatchHeadRow returns the sync_metadata rows (for MarkSynced) that make h
// device's BatchHead of the page, for each of its incarnations.
func BatchHeadRow(device string, h BatchHead) (map[string][]byte, error) {
	v, err := json.Marshal(h)
	if err != nil {
		return nil, err
	}
	rows := map[string][]byte{}
	seq := fmt.Sprintf("/%016x", h.Seq)
	for _, inc := range h.Inc {
		rows[batchHeadPrefix+device+"/"+inc+seq] = v
	}
	if len(h.Inc) == 0 {
		rows[batchHeadPrefix+device+"/"+seq] = v // a batch of a build before incarnations
	}
	return rows, nil
}

// DropBatchHeads deletes the page's BatchHead rows that drop selects, given
// each one's device and the incarnation of its row.
func (p *Page) DropBatchHeads(drop func(device, inc string, h BatchHead) bool) error {
	if err := p.check(); err != nil {
		return err
	}
	var keys []string
	err := p.scanBatchHeads(func(key, dev, inc string, h BatchHead) error {
		if drop(dev, inc, h) {
			keys = append(keys, key)
		}
		return nil
	})
	if err != nil || len(keys) == 0 {
		return err
	}
	err = p.update(func(txn *badger.Txn) error {
		for _, k := range keys {
			if err := txn.Delete([]byte(PrefixSyncMetadata + k)); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("store: drop batch heads: %w", err)
	}
	return nil
}

// BatchHeads calls fn with each device's BatchHeads of the page.
func (p *Page) BatchHeads(fn func(device string, h BatchHead) error) error {
	return p.BatchHeadRows(func(device, _ string, h BatchHead) error { return fn(device, h) })
}

// BatchHeadRows calls fn with each row of the page's BatchHeads: its
// device, the incarnation the row is of, and the BatchHead.
func (p *Page) BatchHeadRows(fn func(device, inc string, h BatchHead) error) error {
	return p.scanBatchHeads(func(_, device, inc string, h BatchHead) error { return fn(device, inc, h) })
}

// scanBatchHeads calls fn with each BatchHead row's sync_metadata key, its
// device and incarnation, and the BatchHead.
func (p *Page) scanBatchHeads(fn func(key, device, inc string, h BatchHead) error) error {
	return p.ScanSyncMetadata(batchHeadPrefix, func(key string, v []byte) error {
		var h BatchHead
		if err := json.Unmarshal(v, &h); err != nil {
			return fmt.Errorf("page %s/%s: row %s: %w", p.Ledger, p.Name, key, err)
		}
		dev, rest, _ := strings.Cut(strings.TrimPrefix(key, batchHeadPrefix), "/")
		inc, _, _ := strings.Cut(rest, "/")
		return fn(key, dev, inc, h)
	})
}
