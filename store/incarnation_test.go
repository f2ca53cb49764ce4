package store

import (
	"slices"
	"testing"
	"time"

	"pgregory.net/rapid"
)

// TestIncarnationFollowsThePage checks that a page's incarnation is made
// with it, goes with its renames, moves and its ledger's renames, is
// carried by the name changes recorded for the remote, and, once the page
// is deleted, still says where it was last named and what the delete saw.
func TestIncarnationFollowsThePage(t *testing.T) {
	clock := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	now := func() time.Time { clock = clock.Add(time.Second); return clock }
	r := openRepo(t, t.TempDir(), Options{Now: now})
	defer r.Close()
	must := fatalOn(t)
	must(r.SetDeviceID("0123456789abcdef0123456789abcdef")) // records name changes
	must(r.CreateLedger("l"))
	must(r.CreateLedger("m"))
	must(r.CreatePage("l", "p"))
	n, ok, err := r.PageNaming("l", "p")
	must(err)
	if !ok || len(n.IDs) != 1 || n.At.Renamed || n.At.Time.IsZero() {
		t.Fatalf("a new page's naming: %+v, %v", n, ok)
	}
	id := n.IDs[0]
	at := func(wantL, wantP string) {
		t.Helper()
		l, p, ok, err := r.FindIncarnation(id)
		must(err)
		if !ok || l != wantL || p != wantP {
			t.Fatalf("incarnation at %s/%s (%v), want %s/%s", l, p, ok, wantL, wantP)
		}
	}
	at("l", "p")

	must(r.RenamePage("l", "p", "q"))
	at("l", "q")
	renamed, _, err := r.PageNaming("l", "q")
	must(err)
	if !renamed.At.Renamed || !renamed.At.After(n.At) || !slices.Equal(renamed.IDs, n.IDs) {
		t.Fatalf("renamed page's naming %+v, made as %+v", renamed, n)
	}
	must(r.MovePage("l", "q", "m", "q"))
	at("m", "q")
	must(r.RenameLedger("m", "k"))
	at("k", "q")
	if _, ok, err := r.PageNaming("m", "q"); err != nil || ok {
		t.Fatalf("a naming left at the old name: %v, %v", ok, err)
	}

	// Every recorded change of the page names its incarnation.
	_, changes, err := r.NameChanges()
	must(err)
	for _, c := range changes {
		if c.Op == NameCreatePage || c.Op == NameRenamePage {
			if !slices.Equal(c.Incarnations, []string{id.String()}) {
				t.Fatalf("%s carries %v, want %s", c.Op, c.Incarnations, id)
			}
		}
	}

	must(r.DeletePage("k", "q"))
	if _, _, ok, err := r.FindIncarnation(id); err != nil || ok {
		t.Fatalf("a deleted page's incarnation found: %v, %v", ok, err)
	}
	gone, ok, err := r.IncarnationNamed(id)
	must(err)
	if !ok || gone.Live || !gone.Deleted || gone.Ledger != "k" || gone.Page != "q" {
		t.Fatalf("after the delete: %+v, %v", gone, ok)
	}
	_, changes, err = r.NameChanges()
	must(err)
	del := changes[len(changes)-1]
	if del.Op != NameDeletePage || !slices.Equal(del.Incarnations, []string{id.String()}) || len(gone.Seen) != len(del.Seen) {
		t.Fatalf("delete %+v, tombstone %+v", del, gone)
	}

	// A later naming of it elsewhere is noted; an earlier one is not.
	must(r.NoteIncarnationNamed(id, "x", "y", NamedAt{Time: clock.Add(time.Hour), Renamed: true}))
	must(r.NoteIncarnationNamed(id, "old", "name", NamedAt{Time: clock.Add(-time.Hour), Renamed: true}))
	noted, _, err := r.IncarnationNamed(id)
	must(err)
	if noted.Ledger != "x" || noted.Page != "y" || !noted.Deleted {
		t.Fatalf("noted %+v", noted)
	}
}

// TestNamedAtOrder checks the order of namings every device applies: a
// rename wins over a create whatever their times, and of two of a kind the
// later.
func TestNamedAtOrder(t *testing.T) {
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	create, laterCreate := NamedAt{Time: t0}, NamedAt{Time: t0.Add(time.Second)}
	rename := NamedAt{Time: t0.Add(-time.Hour), Renamed: true}
	switch {
	case !laterCreate.After(create) || create.After(laterCreate):
		t.Fatal("of two creates the later does not win")
	case !rename.After(laterCreate) || laterCreate.After(rename):
		t.Fatal("an earlier rename does not win over a create")
	case create.After(create):
		t.Fatal("a naming wins over itself")
	}
	u := Naming{At: create}.Union(Naming{At: rename})
	if u.At != rename {
		t.Fatalf("union named at %+v, want the rename's", u.At)
	}
}

// TestNamingRowsRoundTrip checks the encodings of the naming and
// incarnation rows.
func TestNamingRowsRoundTrip(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		at := NamedAt{Renamed: rapid.Bool().Draw(t, "renamed")}
		if ns := rapid.Int64Range(0, 1<<62).Draw(t, "ns"); ns != 0 {
			at.Time = time.Unix(0, ns).UTC()
		}
		var ids []Incarnation
		for range rapid.IntRange(0, 4).Draw(t, "ids") {
			ids = append(ids, Incarnation(rapid.SliceOfN(rapid.Byte(), 16, 16).Draw(t, "id")))
		}
		n := Naming{IDs: ids, At: at}
		got, err := decodeNaming(encodeNaming(n))
		if err != nil || got.At != n.At || !slices.Equal(got.IDs, n.IDs) {
			t.Fatalf("naming %+v came back as %+v (%v)", n, got, err)
		}
		named := Named{
			Ledger:  rapid.StringMatching(`[^/\x00]{1,20}`).Draw(t, "ledger"),
			Page:    rapid.StringMatching(`[^/\x00]{1,20}`).Draw(t, "page"),
			At:      at,
			Live:    rapid.Bool().Draw(t, "live"),
			Deleted: rapid.Bool().Draw(t, "deleted"),
		}
		for range rapid.IntRange(0, 3).Draw(t, "seen") {
			named.Seen = append(named.Seen, CommitID(rapid.SliceOfN(rapid.Byte(), 32, 32).Draw(t, "commit")))
		}
		back, err := decodeNamed(encodeNamed(named))
		if err != nil || back.Ledger != named.Ledger || back.Page != named.Page || back.At != named.At ||
			back.Live != named.Live || back.Deleted != named.Deleted || !slices.Equal(back.Seen, named.Seen) {
			t.Fatalf("incarnation row %+v came back as %+v (%v)", named, back, err)
		}
	})
}
