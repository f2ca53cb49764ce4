package cloudsync

import (
	"context"
	"maps"
	"path"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/ledgerfs/ledgerfs/internal/remote"
	"github.com/ledgerfs/ledgerfs/journal"
	"github.com/ledgerfs/ledgerfs/store"
)

// names lists a device's ledger/page names, and its ledgers as "ledger/".
func (d *device) names() []string {
	d.t.Helper()
	ls, err := d.repo.Ledgers()
	must(d.t, err)
	var out []string
	for _, l := range ls {
		out = append(out, l+"/")
		ps, err := d.repo.Pages(l)
		must(d.t, err)
		for _, p := range ps {
			out = append(out, l+"/"+p)
		}
	}
	slices.Sort(out)
	return out
}

// round syncs each device in turn, twice: what one did reaches all.
func round(ds ...*device) {
	for range 2 {
		for _, d := range ds {
			d.sync()
		}
	}
}

// same fails unless the devices show the same names, heads and files.
func same(t *testing.T, ds ...*device) {
	t.Helper()
	a := ds[0]
	for _, d := range ds[1:] {
		if !slices.Equal(a.names(), d.names()) {
			t.Fatalf("names: %s has %v, %s %v", a.name, a.names(), d.name, d.names())
		}
		for _, lp := range a.pageNames() {
			if a.head(lp[0], lp[1]) != d.head(lp[0], lp[1]) || !maps.Equal(a.files(lp[0], lp[1]), d.files(lp[0], lp[1])) {
				t.Fatalf("page %s/%s differs: %s %v, %s %v", lp[0], lp[1], a.name, a.files(lp[0], lp[1]), d.name, d.files(lp[0], lp[1]))
			}
		}
	}
}

func (d *device) pageNames() [][2]string {
	d.t.Helper()
	ps, err := d.s.pages()
	must(d.t, err)
	return ps
}

// TestNamesSync: ledgers and pages made, renamed and deleted on one device
// are made, renamed and deleted on the other, empty ones included.
func TestNamesSync(t *testing.T) {
	be, err := remote.NewDir(t.TempDir())
	must(t, err)
	a, b := newDevice(t, "a", be), newDevice(t, "b", be)
	must(t, a.repo.CreateLedger("empty"))
	must(t, a.repo.CreateLedger("l"))
	must(t, a.repo.CreatePage("l", "blank"))
	a.write("l", "p", "f", []byte("content"))
	round(a, b)
	same(t, a, b)
	if !slices.Contains(b.names(), "empty/") || !slices.Contains(b.names(), "l/blank") {
		t.Fatalf("an empty ledger or page did not sync: %v", b.names())
	}

	must(t, a.repo.RenamePage("l", "p", "q"))
	a.write("l", "q", "g", []byte("after the rename"))
	must(t, a.repo.RenameLedger("l", "m"))
	must(t, a.repo.DeletePage("m", "blank"))
	must(t, a.repo.DeleteLedger("empty"))
	round(a, b)
	same(t, a, b)
	if want := []string{"m/", "m/q"}; !slices.Equal(b.names(), want) {
		t.Fatalf("b has %v after renames and deletes, want %v", b.names(), want)
	}
	if f := b.files("m", "q"); f["f"] != "content" || f["g"] != "after the rename" {
		t.Fatalf("the renamed page's entries on b: %v", f)
	}
}

