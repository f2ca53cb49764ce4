package mount_test

import (
	"bytes"
	"os"
	"path/filepath"
	"testing"
)

// A file written through the mount keeps its pages in the kernel's cache
// while it is written: each write moves the file's mtime, and a stat after
// it (a database's, between transactions) must not make the kernel drop
// the pages it holds, or every later read of them comes to the server.
// Only a change the kernel did not make drops them (see catchUp).
func TestWritesKeepTheKernelsPages(t *testing.T) {
	t.Parallel()
	s := mountPlain(t, t.TempDir())
	pg := s.page("c", "p")
	const size, page, rounds = 1 << 20, 4096, 40
	data := content(11, size)
	f, err := os.Create(filepath.Join(pg, "db"))
	must(t, err)
	defer f.Close()
	_, err = f.Write(data)
	must(t, err)
	must(t, f.Sync())
	// Reading .stats makes reads of its own that the next reading
	// counts: first, how many.
	first := statsOf(t, s.mnt)
	before := statsOf(t, s.mnt)
	buf := make([]byte, page)
	for i := range rounds {
		// A transaction: one page written, the file's size checked,
		// another page read.
		copy(data[:page], content(100+i, page))
		_, err := f.WriteAt(data[:page], 0)
		must(t, err)
		_, err = f.Stat()
		must(t, err)
		off := int64(page + i*(size-page)/rounds)
		off -= off % page
		_, err = f.ReadAt(buf, off)
		must(t, err)
		if !bytes.Equal(buf, data[off:off+page]) {
			t.Fatalf("round %d: the page at %d reads other bytes", i, off)
		}
	}
	after := statsOf(t, s.mnt)
	const reads = `ledgerfs_fuse_op_duration_seconds_count{op="read"}`
	const getattrs = `ledgerfs_fuse_op_duration_seconds_count{op="getattr"}`
	if n := after[getattrs] - before[getattrs]; n < rounds/2 {
		t.Fatalf("%v stats of %d after a write each reached the server: the test shows nothing", n, rounds)
	}
	// Pages written in full are in the kernel's cache; a few may be read
	// if memory is short.
	own := before[reads] - first[reads]
	if n := after[reads] - before[reads] - own; n > rounds/4 {
		t.Fatalf("%v of %d reads of pages the kernel wrote reached the server", n, rounds)
	}
}
