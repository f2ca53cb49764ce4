package cloudsync

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/ledgerfs/ledgerfs/cas"
	"github.com/ledgerfs/ledgerfs/internal/btree"
	"github.com/ledgerfs/ledgerfs/internal/gc"
	"github.com/ledgerfs/ledgerfs/internal/remote"
	"github.com/ledgerfs/ledgerfs/internal/repokey"
	"github.com/ledgerfs/ledgerfs/internal/retention"
	"github.com/ledgerfs/ledgerfs/internal/s3test"
	"github.com/ledgerfs/ledgerfs/internal/testutil"
	"github.com/ledgerfs/ledgerfs/journal"
	"github.com/ledgerfs/ledgerfs/store"
)

// device is one repository syncing through a shared store.
type device struct {
	t    testing.TB
	name string
	repo *store.Repository
	eng  *journal.Engine
	s    *Syncer
}

// testSecret is the key file the tests' stores are encrypted under.
var testSecret = repokey.Secret{KeyFile: []byte("a key file of the tests, 32 bytes or more")}

func newDevice(t testing.TB, name string, be remote.Backend) *device {
	t.Helper()
	d, err := openDevice(t, name, be, Options{Secret: testSecret}, 0)
	must(t, err)
	d.s.packSize = 256 << 10 // several packs per test
	return d
}

func (d *device) page(l, p string) *store.Page {
	d.t.Helper()
	if ok, _ := d.repo.HasLedger(l); !ok {
		must(d.t, d.repo.CreateLedger(l))
	}
	if ok, _ := d.repo.HasPage(l, p); !ok {
		must(d.t, d.repo.CreatePage(l, p))
	}
	pg, err := d.repo.Acquire(l, p)
	must(d.t, err)
	return pg
}

// write sets key of page l/p to content, or deletes it (content nil).
func (d *device) write(l, p, key string, content []byte) {
	d.t.Helper()
	d.writeAt(l, p, key, content, time.Now())
}

// writeAt writes as write does, modified at mtime.
func (d *device) writeAt(l, p, key string, content []byte, mtime time.Time) {
	d.t.Helper()
	pg := d.page(l, p)
	defer d.repo.Release(pg)
	op := journal.Op{Key: key, Kind: store.OpDelete}
	if content != nil {
		w := pg.NewValueWriter()
		_, err := w.Write(content)
		must(d.t, err)
		id, size, err := w.Close()
		must(d.t, err)
		// Modified now, as a write through the mount is: the later of
		// two edits of a file is the later call.
		op = journal.Op{Key: key, Entry: btree.Entry{Value: id, Meta: btree.Meta{Size: size, Mode: 0o100644,
			MtimeNs: mtime.UnixNano(), HasMtime: true}}}
	}
	must(d.t, d.eng.CommitterFor(pg).Apply(false, op))
}

// files returns page l/p's entries and their contents.
func (d *device) files(l, p string) map[string]string {
	d.t.Helper()
	pg := d.page(l, p)
	defer d.repo.Release(pg)
	head, err := pg.Head()
	must(d.t, err)
	out := map[string]string{}
	it := pg.Tree(head).Seek("")
	for it.Next() {
		e := it.Entry()
		r, err := pg.OpenValue(e.Value)
		must(d.t, err)
		b := make([]byte, e.Meta.Size)
		if _, err := r.ReadAt(b, 0); err != nil && err != io.EOF {
			d.t.Fatal(err)
		}
		out[e.Key] = string(b)
	}
	must(d.t, it.Err())
	return out
}

// entry returns key's entry in page l/p's head, and the page, held.
func (d *device) entry(l, p, key string) (btree.Entry, *store.Page) {
	d.t.Helper()
	pg := d.page(l, p)
	e, ok, err := headEntry(pg, key)
	if err != nil || !ok {
		d.repo.Release(pg)
		d.t.Fatalf("%s: %s/%s: no %s (%v)", d.name, l, p, key, err)
	}
	return e, pg
}

// headEntry returns key's entry in p's head, if it holds one.
func headEntry(p *store.Page, key string) (btree.Entry, bool, error) {
	head, err := p.Head()
	if err != nil {
		return btree.Entry{}, false, err
	}
	return p.Tree(head).Get(key)
}

