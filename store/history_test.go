package store

import (
	"testing"

	"github.com/dgraph-io/badger/v4"

	"github.com/ledgerfs/ledgerfs/internal/btree"
)

// TestDeletedHistory checks that a page deleted in a repository that syncs
// leaves its synced commits and their makers under its incarnation, not
// its unsynced ones (the remote never had their pieces), that commits can
// be added to what is kept and dropped, and that a repository that does not
// sync keeps nothing.
func TestDeletedHistory(t *testing.T) {
	for _, syncs := range []bool{true, false} {
		r := openRepo(t, t.TempDir(), Options{})
		must := fatalOn(t)
		if syncs {
			must(r.SetDeviceID("0123456789abcdef0123456789abcdef"))
		}
		p := newPage(t, r)
		var chain []*Commit
		parent := FirstCommit()
		for i := range 4 {
			c, err := NewCommit(int64(i+1), btree.EmptyRoot, parent)
			must(err)
			chain, parent = append(chain, c), c
		}
		must(p.Adopt(chain, nil, chain[3]))
		must(p.MarkSynced(nil, nil, map[string][]byte{MadeByKey(chain[1].ID): []byte("other")}))
		// The newest is this device's, not pushed yet.
		must(p.db.Update(func(txn *badger.Txn) error {
			return txn.Set(unsyncedCommitKey(chain[3].ID), EncodeUint64(4))
		}))
		n, _, err := r.PageNaming("l", "p")
		must(err)
		r.Release(p)
		must(r.DeletePage("l", "p"))

		kept, err := r.DeletedHistory(n.IDs)
		must(err)
		if !syncs {
			if len(kept) != 0 {
				t.Fatalf("a repository that does not sync kept %d commits of a deleted page", len(kept))
			}
			r.Close()
			continue
		}
		if len(kept) != 3 {
			t.Fatalf("kept %d commits of the deleted page, want its 3 synced ones", len(kept))
		}
		for i, c := range chain[:3] {
			m, ok := kept[c.ID]
			want := ""
			if i == 1 {
				want = "other"
			}
			if !ok || m.By != want || m.Commit.Generation != c.Generation {
				t.Fatalf("commit %d kept as %+v (%v), want made by %q", i, m, ok, want)
			}
		}
		if _, ok := kept[chain[3].ID]; ok {
			t.Fatal("an unsynced commit was kept")
		}

		more, err := NewCommit(9, btree.EmptyRoot, chain[2])
		must(err)
		must(r.AddDeletedHistory(n.IDs, []Made{{Commit: more, By: "third"}, {Commit: chain[0], By: "ignored"}}))
		kept, err = r.DeletedHistory(n.IDs)
		must(err)
		if len(kept) != 4 || kept[more.ID].By != "third" || kept[chain[0].ID].By != "" {
			t.Fatalf("after adding: %d kept, %+v, %+v", len(kept), kept[more.ID], kept[chain[0].ID])
		}
		must(r.DropDeletedHistory(n.IDs))
		if kept, err = r.DeletedHistory(n.IDs); err != nil || len(kept) != 0 {
			t.Fatalf("after dropping: %d kept, %v", len(kept), err)
		}
		r.Close()
	}
}
