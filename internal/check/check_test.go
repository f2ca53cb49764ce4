package check_test

import (
	"io"
	"strings"
	"testing"

	"github.com/ledgerfs/ledgerfs/cas"
	"github.com/ledgerfs/ledgerfs/internal/btree"
	"github.com/ledgerfs/ledgerfs/internal/check"
	"github.com/ledgerfs/ledgerfs/internal/gc"
	"github.com/ledgerfs/ledgerfs/journal"
	"github.com/ledgerfs/ledgerfs/store"
)

// The head's files with hard links are checked: every name points at a
// file's entry that counts exactly its names.
func TestLinks(t *testing.T) {
	eng := journal.NewEngine()
	repo, err := store.Open(t.TempDir(), eng.Hooks(store.Options{}))
	if err != nil {
		t.Fatal(err)
	}
	defer repo.Close()
	if err := repo.CreateLedger("l"); err != nil {
		t.Fatal(err)
	}
	if err := repo.CreatePage("l", "p"); err != nil {
		t.Fatal(err)
	}
	p, err := repo.Acquire("l", "p")
	if err != nil {
		t.Fatal(err)
	}
	defer repo.Release(p)
	w := p.NewValueWriter()
	if _, err := io.WriteString(w, "the file"); err != nil {
		t.Fatal(err)
	}
	id, size, err := w.Close()
	if err != nil {
		t.Fatal(err)
	}
	empty := cas.ObjectIdentifier{Digest: cas.ComputeDigest(cas.KindBlob, false, nil)}
	g := btree.LinkPrefix + "0123456789abcdef"
	file := func(nlink uint32) journal.Op {
		return journal.Op{Key: g, Entry: btree.Entry{Value: id, Meta: btree.Meta{Size: size, Nlink: nlink}}}
	}
	name := func(key, to string) journal.Op {
		return journal.Op{Key: key, Entry: btree.Entry{Value: empty, Meta: btree.Meta{Mode: 0o100000, Link: to}}}
	}
	for _, c := range []struct {
		what string
		ops  []journal.Op
		want string // in a problem; "" for none
	}{
		{"two names", []journal.Op{file(2), name("a", g), name("b", g)}, ""},
		{"a name gone, the count kept", []journal.Op{{Key: "b", Kind: store.OpDelete}}, `counts 2 names, 1 point at it`},
		{"the count right again", []journal.Op{file(1)}, ""},
		{"a name of a missing file", []journal.Op{name("c", btree.LinkPrefix+"ffffffffffffffff")}, "which is missing"},
		{"a name of a plain key", []journal.Op{{Key: "c", Kind: store.OpDelete}, name("d", "a")}, "not a file's entry"},
		{"a file no name points at", []journal.Op{{Key: "d", Kind: store.OpDelete}, {Key: "a", Kind: store.OpDelete}}, "no name points at"},
	} {
		if err := eng.CommitterFor(p).Apply(false, c.ops...); err != nil {
			t.Fatal(err)
		}
		r, err := check.Page(p, func(k string, v []byte) error { _, err := journal.DecodeOp(k, v); return err })
		if err != nil {
			t.Fatal(err)
		}
		if usage, err := gc.PageUsage(repo, p); err != nil || usage.Commits != r.Commits {
			t.Fatalf("%s: fsck counts %d commits, du %d (%v)", c.what, r.Commits, usage.Commits, err)
		}
		got := strings.Join(r.Problems, "\n")
		if c.want == "" && got != "" || c.want != "" && !strings.Contains(got, c.want) {
			t.Errorf("%s: problems %q, want %q", c.what, got, c.want)
		}
	}
}