// read returns the content of key in page l/p's head.
func (d *device) read(l, p, key string) ([]byte, error) {
	d.t.Helper()
	e, pg := d.entry(l, p, key)
	defer d.repo.Release(pg)
	r, err := pg.OpenValue(e.Value)
	if err != nil {
		return nil, err
	}
	b := make([]byte, e.Meta.Size)
	if _, err := r.ReadAt(b, 0); err != nil && err != io.EOF {
		return nil, err
	}
	return b, nil
}

func (d *device) head(l, p string) store.CommitID {
	d.t.Helper()
	pg := d.page(l, p)
	defer d.repo.Release(pg)
	h, err := pg.Head()
	must(d.t, err)
	return h.ID
}

func (d *device) sync() Stats {
	d.t.Helper()
	st, err := d.s.Sync(context.Background())
	if err != nil {
		d.t.Fatalf("%s: sync: %v", d.name, err)
	}
	return st
}

// settled checks what a push leaves: no piece local, no commit unsynced.
func (d *device) settled(l, p string) {
	d.t.Helper()
	pg := d.page(l, p)
	defer d.repo.Release(pg)
	n := 0
	must(d.t, pg.Pieces(store.Local, func(cas.Digest) error { n++; return nil }))
	must(d.t, pg.UnsyncedCommits(func(store.CommitID) error { n++; return nil }))
	if n > 0 {
		d.t.Fatalf("%s: %d local pieces and unsynced commits after a sync", d.name, n)
	}
}

