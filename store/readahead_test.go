package store

import (
	"os"
	"path/filepath"
	"testing"
	"time"
	"unsafe"

	"github.com/ledgerfs/ledgerfs/internal/badgerdb"

	"golang.org/x/sys/unix"

	"github.com/ledgerfs/ledgerfs/cas"
)

// vlogResident returns how many bytes of the page's value logs are in the
// page cache, and drops them first if evict is set.
func vlogResident(t *testing.T, p *Page, evict bool) int {
	t.Helper()
	if evict {
		if err := p.Durability().Checkpoint(); err != nil {
			t.Fatal(err)
		}
		p.repo.trim.Trim(true) // Badger's own mappings keep pages in the cache
	}
	files, err := filepath.Glob(filepath.Join(p.db.Opts().ValueDir, "*.vlog"))
	if err != nil {
		t.Fatal(err)
	}
	total := 0
	for _, name := range files {
		f, err := os.Open(name)
		if err != nil {
			t.Fatal(err)
		}
		fi, _ := f.Stat()
		if evict {
			unix.Fadvise(int(f.Fd()), 0, 0, unix.FADV_DONTNEED)
		}
		if fi.Size() > 0 {
			m, err := unix.Mmap(int(f.Fd()), 0, int(fi.Size()), unix.PROT_READ, unix.MAP_SHARED)
			if err != nil {
				t.Fatal(err)
			}
			vec := make([]byte, (len(m)+os.Getpagesize()-1)/os.Getpagesize())
			if _, _, e := unix.Syscall(unix.SYS_MINCORE, uintptr(unsafe.Pointer(&m[0])), uintptr(len(m)), uintptr(unsafe.Pointer(&vec[0]))); e != 0 {
				t.Fatal(e)
			}
			for _, v := range vec {
				total += int(v & 1)
			}
			unix.Munmap(m)
		}
		f.Close()
	}
	return total * os.Getpagesize()
}

// A streaming get has the kernel read in the value log around the piece, a
// plain get does not: after a piece of a cold 32 MiB value was read, the
// page cache holds at least 8 MiB more of the value log for the streaming
// get than for the plain one, also when the stretch was read ahead before.
func TestGetStreamingReadsAhead(t *testing.T) {
	p := testPage(t)
	chunks := storedChunks(t, p, writeValue(t, p, benchBytes(32<<20)))
	d := chunks[len(chunks)/2]
	asked := make(chan struct{}, 1)
	p.repo.ra.SetDone(func() { asked <- struct{}{} })
	t.Cleanup(func() { p.repo.ra.SetDone(nil) })
	// The advice runs on its own goroutine: a streaming get waits for it.
	settled := func(streaming bool) int {
		if streaming {
			select {
			case <-asked:
			case <-time.After(30 * time.Second):
				t.Fatal("no read-ahead within 30 s")
			}
		}
		return vlogResident(t, p, false)
	}

	if left := vlogResident(t, p, true); left > 1<<20 {
		t.Skipf("the value log stays in the page cache (%d KiB): cannot measure", left>>10)
	}
	// A region read ahead is not asked for again within ReadAheadFresh:
	// each streaming get below comes that much later by the reader's clock.
	start, shifts := time.Now(), 0
	later := func() {
		shifts++
		at := start.Add(time.Duration(shifts) * badgerdb.ReadAheadFresh)
		p.repo.ra.SetClock(func() time.Time { return at })
	}
	t.Cleanup(func() { p.repo.ra.SetClock(time.Now) })

	// The page cache is the machine's: under a loaded suite the kernel
	// may read around a plain get's fault, or evict what was read ahead,
	// so the pair is measured up to three times.
	var plain, streaming int
	for try := range 3 {
		vlogResident(t, p, true)
		if _, err := p.Get(d, nil); err != nil {
			t.Fatal(err)
		}
		plain = settled(false)
		vlogResident(t, p, true)
		later()
		if _, err := p.GetStreaming(d, nil, ReadOn); err != nil {
			t.Fatal(err)
		}
		streaming = settled(true)
		t.Logf("try %d: resident after one get: plain %d KiB, streaming %d KiB", try+1, plain>>10, streaming>>10)
		if streaming >= plain+8<<20 {
			break
		}
	}
	if streaming < plain+8<<20 {
		t.Fatalf("streaming get: %d KiB of value log read in, plain get %d KiB", streaming>>10, plain>>10)
	}

	// A later read of the same stretch, once the pages left the cache,
	// is read ahead again.
	vlogResident(t, p, true)
	later()
	if _, err := p.GetStreaming(d, nil, ReadOn); err != nil {
		t.Fatal(err)
	}
	if again := settled(true); again < plain+8<<20 {
		t.Fatalf("streaming get %v later: %d KiB of value log read in, plain get %d KiB", badgerdb.ReadAheadFresh, again>>10, plain>>10)
	}
}

