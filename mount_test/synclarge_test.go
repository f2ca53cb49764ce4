package mount_test

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/ledgerfs/ledgerfs/internal/s3test"
)

// TestSyncLarge: a large file and many small files written through one
// mount are read the same through another's, through a real S3 server, in
// packs (at most one upload per MiB), and a 1-byte edit of the large file
// on the second comes back to the first. -long: a 1 GiB file and 10,000
// small files; else 64 MiB and 1,000.
func TestSyncLarge(t *testing.T) {
	t.Parallel()
	size, files := 64<<20, 1000
	if *long {
		size, files = 1<<30, 10000
	}
	srv := s3test.Start(t)
	w := srv.Watch(t)
	a := mountSyncedWith(t, plainBinary, w.Endpoint, t.TempDir(), "--sync-every", "1s")
	pa := a.page("home", "data")
	big := filepath.Join(pa, "big.bin")
	f, err := os.Create(big)
	must(t, err)
	for off := 0; off < size; off += 16 << 20 {
		_, err := f.Write(content(int(31+off>>24), min(16<<20, size-off)))
		must(t, err)
	}
	must(t, f.Close())
	must(t, os.Mkdir(filepath.Join(pa, "small"), 0o755))
	for i := range files {
		must(t, os.WriteFile(filepath.Join(pa, "small", fmt.Sprintf("f%05d", i)), []byte(fmt.Sprintf("small file %d\n", i)), 0o644))
	}
	syncDir(t, pa)
	w.Until(t, "a pushed everything", 10*time.Minute, func() bool {
		b, _ := os.ReadFile(filepath.Join(pa, ".ledger", "sync"))
		return strings.Contains(string(b), "waiting to upload: nothing\n")
	})
	if packs := w.Count(s3test.PackPut); packs > size>>20 {
		t.Fatalf("%d packs uploaded for %d MiB", packs, size>>20)
	}
	want := sha(t, big)

	b := mountSyncedWith(t, plainBinary, w.Endpoint, t.TempDir(), "--sync-every", "1s")
	pb := filepath.Join(b.mnt, "home", "data")
	w.Until(t, "the large file on b", 10*time.Minute, func() bool {
		st, err := os.Stat(filepath.Join(pb, "big.bin"))
		return err == nil && st.Size() == int64(size)
	})
	if sha(t, filepath.Join(pb, "big.bin")) != want {
		t.Fatal("the large file differs on b")
	}
	names := ls(t, filepath.Join(pb, "small"))
	if len(names) != files {
		t.Fatalf("b has %d small files, want %d", len(names), files)
	}
	for i := range files {
		got, err := os.ReadFile(filepath.Join(pb, "small", fmt.Sprintf("f%05d", i)))
		if err != nil || !bytes.Equal(got, []byte(fmt.Sprintf("small file %d\n", i))) {
			t.Fatalf("small file %d on b: %q, %v", i, got, err)
		}
	}

	// A 1-byte edit in the middle of the large file on b.
	before := w.Count(s3test.PackPut)
	ef, err := os.OpenFile(filepath.Join(pb, "big.bin"), os.O_WRONLY, 0)
	must(t, err)
	_, err = ef.WriteAt([]byte{'!'}, int64(size/2))
	must(t, err)
	must(t, ef.Close())
	wantEdited := sha(t, filepath.Join(pb, "big.bin"))
	w.Until(t, "b's edit on a", time.Minute, func() bool {
		one := make([]byte, 1)
		g, err := os.Open(big)
		if err != nil {
			return false
		}
		defer g.Close()
		_, err = g.ReadAt(one, int64(size/2))
		return err == nil && one[0] == '!'
	})
	if sha(t, big) != wantEdited {
		t.Fatal("the edited large file differs on a")
	}
	if packs := w.Count(s3test.PackPut) - before; packs > 1 {
		t.Fatalf("a 1-byte edit uploaded %d packs", packs)
	}
}
