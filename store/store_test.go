package store

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/dgraph-io/badger/v4"

	"github.com/ledgerfs/ledgerfs/cas"
	"github.com/ledgerfs/ledgerfs/internal/btree"
	"github.com/ledgerfs/ledgerfs/internal/testutil"
)

// fatalOn returns a check that fails t on a non-nil error.
func fatalOn(t testing.TB) func(error) {
	return func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
}

func openRepo(t testing.TB, dir string, opts Options) *Repository {
	t.Helper()
	r, err := Open(dir, opts)
	if err != nil {
		t.Fatal(err)
	}
	return r
}

func TestLedgersAndPages(t *testing.T) {
	dir := t.TempDir()
	r := openRepo(t, dir, Options{})
	must := fatalOn(t)
	must(r.CreateLedger("notes"))
	must(r.CreateLedger("mail"))
	if err := r.CreateLedger("notes"); !errors.Is(err, ErrExists) {
		t.Fatalf("duplicate ledger: %v", err)
	}
	for _, bad := range []string{"", ".", "..", "a/b", "x\x00", ".ledger", strings.Repeat("x", 256)} {
		if err := r.CreateLedger(bad); !errors.Is(err, ErrBadName) {
			t.Fatalf("ledger %q: %v", bad, err)
		}
	}
	must(r.CreatePage("notes", "inbox"))
	must(r.CreatePage("notes", "archive"))
	if err := r.CreatePage("nope", "x"); !errors.Is(err, ErrNotFound) {
		t.Fatalf("page in missing ledger: %v", err)
	}
	ls, _ := r.Ledgers()
	ps, _ := r.Pages("notes")
	if !slices.Equal(ls, []string{"mail", "notes"}) || !slices.Equal(ps, []string{"archive", "inbox"}) {
		t.Fatalf("ledgers %q pages %q", ls, ps)
	}
	// The page db lives where Ledger puts it.
	want := filepath.Join(dir, SerializationVersion, "ledgers", ledgerFolder("notes"), PageIDFor("inbox").String())
	if fi, err := os.Stat(want); err != nil || !fi.IsDir() {
		t.Fatalf("page dir %s: %v", want, err)
	}
	p, err := r.Acquire("notes", "inbox")
	must(err)
	usage, _ := r.Usage()
	open := 0
	for _, u := range usage {
		if u.Closed.IsZero() {
			open++
			if u.Ledger != "notes" || u.ID != PageIDFor("inbox") {
				t.Fatalf("open row for %s/%v", u.Ledger, u.ID)
			}
		}
	}
	if open != 1 {
		t.Fatalf("%d pages marked open", open)
	}
	if err := r.DeletePage("notes", "inbox"); err == nil {
		t.Fatal("deleted a page in use")
	}
	r.Release(p)
	must(r.RenamePage("notes", "inbox", "in"))
	must(r.RenameLedger("notes", "n"))
	if err := r.DeleteLedger("n"); !errors.Is(err, ErrNotEmpty) {
		t.Fatalf("delete non-empty ledger: %v", err)
	}
	must(r.DeletePage("n", "in"))
	must(r.DeletePage("n", "archive"))
	must(r.DeleteLedger("n"))
	must(r.Close())

	r = openRepo(t, dir, Options{})
	defer r.Close()
	ls, _ = r.Ledgers()
	if !slices.Equal(ls, []string{"mail"}) {
		t.Fatalf("after reopen: %q", ls)
	}
	usage, _ = r.Usage()
	for _, u := range usage {
		if u.Closed.IsZero() {
			t.Fatalf("page %v still marked open after close", u.ID)
		}
	}
}

func TestDeleteInterruptedAfterTrash(t *testing.T) {
	dir := t.TempDir()
	r := openRepo(t, dir, Options{})
	if err := r.CreateLedger("l"); err != nil {
		t.Fatal(err)
	}
	if err := r.CreatePage("l", "p"); err != nil {
		t.Fatal(err)
	}
	// The first step of a delete, then a "crash".
	if _, err := r.toTrash(r.pageDir("l", PageIDFor("p"))); err != nil {
		t.Fatal(err)
	}
	r.Close()
	r = openRepo(t, dir, Options{})
	defer r.Close()
	if ok, _ := r.HasPage("l", "p"); ok {
		t.Fatal("page survives with its db in the trash")
	}
	if _, err := os.Stat(r.trashDir()); !os.IsNotExist(err) {
		t.Fatalf("trash not emptied: %v", err)
	}
}

