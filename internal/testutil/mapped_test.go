package testutil

import (
	"bytes"
	"os"
	"path/filepath"
	"testing"
	"unsafe"

	"golang.org/x/sys/unix"
)

// Pages of a file mapping count once touched; the anonymous memory mapped
// right after it does not, however much of it is resident.
func TestMappedRSS(t *testing.T) {
	const size = 1 << 20
	dir := t.TempDir()
	path := filepath.Join(dir, "000001.vlog")
	data := Random(1, 0, size)
	if err := os.WriteFile(path, data, 0o600); err != nil {
		t.Fatal(err)
	}
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	// Reserve room for the file and 4 MiB after it, then put the file at
	// the start: the rest stays one anonymous mapping that follows it.
	region, err := unix.Mmap(-1, 0, size+4<<20, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_PRIVATE|unix.MAP_ANONYMOUS)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Munmap(region)
	if _, err := unix.MmapPtr(int(f.Fd()), 0, unsafe.Pointer(unsafe.SliceData(region)), size, unix.PROT_READ, unix.MAP_SHARED|unix.MAP_FIXED); err != nil {
		t.Fatal(err)
	}
	anon := region[size:]
	for i := range anon {
		anon[i] = 1
	}
	rss := func() int64 {
		n, err := MappedRSS(dir, ".vlog")
		if err != nil {
			t.Fatal(err)
		}
		return n
	}
	if n := rss(); n > size/2 {
		t.Fatalf("%d KiB resident of a file mapping not read yet, with 4 MiB of anonymous memory after it", n>>10)
	}
	if !bytes.Equal(region[:size], data) {
		t.Fatal("the mapping holds other bytes than the file")
	}
	if n := rss(); n != size {
		t.Fatalf("%d KiB resident of a 1 MiB file mapping read in full", n>>10)
	}
	if n, _ := MappedRSS(dir, ".sst"); n != 0 {
		t.Fatalf("%d KiB resident of mappings of .sst files where there are none", n>>10)
	}
}
