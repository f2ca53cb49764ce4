package store

import (
	"fmt"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"
	"unsafe"

	"github.com/dgraph-io/badger/v4"
	"golang.org/x/sys/unix"
)

// procStatusKiB reads a KiB figure (VmRSS, RssFile, ...) of this process.
func procStatusKiB(t testing.TB, field string) int {
	b, err := os.ReadFile("/proc/self/status")
	if err != nil {
		t.Fatal(err)
	}
	for _, l := range strings.Split(string(b), "\n") {
		if f := strings.Fields(l); len(f) >= 2 && f[0] == field+":" {
			n, _ := strconv.Atoi(f[1])
			return n
		}
	}
	t.Fatalf("no %s in /proc/self/status", field)
	return 0
}

// Writing a large value leaves the value log's pages out of the process:
// a writer keeps to trimAbove, whatever the readers' limit would allow.
// The content is made as it is written, so that the heap stays small and
// leaves readers most of rssBudget.
func TestValueLogPagesAreTrimmed(t *testing.T) {
	p := testPage(t)
	before := fileRSS()
	peak := before
	w := p.NewValueWriter()
	buf := make([]byte, 1<<20)
	seed := uint64(1)
	for range 300 {
		peak = max(peak, fileRSS())
		for i := 0; i+8 <= len(buf); i += 8 {
			seed = seed*6364136223846793005 + 1442695040888963407
			for k := range 8 {
				buf[i+k] = byte(seed >> (8 * k))
			}
		}
		if _, err := w.Write(buf); err != nil {
			t.Fatal(err)
		}
	}
	if _, _, err := w.Close(); err != nil {
		t.Fatal(err)
	}
	total, file := rss()
	grown := (peak - before) >> 20
	t.Logf("file-backed RSS grew by up to %d MiB writing 300 MiB; a reader's limit would be %d MiB", grown, limit(total, file)>>20)
	if grown > 2*trimAbove>>20 {
		t.Fatalf("file-backed RSS grew by up to %d MiB writing 300 MiB", grown)
	}
}