func TestIdlePagesAreBounded(t *testing.T) {
	r := openRepo(t, t.TempDir(), Options{MaxIdlePages: 4})
	defer r.Close()
	if err := r.CreateLedger("l"); err != nil {
		t.Fatal(err)
	}
	for i := range 20 {
		name := fmt.Sprintf("p%02d", i)
		if err := r.CreatePage("l", name); err != nil {
			t.Fatal(err)
		}
		p, err := r.Acquire("l", name)
		if err != nil {
			t.Fatal(err)
		}
		r.Release(p)
		if n := r.OpenPages(); n > 4 {
			t.Fatalf("%d pages open with a limit of 4 idle", n)
		}
	}
	// A page evicted and acquired again works.
	p, err := r.Acquire("l", "p00")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := p.Head(); err != nil {
		t.Fatal(err)
	}
	r.Release(p)
}

// A crash right after Badger created a log file, before its header, leaves
// an empty file that Badger refuses to open.
func TestEmptyLogsLeftByACrash(t *testing.T) {
	dir := t.TempDir()
	r := openRepo(t, dir, Options{})
	must(t, r.CreateLedger("l"))
	must(t, r.CreatePage("l", "p"))
	p, err := r.Acquire("l", "p")
	must(t, err)
	pageDir := p.Dir()
	r.Release(p)
	must(t, r.Close())
	for _, d := range []string{filepath.Join(dir, "page_usage_db"), pageDir} {
		for _, name := range []string{"000999.vlog", "000999.mem"} {
			must(t, os.WriteFile(filepath.Join(d, name), nil, 0o644))
		}
	}
	r = openRepo(t, dir, Options{})
	defer r.Close()
	p, err = r.Acquire("l", "p")
	if err != nil {
		t.Fatalf("page with empty logs: %v", err)
	}
	r.Release(p)
}

func TestLockedRepository(t *testing.T) {
	dir := t.TempDir()
	r := openRepo(t, dir, Options{})
	defer r.Close()
	_, err := Open(dir, Options{})
	if !errors.Is(err, ErrLocked) {
		t.Fatalf("second open: %v", err)
	}
}

func TestClosedPage(t *testing.T) {
	r := openRepo(t, t.TempDir(), Options{})
	p := newPage(t, r)
	r.Close()
	if _, err := p.Head(); !errors.Is(err, ErrClosed) {
		t.Fatalf("Head on closed page: %v", err)
	}
	if _, err := p.Get(cas.Digest("x"), nil); !errors.Is(err, ErrClosed) {
		t.Fatalf("Get on closed page: %v", err)
	}
	w := p.NewValueWriter()
	if _, err := w.Write(make([]byte, 100_000)); err != nil {
		t.Fatal(err)
	}
	if _, _, err := w.Close(); !errors.Is(err, ErrClosed) {
		t.Fatalf("write on closed page: %v", err)
	}
}

func testPage(t testing.TB) *Page {
	r := openRepo(t, t.TempDir(), Options{})
	t.Cleanup(func() { r.Close() })
	return newPage(t, r)
}

// trimmedPage is testPage in a repository that trims its mappings
// (Options.Trim).
func trimmedPage(t testing.TB) *Page {
	r := openRepo(t, t.TempDir(), Options{Trim: true})
	t.Cleanup(func() { r.Close() })
	return newPage(t, r)
}

// newPage creates ledger l and page p in r and acquires the page.
func newPage(t testing.TB, r *Repository) *Page {
	t.Helper()
	if err := r.CreateLedger("l"); err != nil {
		t.Fatal(err)
	}
	if err := r.CreatePage("l", "p"); err != nil {
		t.Fatal(err)
	}
	p, err := r.Acquire("l", "p")
	if err != nil {
		t.Fatal(err)
	}
	return p
}

