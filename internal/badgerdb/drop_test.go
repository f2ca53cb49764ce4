package badgerdb

import (
	"fmt"
	"strings"
	"testing"

	"github.com/dgraph-io/badger/v4"

	"github.com/ledgerfs/ledgerfs/internal/testutil"
)

// vlogRSS returns the resident bytes of this process's mappings of value
// logs under dir.
func vlogRSS(t *testing.T, dir string) int64 {
	t.Helper()
	n, err := testutil.MappedRSS(dir, ".vlog")
	if err != nil {
		t.Fatal(err)
	}
	return n
}

// A read that drops what it mapped of a value log leaves the process's
// share of it small, where reads that do not leave it growing; what was
// dropped stays in the page cache, and reads the same.
func TestDropKeepsValueLogPagesOut(t *testing.T) {
	dir := t.TempDir()
	const n, size = 1024, 16 << 10
	db, err := badger.Open(Options(dir, false))
	if err != nil {
		t.Fatal(err)
	}
	val := func(i int) []byte { return []byte(strings.Repeat(fmt.Sprintf("%08d", i), size/8)) }
	wb := db.NewWriteBatch()
	for i := range n {
		if err := wb.Set([]byte(fmt.Sprint("k", i)), val(i)); err != nil {
			t.Fatal(err)
		}
	}
	if err := wb.Flush(); err != nil {
		t.Fatal(err)
	}
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}

	read := func(drop bool) (rss int64, dropped int) {
		db, err := badger.Open(Options(dir, false))
		if err != nil {
			t.Fatal(err)
		}
		defer db.Close()
		var d Dropper
		err = db.View(func(txn *badger.Txn) error {
			for i := 0; i < n; i += 3 { // not in order: read-around maps the pages between
				it, err := txn.Get([]byte(fmt.Sprint("k", i)))
				if err != nil {
					return err
				}
				err = it.Value(func(v []byte) error {
					if string(v) != string(val(i)) {
						return fmt.Errorf("value %d differs", i)
					}
					if drop && d.Drop(v) {
						dropped++
					}
					return nil
				})
				if err != nil {
					return err
				}
			}
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
		return vlogRSS(t, dir), dropped
	}
	kept, _ := read(false)
	left, dropped := read(true)
	if dropped != (n+2)/3 {
		t.Fatalf("dropped %d of %d reads", dropped, (n+2)/3)
	}
	if kept < 4<<20 || left > kept/4 {
		t.Fatalf("value-log pages resident after reads of %d KiB: %d KiB kept without drops, %d KiB with", n*size/3>>10, kept>>10, left>>10)
	}
	// Dropped from the process, not from the page cache, and read again
	// the same (checked by read).
	read(true)
}

// A Dropper gives no advice where its value log was and other memory is
// now: memory mapped at a value log's old address keeps its contents, and
// so does memory of the Go heap.
func TestDropLeavesOtherMemoryAlone(t *testing.T) {
	const size = 4 << 20
	shared := mappedLog(t, t.TempDir(), size)
	var d Dropper
	if !d.Drop(shared[size/2 : size/2+ValueThreshold]) {
		t.Fatal("no drop of a value in a shared value-log mapping")
	}
	mem := reuseAddresses(t, shared)
	heap := make([]byte, 4*ValueReadAround)
	fillPattern(heap)
	for _, v := range [][]byte{mem[size/2 : size/2+ValueThreshold], heap[ValueReadAround : ValueReadAround+ValueThreshold]} {
		if d.Drop(v) {
			t.Fatal("dropped pages of memory that is no value log")
		}
	}
	checkPattern(t, mem, "private memory at a dropped log's old address")
	checkPattern(t, heap, "the heap")
}
