package fs

import (
	"bytes"
	"errors"
	"io"
	"math/rand/v2"
	"testing"

	"github.com/ledgerfs/ledgerfs/store"
)

func testPage(t *testing.T) *store.Page {
	t.Helper()
	repo, err := store.Open(t.TempDir(), store.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { repo.Close() })
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
	t.Cleanup(func() { repo.Release(p) })
	return p
}

// A streamed value's last pieces wait for the commit that refers to them.
// When that commit fails they are dropped, and the content must not go on
// naming the value as its base: a later commit would refer to pieces that
// were never stored.
func TestContentAfterLostCommit(t *testing.T) {
	p := testPage(t)
	data := make([]byte, 3<<20)
	rand.NewChaCha8([32]byte{1}).Read(data)

	// The same content committed, for comparison: it reads back.
	ok := newContent(p, t.TempDir(), emptyValue, 0)
	if err := ok.write(data, 0); err != nil {
		t.Fatal(err)
	}
	_, _, w, err := ok.value()
	if err != nil {
		t.Fatal(err)
	}
	if err := ok.stored(w.Commit()); err != nil {
		t.Fatal(err)
	}
	got := make([]byte, len(data))
	if _, err := ok.readAt(got, 0); err != nil && err != io.EOF || !bytes.Equal(got, data) {
		t.Fatalf("committed content reads back wrong: %v", err)
	}
	ok.close()

	c := newContent(p, t.TempDir(), emptyValue, 0)
	defer c.close()
	if err := c.write(data[:1<<20], 0); err != nil {
		t.Fatal(err)
	}
	_, _, w, err = c.value()
	if err != nil {
		t.Fatal(err)
	}
	// The commit failed (a journal row refused, say): its pieces go.
	lost := errors.New("commit refused")
	w.Discard()
	if err := c.stored(lost); !errors.Is(err, lost) {
		t.Fatalf("stored: %v, want the commit's error", err)
	}
	if _, _, _, err := c.value(); !errors.Is(err, lost) {
		t.Errorf("value after a lost commit: %v, want the commit's error", err)
	}
	if _, err := c.readAt(make([]byte, 10), 0); !errors.Is(err, lost) {
		t.Errorf("read after a lost commit: %v, want the commit's error", err)
	}
	if err := c.write([]byte("x"), 1<<20); !errors.Is(err, lost) {
		t.Errorf("write after a lost commit: %v, want the commit's error", err)
	}
}