func countRows(t testing.TB, db *badger.DB, prefix string) int {
	n := 0
	err := db.View(func(txn *badger.Txn) error {
		it := txn.NewIterator(badger.IteratorOptions{Prefix: []byte(prefix)})
		defer it.Close()
		for it.Rewind(); it.Valid(); it.Next() {
			n++
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return n
}

func writeValue(t testing.TB, p *Page, data []byte) cas.ObjectIdentifier {
	w := p.NewValueWriter()
	for i := 0; i < len(data); i += 128 << 10 {
		if _, err := w.Write(data[i:min(len(data), i+128<<10)]); err != nil {
			t.Fatal(err)
		}
	}
	id, size, err := w.Close()
	if err != nil || size != uint64(len(data)) {
		t.Fatalf("close: %v size %d", err, size)
	}
	return id
}

func TestValueDedupAndEdit(t *testing.T) {
	p := testPage(t)
	// Random content, with no long repeats.
	data := testutil.Random(88172645463325252, 0, 64<<20)
	id := writeValue(t, p, data)
	rows := countRows(t, p.db, PrefixObjects)
	if id2 := writeValue(t, p, data); id2 != id || countRows(t, p.db, PrefixObjects) != rows {
		t.Fatalf("second copy added %d rows", countRows(t, p.db, PrefixObjects)-rows)
	}
	data[len(data)/2] ^= 0x55
	id3 := writeValue(t, p, data)
	added := countRows(t, p.db, PrefixObjects) - rows
	t.Logf("64 MiB value: %d pieces; a 1-byte edit added %d", rows, added)
	if id3 == id || added > 10 {
		t.Fatalf("1-byte edit in 64 MiB added %d pieces", added)
	}
	r, err := p.OpenValue(id3)
	if err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, 10)
	if _, err := r.ReadAt(buf, int64(len(data)/2-5)); err != nil || buf[5] != data[len(data)/2] {
		t.Fatalf("read back edit: %v", err)
	}
}

func TestCorruptObjectRow(t *testing.T) {
	p := testPage(t)
	data := make([]byte, 200_000)
	for i := range data {
		data[i] = byte(i * i >> 3)
	}
	writeValue(t, p, data)
	// Flip a byte of one stored chunk behind the store's back.
	err := p.db.Update(func(txn *badger.Txn) error {
		it := txn.NewIterator(badger.IteratorOptions{Prefix: []byte(PrefixObjects)})
		defer it.Close()
		for it.Rewind(); it.Valid(); it.Next() {
			d := cas.Digest(it.Item().Key()[len(PrefixObjects):])
			if d.IsIndex() {
				continue
			}
			v, _ := it.Item().ValueCopy(nil)
			v[0] ^= 1
			return txn.Set(it.Item().KeyCopy(nil), v)
		}
		return errors.New("no chunk")
	})
	if err != nil {
		t.Fatal(err)
	}
	// Badger's checksums are right (the row was written through it):
	// reads trust them; the scrub and fsck's row check hash the piece.
	next, read, damaged, err := p.Scrub(nil, 1<<30)
	if err != nil || next != nil || read == 0 || len(damaged) != 1 || cas.Digest(damaged[0]).IsIndex() {
		t.Fatalf("the scrub: %d bytes read, damaged %x, next %x, %v; want the one chunk changed", read, damaged, next, err)
	}
	if _, err := p.VerifyRows(nil); err == nil {
		t.Fatal("the row check passed a piece whose bytes do not match its digest")
	}
	// In batches, the same.
	var all [][]byte
	for next := []byte(nil); ; {
		var d [][]byte
		next, _, d, err = p.Scrub(next, 4096)
		if err != nil {
			t.Fatal(err)
		}
		all = append(all, d...)
		if next == nil {
			break
		}
	}
	if len(all) != 1 || string(all[0]) != string(damaged[0]) {
		t.Fatalf("a scrub in batches found %x, want %x", all, damaged)
	}
}

func TestCommitEncoding(t *testing.T) {
	root := btree.EmptyRoot
	first := FirstCommit()
	c1, err := NewCommit(100, root, first)
	if err != nil || c1.Generation != 1 {
		t.Fatal(err)
	}
	c2, _ := NewCommit(200, root, c1)
	c3, _ := NewCommit(150, root, first)
	m, err := NewCommit(999, root, c2, c3)
	if err != nil {
		t.Fatal(err)
	}
	if m.Generation != 3 || m.Timestamp != 200 {
		t.Fatalf("merge generation %d timestamp %d", m.Generation, m.Timestamp)
	}
	if string(m.Parents[0][:]) > string(m.Parents[1][:]) {
		t.Fatal("parents not sorted")
	}
	m2, _ := NewCommit(999, root, c3, c2)
	if m2.ID != m.ID {
		t.Fatal("merge id depends on parent order")
	}
	if CommitID(cas.Hash(m.Bytes)) != m.ID {
		t.Fatal("id is not the hash of the bytes")
	}
	d, err := DecodeCommit(m.ID, m.Bytes)
	if err != nil || d.Timestamp != m.Timestamp || d.Generation != m.Generation || !slices.Equal(d.Parents, m.Parents) || d.Root != root {
		t.Fatalf("decode: %+v %v", d, err)
	}
	bad := slices.Clone(m.Bytes)
	bad[len(bad)-1] ^= 1
	if _, err := DecodeCommit(m.ID, bad); err == nil {
		t.Fatal("corrupt commit accepted")
	}
	if _, err := NewCommit(1, root); err == nil {
		t.Fatal("commit without parents")
	}
}

func FuzzDecodeCommit(f *testing.F) {
	c, _ := NewCommit(5, btree.EmptyRoot, FirstCommit())
	f.Add(c.Bytes)
	f.Fuzz(func(t *testing.T, b []byte) {
		id := CommitID(cas.Hash(b))
		c, err := DecodeCommit(id, b)
		if err != nil {
			return
		}
		if c.Generation == 0 || len(c.Parents) == 0 {
			t.Fatal("accepted an invalid commit")
		}
	})
}

func FuzzJournalRowKey(f *testing.F) {
	f.Add([]byte("journals/I0123456789abcdef/entry/k"))
	f.Fuzz(func(t *testing.T, b []byte) {
		id, rest, ok := ParseJournalRow(b)
		if !ok {
			return
		}
		if string(b) != journalPrefix(id)+rest {
			t.Fatalf("%q parsed as %q + %q", b, id, rest)
		}
	})
}

// A value's last pieces land with the journal rows its CommitJournal is
// given, in one transaction: before the commit neither is in the db, after
// it both are. Rows that fit in a transaction but not with the pieces follow
// them in one of their own.
func TestValueCommitWithRows(t *testing.T) {
	p := testPage(t)
	jid := func(name string) JournalID { return JournalID(fmt.Sprintf("I%016x", len(name))) }
	entries := func(name string, n int) []JournalEntry {
		es := make([]JournalEntry, n)
		for i := range es {
			es[i] = JournalEntry{Key: fmt.Sprintf("%05d", i), Value: []byte("D")}
		}
		return es
	}
	// As many rows as one transaction takes, by Badger's own count.
	fit := 0
	txn := p.db.NewTransaction(true)
	for txn.Set(journalEntryKey(jid("fit"), fmt.Sprintf("%05d", fit)), []byte("D")) == nil {
		fit++
	}
	txn.Discard()
	for _, tc := range []struct {
		name       string
		size, rows int
	}{{"one row", 40_000, 1}, {"rows beyond the pieces' transaction", 6 << 20, fit - 1}} {
		t.Run(tc.name, func(t *testing.T) {
			data := testutil.Random(uint64(tc.rows), 1, tc.size)
			w := p.NewValueWriter()
			if _, err := w.Write(data); err != nil {
				t.Fatal(err)
			}
			id, _, err := w.End()
			if err != nil {
				t.Fatal(err)
			}
			if _, err := p.Get(id.Digest, nil); err == nil {
				t.Fatal("the value's root piece is in the db before Commit")
			}
			if err := w.CommitJournal(jid(tc.name), entries(tc.name, tc.rows)); err != nil {
				t.Fatal(err)
			}
			w.Discard() // a no-op after Commit
			if got := countRows(t, p.db, journalEntryPrefix(jid(tc.name))); got != tc.rows {
				t.Fatalf("%d rows after Commit, want %d", got, tc.rows)
			}
			r, err := p.OpenValue(id)
			if err != nil {
				t.Fatal(err)
			}
			got, err := io.ReadAll(io.NewSectionReader(r, 0, int64(len(data))))
			if err != nil || !bytes.Equal(got, data) {
				t.Fatalf("value read back after Commit: %d bytes, %v", len(got), err)
			}
		})
	}
}

// A db whose memtable cannot be flushed (its directory deleted) is given up
// on after the close timeout, the other dbs still close, and trimming stops:
// the abandoned close may unmap its files at any later time. The timeout is
// one a loaded machine's healthy closes stay within (200 ms was not, beside
// the mount tests).
func TestCloseGivesUpOnStuckDB(t *testing.T) {
	dir := t.TempDir()
	r := openRepo(t, dir, Options{CloseTimeout: 2 * time.Second})
	p := newPage(t, r)
	writeValue(t, p, bytes.Repeat([]byte("x"), 4096))
	pageDir := p.db.Opts().Dir
	if err := os.RemoveAll(pageDir); err != nil {
		t.Fatal(err)
	}
	r.Release(p)
	start := time.Now()
	err := r.Close()
	if !errors.Is(err, errCloseStuck) || !strings.Contains(err.Error(), pageDir) {
		t.Fatalf("Close: %v, want the page db %s to be given up on", err, pageDir)
	}
	if strings.Contains(err.Error(), "page_usage_db") {
		t.Fatalf("Close gave up on the repository db too: %v", err)
	}
	if d := time.Since(start); d > 10*time.Second {
		t.Fatalf("Close took %v", d)
	}
	if !r.trim.Disabled() {
		t.Fatal("trimming still on after a close was given up on")
	}
	// Given its directory back, the abandoned db finishes closing, and
	// its goroutines end (TestMain checks that none outlives the tests).
	must(t, os.MkdirAll(pageDir, 0o755))
	r.mu.Lock()
	abandoned := r.abandoned
	r.mu.Unlock()
	if len(abandoned) != 1 {
		t.Fatalf("%d closes given up on, want 1", len(abandoned))
	}
	select {
	case <-abandoned[0]:
	case <-time.After(30 * time.Second):
		t.Fatal("the abandoned db did not finish closing 30 s after its directory came back")
	}
}

func must(t testing.TB, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

// A page's first push marks every commit of its history synced, more
// deletes than one Badger transaction holds: MarkSynced takes them all,
// and sets the sync metadata once they are gone.
func TestMarkSyncedManyCommits(t *testing.T) {
	p := testPage(t)
	const n = 50_000
	ids := make([]CommitID, n)
	err := batched(p.db, n, func(txn *badger.Txn, i int) error {
		copy(ids[i][:], fmt.Sprintf("commit %08d", i))
		return txn.Set(unsyncedCommitKey(ids[i]), EncodeUint64(uint64(i)))
	})
	if err != nil {
		t.Fatal(err)
	}
	if err := p.MarkSynced(nil, ids, map[string][]byte{"pushed": []byte("all")}); err != nil {
		t.Fatal(err)
	}
	left := 0
	if err := p.UnsyncedCommits(func(CommitID) error { left++; return nil }); err != nil {
		t.Fatal(err)
	}
	if v, ok, err := p.SyncMetadata("pushed"); left != 0 || !ok || string(v) != "all" || err != nil {
		t.Fatalf("after MarkSynced of %d commits: %d left unsynced, metadata %q %v %v", n, left, v, ok, err)
	}
}

// A device's first pull can bring a page's whole history in one batch, more
// commit rows than one Badger transaction holds: Adopt lands them all, and
// the head moves to the last.
func TestAdoptManyCommits(t *testing.T) {
	p := testPage(t)
	const n = 30_000
	commits := make([]*Commit, n)
	parent := FirstCommit()
	for i := range commits {
		c, err := NewCommit(int64(i+1), btree.EmptyRoot, parent)
		if err != nil {
			t.Fatal(err)
		}
		commits[i], parent = c, c
	}
	if err := p.Adopt(commits, nil, commits[n-1]); err != nil {
		t.Fatal(err)
	}
	if h, err := p.Head(); err != nil || h.ID != commits[n-1].ID {
		t.Fatalf("head after adopting %d commits: %v, %v", n, h, err)
	}
	for _, c := range []*Commit{commits[0], commits[n/2], commits[n-1]} {
		if ok, err := p.HasCommit(c.ID); !ok || err != nil {
			t.Fatalf("commit %d of %d not held after Adopt (%v)", c.Generation, n, err)
		}
	}
}

// A page moved to another ledger takes its db along; a crash between the
// move of its directory and the move of its rows is finished at the next
// open, and a crash before its directory moved leaves it where it was:
// the page is never dropped as gone.
func TestMovePageAndItsInterruptions(t *testing.T) {
	dir := t.TempDir()
	r := openRepo(t, dir, Options{})
	must := fatalOn(t)
	for _, l := range []string{"l1", "l2"} {
		must(r.CreateLedger(l))
	}
	data := []byte("a piece the page's db holds, longer than an inline piece's bound of bytes")
	d := cas.ComputeDigest(cas.KindBlob, false, data)
	for _, p := range []string{"moved", "cut", "early"} {
		must(r.CreatePage("l1", p))
		pg, err := r.Acquire("l1", p)
		must(err)
		pw := pg.NewPieceWriter()
		must(pw.Put(d, data))
		must(pw.Flush())
		r.Release(pg)
	}
	holds := func(l, p string) {
		t.Helper()
		pg, err := r.Acquire(l, p)
		must(err)
		defer r.Release(pg)
		if _, err := pg.Get(d, nil); err != nil {
			t.Fatalf("%s/%s lacks the page's piece: %v", l, p, err)
		}
	}
	must(r.MovePage("l1", "moved", "l2", "m"))
	if err := r.MovePage("l1", "cut", "nosuch", "c"); !errors.Is(err, ErrNotFound) {
		t.Fatalf("a move into a missing ledger: %v, want ErrNotFound", err)
	}
	if err := r.MovePage("l1", "cut", "l2", "m"); !errors.Is(err, ErrExists) {
		t.Fatalf("a move onto a page: %v, want ErrExists", err)
	}
	holds("l2", "m")

	// "cut": its directory moved, then a crash; "early": a crash before.
	cut := pageMove{Ledger: "l1", Page: "cut", ToLedger: "l2", To: "c"}
	early := pageMove{Ledger: "l1", Page: "early", ToLedger: "l2", To: "e"}
	for _, m := range []pageMove{cut, early} {
		b, err := json.Marshal(m)
		must(err)
		must(r.db.Update(func(txn *badger.Txn) error { return txn.Set(movingKey(m.Ledger, m.Page), b) }))
	}
	must(r.evict("l1", "cut")) // as movePage does before the directory moves
	must(r.moveDir(cut))
	must(r.Close())
	r = openRepo(t, dir, Options{})
	defer r.Close()
	want := map[string]bool{"l1/early": true, "l2/c": true, "l2/m": true}
	for _, l := range []string{"l1", "l2"} {
		ps, err := r.Pages(l)
		must(err)
		for _, p := range ps {
			if !want[l+"/"+p] {
				t.Errorf("after the crashes: page %s/%s", l, p)
			}
			delete(want, l+"/"+p)
		}
	}
	if len(want) > 0 {
		t.Fatalf("after the crashes, missing pages: %v", want)
	}
	holds("l2", "c")
	holds("l1", "early")
	if rows, err := r.list(prefixMoving); err != nil || len(rows) > 0 {
		t.Fatalf("move rows left: %v %v", rows, err)
	}
}

// Access times kept for a page's files read back per page and key, and
// survive a reopen; another page's, or a key never read, have none.
func TestLocalAtimes(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	r := openRepo(t, dir, Options{})
	if err := r.SetLocalAtimes("l", "p", map[string]int64{"a": 10, "d/b": 20}); err != nil {
		t.Fatal(err)
	}
	r.Close()
	r = openRepo(t, dir, Options{})
	defer r.Close()
	for _, c := range []struct {
		page, key string
		ns        int64
		ok        bool
	}{{"p", "a", 10, true}, {"p", "d/b", 20, true}, {"p", "c", 0, false}, {"q", "a", 0, false}} {
		ns, ok, err := r.LocalAtime("l", c.page, c.key)
		if err != nil || ok != c.ok || ns != c.ns {
			t.Errorf("l/%s %s: %d, %v, %v; want %d, %v", c.page, c.key, ns, ok, err, c.ns, c.ok)
		}
	}
}

// A read of a page's heads that a pull's move of them overtakes (Adopt
// between the read of the db and its caching) does not cache what it read
// over what the move left: the next read shows the new head. Before, a
// mount that looked up a page as it was being pulled showed it empty until
// the page was closed.
func TestHeadsReadOvertakenByAMove(t *testing.T) {
	p := testPage(t)
	c, err := NewCommit(1, btree.EmptyRoot, FirstCommit())
	if err != nil {
		t.Fatal(err)
	}
	p.hmu.Lock()
	p.heads = nil // as a page just opened holds
	p.hmu.Unlock()
	p.headsRead = func() {
		p.headsRead = nil
		p.Lock()
		defer p.Unlock()
		if err := p.Adopt([]*Commit{c}, nil, c); err != nil {
			t.Error(err)
		}
	}
	if h, err := p.Head(); err != nil || h.ID != FirstCommitID {
		t.Fatalf("head read before the move: %v, %v", h, err)
	}
	if h, err := p.Head(); err != nil || h.ID != c.ID {
		t.Fatalf("head after a move that overtook a read: %v, %v; want %v", h, err, c.ID)
	}
}

// A page looked up while it is renamed, moved or deleted is found where the
// change left it, or not found: never opened half-moved, which had Badger
// write into a directory on its way to the new name or the trash, and
// left a stray db behind.
func TestPageLookedUpWhileItMoves(t *testing.T) {
	dir := t.TempDir()
	r := openRepo(t, dir, Options{})
	defer r.Close()
	must := fatalOn(t)
	must(r.CreateLedger("l"))
	must(r.CreateLedger("m"))
	must(r.CreatePage("l", "a"))
	stop := make(chan struct{})
	errs := make(chan error, 1)
	var wg sync.WaitGroup
	for _, name := range [][2]string{{"l", "a"}, {"l", "b"}, {"m", "a"}, {"k", "a"}} {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				select {
				case <-stop:
					return
				default:
				}
				p, err := r.Acquire(name[0], name[1])
				if err == nil {
					r.Release(p)
				} else if !errors.Is(err, ErrNotFound) {
					select {
					case errs <- fmt.Errorf("acquire %s/%s: %w", name[0], name[1], err):
					default:
					}
				}
			}
		}()
	}
	// Each change is tried until no lookup holds the page, and undone
	// the same way; a try that found the page in use changes nothing.
	retry := func(change func() error) {
		t.Helper()
		for {
			err := change()
			if !errors.Is(err, ErrBusy) {
				must(err)
				return
			}
		}
	}
	for i := 0; i < 20; i++ {
		retry(func() error { return r.RenamePage("l", "a", "b") })
		retry(func() error { return r.RenamePage("l", "b", "a") })
		retry(func() error { return r.MovePage("l", "a", "m", "a") })
		retry(func() error { return r.MovePage("m", "a", "l", "a") })
		retry(func() error { return r.RenameLedger("l", "k") })
		retry(func() error { return r.RenameLedger("k", "l") })
		retry(func() error { return r.DeletePage("l", "a") })
		must(r.CreatePage("l", "a"))
	}
	close(stop)
	wg.Wait()
	select {
	case err := <-errs:
		t.Fatal(err)
	default:
	}
	// Every db directory belongs to a page.
	for _, l := range []string{"l", "m", "k"} {
		ids := map[string]bool{}
		ps, err := r.Pages(l)
		must(err)
		for _, p := range ps {
			ids[PageIDFor(p).String()] = true
		}
		ents, _ := os.ReadDir(filepath.Join(dir, SerializationVersion, "ledgers", ledgerFolder(l)))
		for _, e := range ents {
			if !ids[e.Name()] {
				t.Errorf("ledger %s holds a db directory %s of no page (pages: %v)", l, e.Name(), ps)
			}
		}
	}
}

// DeleteTransient deletes every piece marked transient, in batches, and
// only those: pieces marked local since, and deleted rows among the
// transient ones, stay as they were.
func TestDeleteTransient(t *testing.T) {
	p := testPage(t)
	must := fatalOn(t)
	var transient, local []cas.Digest
	pw := p.NewPieceWriter()
	for i := range 5000 {
		data := []byte(fmt.Sprintf("piece %d, longer than an inline piece's bound of bytes", i))
		d := cas.ComputeDigest(cas.KindBlob, false, data)
		must(pw.Put(d, data))
		if i%3 == 0 {
			local = append(local, d)
		} else {
			transient = append(transient, d)
		}
	}
	must(pw.Flush())
	must(p.SetStatus(Transient, slices.Concat(transient, local)))
	must(p.SetStatus(Local, local)) // tombstones among the transient rows
	n, err := p.DeleteTransient()
	must(err)
	if n != len(transient) {
		t.Errorf("deleted %d pieces, want the %d transient ones", n, len(transient))
	}
	for _, d := range transient {
		if ok, err := p.Has(d); err != nil || ok {
			t.Fatalf("transient piece %x left (%v)", d, err)
		}
	}
	for _, d := range local {
		if ok, err := p.Has(d); err != nil || !ok {
			t.Fatalf("local piece %x deleted (%v)", d, err)
		}
	}
	if n, err := p.DeleteTransient(); err != nil || n != 0 {
		t.Errorf("a second pass deleted %d (%v), want none", n, err)
	}
}

// TestScanSyncStateAfter: a scan in runs, each from the key after the last
// one read, reads every row under its prefix once, in order, and none of
// another prefix, whatever the runs' length.
func TestScanSyncStateAfter(t *testing.T) {
	r := openRepo(t, t.TempDir(), Options{})
	defer r.Close()
	want := map[string][]byte{"other": {1}, "p0": {2}}
	var keys []string
	for i := range 50 {
		k := fmt.Sprintf("p/%03d", i*7%50)
		want[k] = []byte(k)
		keys = append(keys, k)
	}
	// A key that sorts right after one read: "p/001" then "p/001x".
	want["p/001x"] = []byte("x")
	keys = append(keys, "p/001x")
	slices.Sort(keys)
	fatalOn(t)(r.SetSyncState(want))
	for _, run := range []int{1, 3, 50, 100} {
		var got []string
		after := ""
		for {
			n := 0
			err := r.ScanSyncStateAfter("p/", after, func(k string, v []byte) error {
				if n == run {
					return errStopTest
				}
				if string(v) != string(want[k]) {
					t.Fatalf("row %s holds %q", k, v)
				}
				got, after, n = append(got, k), k, n+1
				if len(got) > len(keys) {
					t.Fatalf("runs of %d read %d rows of %d: %v", run, len(got), len(keys), got)
				}
				return nil
			})
			if err != nil && !errors.Is(err, errStopTest) {
				t.Fatal(err)
			}
			if err == nil {
				break
			}
		}
		if !slices.Equal(got, keys) {
			t.Fatalf("runs of %d read %v, want %v", run, got, keys)
		}
	}
}

var errStopTest = errors.New("stop")