// TestChangeBeatsPageDelete: a page deleted on one device while another
// changes files in it stays with what the other changed or made, and comes
// back so on the first; what the other left as the deleting device had
// seen it goes, as with a folder deleted while files in it change (a file
// deleted on the first before the page went stays deleted). A page
// deleted while the other only had what the first had seen goes on both.
func TestChangeBeatsPageDelete(t *testing.T) {
	be, err := remote.NewDir(t.TempDir())
	must(t, err)
	a, b := newDevice(t, "a", be), newDevice(t, "b", be)
	a.write("l", "kept", "f", []byte("v1"))
	a.write("l", "kept", "untouched", []byte("v1"))
	a.write("l", "kept", "deleted first", []byte("v1"))
	a.write("l", "gone", "f", []byte("v1"))
	round(a, b)
	b.write("l", "kept", "f", []byte("b's edit"))
	b.write("l", "kept", "new", []byte("b's new file"))
	a.write("l", "kept", "deleted first", nil)
	a.write("l", "gone", "f", []byte("a's last edit, never pushed"))
	must(t, a.repo.DeletePage("l", "kept"))
	must(t, a.repo.DeletePage("l", "gone"))
	a.sync()
	b.sync() // b lets "gone" go, keeps what it changed of "kept" and sends it whole
	a.sync() // a gets "kept" back
	same(t, a, b)
	if want := []string{"l/", "l/kept"}; !slices.Equal(a.names(), want) {
		t.Fatalf("a has %v, want %v", a.names(), want)
	}
	if got, want := a.files("l", "kept"), map[string]string{"f": "b's edit", "new": "b's new file"}; !maps.Equal(got, want) {
		t.Fatalf("the kept page on a holds %v, want %v", got, want)
	}

	// Changes that leave nothing (a delete of the one file the deleting
	// device had seen) leave the page, empty, on both: the batch that
	// holds them makes it again wherever it lands after the delete.
	a.write("l", "again", "f", []byte("v1"))
	round(a, b)
	b.write("l", "again", "f", nil)
	must(t, a.repo.DeletePage("l", "again"))
	a.sync()
	b.sync()
	a.sync()
	same(t, a, b)
	if got := a.files("l", "again"); len(got) != 0 {
		t.Fatalf("the page whose files both devices deleted holds %v", got)
	}
}

// TestRenameOntoPageMadeApart: a page renamed on one device to a name the
// other gave a page of its own meanwhile ends as one page holding both,
// and the old name goes on both.
func TestRenameOntoPageMadeApart(t *testing.T) {
	be, err := remote.NewDir(t.TempDir())
	must(t, err)
	a, b := newDevice(t, "a", be), newDevice(t, "b", be)
	a.write("l", "s", "from-s", []byte("s"))
	round(a, b)
	must(t, a.repo.RenamePage("l", "s", "t"))
	b.write("l", "t", "from-t", []byte("t"))
	round(a, b)
	same(t, a, b)
	if want := []string{"l/", "l/t"}; !slices.Equal(a.names(), want) {
		t.Fatalf("a has %v, want %v", a.names(), want)
	}
	if f := a.files("l", "t"); f["from-s"] != "s" || f["from-t"] != "t" {
		t.Fatalf("the merged page holds %v, want both sides' entries", f)
	}
}

// TestThreeWayConflictKeepsEveryLoser: one file written on three devices
// while apart, within one second, ends with the latest version and each
// other one in a conflict file named by the device that wrote it, on all
// three, whatever order the devices sync in (a version that loses inside
// another device's merge is not named by that device, where two losers
// would share a name).
func TestThreeWayConflictKeepsEveryLoser(t *testing.T) {
	orders := [][]int{{0, 1, 2}, {0, 2, 1}, {1, 0, 2}, {1, 2, 0}, {2, 0, 1}, {2, 1, 0}}
	for _, order := range orders {
		be, err := remote.NewDir(t.TempDir())
		must(t, err)
		ds := []*device{newDevice(t, "a", be), newDevice(t, "b", be), newDevice(t, "c", be)}
		ds[0].write("l", "p", "base", []byte("base"))
		round(ds...)
		second := time.Now().Truncate(time.Second)
		for i, d := range ds {
			d.writeAt("l", "p", "shared.txt", []byte(d.name+"'s"), second.Add(time.Duration(i)*time.Millisecond))
		}
		// All come online at once: each pushes before any pulls, so the
		// first to pull merges the other two, one after the other.
		for _, d := range ds {
			must(t, d.s.Push(context.Background(), &Stats{}))
		}
		for _, i := range order {
			ds[i].sync()
		}
		round(ds...)
		same(t, ds...)
		f := ds[0].files("l", "p")
		if f["shared.txt"] != "c's" {
			t.Fatalf("order %v: shared.txt is %q, want the latest, c's", order, f["shared.txt"])
		}
		losers := map[string]string{}
		for k, v := range f {
			if strings.HasPrefix(k, "shared.sync-conflict-") {
				losers[v] = k
			}
		}
		if len(losers) != 2 || losers["a's"] == "" || losers["b's"] == "" {
			t.Fatalf("order %v: conflict files %v, want one of a's and one of b's", order, losers)
		}
		for _, d := range ds[:2] {
			if dev := strings.ToUpper(d.s.device[:7]); !strings.Contains(losers[d.name+"'s"], dev) {
				t.Fatalf("order %v: %s's version is kept as %s, not named by its device %s", order, d.name, losers[d.name+"'s"], dev)
			}
		}
	}
}

