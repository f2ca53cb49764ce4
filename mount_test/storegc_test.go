package mount_test

import (
	"bytes"
	"context"
	"fmt"
	"net/http"
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

// twoRepos starts an S3 server, watched, for two repositories: a, which
// keeps only its heads (--keep-last 1) and collects, and b.
func twoRepos(t *testing.T) (srv *s3test.Server, w *s3test.Watcher, repoA, repoB string) {
	srv = s3test.Start(t)
	w = srv.Watch(t)
	repoA, repoB = t.TempDir(), t.TempDir()
	run(t, "", binary, "retention", repoA, "--keep-last", "1")
	return srv, w, repoA, repoB
}

// gcKilledAt runs `ledgerfs gc --remote --grace 0` of repo through w and
// kills it with -9 once the store has taken one more request that match
// matches (what, for messages); it returns what the run said.
func gcKilledAt(t *testing.T, w *s3test.Watcher, repo, what string, match func(s3test.Request) bool) string {
	t.Helper()
	cmd := gcStoreCmd(w.Endpoint, repo)
	var out output
	cmd.Stdout, cmd.Stderr = &out, &out
	before := w.Count(match)
	must(t, cmd.Start())
	exited := make(chan struct{})
	go func() {
		cmd.Wait()
		close(exited)
	}()
	t.Cleanup(func() { cmd.Process.Kill() })
	w.Await(t, what, before+1, match, exited)
	must(t, cmd.Process.Kill())
	<-exited
	return out.String()
}

// TestCollectStoreKilled: two devices share a real S3 server; everything
// is deleted on both; `ledgerfs gc --remote` is killed with -9 once it has
// deleted a pack. Run again, it takes over the lock its dead process left,
// and finishes: the store holds at most 5 % of its peak, and both devices
// and one that joins after agree with the store (fsck --remote).
func TestCollectStoreKilled(t *testing.T) {
	t.Parallel()
	srv, w, repoA, repoB := twoRepos(t)

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

	deleted := w.Count(s3test.PackDelete)
	out := gcKilledAt(t, w, repoA, "a pack deleted by the collection", s3test.PackDelete)
	killedAt := w.Count(s3test.PackDelete) - deleted

	b, err := gcStoreCmd(srv.Endpoint, repoA).CombinedOutput()
	if err != nil || !strings.Contains(string(b), "deleted") {
		t.Fatalf("the collection after one killed: %v\n%s\n(the killed one said:\n%s)", err, b, out)
	}
	after := storeBytes(t, srv)
	t.Logf("the killed collection had deleted %d packs", killedAt)
	t.Logf("store: peak %d bytes, %d after everything was deleted and collected (%.2f %%)", peak, after, 100*float64(after)/float64(peak))
	if after*20 > peak {
		t.Fatalf("the store holds %d bytes of its peak %d after everything was deleted and collected: over 5 %%\n%s", after, peak, b)
	}
	repoC := t.TempDir()
	syncRepo(t, srv, repoB)
	run(t, "", binary, "gc", repoB)
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

// TestRepackKilled: after 9 of every 10 files of a page are deleted, every
// pack still holds one, so the store's collection repacks; it is killed
// with -9 once it has uploaded a new pack (before the batch that names
// it), or once it has written that batch (before its record). Run again, it finishes: the packs hold little beyond the
// files left, and the collecting device, one that synced before (and
// read through the old packs), and one that joins after read every file
// left and agree with the store (fsck --remote).
func TestRepackKilled(t *testing.T) {
	t.Parallel()
	for _, at := range []struct {
		what string
		req  func(s3test.Request) bool
	}{
		{"a pack uploaded by the repack", s3test.PackPut},
		{"the repack's batch written", func(r s3test.Request) bool {
			return r.Method == http.MethodPut && strings.Contains(r.Path, "/logs/") && r.Status == http.StatusOK
		}},
	} {
		t.Run(at.what, func(t *testing.T) {
			t.Parallel()
			repackKilled(t, at.what, at.req)
		})
	}
}

func repackKilled(t *testing.T, what string, killAt func(s3test.Request) bool) {
	srv, w, repoA, repoB := twoRepos(t)

	a := mountPlain(t, repoA)
	pg := a.page("home", "work")
	const files = 80
	left := map[string][]byte{}
	for i := range files {
		name := fmt.Sprintf("f%02d", i)
		must(t, os.WriteFile(filepath.Join(pg, name), content(200+i, 256<<10), 0o644))
		if i%10 == 0 {
			left[name] = content(200+i, 256<<10)
		}
	}
	a.stop()
	syncRepo(t, srv, repoA)
	syncRepo(t, srv, repoB)
	a = mountPlain(t, repoA)
	for i := range files {
		if i%10 != 0 {
			must(t, os.Remove(filepath.Join(a.page("home", "work"), fmt.Sprintf("f%02d", i))))
		}
	}
	a.stop()
	syncRepo(t, srv, repoA)
	syncRepo(t, srv, repoB)
	peak := storeBytes(t, srv)

	out := gcKilledAt(t, w, repoA, what, killAt)

	b, err := gcStoreCmd(srv.Endpoint, repoA).CombinedOutput()
	if err != nil || !strings.Contains(string(b), "deleted") {
		t.Fatalf("the collection after one killed: %v\n%s\n(the killed one said:\n%s)", err, b, out)
	}
	var want int64
	for _, c := range left {
		want += int64(len(c))
	}
	after := storeBytes(t, srv)
	t.Logf("the killed collection said:\n%s\nthe next:\n%s", out, b)
	t.Logf("store: %d bytes before, %d after; the files left take %d", peak, after, want)
	// A pack the killed run uploaded and named in no batch stays (as a
	// push's cut short does): at most one repack's worth.
	if after > 2*want+want/5 {
		t.Fatalf("after the collections the store holds %d bytes for %d of files left", after, want)
	}
	repoC := t.TempDir()
	syncRepo(t, srv, repoB)
	syncRepo(t, srv, repoC)
	for _, repo := range []string{repoA, repoB, repoC} {
		// b keeps the history it pulled before the collection, whose
		// older versions a's policy let go from the store (b, which
		// never wrote, sent none): b reads the files left, not those.
		if repo != repoB {
			cmd := exec.Command(binary, "fsck", "--remote", repo)
			cmd.Env = append(os.Environ(), s3Env...)
			if b, err := cmd.CombinedOutput(); err != nil {
				t.Fatalf("fsck --remote %s after the collection: %v\n%s", repo, err, b)
			}
		}
		m := mountSyncedAt(t, srv.Endpoint, repo) // reads what is in the store only
		for name, c := range left {
			got, err := os.ReadFile(filepath.Join(m.mnt, "home", "work", name))
			if err != nil || !bytes.Equal(got, c) {
				t.Fatalf("%s of %s after the collections: %v (%d bytes)", name, repo, err, len(got))
			}
		}
		m.stop()
	}
}
