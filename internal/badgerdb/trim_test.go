package badgerdb

import (
	"os"
	"strconv"
	"strings"
	"testing"
	"unsafe"

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

// The limit leaves mapped pages what the rest of the process leaves of the
// budget, and never less than TrimAbove.
func TestLimitFollowsTheRestOfTheProcess(t *testing.T) {
	for _, anon := range []int64{0, 16 << 20, rssBudget / 2, rssBudget - TrimAbove, rssBudget, 4 * rssBudget} {
		for _, file := range []int64{0, 8 << 20, rssBudget} {
			l := limit(anon+file, file)
			if l < TrimAbove || anon+l > max(rssBudget, anon+TrimAbove) {
				t.Errorf("%d MiB heap and %d MiB mapped: limit %d MiB, want at least %d MiB and at most what the heap leaves of %d MiB",
					anon>>20, file>>20, l>>20, TrimAbove>>20, rssBudget>>20)
			}
			if anon+TrimAbove <= rssBudget && anon+l != rssBudget {
				t.Errorf("%d MiB heap: limit %d MiB leaves part of the %d MiB budget unused", anon>>20, l>>20, rssBudget>>20)
			}
		}
	}
}

func fileRSS() int64 {
	_, file := RSS()
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
	shared := mappedLog(t, dir, 4<<20)
	for i := 0; i < len(shared); i += 4096 {
		shared[i] = 1
	}
	tr := NewTrimmer(dir)
	ranges, err := tr.mappings(".vlog")
	if err != nil {
		t.Fatal(err)
	}
	if len(ranges) != 1 || ranges[0].end-ranges[0].start != uintptr(len(shared)) {
		t.Fatalf("mappings of the value log: %+v, want one of %d bytes", ranges, len(shared))
	}
	if base := uintptr(unsafe.Pointer(&shared[0])); ranges[0].start != base {
		t.Fatalf("mapping listed at %#x, mapped at %#x", ranges[0].start, base)
	}
	mem := reuseAddresses(t, shared)
	advise(ranges)
	checkPattern(t, mem, "private memory at a trimmed log's old address")
}

// mappedLog maps a new value-log file of size bytes under dir, shared, as
// Badger maps its logs.
func mappedLog(t *testing.T, dir string, size int) []byte {
	t.Helper()
	f, err := os.Create(dir + "/000001.vlog")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if err := f.Truncate(int64(size)); err != nil {
		t.Fatal(err)
	}
	m, err := unix.Mmap(int(f.Fd()), 0, size, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED)
	if err != nil {
		t.Fatal(err)
	}
	return m
}

// reuseAddresses unmaps m, as Badger unmaps a log it deletes, and maps
// private memory at its addresses instead, filled with fillPattern.
func reuseAddresses(t *testing.T, m []byte) []byte {
	t.Helper()
	base, size := unsafe.Pointer(&m[0]), len(m)
	if err := unix.Munmap(m); err != nil {
		t.Fatal(err)
	}
	p, err := unix.MmapPtr(-1, 0, base, uintptr(size), unix.PROT_READ|unix.PROT_WRITE,
		unix.MAP_PRIVATE|unix.MAP_ANONYMOUS|unix.MAP_FIXED_NOREPLACE)
	if err != nil || p != base {
		t.Fatalf("map private memory at %p: got %p, %v", base, p, err)
	}
	t.Cleanup(func() { unix.MunmapPtr(p, uintptr(size)) })
	mem := unsafe.Slice((*byte)(p), size)
	fillPattern(mem)
	return mem
}

func fillPattern(b []byte) {
	for i := range b {
		b[i] = byte(i%251) + 1
	}
}

// checkPattern fails unless b still holds what fillPattern wrote.
func checkPattern(t *testing.T, b []byte, what string) {
	t.Helper()
	for i := range b {
		if b[i] != byte(i%251)+1 {
			t.Fatalf("byte %d of %s is %d, was %d", i, what, b[i], byte(i%251)+1)
		}
	}
}
