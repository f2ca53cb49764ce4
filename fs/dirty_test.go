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

// TestContentStates walks the base's states (baseState) through the
// transitions its doc lists, checking the content reads what was written
// in each.
func TestContentStates(t *testing.T) {
	p := testPage(t)
	data := make([]byte, 600<<10)
	rand.NewChaCha8([32]byte{2}).Read(data)
	c := newContent(p, t.TempDir(), emptyValue, 0)
	defer c.close()
	check := func(step string, want baseState, content []byte) {
		t.Helper()
		if c.state != want {
			t.Fatalf("%s: state %d, want %d", step, c.state, want)
		}
		got := make([]byte, len(content)+1)
		n, err := c.readAt(got, 0)
		if err != nil && err != io.EOF || !bytes.Equal(got[:n], content) {
			t.Fatalf("%s: reads %d bytes (%v), want the %d written", step, n, err, len(content))
		}
	}
	check("new", baseCommitted, nil)
	if err := c.write(data, 0); err != nil { // streams
		t.Fatal(err)
	}
	id, size, w, err := c.value()
	if err != nil || w == nil {
		t.Fatalf("value of a stream: %v, writer %v", err, w)
	}
	if c.state != baseUnstored || !c.fromStream() {
		t.Fatalf("after value: state %d, want baseUnstored", c.state)
	}
	if err := c.stored(w.Commit()); err != nil {
		t.Fatal(err)
	}
	check("stored", baseStreamed, data)
	c.reset(id, size)
	check("committed", baseCommitted, data)
	c.state = baseLanded // as fileNode.commitLocked marks an applied commit
	edited := bytes.Clone(data)
	copy(edited[1000:], "edit")
	if err := c.write([]byte("edit"), 1000); err != nil {
		t.Fatal(err)
	}
	check("edited over a landed base", baseLanded, edited)
	if _, _, w, err = c.value(); err != nil {
		t.Fatal(err)
	}
	if len(c.kept) == 0 {
		t.Error("an edit of a landed base lists no kept subtree")
	}
	w.Discard()
}