// mappedKiB sums the resident KiB of this process's mappings of files under
// dir with the given suffix.
func mappedKiB(t testing.TB, dir, suffix string) int {
	b, err := os.ReadFile("/proc/self/smaps")
	if err != nil {
		t.Fatal(err)
	}
	total, in := 0, false
	for _, l := range strings.Split(string(b), "\n") {
		f := strings.Fields(l)
		switch {
		case len(f) >= 5 && strings.Contains(f[0], "-") && !strings.HasSuffix(f[0], ":"):
			in = len(f) >= 6 && strings.HasPrefix(f[5], dir) && strings.HasSuffix(f[5], suffix)
		case in && len(f) >= 2 && f[0] == "Rss:":
			n, _ := strconv.Atoi(f[1])
			total += n
		}
	}
	return total
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
	p := testPage(t)
	p.repo.trim.running.Lock() // only this test's trims
	defer p.repo.trim.running.Unlock()
	writeValue(t, p, benchBytes(8<<20))
	readTables(t, p)
	dir := p.repo.trim.dir
	trim := func(limit int64) (sst, vlog int) {
		t.Helper()
		p.repo.trim.above.Store(limit)
		if err := p.repo.trim.trim(false); err != nil {
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
	p := testPage(t)
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
		p.repo.trim.running.Lock() // wait for a periodic trim under way
		p.repo.trim.running.Unlock()
	}
	p.repo.trim.above.Store(fileRSS() + 256<<20)
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
	p.repo.trim.above.Store(1)
	trimmed := false
	for _, d := range chunks {
		before := p.repo.trim.traffic.Load()
		if _, err := p.Get(d, nil); err != nil {
			t.Fatal(err)
		}
		if p.repo.trim.traffic.Load() < before {
			trimmed = true
			break
		}
	}
	p.repo.trim.running.Lock()
	p.repo.trim.running.Unlock()
	left := vlogMapped(t, p)
	t.Logf("above the limit: value log mapped %d KiB after a trim the reads started", left>>10)
	if !trimmed || left > mapped/4 {
		t.Fatalf("above the limit: reads of %d chunks started a trim: %v; value log mapped %d KiB after it, %d KiB before", len(chunks), trimmed, left>>10, mapped>>10)
	}
}

// Pages mapped by reads the trimmer does not count, such as compactions',
// leave the process at the next periodic check.
func TestPeriodicTrim(t *testing.T) {
	p := testPage(t)
	p.repo.trim.above.Store(trimAbove) // what a writer's heap leaves it
	p.repo.trim.running.Lock()         // no trim until the pages are counted
	readTables(t, p)
	dir := p.repo.trim.dir
	before := mappedKiB(t, dir, ".sst")
	rss := fileRSS()
	p.repo.trim.running.Unlock()
	if rss < trimAbove {
		t.Fatalf("file-backed RSS %d KiB after reading the tables: below the %d KiB the check trims from", rss>>10, trimAbove>>10)
	}
	after := before
	for deadline := time.Now().Add(4 * trimCheck); time.Now().Before(deadline) && after > before/8; {
		time.Sleep(trimCheck / 10)
		after = mappedKiB(t, dir, ".sst")
	}
	t.Logf("resident table pages: %d KiB after reading, %d KiB after the periodic check", before, after)
	if before < 4<<10 || after > before/8 {
		t.Fatalf("resident table pages: %d KiB after reading, %d KiB after the periodic check", before, after)
	}
}

// The limit leaves mapped pages what the rest of the process leaves of the
// budget, and never less than trimAbove.
func TestLimitFollowsTheRestOfTheProcess(t *testing.T) {
	for _, anon := range []int64{0, 16 << 20, rssBudget / 2, rssBudget - trimAbove, rssBudget, 4 * rssBudget} {
		for _, file := range []int64{0, 8 << 20, rssBudget} {
			l := limit(anon+file, file)
			if l < trimAbove || anon+l > max(rssBudget, anon+trimAbove) {
				t.Errorf("%d MiB heap and %d MiB mapped: limit %d MiB, want at least %d MiB and at most what the heap leaves of %d MiB",
					anon>>20, file>>20, l>>20, trimAbove>>20, rssBudget>>20)
			}
			if anon+trimAbove <= rssBudget && anon+l != rssBudget {
				t.Errorf("%d MiB heap: limit %d MiB leaves part of the %d MiB budget unused", anon>>20, l>>20, rssBudget>>20)
			}
		}
	}
}

// fileRSS returns the process's resident file-backed and shared memory in
// bytes.
func fileRSS() int64 {
	_, file := rss()
	return file
}

func TestFileRSS(t *testing.T) {
	got := fileRSS()
	want := int64(procStatusKiB(t, "RssFile")+procStatusKiB(t, "RssShmem")) << 10
	t.Logf("fileRSS %d KiB, RssFile+RssShmem %d KiB", got>>10, want>>10)
	// Both count the same pages; the process may fault a few more in
	// between the two reads.
	if got <= 0 || got < want-(4<<20) || got > want+(4<<20) {
		t.Fatalf("fileRSS %d KiB, /proc/self/status RssFile+RssShmem %d KiB", got>>10, want>>10)
	}
}

// A trim whose mapping was unmapped after /proc/self/maps was read, and
// whose addresses now hold this process's private memory, leaves that
// memory as it is: Badger unmaps tables and value logs whenever it likes,
// and the Go heap or anything else may take the addresses.
func TestTrimLeavesReusedAddressesAlone(t *testing.T) {
	dir := t.TempDir()
	const size = 4 << 20
	f, err := os.Create(dir + "/000001.vlog")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if err := f.Truncate(size); err != nil {
		t.Fatal(err)
	}
	shared, err := unix.Mmap(int(f.Fd()), 0, size, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED)
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i < size; i += 4096 {
		shared[i] = 1
	}
	tr := &trimmer{dir: dir}
	ranges, err := tr.mappings(".vlog")
	if err != nil {
		t.Fatal(err)
	}
	if len(ranges) != 1 || ranges[0].end-ranges[0].start != size {
		t.Fatalf("mappings of the value log: %+v, want one of %d bytes", ranges, size)
	}
	base := unsafe.Pointer(&shared[0])
	if ranges[0].start != uintptr(base) {
		t.Fatalf("mapping listed at %#x, mapped at %p", ranges[0].start, base)
	}
	// The log goes; private memory takes its addresses.
	if err := unix.Munmap(shared); err != nil {
		t.Fatal(err)
	}
	p, err := unix.MmapPtr(-1, 0, base, size, unix.PROT_READ|unix.PROT_WRITE,
		unix.MAP_PRIVATE|unix.MAP_ANONYMOUS|unix.MAP_FIXED_NOREPLACE)
	if err != nil || p != base {
		t.Fatalf("map private memory at %p: got %p, %v", base, p, err)
	}
	mem := unsafe.Slice((*byte)(unsafe.Pointer(p)), size)
	defer unix.MunmapPtr(p, size)
	for i := range mem {
		mem[i] = byte(i%251) + 1
	}
	advise(ranges)
	for i := range mem {
		if mem[i] != byte(i%251)+1 {
			t.Fatalf("byte %d of private memory at a trimmed log's old address is %d after the trim, was %d", i, mem[i], byte(i%251)+1)
		}
	}
}