// TestLosersOfOneSecondKeepTwoNames: two versions of one file that one
// device wrote within a second, each losing to another device's, keep a
// conflict file each, both named after their writer: the second's name
// was the first's, and the second replaced it (the simulation's seed 1466
// of -sim.pages, which lost a version so).
func TestLosersOfOneSecondKeepTwoNames(t *testing.T) {
	be, err := remote.NewDir(t.TempDir())
	must(t, err)
	a, b, c := newDevice(t, "a", be), newDevice(t, "b", be), newDevice(t, "c", be)
	ctx := context.Background()
	second := time.Now().Truncate(time.Second)
	a.writeAt("l", "p", "f.txt", []byte("base"), second)
	round(a, b, c)
	b.writeAt("l", "p", "f.txt", []byte("b's first"), second.Add(1*time.Millisecond))
	must(t, b.s.Push(ctx, &Stats{}))
	// c's later version beats b's first, kept as a conflict file.
	c.writeAt("l", "p", "f.txt", []byte("c's"), second.Add(2*time.Millisecond))
	c.sync()
	// b writes over c's, in the same second as its first.
	b.sync()
	b.writeAt("l", "p", "f.txt", []byte("b's second"), second.Add(3*time.Millisecond))
	must(t, b.s.Push(ctx, &Stats{}))
	// a's later version beats b's second, whose conflict file's name is
	// its first's.
	a.writeAt("l", "p", "f.txt", []byte("a's"), second.Add(4*time.Millisecond))
	round(a, b, c)
	same(t, a, b, c)
	f := a.files("l", "p")
	if f["f.txt"] != "a's" {
		t.Fatalf("f.txt is %q, want the latest, a's", f["f.txt"])
	}
	dev := strings.ToUpper(b.s.device[:7])
	kept := map[string]string{}
	for k, v := range f {
		if file, d, ok := splitConflict(k); ok {
			if file != "f.txt" || d != dev || path.Ext(k) != ".txt" {
				t.Errorf("conflict file %s of %s: want one of f.txt named after b (%s)", k, v, dev)
			}
			kept[v] = k
		}
	}
	if len(kept) != 2 || kept["b's first"] == "" || kept["b's second"] == "" {
		t.Fatalf("conflict files %v, want one of each of b's versions", kept)
	}
}

// TestMergeOnAVirtualBaseKeepsNoReplacedVersion: a merge of heads with two
// common ancestors, one holding b's first version of a file and one c's,
// where c's head holds b's first version still (c deleted the file, and
// b's edit beat the delete) and b's head holds b's second: b's second
// wins, with no conflict file of b's first, which b replaced itself, nor
// of c's, which c deleted (the simulation's seed 1539).
func TestMergeOnAVirtualBaseKeepsNoReplacedVersion(t *testing.T) {
	be, err := remote.NewDir(t.TempDir())
	must(t, err)
	a, b, c := newDevice(t, "a", be), newDevice(t, "b", be), newDevice(t, "c", be)
	second := time.Now().Truncate(time.Second)
	a.writeAt("l", "p", "f", []byte("a's"), second)
	round(a, b, c)
	b.writeAt("l", "p", "f", []byte("b's first"), second.Add(1*time.Millisecond))
	must(t, b.s.Push(context.Background(), &Stats{}))
	c.writeAt("l", "p", "f", []byte("c's"), second.Add(2*time.Millisecond))
	must(t, c.s.Push(context.Background(), &Stats{}))
	// b merges c's version alone: b's second wins, c's is kept.
	b.writeAt("l", "p", "f", []byte("b's second"), second.Add(3*time.Millisecond))
	b.sync()
	// c deletes the file, then lands b's first (its edit beats the
	// delete) and b's merge: their common ancestors are b's first and
	// c's, apart.
	c.write("l", "p", "f", nil)
	c.sync()
	round(a, b, c)
	same(t, a, b, c)
	want := map[string]string{"f": "b's second"}
	if got := c.files("l", "p"); !maps.Equal(got, want) {
		t.Fatalf("after the merges the page holds %v, want %v", got, want)
	}
}

