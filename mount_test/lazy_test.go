package mount_test

import (
	"crypto/sha256"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/ledgerfs/ledgerfs/internal/s3test"
	"github.com/ledgerfs/ledgerfs/store"
)

// TestLazyValuesThroughMount: a page synced to a second mount through a
// real S3 server arrives without its contents: ls -lR, find, stat and du
// --apparent-size of it read no pack; a read fetches what it needs (a big
// file in few requests) and keeps it, so a second read fetches nothing.
// With the server killed, a read of content not fetched yet fails with EIO
// after --fetch-timeout, one log line naming it, while what was fetched
// reads on; once the server is back the read works. A mount killed (kill
// -9) in the middle of a fetch leaves a repository that reads every file
// right once remounted.
func TestLazyValuesThroughMount(t *testing.T) {
	srv := s3test.Start(t)
	w := srv.Watch(t)
	// a writes 48 MiB, whose CPU time the race detector would triple; b,
	// whose lazy reads and fetches are the point, is race-built.
	a := mountSyncedWith(t, plainBinary, w.Endpoint, t.TempDir())
	pa := a.page("home", "data")
	var want int64
	for d := range 10 {
		dir := filepath.Join(pa, fmt.Sprintf("d%02d", d))
		must(t, os.Mkdir(dir, 0o755))
		for f := range 100 {
			b := content(d*100+f, 1000+f)
			must(t, os.WriteFile(filepath.Join(dir, fmt.Sprintf("f%03d.txt", f)), b, 0o644))
			want += int64(len(b))
		}
	}
	big := content(7, 24<<20)
	must(t, os.WriteFile(filepath.Join(pa, "big.bin"), big, 0o644))
	must(t, os.WriteFile(filepath.Join(pa, "big2.bin"), content(8, 24<<20), 0o644))
	want += 2 * int64(len(big))
	syncDir(t, pa)
	w.Until(t, "a's page pushed", time.Minute, func() bool {
		b, err := os.ReadFile(filepath.Join(pa, ".ledger", "sync"))
		return err == nil && strings.Contains(string(b), "waiting to upload: nothing\n")
	})
	latest := func(pg string) string {
		l, _ := os.Readlink(filepath.Join(pg, ".ledger", "latest"))
		return l
	}

	repoB := t.TempDir()
	b := mountSyncedAt(t, w.Endpoint, repoB, "--fetch-timeout", "2s")
	pb := filepath.Join(b.mnt, "home", "data")
	w.Until(t, "a's head on b", time.Minute, func() bool { return latest(pb) != "" && latest(pb) == latest(pa) })
	packGets := func() int { return w.Count(s3test.PackGet) }
	before := packGets()
	run(t, pb, "ls", "-lR")
	if n := strings.Count(run(t, pb, "find", ".", "-type", "f", "-printf", "%s\n"), "\n"); n != 1002 {
		t.Fatalf("find lists %d files, want 1002", n)
	}
	run(t, pb, "find", ".", "-type", "f", "-exec", "stat", "--format", "%s %Y", "{}", "+")
	du := strings.Fields(run(t, pb, "du", "-s", "-b", "--apparent-size", "."))[0]
	if got := packGets() - before; got != 0 {
		t.Fatalf("ls -lR, find, stat and du read %d packs", got)
	}
	if n, _ := strconv.ParseInt(du, 10, 64); n < want {
		t.Fatalf("du --apparent-size says %d bytes, the files hold %d", n, want)
	}

	// Reads fetch, then keep.
	small := filepath.Join(pb, "d03", "f042.txt")
	if got, err := os.ReadFile(small); err != nil || string(got) != string(content(342, 1042)) {
		t.Fatalf("a small file read on b: %v", err)
	}
	before = packGets()
	if sha(t, filepath.Join(pb, "big.bin")) != fmt.Sprintf("%x", sha256.Sum256(big)) {
		t.Fatal("big.bin read on b: other bytes")
	}
	reqs := packGets() - before
	t.Logf("a 24 MiB file read in order: %d requests of packs", reqs)
	// Packs of ~8 MiB: the root, a range of each of the 3–4 packs, and
	// a few more where the kernel's read-ahead runs ahead of the stream
	// (7 in most runs; 11 and 15 seen on a loaded machine: likely the
	// kernel's read-ahead requests reaching the reader out of order, so
	// that its first reads fetch a piece each until it sees a stream; not
	// checked). One a chunk would be 1,500.
	if reqs == 0 || reqs > 24 {
		t.Fatalf("a 24 MiB file read in order made %d requests of packs", reqs)
	}
	before = packGets()
	sha(t, filepath.Join(pb, "big.bin"))
	if got, err := os.ReadFile(small); err != nil || string(got) != string(content(342, 1042)) || packGets() != before {
		t.Fatalf("reads of fetched files again: %v, %d requests", err, packGets()-before)
	}

	// A pinned directory is fetched at once, and reads offline.
	before = packGets()
	run(t, "", binary, "pin", filepath.Join(pb, "d07"))
	if packGets() == before {
		t.Fatal("ledgerfs pin fetched nothing")
	}
	if got, err := os.ReadFile(filepath.Join(pb, ".ledger", "local")); err != nil || string(got) != "d07/\n" {
		t.Fatalf(".ledger/local after a pin: %q, %v", got, err)
	}

	// The server gone: EIO after the timeout, what is held reads on.
	srv.Kill()
	for f := range 100 {
		name := filepath.Join(pb, "d07", fmt.Sprintf("f%03d.txt", f))
		if got, err := os.ReadFile(name); err != nil || string(got) != string(content(700+f, 1000+f)) {
			t.Fatalf("a pinned file with the server down: %v", err)
		}
	}
	start := time.Now()
	_, err := os.ReadFile(filepath.Join(pb, "d05", "f005.txt"))
	took := time.Since(start)
	if !errors.Is(err, syscall.EIO) || took > 30*time.Second {
		t.Fatalf("a read with the server down: %v after %v, want EIO after --fetch-timeout", err, took)
	}
	t.Logf("a read with the server down failed after %v", took)
	if got, err := os.ReadFile(small); err != nil || string(got) != string(content(342, 1042)) {
		t.Fatalf("a fetched file with the server down: %v", err)
	}
	// The line is written before the reply, but reaches b.log through a
	// pipe the test copies from: wait for it.
	const failed = "content in the remote store only could not be fetched"
	b.log.await(t, failed)
	if n := strings.Count(b.log.String(), failed); n != 1 {
		t.Fatalf("%d log lines for one failed read:\n%s", n, b.log)
	}
	srv.Restart()
	w.Until(t, "the read once the server is back", time.Minute, func() bool {
		got, err := os.ReadFile(filepath.Join(pb, "d05", "f005.txt"))
		return err == nil && string(got) == string(content(505, 1005))
	})

	// By hand: a pinned page stays; unpinned, it goes, and comes back.
	if out, err := exec.Command(binary, "evict", pb).CombinedOutput(); err == nil || !strings.Contains(string(out), "pinned") {
		t.Fatalf("ledgerfs evict of a pinned page: %v\n%s\nthe mount's log:\n%s", err, out, b.log)
	}
	// Logged before the reply, copied to b.log after it: wait.
	b.log.await(t, "it is pinned")
	run(t, "", binary, "pin", "--remove", filepath.Join(pb, "d07"))
	// A descriptor of the page open as the evict begins: the evict waits
	// for it (the kernel releases a descriptor after close returns).
	held, err := os.Open(filepath.Join(pb, "d07", "f007.txt"))
	must(t, err)
	evict := exec.Command(binary, "evict", pb)
	var evicted output
	evict.Stdout, evict.Stderr = &evicted, &evicted
	must(t, evict.Start())
	b.log.await(t, "the evict waits for its descriptors to close")
	must(t, held.Close())
	if err := evict.Wait(); err != nil {
		t.Fatalf("ledgerfs evict, with a descriptor closed while it waited: %v\n%s", err, &evicted)
	}
	// Anything that opens the page brings it back at once, its db made
	// anew with the head alone (a CI run saw one 6 ms after the evict),
	// and logged once made.
	if dirs, _ := filepath.Glob(filepath.Join(repoB, "1", "ledgers", "*", "*")); len(dirs) != 0 {
		stop := make(chan struct{})
		defer time.AfterFunc(10*time.Second, func() { close(stop) }).Stop()
		if !b.log.until(func(l string) bool { return strings.Contains(l, "evicted page comes back") }, stop) {
			t.Fatalf("after ledgerfs evict the page's db is still there, and it did not come back: %v", dirs)
		}
	}
	if sha(t, filepath.Join(pb, "big.bin")) != fmt.Sprintf("%x", sha256.Sum256(big)) {
		t.Fatal("big.bin after the page came back: other bytes")
	}

	// kill -9 in the middle of a fetch of big2.bin.
	before = packGets()
	done := make(chan error, 1)
	go func() {
		f, err := os.Open(filepath.Join(pb, "big2.bin"))
		if err == nil {
			_, err = io.Copy(io.Discard, f)
			f.Close()
		}
		done <- err
	}()
	w.Await(t, "big2.bin's fetch under way", before+2, s3test.PackGet, nil)
	b.kill()
	<-done
	b = mountSyncedWith(t, plainBinary, w.Endpoint, repoB) // what the kill left: reads of volume
	pb = filepath.Join(b.mnt, "home", "data")
	if sha(t, filepath.Join(pb, "big2.bin")) != fmt.Sprintf("%x", sha256.Sum256(content(8, 24<<20))) ||
		sha(t, filepath.Join(pb, "big.bin")) != fmt.Sprintf("%x", sha256.Sum256(big)) {
		t.Fatal("after a kill during a fetch, the files read other bytes")
	}
	b.stop()
	cat := exec.Command(binary, "cat", repoB, "home", "data", "d09/f009.txt")
	cat.Env = append(os.Environ(), s3Env...)
	if got, err := cat.Output(); err != nil || string(got) != string(content(909, 1009)) {
		t.Fatalf("ledgerfs cat of a file never read, unmounted: %v", err)
	}
	out, err := exec.Command(binary, "fsck", repoB).CombinedOutput()
	if err != nil || !strings.Contains(string(out), "in the remote only, fetched when read") {
		t.Fatalf("fsck after a kill during a fetch: %v\n%s", err, out)
	}
}

