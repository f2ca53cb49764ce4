package mount_test

import (
	"encoding/base64"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/dgraph-io/badger/v4"

	"github.com/ledgerfs/ledgerfs/cas"
	"github.com/ledgerfs/ledgerfs/store"
)

// fsckRepo makes a repository with history through a mount: files
// written, rewritten and removed in page l/p, and a page l/q.
func fsckRepo(t *testing.T) string {
	t.Helper()
	repo := filepath.Join(t.TempDir(), "repo")
	s := mountPlain(t, repo)
	pg := s.page("l", "p")
	for i := range 3 {
		for _, n := range []string{"a", "b", "d/c"} {
			must(t, os.MkdirAll(filepath.Dir(filepath.Join(pg, n)), 0o755))
			must(t, os.WriteFile(filepath.Join(pg, n), content(i*10+len(n), 200000), 0o644))
		}
		syncDir(t, pg)
	}
	must(t, os.Remove(filepath.Join(pg, "b")))
	must(t, os.WriteFile(filepath.Join(s.page("l", "q"), "x"), []byte("x"), 0o644))
	syncDir(t, pg)
	s.stop()
	return repo
}

// editPage changes the db of page l/p of a copy of repo with fn.
func editPage(t *testing.T, repo string, fn func(db *badger.DB)) string {
	t.Helper()
	dst := filepath.Join(t.TempDir(), "copy")
	run(t, "/", "cp", "-a", repo, dst)
	if fn == nil {
		return dst
	}
	page := pageDir(dst, "l", "p")
	db, err := badger.Open(badger.DefaultOptions(page).WithLogger(nil))
	must(t, err)
	fn(db)
	must(t, db.Close())
	return dst
}

// pageDir is the db directory of page ledger/page in repo.
func pageDir(repo, ledger, page string) string {
	return filepath.Join(repo, store.SerializationVersion, "ledgers", base64.URLEncoding.EncodeToString([]byte(ledger)), store.PageIDFor(page).String())
}

// objectKeys returns the object rows' keys whose digest passes keep.
func objectKeys(t *testing.T, db *badger.DB, keep func(cas.Digest) bool) [][]byte {
	t.Helper()
	var out [][]byte
	must(t, db.View(func(txn *badger.Txn) error {
		it := txn.NewIterator(badger.IteratorOptions{Prefix: []byte(store.PrefixObjects)})
		defer it.Close()
		for it.Rewind(); it.Valid(); it.Next() {
			k := it.Item().KeyCopy(nil)
			if keep(cas.Digest(k[len(store.PrefixObjects):])) {
				out = append(out, k)
			}
		}
		return nil
	}))
	if len(out) == 0 {
		lsm, vlog := db.Size()
		t.Fatalf("no such object in %s (%d, %d bytes)", db.Opts().Dir, lsm, vlog)
	}
	return out
}

// fsck runs ledgerfs fsck and returns its output and exit status.
func fsck(t *testing.T, args ...string) (string, int) {
	t.Helper()
	out, err := exec.Command(plainBinary, append([]string{"fsck"}, args...)...).CombinedOutput()
	if ee, ok := err.(*exec.ExitError); ok {
		return string(out), ee.ExitCode()
	}
	if err != nil {
		t.Fatal(err)
	}
	return string(out), 0
}