// TestMergeKeepsAConflictFileOnlyTheVirtualBaseMade: a merge of heads with
// two common ancestors, b's version of a file and a's, whose merge (the
// virtual base) keeps b's as a conflict file. e's head holds that merge
// with a later edit of e's; a's head never held the conflict file: a
// deleted its own version and then merged b's, which won. a's head lacks
// the conflict file, but a never deleted it: b's version, which no device
// replaced, stays (the simulation's seed 194 of -sim.pages -sim.ledgers
// -sim.collect=keep-last=2).
func TestMergeKeepsAConflictFileOnlyTheVirtualBaseMade(t *testing.T) {
	be, err := remote.NewDir(t.TempDir())
	must(t, err)
	a, b, e := newDevice(t, "a", be), newDevice(t, "b", be), newDevice(t, "e", be)
	ctx := context.Background()
	second := time.Now().Truncate(time.Second)
	a.writeAt("l", "p", "f", []byte("first"), second)
	round(a, b, e)
	b.writeAt("l", "p", "f", []byte("b's"), second.Add(1*time.Millisecond))
	must(t, b.s.Push(ctx, &Stats{}))
	a.writeAt("l", "p", "f", []byte("a's"), second.Add(2*time.Millisecond))
	must(t, a.s.Push(ctx, &Stats{}))
	// e merges the two: a's wins, b's is kept as a conflict file; then e
	// edits the file, and holds both back.
	must(t, e.s.Pull(ctx, &Stats{}))
	if got := e.files("l", "p"); len(got) != 2 {
		t.Fatalf("e's merge holds %v, want the file and a conflict file", got)
	}
	e.writeAt("l", "p", "f", []byte("e's"), second.Add(3*time.Millisecond))
	// a deletes its version, then merges b's: b's edit beats the delete.
	a.write("l", "p", "f", nil)
	a.sync()
	if got, want := a.files("l", "p"), map[string]string{"f": "b's"}; !maps.Equal(got, want) {
		t.Fatalf("a's merge holds %v, want %v", got, want)
	}
	// a lands e's edit on its merge: their common ancestors are a's
	// first version and b's.
	must(t, e.s.Push(ctx, &Stats{}))
	check := func(when string) {
		t.Helper()
		got := a.files("l", "p")
		kept := ""
		for k, v := range got {
			if _, ok := conflictOf(k); ok {
				kept = v
			}
		}
		if got["f"] != "e's" || kept != "b's" || len(got) != 2 {
			t.Fatalf("%s the page holds %v, want e's version and a conflict file of b's", when, got)
		}
	}
	a.sync()
	check("after a's merge")
	round(a, b, e)
	same(t, a, b, e)
	check("after the merges")
}

// commits counts the commits of page l/p's history, from its head.
func (d *device) commits(l, p string) int {
	d.t.Helper()
	pg := d.page(l, p)
	defer d.repo.Release(pg)
	head, err := pg.Head()
	must(d.t, err)
	seen := map[store.CommitID]bool{}
	stack := []store.CommitID{head.ID}
	for len(stack) > 0 {
		id := stack[len(stack)-1]
		stack = stack[:len(stack)-1]
		if seen[id] || id == store.FirstCommitID {
			continue
		}
		seen[id] = true
		c, err := pg.Commit(id)
		must(d.t, err)
		stack = append(stack, c.Parents...)
	}
	return len(seen)
}

// TestPageMovedBetweenLedgersSyncs: a page moved to another ledger keeps
// its history, here and on the other device, and its old name goes on both.
func TestPageMovedBetweenLedgersSyncs(t *testing.T) {
	be, err := remote.NewDir(t.TempDir())
	must(t, err)
	a, b := newDevice(t, "a", be), newDevice(t, "b", be)
	for i := range 5 {
		a.write("l1", "p", "f", []byte(strings.Repeat("v", i+1)))
	}
	must(t, a.repo.CreateLedger("l2"))
	round(a, b)
	before := a.commits("l1", "p")
	if before < 5 {
		t.Fatalf("the page has %d commits, want 5 or more", before)
	}
	must(t, a.repo.MovePage("l1", "p", "l2", "q"))
	if got := a.commits("l2", "q"); got != before {
		t.Fatalf("the moved page has %d commits here, want %d", got, before)
	}
	a.write("l2", "q", "g", []byte("after the move"))
	round(a, b)
	same(t, a, b)
	if want := []string{"l1/", "l2/", "l2/q"}; !slices.Equal(b.names(), want) {
		t.Fatalf("b has %v after the move, want %v", b.names(), want)
	}
	if got := b.commits("l2", "q"); got != before+1 {
		t.Fatalf("the moved page has %d commits on b, want %d", got, before+1)
	}
	if f := b.files("l2", "q"); f["f"] != "vvvvv" || f["g"] != "after the move" {
		t.Fatalf("the moved page's entries on b: %v", f)
	}
}