// vlogMapped returns how many bytes of the page's value logs are mapped in
// this process.
func vlogMapped(t *testing.T, p *Page) int {
	t.Helper()
	return mappedKiB(t, p.db.Opts().ValueDir, ".vlog") << 10
}

// A streaming get has the value log ahead of it mapped in on another
// goroutine, so that the reader takes no page faults of its own.
func TestGetStreamingMapsAhead(t *testing.T) {
	p := testPage(t)
	chunks := storedChunks(t, p, writeValue(t, p, benchBytes(32<<20)))
	done := make(chan struct{}, 1)
	p.repo.ra.SetDone(func() { done <- struct{}{} })
	t.Cleanup(func() { p.repo.ra.SetDone(nil) })
	p.repo.trim.Trim(true)
	// No periodic trim drops what the read-ahead maps meanwhile: it runs
	// whenever the process's file-backed RSS is above trimAbove, as a test
	// binary built with -race alone may be.
	p.repo.trim.Hold()
	defer p.repo.trim.Release()
	before := vlogMapped(t, p)
	if _, err := p.GetStreaming(chunks[len(chunks)/2], nil, ReadOn); err != nil {
		t.Fatal(err)
	}
	select {
	case <-done:
	case <-time.After(30 * time.Second):
		t.Fatal("no read-ahead within 30 s")
	}
	if !p.repo.ra.Populates() {
		t.Skip("the kernel cannot populate mappings (MADV_POPULATE_READ, Linux 5.14)")
	}
	after := vlogMapped(t, p)
	t.Logf("value log mapped: %d KiB before the get, %d KiB after", before>>10, after>>10)
	if after < before+8<<20 {
		t.Fatalf("a streaming get mapped %d KiB of value log ahead, want at least 8 MiB", (after-before)>>10)
	}
}

// A streaming get counts the bytes it read towards the next trim, a plain
// get at least the read-around: the chunks of a stream share the pages
// mapped around each other, and counting the read-around for each trimmed
// every 4 MiB of a sequential read.
func TestStreamingGetsCountTheirBytes(t *testing.T) {
	p := testPage(t)
	chunks := storedChunks(t, p, writeValue(t, p, benchBytes(4<<20)))
	// Under half the limit, where plain gets keep their pages (Pressed).
	p.repo.trim.SetLimit(2 * (fileRSS() + 256<<20))
	t.Cleanup(func() { p.repo.trim.SetLimit(0) })
	counted := func(get func(cas.Digest, []byte) ([]byte, error)) (traffic, read int64) {
		t.Helper()
		p.repo.trim.Hold() // no trim resets the count meanwhile
		defer p.repo.trim.Release()
		before := p.repo.trim.Traffic()
		for _, d := range chunks {
			v, err := get(d, nil)
			if err != nil {
				t.Fatal(err)
			}
			read += int64(len(v))
		}
		return p.repo.trim.Traffic() - before, read
	}
	streaming := func(d cas.Digest, buf []byte) ([]byte, error) { return p.GetStreaming(d, buf, ReadOn) }
	if traffic, read := counted(streaming); traffic != read {
		t.Errorf("%d streaming gets of %d bytes counted %d bytes", len(chunks), read, traffic)
	}
	if traffic, _ := counted(p.Get); traffic < int64(len(chunks))*badgerdb.ValueReadAround {
		t.Errorf("%d plain gets counted %d bytes, want at least the read-around of each", len(chunks), traffic)
	}
}

// storedChunks lists the chunks of the value id that have rows of their
// own: a last chunk of 32 bytes or less is inline (the polynomial, and so
// the cuts, differ per repository).
func storedChunks(t testing.TB, p *Page, id cas.ObjectIdentifier) []cas.Digest {
	t.Helper()
	var chunks []cas.Digest
	if err := cas.Walk(p, id, func(d cas.Digest) (bool, error) {
		if !d.IsIndex() && !d.IsInline() {
			chunks = append(chunks, d)
		}
		return true, nil
	}, nil); err != nil {
		t.Fatal(err)
	}
	return chunks
}
