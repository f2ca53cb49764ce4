package store

import (
	"fmt"
	"testing"
	"time"

	"github.com/ledgerfs/ledgerfs/internal/badgerdb"
	"github.com/ledgerfs/ledgerfs/internal/testutil"

	"github.com/dgraph-io/badger/v4"
)

// Writing a large value leaves the value log's pages out of the process:
// a writer keeps to badgerdb.TrimAbove, whatever the readers' limit would allow.
// The content is made as it is written, so that the heap stays small and
// leaves readers most of rssBudget.
func TestValueLogPagesAreTrimmed(t *testing.T) {
	p := trimmedPage(t)
	before := fileRSS()
	peak := before
	w := p.NewValueWriter()
	buf := make([]byte, 1<<20)
	for i := range 300 {
		peak = max(peak, fileRSS())
		testutil.FillRandom(buf, 1, uint64(i))
		if _, err := w.Write(buf); err != nil {
			t.Fatal(err)
		}
	}
	if _, _, err := w.Close(); err != nil {
		t.Fatal(err)
	}
	grown := (peak - before) >> 20
	t.Logf("file-backed RSS grew by up to %d MiB writing 300 MiB", grown)
	if grown > 2*badgerdb.TrimAbove>>20 {
		t.Fatalf("file-backed RSS grew by up to %d MiB writing 300 MiB", grown)
	}
}

// mappedKiB sums the resident KiB of this process's mappings of files under
// dir with the given suffix.
func mappedKiB(t testing.TB, dir, suffix string) int {
	n, err := testutil.MappedRSS(dir, suffix)
	if err != nil {
		t.Fatal(err)
	}
	return int(n >> 10)
}