// TestRenameCarriesUnpushedChanges: commits a device made in a page while
// another device renamed it are pushed under the new name at its next
// round, by a syncer that pushes only the pages it was told changed (a
// mount's): the mark of the old name must follow the rename.
func TestRenameCarriesUnpushedChanges(t *testing.T) {
	be, err := remote.NewDir(t.TempDir())
	must(t, err)
	a, c := newDevice(t, "a", be), newDevice(t, "c", be)
	a.s.Watched, c.s.Watched = true, true
	a.write("l", "p", "base", []byte("base"))
	a.s.Changed("l", "p")
	round(a, c)
	for i := range 3 {
		c.write("l", "p", "offline", []byte(strings.Repeat("c", i+1)))
	}
	c.s.Changed("l", "p") // as the mount marks a page it committed to
	must(t, a.repo.RenamePage("l", "p", "q"))
	a.sync()
	c.sync() // applies the rename, then pushes
	a.sync()
	if want := []string{"l/", "l/q"}; !slices.Equal(c.names(), want) {
		t.Fatalf("c has %v, want %v", c.names(), want)
	}
	if got := a.files("l", "q")["offline"]; got != "ccc" {
		t.Fatalf("c's offline change on a: %q, want ccc: c's commits stayed unpushed", got)
	}
	c.settled("l", "q")
	same(t, a, c)
}

// chmod changes key's mode in page l/p, as a chmod through a mount does.
func (d *device) chmod(l, p, key string, mode uint32, at time.Time) {
	d.t.Helper()
	e, pg := d.entry(l, p, key)
	defer d.repo.Release(pg)
	e.Meta.Mode = mode
	e.Meta.CtimeNs, e.Meta.HasCtime = at.UnixNano(), true
	must(d.t, d.eng.CommitterFor(pg).Apply(false, journal.Op{Key: key, Entry: e}))
}

// mode is key's mode in page l/p's head.
func (d *device) mode(l, p, key string) uint32 {
	d.t.Helper()
	e, pg := d.entry(l, p, key)
	d.repo.Release(pg)
	return e.Meta.Mode
}

// The same content written on two devices while apart is no conflict; a
// chmod on one device and an edit on the other both stand, in the file
// itself, with no conflict file.
func TestMergeKeepsWhatDoesNotConflict(t *testing.T) {
	be, err := remote.NewDir(t.TempDir())
	must(t, err)
	a, b := newDevice(t, "a", be), newDevice(t, "b", be)
	at := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	a.writeAt("l", "p", "same.txt", []byte("base"), at)
	a.writeAt("l", "p", "f.sh", []byte("echo one"), at)
	round(a, b)
	a.writeAt("l", "p", "same.txt", []byte("both wrote this"), at.Add(time.Minute))
	b.writeAt("l", "p", "same.txt", []byte("both wrote this"), at.Add(2*time.Minute))
	a.chmod("l", "p", "f.sh", 0o100755, at.Add(3*time.Minute))
	b.writeAt("l", "p", "f.sh", []byte("echo two"), at.Add(time.Minute))
	round(a, b)
	same(t, a, b)
	fs := a.files("l", "p")
	for k := range fs {
		if strings.Contains(k, conflictMark) {
			t.Errorf("conflict file %s (files %v)", k, fs)
		}
	}
	if fs["same.txt"] != "both wrote this" || fs["f.sh"] != "echo two" {
		t.Errorf("files %v, want both sides' content", fs)
	}
	if m := a.mode("l", "p", "f.sh"); m != 0o100755 {
		t.Errorf("f.sh's mode %o, want a's chmod 100755 with b's content", m)
	}
}

