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

// TestDeletedHistoryAddsUp: a page deleted here keeps its history under
// its incarnation; a page that came to hold that incarnation too (another
// device joined the two) and is deleted later adds its own history to it,
// and the first page's commits, and who made them, stay (the simulation's
// seed 991 of -sim.pages: the second delete replaced the first's, and a
// conflict file was named after the device that merged its version).
func TestDeletedHistoryAddsUp(t *testing.T) {
	r := openRepo(t, t.TempDir(), Options{})
	defer r.Close()
	must := fatalOn(t)
	must(r.SetDeviceID("0123456789abcdef0123456789abcdef"))
	chain := func(p *Page, from int64, by string) []*Commit {
		var cs []*Commit
		parent := FirstCommit()
		for i := range int64(2) {
			c, err := NewCommit(from+i, btree.EmptyRoot, parent)
			must(err)
			cs, parent = append(cs, c), c
		}
		must(p.Adopt(cs, nil, cs[1]))
		must(p.MarkSynced(nil, nil, map[string][]byte{MadeByKey(cs[0].ID): []byte(by)}))
		return cs
	}
	p := newPage(t, r)
	first := chain(p, 1, "other")
	n, _, err := r.PageNaming("l", "p")
	must(err)
	r.Release(p)
	must(r.DeletePage("l", "p"))

	must(r.CreatePage("l", "q"))
	q, err := r.Acquire("l", "q")
	must(err)
	second := chain(q, 10, "third")
	qn, _, err := r.PageNaming("l", "q")
	must(err)
	must(r.SetPageNaming("l", "q", qn.Union(n)))
	r.Release(q)
	must(r.DeletePage("l", "q"))

	kept, err := r.DeletedHistory(n.IDs)
	must(err)
	if len(kept) != 4 {
		t.Fatalf("kept %d commits under the first page's incarnation, want its 2 and the second page's 2", len(kept))
	}
	for _, c := range append(first, second...) {
		if _, ok := kept[c.ID]; !ok {
			t.Fatalf("commit %x is not kept", c.ID[:4])
		}
	}
	if kept[first[0].ID].By != "other" || kept[second[0].ID].By != "third" {
		t.Fatalf("makers kept: %q and %q, want other and third", kept[first[0].ID].By, kept[second[0].ID].By)
	}
}
