package mount_test

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/ledgerfs/ledgerfs/internal/remote"
	"github.com/ledgerfs/ledgerfs/internal/s3test"
)

// storeBytes is what the objects under bucket "ledgerfs", prefix "home" of
// srv take.
func storeBytes(t *testing.T, srv *s3test.Server) int64 {
	t.Helper()
	be, err := remote.NewS3(context.Background(), srv.Config("ledgerfs", "home"))
	must(t, err)
	var n int64
	must(t, be.List(context.Background(), "", "", func(o remote.Object) error {
		n += o.Size
		return nil
	}))
	return n
}

// gcStoreCmd is `ledgerfs gc --remote --grace 0` of repo through the S3
// server at endpoint.
func gcStoreCmd(endpoint, repo string) *exec.Cmd {
	cmd := exec.Command(binary, "gc", "--remote=s3://ledgerfs/home", "--endpoint", endpoint, "--grace", "0", repo)
	cmd.Env = append(os.Environ(), s3Env...)
	return cmd
}

// TestCollectStoreKilled: two devices share a real S3 server; everything
// is deleted on both; `ledgerfs gc --remote` is killed with -9 once it has
// deleted a pack. Run again, it takes over the lock its dead process left,
// and finishes: the store holds at most 5 % of its peak, and both devices
// and one that joins after agree with the store (fsck --remote).
func TestCollectStoreKilled(t *testing.T) {
	t.Parallel()
	srv := s3test.Start(t)
	w := srv.Watch(t)
	repoA, repoB := t.TempDir(), t.TempDir()
	run(t, "", binary, "retention", repoA, "--keep-last", "1")

	a := mountPlain(t, repoA)
	pg := a.page("home", "work")
	for i := range 5 {
		must(t, os.WriteFile(filepath.Join(pg, fmt.Sprintf("f%d", i)), content(100+i, 7<<20), 0o644))
	}
	a.stop()
	syncRepo(t, srv, repoA)
	syncRepo(t, srv, repoB)
	peak := storeBytes(t, srv)

	a = mountPlain(t, repoA)
	must(t, os.RemoveAll(filepath.Join(a.mnt, "home", "work")))
	a.stop()
	syncRepo(t, srv, repoA)
	syncRepo(t, srv, repoB)

	cmd := gcStoreCmd(w.Endpoint, repoA)
	var out output
	cmd.Stdout, cmd.Stderr = &out, &out
	deleted := w.Count(s3test.PackDelete)
	must(t, cmd.Start())
	exited := make(chan struct{})
	go func() {
		cmd.Wait()
		close(exited)
	}()
	t.Cleanup(func() { cmd.Process.Kill() })
	w.Await(t, "a pack deleted by the collection", deleted+1, s3test.PackDelete, exited)
	must(t, cmd.Process.Kill())
	<-exited
	killedAt := w.Count(s3test.PackDelete) - deleted

	b, err := gcStoreCmd(srv.Endpoint, repoA).CombinedOutput()
	if err != nil || !strings.Contains(string(b), "deleted") {
		t.Fatalf("the collection after one killed: %v\n%s\n(the killed one said:\n%s)", err, b, out.String())
	}
	after := storeBytes(t, srv)
	t.Logf("the killed collection had deleted %d packs", killedAt)
	t.Logf("store: peak %d bytes, %d after everything was deleted and collected (%.2f %%)", peak, after, 100*float64(after)/float64(peak))
	if after*20 > peak {
		t.Fatalf("the store holds %d bytes of its peak %d after everything was deleted and collected: over 5 %%\n%s", after, peak, b)
	}
	repoC := t.TempDir()
	syncRepo(t, srv, repoB)
	syncRepo(t, srv, repoC)
	for _, repo := range []string{repoA, repoB, repoC} {
		cmd := exec.Command(binary, "fsck", "--remote", repo)
		cmd.Env = append(os.Environ(), s3Env...)
		if b, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("fsck --remote %s after the collection: %v\n%s", repo, err, b)
		}
	}
}

// TestMountCollectsStore: a mount with a schedule for the store's
// collection (--collect-store-every) deletes the packs of a page another
// device deleted, and keeps serving what its pages hold.
func TestMountCollectsStore(t *testing.T) {
	t.Parallel()
	srv := s3test.Start(t)
	w := srv.Watch(t)
	repoA, repoB := t.TempDir(), t.TempDir()
	a := mountPlain(t, repoA)
	keep := content(1, 3<<20)
	must(t, os.WriteFile(filepath.Join(a.page("home", "keep"), "f"), keep, 0o644))
	must(t, os.WriteFile(filepath.Join(a.page("home", "drop"), "g"), content(2, 9<<20), 0o644))
	a.stop()
	syncRepo(t, srv, repoA)
	before := storeBytes(t, srv)
	// b holds the pages before it mounts: what this test watches is its
	// collection, not how soon a new page shows.
	syncRepo(t, srv, repoB)

	b := mountSyncedAt(t, w.Endpoint, repoB, "--collect-store-every", "1ms", "--collect-store-grace", "0")
	f := filepath.Join(b.mnt, "home", "keep", "f")
	w.Until(t, "the page on b", time.Minute, func() bool { _, err := os.Stat(f); return err == nil })

	a = mountPlain(t, repoA)
	must(t, os.RemoveAll(filepath.Join(a.mnt, "home", "drop")))
	a.stop()
	deleted := w.Count(s3test.PackDelete)
	syncRepo(t, srv, repoA)
	w.Await(t, "a pack deleted by b's collection", deleted+1, s3test.PackDelete, b.exited)
	if got, err := os.ReadFile(f); err != nil || !bytes.Equal(got, keep) {
		t.Fatalf("the kept page's file on b after its collection of the store: %v", err)
	}
	if after := storeBytes(t, srv); after >= before-(8<<20) {
		t.Fatalf("the store holds %d bytes after the collection, %d before: the deleted page's 9 MiB did not go", after, before)
	}
	b.log.await(t, "collected the remote store")
}