// A page renamed on one device while another, not knowing, went on
// writing it: the other's commits, pulled after the rename, land in the
// renamed page rather than bring the old name back (seed 55 of the
// simulation with -sim.pages), and both devices end with one page.
func TestCommitsOfARenamedPageFollowIt(t *testing.T) {
	st := newSimStore(1)
	a, b := newDevice(t, "a", st), newDevice(t, "b", st)
	a.write("l", "p", "f", []byte("first"))
	a.sync()
	b.sync()
	must(t, b.repo.CreateLedger("m"))
	must(t, b.repo.MovePage("l", "p", "m", "q")) // b, apart
	a.write("l", "p", "g", []byte("after b renamed it"))
	a.sync()
	b.sync() // pulls a's change of l/p, then pushes the rename
	a.sync()
	b.sync()
	same(t, a, b)
	if got := b.names(); slices.Contains(got, "l/p") || !slices.Contains(got, "m/q") {
		t.Fatalf("b's pages %v: want m/q and no l/p", got)
	}
	if got := b.files("m", "q"); got["f"] != "first" || got["g"] != "after b renamed it" {
		t.Fatalf("m/q on b holds %v: want both of a's files", got)
	}
}

// A page made under a name after another device renamed its page of that
// name away is a page of its own: the rename, arriving later, leaves it
// where it is, and both devices end with both pages (the simulation's seed
// 53 with -sim.pages: one device merged it into the renamed page, the
// other kept it).
func TestPageMadeAfterARenameElsewhereStays(t *testing.T) {
	st := newSimStore(1)
	a, c := newDevice(t, "a", st), newDevice(t, "c", st)
	a.write("l", "p", "f", []byte("a's"))
	must(t, a.repo.MovePage("l", "p", "l", "q"))
	a.sync()
	c.write("l", "p", "g", []byte("c's, made after a's rename")) // c, apart
	c.sync()
	a.sync()
	c.sync()
	same(t, a, c)
	if got := c.files("l", "p"); got["g"] != "c's, made after a's rename" || len(got) != 1 {
		t.Fatalf("l/p on c holds %v: want c's file alone", got)
	}
	if got := c.files("l", "q"); got["f"] != "a's" || len(got) != 1 {
		t.Fatalf("l/q on c holds %v: want a's file alone", got)
	}
}

// A page renamed by one device onto a name another device has a page
// under, while that device wrote into the page renamed, ends as one page
// on both: the other device merges its page of the old name, with its
// changes the renaming device never saw, into its page of the new name
// (the simulation's seeds 107 and 285 with -sim.pages: it kept the old
// page beside the new one, where the renaming device landed its changes
// in the renamed page).
func TestPageRenamedOntoATakenNameMergesIntoIt(t *testing.T) {
	st := newSimStore(1)
	a, c := newDevice(t, "a", st), newDevice(t, "c", st)
	a.write("l", "p", "f", []byte("first"))
	a.sync()
	c.sync()
	// Apart: a renames l/p to l/q; c writes into l/p and makes an l/q
	// of its own.
	must(t, a.repo.MovePage("l", "p", "l", "q"))
	c.write("l", "p", "g", []byte("c's, into the page a renamed"))
	c.write("l", "q", "h", []byte("c's own l/q"))
	a.sync()
	c.sync() // pushes its l/p and l/q; pulls the rename, onto its l/q
	a.sync()
	c.sync()
	a.sync()
	same(t, a, c)
	if got := c.names(); slices.Contains(got, "l/p") || !slices.Contains(got, "l/q") {
		t.Fatalf("c's pages %v: want l/q and no l/p", got)
	}
	want := map[string]string{"f": "first", "g": "c's, into the page a renamed", "h": "c's own l/q"}
	if got := a.files("l", "q"); !maps.Equal(got, want) {
		t.Fatalf("l/q holds %v: want %v", got, want)
	}
}