func must(t testing.TB, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

func random(seed uint64, n int) []byte { return testutil.Random(seed, 0, n) }

func stores(t *testing.T) map[string]remote.Backend {
	dir, err := remote.NewDir(t.TempDir())
	must(t, err)
	srv := s3test.Start(t)
	s3, err := remote.NewS3(context.Background(), srv.Config("sync", "repo"))
	must(t, err)
	return map[string]remote.Backend{"dir": dir, srv.Kind: s3}
}

func objects(t *testing.T, be remote.Backend) []remote.Object {
	var out []remote.Object
	must(t, be.List(context.Background(), "", "", func(o remote.Object) error {
		out = append(out, o)
		return nil
	}))
	return out
}

// TestTwoDevicesConverge: edits of different files on two devices, a file
// edited on both, and a delete racing an edit, synced through the store,
// leave both devices with the same head id and the same files, the losing
// edit in a conflict file; a sync with nothing new writes nothing.
func TestTwoDevicesConverge(t *testing.T) {
	for kind, be := range stores(t) {
		t.Run(kind, func(t *testing.T) {
			a, b := newDevice(t, "a", be), newDevice(t, "b", be)
			if a.repo.Polynomial() != b.repo.Polynomial() {
				t.Fatal("the second device did not take the remote's chunker polynomial")
			}
			big := random(1, 3<<20)
			a.write("l", "p", "docs/big.bin", big)
			a.write("l", "p", "docs/shared.txt", []byte("v1"))
			a.write("l", "p", "gone.txt", []byte("to be deleted on a, edited on b"))
			st := a.sync()
			if st.CommitsUp != 3 || st.PacksUp < 2 {
				t.Fatalf("first push: %+v, want 3 commits in several packs", st)
			}
			a.settled("l", "p")
			st = b.sync()
			if st.CommitsDown != 3 || st.Merges != 0 {
				t.Fatalf("b's first pull: %+v, want 3 commits and a fast-forward", st)
			}
			var packBytes int64
			for _, o := range objects(t, be) {
				if strings.HasPrefix(o.Name, packsDir) {
					packBytes += o.Size
				}
			}
			if st.BytesDown > packBytes {
				t.Fatalf("b's first pull fetched %d bytes of packs; the store holds %d: packs read more than once", st.BytesDown, packBytes)
			}
			if b.head("l", "p") != a.head("l", "p") || !maps.Equal(a.files("l", "p"), b.files("l", "p")) {
				t.Fatal("b after pulling: not a's head and files")
			}

			// Apart: different files, the same file, a delete and an edit.
			a.write("l", "p", "a-only.txt", []byte("from a"))
			b.write("l", "p", "b-only.txt", []byte("from b"))
			b.write("l", "p", "docs/shared.txt", []byte("b's edit"))
			a.write("l", "p", "docs/shared.txt", []byte("a's edit, later"))
			a.write("l", "p", "gone.txt", nil)
			b.write("l", "p", "gone.txt", []byte("b's edit of a file a deleted"))
			a.sync()
			st = b.sync() // pulls a's, merges, pushes the merge
			if st.Merges != 1 || st.Conflicts != 1 {
				t.Fatalf("b's merge: %+v, want one merge with one conflict", st)
			}
			a.sync()
			if a.head("l", "p") != b.head("l", "p") {
				t.Fatalf("heads differ after syncing both ways: a %s, b %s", a.head("l", "p"), b.head("l", "p"))
			}
			fa, fb := a.files("l", "p"), b.files("l", "p")
			if !maps.Equal(fa, fb) {
				t.Fatalf("files differ: a %v, b %v", slices.Sorted(maps.Keys(fa)), slices.Sorted(maps.Keys(fb)))
			}
			var conflict string
			for k := range fa {
				if strings.Contains(k, ".sync-conflict-") {
					conflict = k
				}
			}
			switch {
			case fa["a-only.txt"] != "from a" || fa["b-only.txt"] != "from b":
				t.Fatal("an edit of a file changed on one side only was lost")
			case fa["docs/shared.txt"] != "a's edit, later":
				t.Fatalf("shared.txt holds %q, want the later edit", fa["docs/shared.txt"])
			case !strings.HasPrefix(conflict, "docs/shared.sync-conflict-") || !strings.HasSuffix(conflict, "-"+strings.ToUpper(b.s.Device()[:7])+".txt") || fa[conflict] != "b's edit":
				t.Fatalf("conflict file %q holds %q; want docs/shared.sync-conflict-…-%s.txt with b's edit", conflict, fa[conflict], strings.ToUpper(b.s.Device()[:7]))
			case fa["gone.txt"] != "b's edit of a file a deleted":
				t.Fatal("a delete beat an edit")
			case !bytes.Equal([]byte(fa["docs/big.bin"]), big):
				t.Fatal("the big file differs")
			}
			a.settled("l", "p")
			b.settled("l", "p")

			before := objects(t, be)
			a.sync()
			b.sync()
			if after := objects(t, be); !slices.Equal(before, after) {
				t.Fatalf("syncs with nothing new changed the store: %d objects, then %d", len(before), len(after))
			}
		})
	}
}

// TestPageMadeOnBothSides: a page created on two devices while apart is
// one page afterwards, with both sides' entries.
func TestPageMadeOnBothSides(t *testing.T) {
	be, err := remote.NewDir(t.TempDir())
	must(t, err)
	a, b := newDevice(t, "a", be), newDevice(t, "b", be)
	for i := range 5 {
		a.write("notes", "todo", fmt.Sprintf("a%d", i), []byte("a"))
		b.write("notes", "todo", fmt.Sprintf("b%d", i), []byte("b"))
	}
	a.sync()
	b.sync()
	a.sync()
	fa, fb := a.files("notes", "todo"), b.files("notes", "todo")
	if len(fa) != 10 || !maps.Equal(fa, fb) || a.head("notes", "todo") != b.head("notes", "todo") {
		t.Fatalf("a %v, b %v: want both sides' 10 entries on both, one head", fa, fb)
	}
}

// TestPushAfterCrash: a push cut short after its batch went up, before the
// device recorded it, is finished by the next without a second batch.
func TestPushAfterCrash(t *testing.T) {
	be, err := remote.NewDir(t.TempDir())
	must(t, err)
	a := newDevice(t, "a", be)
	a.write("l", "p", "f", random(2, 100<<10))
	// The push's writes reach the store; the device's own records of
	// them are then put back, as a crash before them leaves it.
	pg := a.page("l", "p")
	defer a.repo.Release(pg)
	var local []cas.Digest
	must(t, pg.Pieces(store.Local, func(d cas.Digest) error { local = append(local, d); return nil }))
	var unsynced []store.CommitID
	must(t, pg.UnsyncedCommits(func(id store.CommitID) error { unsynced = append(unsynced, id); return nil }))
	a.sync()
	next, err := a.s.nextSeq()
	must(t, err)
	must(t, pg.SetStatus(store.Local, local))
	must(t, a.repo.SetSyncState(map[string][]byte{stateNextSeq: fmt.Appendf(nil, "%d", next-1)})) // the page's batch
	head, err := pg.Head()
	must(t, err)
	must(t, pg.Adopt(nil, head, head)) // its unsynced row back
	before := objects(t, be)
	st := a.sync()
	if st.BatchesUp != 0 {
		t.Fatalf("the repeated push wrote %d batches", st.BatchesUp)
	}
	if after := objects(t, be); len(after) != len(before) {
		t.Fatalf("the repeated push wrote %d objects", len(after)-len(before))
	}
	a.settled("l", "p")
}

// TestMergesAreDeterministic: two devices that each merge the same two
// heads, one theirs and one the other's, make the same merge commit.
func TestMergesAreDeterministic(t *testing.T) {
	be, err := remote.NewDir(t.TempDir())
	must(t, err)
	a, b := newDevice(t, "a", be), newDevice(t, "b", be)
	a.write("l", "p", "base", []byte("0"))
	a.sync()
	b.sync()
	a.write("l", "p", "x", []byte("a"))
	a.write("l", "p", "both", []byte("a's"))
	b.write("l", "p", "y", []byte("b"))
	b.write("l", "p", "both", []byte("b's"))
	ctx := context.Background()
	var st Stats
	must(t, a.s.Push(ctx, &st))
	must(t, b.s.Push(ctx, &st))
	must(t, a.s.Pull(ctx, &st))
	must(t, b.s.Pull(ctx, &st))
	if st.Merges != 2 || st.Conflicts != 2 {
		t.Fatalf("%+v: want a merge with a conflict on each device", st)
	}
	if a.head("l", "p") != b.head("l", "p") {
		t.Fatalf("the same heads merged on two devices: %s and %s", a.head("l", "p"), b.head("l", "p"))
	}
	if fa, fb := a.files("l", "p"), b.files("l", "p"); !maps.Equal(fa, fb) || len(fa) != 5 {
		t.Fatalf("a %v, b %v", fa, fb)
	}
	// Each pushes the same merge: both batches name one commit.
	a.sync()
	b.sync()
	a.sync()
	if a.head("l", "p") != b.head("l", "p") {
		t.Fatal("heads differ after pushing the same merge")
	}
}

// TestMergeMakesAConflictFileOneSideDeleted: a's user keeps its version
// that lost a merge, moving the conflict file back over its file, while e
// edits the file: the merge of the two makes a conflict file of a's
// version again, under the name a's side deleted. Both devices make the
// same merge, with that conflict file (which of a conflict file made and
// a side's deletion of its name came last went by map order).
func TestMergeMakesAConflictFileOneSideDeleted(t *testing.T) {
	be, err := remote.NewDir(t.TempDir())
	must(t, err)
	a, e := newDevice(t, "a", be), newDevice(t, "e", be)
	ctx := context.Background()
	second := time.Now().Truncate(time.Second)
	a.writeAt("l", "p", "f", []byte("first"), second)
	a.sync()
	e.sync()
	a.writeAt("l", "p", "f", []byte("a's"), second.Add(time.Second))
	must(t, a.s.Push(ctx, &Stats{}))
	e.writeAt("l", "p", "f", []byte("e's first"), second.Add(2*time.Second))
	e.sync()
	a.sync()
	kept := ""
	for k := range a.files("l", "p") {
		if _, ok := conflictOf(k); ok {
			kept = k
		}
	}
	if kept == "" {
		t.Fatalf("the first merge kept no conflict file: %v", a.files("l", "p"))
	}
	// a moves the conflict file back over its file, its time kept.
	a.writeAt("l", "p", "f", []byte("a's"), second.Add(time.Second))
	a.write("l", "p", kept, nil)
	e.writeAt("l", "p", "f", []byte("e's second"), second.Add(3*time.Second))
	var st Stats
	must(t, a.s.Push(ctx, &st))
	must(t, e.s.Push(ctx, &st))
	must(t, a.s.Pull(ctx, &st))
	must(t, e.s.Pull(ctx, &st))
	if a.head("l", "p") != e.head("l", "p") {
		t.Fatalf("the same heads merged on two devices: a holds %v, e %v", a.files("l", "p"), e.files("l", "p"))
	}
	want := map[string]string{"f": "e's second", kept: "a's"}
	if got := e.files("l", "p"); !maps.Equal(got, want) {
		t.Fatalf("after the merge the page holds %v, want %v", got, want)
	}
}

// TestCollectionKeepsUnsynced: in a repository that syncs, a collection
// keeping only the newest commit still keeps every commit not pushed yet,
// and the pieces they reach: the next push sends them all, and the other
// device sees each version in its history.
func TestCollectionKeepsUnsynced(t *testing.T) {
	be, err := remote.NewDir(t.TempDir())
	must(t, err)
	a, b := newDevice(t, "a", be), newDevice(t, "b", be)
	for i := range 4 {
		a.write("l", "p", "f", random(uint64(10+i), 200<<10))
	}
	r, err := gc.CollectPage(a.repo, "l", "p", gc.PageOptions{Policy: &retention.Policy{Last: 1}, Wait: true})
	must(t, err)
	if r.Pruned != 0 {
		t.Fatalf("collection pruned %d unsynced commits", r.Pruned)
	}
	a.sync()
	st := b.sync()
	if st.CommitsDown != 4 {
		t.Fatalf("b pulled %d commits, want the 4 a made", st.CommitsDown)
	}
}

// TestVerify: after a sync the remote holds everything marked synced; a
// pack or a batch lost from it is reported.
func TestVerify(t *testing.T) {
	dir := t.TempDir()
	be, err := remote.NewDir(dir)
	must(t, err)
	a := newDevice(t, "a", be)
	a.write("l", "p", "f", random(3, 600<<10))
	a.sync()
	ctx := context.Background()
	if problems, err := Verify(ctx, a.repo, be, Options{}); err != nil || len(problems) != 0 {
		t.Fatalf("after a sync: %v, %v", problems, err)
	}
	var pack, log string
	for _, o := range objects(t, be) {
		switch {
		case strings.HasPrefix(o.Name, packsDir):
			pack = o.Name
		case strings.HasPrefix(o.Name, logsDir):
			log = o.Name
		}
	}
	must(t, os.Remove(filepath.Join(dir, pack)))
	problems, err := Verify(ctx, a.repo, be, Options{})
	if err != nil || len(problems) < 2 || !strings.Contains(strings.Join(problems, "\n"), "pieces marked synced are in no pack") {
		t.Fatalf("a pack lost: %q, %v; want it and its pieces named", problems, err)
	}
	must(t, os.Remove(filepath.Join(dir, log)))
	problems, err = Verify(ctx, a.repo, be, Options{})
	if err != nil || !strings.Contains(strings.Join(problems, "\n"), "commits not marked unsynced are in no batch") {
		t.Fatalf("the batch lost: %q, %v; want its commits named", problems, err)
	}
}

// TestThreeDevicesOfflineAndRenames: three devices; one offline for many
// commits while the others change and rename; a directory renamed on one
// device while a file in it is edited on another loses neither. After
// syncing around twice all three show one head and the same files.
func TestThreeDevicesOfflineAndRenames(t *testing.T) {
	be, err := remote.NewDir(t.TempDir())
	must(t, err)
	a, b, c := newDevice(t, "a", be), newDevice(t, "b", be), newDevice(t, "c", be)
	a.write("l", "p", "dir/f", []byte("f0"))
	a.write("l", "p", "dir/g", []byte("g0"))
	for _, d := range []*device{a, b, c} {
		d.sync()
	}
	// c goes offline and makes 50 commits.
	for i := range 50 {
		c.write("l", "p", fmt.Sprintf("offline/%02d", i), []byte{byte(i)})
	}
	// a renames dir to moved (its files' keys move); b edits dir/f.
	pg := a.page("l", "p")
	head, err := pg.Head()
	must(t, err)
	var ops []journal.Op
	it := pg.Tree(head).Prefix("dir/")
	for it.Next() {
		e := it.Entry()
		ops = append(ops, journal.Op{Key: e.Key, Kind: store.OpRenameDelete},
			journal.Op{Key: "moved/" + strings.TrimPrefix(e.Key, "dir/"), Entry: e})
	}
	must(t, it.Err())
	must(t, a.eng.CommitterFor(pg).Apply(false, ops...))
	a.repo.Release(pg)
	b.write("l", "p", "dir/f", []byte("b's edit of f"))
	for range 2 {
		for _, d := range []*device{a, b, c} {
			d.sync()
		}
	}
	fa := a.files("l", "p")
	for _, d := range []*device{b, c} {
		if d.head("l", "p") != a.head("l", "p") || !maps.Equal(d.files("l", "p"), fa) {
			t.Fatalf("%s differs from a after two rounds", d.name)
		}
	}
	if fa["moved/f"] != "f0" || fa["moved/g"] != "g0" {
		t.Fatalf("the rename was lost: %v", slices.Sorted(maps.Keys(fa)))
	}
	if fa["dir/f"] != "b's edit of f" {
		t.Fatalf("the edit inside the renamed directory was lost: dir/f %q", fa["dir/f"])
	}
	for i := range 50 {
		if fa[fmt.Sprintf("offline/%02d", i)] != string([]byte{byte(i)}) {
			t.Fatalf("offline/%02d of the offline device is missing", i)
		}
	}
}