// readTables writes rows small enough to stay in the tables, makes them
// tables, and reads every row back through the tables' mappings: traffic the
// trimmer does not count.
func readTables(t *testing.T, p *Page) {
	t.Helper()
	db := p.db
	val := make([]byte, 200) // below the value threshold: in the tables
	for b := range 40 {
		wb := db.NewWriteBatch()
		for i := range 5000 {
			val[0], val[1] = byte(i), byte(b)
			if err := wb.Set([]byte(fmt.Sprintf("t/%02d/%05d", b, i)), val); err != nil {
				t.Fatal(err)
			}
		}
		if err := wb.Flush(); err != nil {
			t.Fatal(err)
		}
	}
	// Make the memtables tables, then read every row through them.
	if err := db.Flatten(1); err != nil {
		t.Fatal(err)
	}
	if err := db.View(func(txn *badger.Txn) error {
		it := txn.NewIterator(badger.DefaultIteratorOptions)
		defer it.Close()
		for it.Rewind(); it.Valid(); it.Next() {
			if _, err := it.Item().ValueCopy(nil); err != nil {
				return err
			}
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
}

// Tables read through their mappings leave the process at a trim if the
// file-backed RSS is above the limit once the value logs' pages are gone;
// below it they stay, as every get reads them.
func TestTablePagesAreTrimmed(t *testing.T) {
	p := trimmedPage(t)
	p.repo.trim.Hold() // only this test's trims
	defer p.repo.trim.Release()
	writeValue(t, p, benchBytes(8<<20))
	readTables(t, p)
	dir := p.repo.trim.Dir()
	trim := func(limit int64) (sst, vlog int) {
		t.Helper()
		p.repo.trim.SetLimit(limit)
		if err := p.repo.trim.Trim(false); err != nil {
			t.Fatal(err)
		}
		return mappedKiB(t, dir, ".sst"), mappedKiB(t, dir, ".vlog")
	}
	before := mappedKiB(t, dir, ".sst")
	kept, vlog := trim(fileRSS() + 256<<20)
	t.Logf("below the limit: resident table pages %d KiB before the trim, %d KiB after; value log %d KiB after", before, kept, vlog)
	if before < 4<<10 || kept < before*3/4 || vlog > 1<<10 {
		t.Fatalf("below the limit: resident table pages %d KiB before the trim, %d KiB after; value log %d KiB after", before, kept, vlog)
	}
	after, _ := trim(1)
	t.Logf("above the limit: resident table pages %d KiB after the trim", after)
	if after > before/8 {
		t.Fatalf("above the limit: resident table pages %d KiB before the trim, %d KiB after", before, after)
	}
}

// A reader whose pages fit under the limit keeps them mapped however much
// it reads: a fault costs more than the read. Above the limit its traffic
// trims them.
func TestReadsTrimOnlyAboveTheLimit(t *testing.T) {
	p := trimmedPage(t)
	chunks := storedChunks(t, p, writeValue(t, p, benchBytes(8<<20)))
	readAll := func(times int) {
		t.Helper()
		for range times {
			for _, d := range chunks {
				if _, err := p.Get(d, nil); err != nil {
					t.Fatal(err)
				}
			}
		}
		p.repo.trim.Hold() // wait for a periodic trim under way
		p.repo.trim.Release()
	}
	// Under half the limit (Pressed).
	p.repo.trim.SetLimit(2 * (fileRSS() + 256<<20))
	readAll(1)
	mapped := vlogMapped(t, p)
	// Each plain get counts the read-around: this is many trims' worth.
	readAll(8)
	kept := vlogMapped(t, p)
	t.Logf("below the limit: value log mapped %d KiB after one read of each chunk, %d KiB after eight more", mapped>>10, kept>>10)
	if mapped < 6<<20 || kept < mapped*3/4 {
		t.Fatalf("below the limit: value log mapped %d KiB after one read of each chunk, %d KiB after eight more", mapped>>10, kept>>10)
	}
	// Above the limit, read until a get trims (it starts the count anew),
	// and let a periodic trim under way finish.
	p.repo.trim.SetLimit(1)
	trimmed := false
	for _, d := range chunks {
		before := p.repo.trim.Traffic()
		if _, err := p.Get(d, nil); err != nil {
			t.Fatal(err)
		}
		if p.repo.trim.Traffic() < before {
			trimmed = true
			break
		}
	}
	p.repo.trim.Hold()
	p.repo.trim.Release()
	left := vlogMapped(t, p)
	t.Logf("above the limit: value log mapped %d KiB after a trim the reads started", left>>10)
	if !trimmed || left > mapped/4 {
		t.Fatalf("above the limit: reads of %d chunks started a trim: %v; value log mapped %d KiB after it, %d KiB before", len(chunks), trimmed, left>>10, mapped>>10)
	}
}

// Pages mapped by reads the trimmer does not count, such as compactions',
// leave the process at the next periodic check.
func TestPeriodicTrim(t *testing.T) {
	p := trimmedPage(t)
	p.repo.trim.SetLimit(badgerdb.TrimAbove) // what a writer's heap leaves it
	p.repo.trim.Hold()                       // no trim until the pages are counted
	readTables(t, p)
	dir := p.repo.trim.Dir()
	before := mappedKiB(t, dir, ".sst")
	rss := fileRSS()
	p.repo.trim.Release()
	if rss < badgerdb.TrimAbove {
		t.Fatalf("file-backed RSS %d KiB after reading the tables: below the %d KiB the check trims from", rss>>10, badgerdb.TrimAbove>>10)
	}
	after := before
	for deadline := time.Now().Add(4 * badgerdb.TrimCheck); time.Now().Before(deadline) && after > before/8; {
		time.Sleep(badgerdb.TrimCheck / 10)
		after = mappedKiB(t, dir, ".sst")
	}
	t.Logf("resident table pages: %d KiB after reading, %d KiB after the periodic check", before, after)
	if before < 4<<10 || after > before/8 {
		t.Fatalf("resident table pages: %d KiB after reading, %d KiB after the periodic check", before, after)
	}
}

// fileRSS returns the process's resident file-backed and shared memory in
// bytes.
func fileRSS() int64 {
	_, file := badgerdb.RSS()
	return file
}

// Past half the readers' limit, a plain get drops the value-log pages it
// mapped as soon as it has copied its value (they stay in the page cache),
// and counts only its bytes: a random reader of much data no longer waits
// for trims, which take the pages out of the page cache too.
func TestPressedReadsDropTheirPages(t *testing.T) {
	p := trimmedPage(t)
	chunks := storedChunks(t, p, writeValue(t, p, benchBytes(8<<20)))
	p.repo.trim.SetLimit(1)
	t.Cleanup(func() { p.repo.trim.SetLimit(0) })
	if !p.repo.trim.Pressed() {
		t.Fatal("no check found the mapped pages past half a limit of 1 byte")
	}
	// No trim from here: pages leave the process only with their reads.
	p.repo.trim.Hold()
	defer p.repo.trim.Release()
	before, traffic := vlogMapped(t, p), p.repo.trim.Traffic()
	var n, want int64
	for _, d := range chunks {
		v, err := p.Get(d, nil)
		if err != nil {
			t.Fatal(err)
		}
		n += int64(len(v))
		if len(v) >= badgerdb.ValueThreshold {
			want += int64(len(v))
		} else {
			// Kept in the tables (a file's last chunk may be that
			// short): no value log to drop, the read-around counted.
			want += badgerdb.ValueReadAround
		}
	}
	after := vlogMapped(t, p)
	if counted := p.repo.trim.Traffic() - traffic; counted != want {
		t.Errorf("gets of %d bytes counted %d bytes, want %d", n, counted, want)
	}
	if after > before+1<<20 {
		t.Errorf("value log mapped %d KiB before gets of %d KiB, %d KiB after", before>>10, n>>10, after>>10)
	}
}