// A page renamed here goes up whole once: the next change of it goes up
// as its own commits, and a round with nothing changed writes nothing. The
// mark of a page to send whole stayed after its push (an empty value was
// written in place of a delete), and every later push of the page sent it
// whole again, with every piece's place, and wrote a batch even with
// nothing new.
func TestARenamedPageGoesUpWholeOnce(t *testing.T) {
	st := newSimStore(1)
	a, b := newDevice(t, "a", st), newDevice(t, "b", st)
	a.write("l", "p", "f", []byte("first"))
	a.sync()
	b.sync()
	must(t, a.repo.MovePage("l", "p", "l", "q"))
	a.sync()
	if _, marked, err := a.repo.SyncState(resendKey("l", "q")); err != nil || marked {
		t.Fatalf("l/q still marked to go up whole after its push (%v)", err)
	}
	before := st.count()
	a.s.Changed("l", "q")
	a.sync()
	if after := st.count(); after != before {
		t.Fatalf("a round with nothing new wrote %d objects", after-before)
	}
}

// TestPageMovedByItsLedgersRenameHereStays: e renames its ledger m, holding
// a page r named before then, to l, after d renamed its own l to n. When
// d's older rename arrives at e, r came under l with e's rename, after d's,
// and stays, as it does on d, which applies e's rename after its own.
func TestPageMovedByItsLedgersRenameHereStays(t *testing.T) {
	st := newSimStore(1)
	d, e := newDevice(t, "d", st), newDevice(t, "e", st)
	e.write("m", "r", "f", []byte("e's"))
	d.write("l", "p", "f", []byte("d's"))
	must(t, d.repo.RenameLedger("l", "n"))
	must(t, e.repo.RenameLedger("m", "l"))
	round(d, e)
	round(d, e)
	same(t, d, e)
	if want := []string{"l/", "l/r", "n/", "n/p"}; !slices.Equal(e.names(), want) {
		t.Fatalf("e has %v, want %v", e.names(), want)
	}
}

// TestLedgerMadeAfterARenameOfItsNameStays: a renames ledger l to n while
// c, which never knew a's l, makes a ledger l of its own after that: c's
// l is not the one a renamed, and stays on both devices, while a's page
// goes to n on both (the simulation's seed 5 of -sim.pages -sim.ledgers
// -sim.join -sim.collect=keep-last=2).
func TestLedgerMadeAfterARenameOfItsNameStays(t *testing.T) {
	st := newSimStore(1)
	a, c := newDevice(t, "a", st), newDevice(t, "c", st)
	a.write("l", "p", "f", []byte("a's"))
	must(t, a.repo.RenameLedger("l", "n"))
	must(t, c.repo.CreateLedger("l"))
	for range 2 {
		a.sync()
		c.sync()
	}
	same(t, a, c)
	if want := []string{"l/", "n/", "n/p"}; !slices.Equal(c.names(), want) {
		t.Fatalf("c has %v, want %v", c.names(), want)
	}
}

// TestPageLandedInARenamedLedgerStaysThere: e renames its ledger m to l
// after d renamed its own l to n; c's page m/q reaches e after e's rename,
// and lands in l. d's rename, older than e's, then arrives: q came under l
// with e's rename, after d's, and stays in l, as it does on the devices
// where q was in m when e's rename came (the simulation's seed 120 of
// -sim.pages -sim.ledgers -sim.join -sim.collect=keep-last=2).
func TestPageLandedInARenamedLedgerStaysThere(t *testing.T) {
	st := newSimStore(1)
	c, d, e := newDevice(t, "c", st), newDevice(t, "d", st), newDevice(t, "e", st)
	c.write("m", "q", "f", []byte("c's"))
	must(t, c.s.Push(context.Background(), &Stats{}))
	d.write("l", "p", "f", []byte("d's"))
	must(t, d.repo.RenameLedger("l", "n"))
	e.write("m", "r", "f", []byte("e's"))
	must(t, e.repo.RenameLedger("m", "l"))
	e.sync() // lands c's m/q in l, where e's rename took m
	round(c, d, e)
	round(c, d, e)
	same(t, c, d, e)
	if want := []string{"l/", "l/q", "l/r", "n/", "n/p"}; !slices.Equal(e.names(), want) {
		t.Fatalf("e has %v, want %v", e.names(), want)
	}
}

