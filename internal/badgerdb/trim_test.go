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
	tr := NewTrimmer(dir)
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