// TestEvictionThroughMount: a mount with --cache-size below what its
// pages take evicts the closed, synced ones (their dbs leave the disk,
// their names stay listed); reading them again brings them back from the
// remote, with the same bytes.
func TestEvictionThroughMount(t *testing.T) {
	srv := s3test.Start(t)
	w := srv.Watch(t)
	a := mountSyncedAt(t, w.Endpoint, t.TempDir())
	pages := []string{"p0", "p1", "p2"}
	for i, name := range pages {
		pg := a.page("home", name)
		must(t, os.WriteFile(filepath.Join(pg, "f.bin"), content(40+i, 1<<20), 0o644))
		syncDir(t, pg)
	}
	w.Until(t, "a's pages pushed", time.Minute, func() bool {
		for _, name := range pages {
			b, err := os.ReadFile(filepath.Join(a.mnt, "home", name, ".ledger", "sync"))
			if err != nil || !strings.Contains(string(b), "waiting to upload: nothing\n") {
				return false
			}
		}
		return true
	})
	repoB := t.TempDir()
	b := mountSyncedAt(t, w.Endpoint, repoB, "--cache-size", "1", "--max-idle-pages", "0")
	read := func(name string) error {
		got, err := os.ReadFile(filepath.Join(b.mnt, "home", name, "f.bin"))
		if err == nil && string(got) != string(content(40+slices.Index(pages, name), 1<<20)) {
			err = errors.New("other bytes")
		}
		return err
	}
	w.Until(t, "a's pages readable on b", time.Minute, func() bool {
		for _, name := range pages {
			if read(name) != nil {
				return false
			}
		}
		return true
	})
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("b's log:\n%s", b.log)
		}
	})
	// Each page, read, is no longer in use: the next round evicts it.
	w.Until(t, "b's pages evicted", time.Minute, func() bool {
		dirs, err := filepath.Glob(filepath.Join(repoB, "1", "ledgers", "*", "*"))
		return err == nil && len(dirs) == 0
	})
	if n := strings.Count(b.log.String(), "page evicted"); n < len(pages) {
		t.Fatalf("%d pages evicted, by b's log", n)
	}
	if got := ls(t, filepath.Join(b.mnt, "home")); !slices.Equal(got, pages) {
		t.Fatalf("b lists %v after eviction, want %v", got, pages)
	}
	// Counted before the reads: a page read is closed again at once, and
	// the next round may evict it before the last read is done (counted
	// after them, every eviction could be over, and none left to wait for).
	n := strings.Count(b.log.String(), "page evicted")
	for _, name := range pages {
		if err := read(name); err != nil {
			t.Fatalf("%s after it was evicted: %v", name, err)
		}
	}
	b.log.await(t, "evicted page comes back")

	// kill -9 while the mount evicts them again (the pages just read are
	// closed: the next round evicts them, one after another), once the
	// first is gone.
	if !b.log.until(func(s string) bool { return strings.Count(s, "page evicted") > n }, b.exited) {
		t.Fatalf("b ended before it evicted the pages again:\n%s", b.log)
	}
	b.kill()
	t.Logf("killed after %d of the %d pages were evicted again", strings.Count(b.log.String(), "page evicted")-n, len(pages))
	b = mountSyncedAt(t, w.Endpoint, repoB)
	for _, name := range pages {
		if err := read(name); err != nil {
			t.Fatalf("%s after a kill during eviction: %v", name, err)
		}
	}
	b.stop()
	if out, err := exec.Command(binary, "fsck", repoB).CombinedOutput(); err != nil {
		t.Fatalf("fsck after a kill during eviction: %v\n%s", err, out)
	}
}