// A ledger renamed by one device onto a name another device made a ledger
// under meanwhile ends as one ledger on both, holding both sides' pages: a
// page of a name in both merges, and what the other device wrote into the
// renamed ledger's pages goes with them (#59: the other device kept the old
// ledger).
func TestLedgerRenamedOntoATakenNameMergesIntoIt(t *testing.T) {
	st := newSimStore(1)
	a, c := newDevice(t, "a", st), newDevice(t, "c", st)
	a.write("l", "p", "f", []byte("first"))
	a.write("l", "r", "f", []byte("in r"))
	a.sync()
	c.sync()
	// Apart: a renames l to m; c writes into l/p and makes an m of its
	// own, with a page p and a page q.
	must(t, a.repo.RenameLedger("l", "m"))
	c.write("l", "p", "g", []byte("c's, into the ledger a renamed"))
	c.write("m", "p", "h", []byte("c's own m/p"))
	c.write("m", "q", "i", []byte("c's own m/q"))
	a.sync()
	c.sync()
	a.sync()
	c.sync()
	a.sync()
	same(t, a, c)
	if want := []string{"m/", "m/p", "m/q", "m/r"}; !slices.Equal(c.names(), want) {
		t.Fatalf("c has %v, want %v", c.names(), want)
	}
	want := map[string]string{"f": "first", "g": "c's, into the ledger a renamed", "h": "c's own m/p"}
	if got := a.files("m", "p"); !maps.Equal(got, want) {
		t.Fatalf("m/p holds %v: want %v", got, want)
	}
}

// A page in use here holds back the rename another device made of it,
// and that device's later changes of that page, not its changes of other
// pages (#59: every page's waited). Once the page is free the rename
// applies, and the batches applied ahead of it are not applied again.
func TestABusyPageHoldsBackOnlyItsOwnBatches(t *testing.T) {
	st := newSimStore(1)
	a, b := newDevice(t, "a", st), newDevice(t, "b", st)
	a.write("l", "p", "f", []byte("first"))
	a.write("l", "q", "f", []byte("first"))
	a.sync()
	b.sync()
	busy := map[string]bool{"l/p": true}
	b.s.Names = busyNames{Unrecorded: b.repo.Unrecorded(), inUse: func(l, p string) bool { return busy[l+"/"+p] }}
	must(t, a.repo.RenamePage("l", "p", "r"))
	a.write("l", "r", "g", []byte("into the renamed page"))
	a.write("l", "q", "g", []byte("into another page"))
	a.sync()
	if st := b.sync(); st.Waiting == 0 {
		t.Fatal("b's pull held nothing back while l/p was in use")
	}
	if got := b.files("l", "q")["g"]; got != "into another page" {
		t.Fatalf("l/q on b holds g = %q while l/p is in use: want a's change of it", got)
	}
	if !slices.Contains(b.names(), "l/p") || slices.Contains(b.names(), "l/r") {
		t.Fatalf("b renamed l/p while in use: %v", b.names())
	}
	delete(busy, "l/p")
	b.sync()
	a.sync()
	same(t, a, b)
	if got := b.files("l", "r")["g"]; got != "into the renamed page" {
		t.Fatalf("l/r on b holds g = %q: want a's change of it", got)
	}
	var ahead []string
	must(t, b.repo.ScanSyncState(stateAhead, func(k string, _ []byte) error {
		ahead = append(ahead, k)
		return nil
	}))
	if len(ahead) > 0 {
		t.Fatalf("rows of batches applied ahead left after the position passed them: %v", ahead)
	}
}

// A page renamed on two devices while apart, to two names, ends as one
// page on both, under the later rename's name, holding what each wrote
// into it since (each device kept its own name, and the other's page came
// as a second one; the simulation's seed 39 with -sim.pages).
func TestCrossedRenamesOfAPageEndAsOne(t *testing.T) {
	st := newSimStore(1)
	a, b := newDevice(t, "a", st), newDevice(t, "b", st)
	a.write("l", "p", "f", []byte("first"))
	a.sync()
	b.sync()
	must(t, a.repo.RenamePage("l", "p", "x"))
	a.write("l", "x", "g", []byte("a's"))
	must(t, b.repo.RenamePage("l", "p", "y")) // the later rename
	b.write("l", "y", "h", []byte("b's"))
	for range 3 {
		a.sync()
		b.sync()
	}
	same(t, a, b)
	if want := []string{"l/", "l/y"}; !slices.Equal(a.names(), want) {
		t.Fatalf("a has %v, want %v", a.names(), want)
	}
	want := map[string]string{"f": "first", "g": "a's", "h": "b's"}
	if got := a.files("l", "y"); !maps.Equal(got, want) {
		t.Fatalf("l/y holds %v: want %v", got, want)
	}
}