// ledgerfs fsck passes a sound repository and finds each kind of damage
// in a copy: a changed chunk, a missing tree node, a stray journal (which
// --repair settles) and a cut value log; the other page stays ok.
func TestFsck(t *testing.T) {
	t.Parallel()
	repo := fsckRepo(t)
	if out, code := fsck(t, repo); code != 0 || strings.Count(out, ": ok (") != 2 || strings.Contains(out, "\r") {
		t.Fatalf("fsck of a sound repository, output not a terminal (no progress bar): exit %d\n%q", code, out)
	}
	// On a terminal (script gives it one) a progress bar is drawn too.
	if out := run(t, "/", "script", "-qec", plainBinary+" fsck "+repo, "/dev/null"); !strings.Contains(out, "checking l/") || !strings.Contains(out, "\r") {
		t.Errorf("fsck on a terminal drew no progress bar:\n%q", out)
	}
	for _, c := range []struct {
		name string
		edit func(db *badger.DB)
		want string
	}{
		{"changed chunk", func(db *badger.DB) {
			k := objectKeys(t, db, func(d cas.Digest) bool { return !d.IsIndex() && !d.IsTreeNode() })[0]
			must(t, db.Update(func(txn *badger.Txn) error { return txn.Set(k, []byte("not what the digest names")) }))
		}, "digest"},
		{"missing tree node", func(db *badger.DB) {
			k := objectKeys(t, db, cas.Digest.IsTreeNode)[0]
			must(t, db.Update(func(txn *badger.Txn) error { return txn.Delete(k) }))
		}, "tree node"},
	} {
		t.Run(c.name, func(t *testing.T) {
			cp := editPage(t, repo, c.edit)
			out, code := fsck(t, cp)
			if code != 1 || !strings.Contains(out, "l/p: ") || !strings.Contains(out, c.want) || !strings.Contains(out, "l/q: ok") {
				t.Errorf("fsck: exit %d, want 1 and %q for l/p only\n%s", code, c.want, out)
			}
		})
	}
	// What a crash leaves (a transaction's journal never committed) is no
	// damage: listed, and the page passes.
	t.Run("stray journal", func(t *testing.T) {
		cp := editPage(t, repo, func(db *badger.DB) {
			must(t, db.Update(func(txn *badger.Txn) error {
				return txn.Set([]byte("journals/E0123456789abcdef/entry/stray"), []byte("D"))
			}))
		})
		out, code := fsck(t, cp)
		if code != 0 || !strings.Contains(out, "l/p: ok, with 1 kind of leftover left by a crash") || !strings.Contains(out, "journal rows") || strings.Contains(out, "problem") {
			t.Errorf("fsck of a stray journal: exit %d, want 0 and the journal listed\n%s", code, out)
		}
	})
	t.Run("repair status rows", func(t *testing.T) {
		cp := editPage(t, repo, func(db *badger.DB) {
			k := objectKeys(t, db, func(cas.Digest) bool { return true })[0]
			d := cas.Digest(k[len(store.PrefixObjects):])
			must(t, db.Update(func(txn *badger.Txn) error {
				if err := txn.Delete([]byte(store.StatusPrefix(store.Local) + string(d))); err != nil {
					return err
				}
				return txn.Set([]byte(store.StatusPrefix(store.Local)+string(cas.ComputeDigest(cas.KindBlob, false, []byte("never stored, but more than an inline digest holds")))), nil)
			}))
		})
		if out, code := fsck(t, cp, "l", "p"); code != 1 || !strings.Contains(out, "no status row") || !strings.Contains(out, "not stored") {
			t.Errorf("fsck of wrong status rows: exit %d\n%s", code, out)
		}
		if out, code := fsck(t, "--repair", cp, "l", "p"); code != 0 || !strings.Contains(out, "repaired 2 status rows") {
			t.Errorf("fsck --repair of wrong status rows: exit %d\n%s", code, out)
		}
	})
	t.Run("repair", func(t *testing.T) {
		cp := editPage(t, repo, func(db *badger.DB) {
			must(t, db.Update(func(txn *badger.Txn) error {
				return txn.Set([]byte("journals/E0123456789abcdef/entry/stray"), []byte("D"))
			}))
		})
		if out, code := fsck(t, "--repair", cp, "l", "p"); code != 0 || !strings.Contains(out, "l/p: ok") {
			t.Errorf("fsck --repair of a stray journal: exit %d\n%s", code, out)
		}
		if out, code := fsck(t, cp); code != 0 {
			t.Errorf("fsck after --repair: exit %d\n%s", code, out)
		}
	})
	t.Run("cut value log", func(t *testing.T) {
		cp := editPage(t, repo, nil)
		logs, _ := filepath.Glob(filepath.Join(pageDir(cp, "l", "p"), "*.vlog"))
		if len(logs) == 0 {
			t.Fatal("no value log")
		}
		for _, l := range logs {
			fi, err := os.Stat(l)
			must(t, err)
			must(t, os.Truncate(l, fi.Size()/3))
		}
		out, code := fsck(t, cp)
		if code != 1 || !strings.Contains(out, "l/q: ok") || strings.Contains(out, "l/p: ok") {
			t.Errorf("fsck of a cut value log: exit %d\n%s", code, out)
		}
	})
	if out, code := fsck(t, filepath.Join(t.TempDir(), "none")); code == 0 {
		t.Errorf("fsck of a missing repository: exit 0\n%s", out)
	}
}