// TestCacheSizeBoundsReads: a mount with --cache-size reads a file 4 times
// its cache size twice, through the remote; the repository stays under
// the cache size plus a little (what its dbs take), and the file reads
// the same both times.
func TestCacheSizeBoundsReads(t *testing.T) {
	t.Parallel()
	srv := s3test.Start(t)
	repoA, repoB := t.TempDir(), t.TempDir()
	const size, cacheSize = 96 << 20, 24 << 20
	a := mountPlain(t, repoA)
	must(t, os.WriteFile(filepath.Join(a.page("home", "big"), "f.bin"), content(77, size), 0o644))
	want := sha(t, filepath.Join(a.mnt, "home", "big", "f.bin"))
	a.stop()
	syncRepo(t, srv, repoA)
	syncRepo(t, srv, repoB)
	b := mountSyncedWith(t, plainBinary, srv.Endpoint, repoB, "--cache-size", fmt.Sprint(cacheSize))
	for i := range 2 {
		if got := sha(t, filepath.Join(b.mnt, "home", "big", "f.bin")); got != want {
			t.Fatalf("read %d of the file through a cache of a quarter of it: other bytes", i+1)
		}
		used := store.DiskUsage(repoB)
		t.Logf("after read %d: the repository takes %d MiB on disk (cache size %d MiB)", i+1, used>>20, cacheSize>>20)
		if used > cacheSize+16<<20 {
			t.Fatalf("after read %d the repository takes %d bytes on disk, over the cache size %d and 16 MiB of dbs", i+1, used, cacheSize)
		}
	}
}
