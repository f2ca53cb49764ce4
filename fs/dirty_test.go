package fs

import (
	"bytes"
	"errors"
	"io"
	"math/rand/v2"
	"os"
	"testing"

	"pgregory.net/rapid"

	"github.com/ledgerfs/ledgerfs/cas"
	"github.com/ledgerfs/ledgerfs/store"
)

func testPage(t *testing.T) *store.Page {
	t.Helper()
	_, p := testRepoPage(t)
	return p
}

// testRepoPage is testPage with the page's repository.
func testRepoPage(t *testing.T) (*store.Repository, *store.Page) {
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
	return repo, p
}

// A small new file written, rewritten at its start and fsynced (a rollback
// journal) stays in the spool's memory: nothing is stored before its
// commit, and the record of that commit is copied from memory, not read
// back from the page. Past memSpool bytes written in order, it streams.
func TestSmallFileStaysInMemory(t *testing.T) {
	repo, p := testRepoPage(t)
	c := newContent(p, t.TempDir(), emptyValue, 0)
	defer c.close()
	model := make([]byte, 9<<10)
	rand.NewChaCha8([32]byte{7}).Read(model)
	if err := c.write(model, 0); err != nil {
		t.Fatal(err)
	}
	copy(model, "header")
	if err := c.write([]byte("header"), 0); err != nil {
		t.Fatal(err)
	}
	before := repo.Stats().PiecesStored
	f := &fileNode{c: c}
	src, err := f.logSource(p.Durability(), "journal", maxLoggedChange)
	if err != nil {
		t.Fatal(err)
	}
	if src == nil || src.Base != "" || len(src.Extents) != 1 || !bytes.Equal(src.Extents[0].Data, model) {
		t.Fatalf("log source of a small new file: %+v, want the whole content", src)
	}
	got := make([]byte, len(model)+1)
	if n, err := c.readAt(got, 0); err != io.EOF && err != nil || !bytes.Equal(got[:n], model) {
		t.Fatalf("reads %d bytes (%v), want the %d written", n, err, len(model))
	}
	if c.stream != nil || c.spool == nil || c.spool.f != nil {
		t.Fatalf("a %d-byte file: stream %v, spool %+v; want it in memory", len(model), c.stream, c.spool)
	}
	if after := repo.Stats().PiecesStored; after != before {
		t.Errorf("%d pieces stored before the commit", after-before)
	}
	more := make([]byte, memSpool)
	rand.NewChaCha8([32]byte{8}).Read(more)
	if err := c.write(more, int64(len(model))); err != nil {
		t.Fatal(err)
	}
	model = append(model, more...)
	if c.stream == nil {
		t.Error("a file written in order past memSpool does not stream")
	}
	if got := committedValue(t, p, c); !bytes.Equal(got, model) {
		t.Fatalf("committed value: %d bytes, not the %d written", len(got), len(model))
	}
}

// committedValue commits c's content as a close does and reads the value
// back.
func committedValue(t interface {
	Helper()
	Fatal(...any)
}, p *store.Page, c *content) []byte {
	t.Helper()
	id, n, w, err := c.value()
	if err == nil && w != nil {
		err = c.stored(w.Commit())
	}
	if err != nil {
		t.Fatal(err)
	}
	v, err := p.OpenValue(id)
	if err != nil {
		t.Fatal(err)
	}
	b := make([]byte, n+1)
	m, err := v.ReadAt(b, 0)
	if err != nil && err != io.EOF {
		t.Fatal(err)
	}
	return b[:m]
}

// storedValue stores n random bytes drawn from seed in p as a file's
// content is stored, and returns them and the value's id.
func storedValue(t *testing.T, p *store.Page, seed byte, n int) ([]byte, cas.ObjectIdentifier) {
	t.Helper()
	data := make([]byte, n)
	rand.NewChaCha8([32]byte{seed}).Read(data)
	c := newContent(p, t.TempDir(), emptyValue, 0)
	defer c.close()
	if err := c.write(data, 0); err != nil {
		t.Fatal(err)
	}
	id, _, w, err := c.value()
	if err == nil {
		err = c.stored(w.Commit())
	}
	if err != nil {
		t.Fatal(err)
	}
	return data, id
}

// readRange reads up to size bytes of r at off, to its end.
func readRange(t *rapid.T, r io.ReaderAt, off, size int) []byte {
	b := make([]byte, size)
	n, err := r.ReadAt(b, int64(off))
	if err != nil && err != io.EOF {
		t.Fatal(err)
	}
	return b[:n]
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

// A commit from a copy (fileNode.commitFromCopy) computes the value of the
// content as it was when copied, from the base and a copy of its changes,
// while writes and truncates go on; the content then takes that value as its
// base with what changed since over it. Whatever the changes before and
// after the copy, the value holds the copied content, and the content reads
// and commits as it does without a copy.
func TestRebaseOnCopy(t *testing.T) {
	p := testPage(t)
	data, baseID := storedValue(t, p, 3, 1<<20)
	read := func(t *rapid.T, r io.ReaderAt, size int) []byte { return readRange(t, r, 0, size+1) }
	rapid.Check(t, func(t *rapid.T) {
		c := newContent(p, os.TempDir(), baseID, int64(len(data)))
		defer c.close()
		model := bytes.Clone(data)
		// Writes and truncates, never to 0 (a rewrite from 0 streams, and a
		// stream is never copied).
		change := func(label string) {
			for range rapid.IntRange(0, 6).Draw(t, label) {
				if rapid.Bool().Draw(t, label+"-truncate") {
					n := rapid.IntRange(1, 3<<19).Draw(t, label+"-size")
					if err := c.truncate(int64(n)); err != nil {
						t.Fatal(err)
					}
					model = append(model[:min(n, len(model))], make([]byte, max(0, n-len(model)))...)
					continue
				}
				off := rapid.IntRange(1, 3<<19).Draw(t, label+"-off")
				b := bytes.Repeat([]byte{byte(rapid.IntRange(1, 255).Draw(t, label+"-byte"))}, rapid.IntRange(1, 10000).Draw(t, label+"-len"))
				if err := c.write(b, int64(off)); err != nil {
					t.Fatal(err)
				}
				if grow := off + len(b); grow > len(model) {
					model = append(model, make([]byte, grow-len(model))...)
				}
				copy(model[off:], b)
			}
		}
		change("before")
		if !c.dirty || c.baseSize == 0 {
			t.Skip("nothing to copy")
		}
		copied := bytes.Clone(model)
		ext, err := c.copyExtents(c.ext)
		if err != nil {
			t.Fatal(err)
		}
		size := c.size
		c.copied = newSince(size)
		w, id, err := p.EditExtents(c.baseID, uint64(c.baseSize), uint64(size), ext)
		if err != nil {
			t.Fatal(err)
		}
		defer w.Discard()
		change("after")
		after := c.copied
		c.copied = nil
		c.rebase(id, size, after)
		if err := w.Commit(); err != nil {
			t.Fatal(err)
		}
		v, err := p.OpenValue(id)
		if err != nil {
			t.Fatal(err)
		}
		if got := read(t, v, len(copied)); !bytes.Equal(got, copied) {
			t.Fatalf("the value from the copy holds %d bytes, want the %d copied", len(got), len(copied))
		}
		if got := read(t, contentReader{c: c}, len(model)); !bytes.Equal(got, model) {
			t.Fatalf("rebased, the content reads %d bytes, want %d", len(got), len(model))
		}
		if !c.dirty && !bytes.Equal(model, copied) {
			t.Fatal("rebased, the content is not dirty, but differs from the copy")
		}
		id, n, w2, err := c.value()
		if err != nil {
			t.Fatal(err)
		}
		if w2 != nil {
			defer w2.Discard()
			if err := w2.Commit(); err != nil {
				t.Fatal(err)
			}
		}
		v, err = p.OpenValue(id)
		if err != nil {
			t.Fatal(err)
		}
		if got := read(t, v, int(n)); !bytes.Equal(got, model) {
			t.Fatalf("committed after the rebase: %d bytes, want %d", len(got), len(model))
		}
	})
}

// A file rewritten in order from offset 0 streams once the spool holds
// streamAfter bytes from 0 and nothing else; the base's bytes after the
// stream follow it, or an edit of the base keeps them. Whatever the writes,
// truncates and reads around it, the content reads, and commits, as the
// model of the file does.
func TestRewriteFromZeroStreams(t *testing.T) {
	p := testPage(t)
	data, baseID := storedValue(t, p, 4, 3<<20)
	read := readRange
	streamed := 0
	rapid.Check(t, func(t *rapid.T) {
		baseSize := rapid.SampledFrom([]int{0, 100 << 10, len(data)}).Draw(t, "base")
		id := emptyValue
		if baseSize > 0 {
			id = baseID
		}
		c := newContent(p, os.TempDir(), id, int64(len(data)))
		defer c.close()
		c.truncate(int64(baseSize))
		model := bytes.Clone(data[:baseSize])
		c.streamAfter = int64(rapid.IntRange(1, 64<<10).Draw(t, "after"))
		setSize := func(n int) {
			model = append(model[:min(n, len(model))], make([]byte, max(0, n-len(model)))...)
		}
		if rapid.Bool().Draw(t, "reshape") {
			// Cut and grown: the base's bytes past the cut read as zeros.
			for _, label := range []string{"cut", "grown"} {
				n := rapid.IntRange(0, 4<<20).Draw(t, label)
				if err := c.truncate(int64(n)); err != nil {
					t.Fatal(err)
				}
				setSize(n)
			}
		}
		next := 0 // where the writes in order go on
		for i := range rapid.IntRange(1, 40).Draw(t, "ops") {
			switch op := rapid.IntRange(0, 9).Draw(t, "op"); {
			case op < 6: // in order from 0, or anywhere
				off := next
				if op == 5 {
					off = rapid.IntRange(0, 4<<20).Draw(t, "off")
				}
				b := make([]byte, rapid.IntRange(1, 300<<10).Draw(t, "len"))
				rand.NewChaCha8([32]byte{byte(i), 5}).Read(b)
				if err := c.write(b, int64(off)); err != nil {
					t.Fatal(err)
				}
				if c.stream != nil && c.baseSize > 0 {
					streamed++
				}
				if end := off + len(b); end > len(model) {
					setSize(end)
				}
				copy(model[off:], b)
				next = off + len(b)
			case op == 6:
				n := rapid.IntRange(0, 4<<20).Draw(t, "size")
				if err := c.truncate(int64(n)); err != nil {
					t.Fatal(err)
				}
				setSize(n)
			case op == 7:
				off := rapid.IntRange(0, len(model)).Draw(t, "roff")
				n := rapid.IntRange(1, 200<<10).Draw(t, "rlen")
				if got, want := read(t, contentReader{c: c}, off, n), model[off:min(off+n, len(model))]; !bytes.Equal(got, want) {
					t.Fatalf("read of %d at %d: %d bytes, not the %d of the model", n, off, len(got), len(want))
				}
			default: // a commit, as a close's: the value becomes the base
				id, n, w, err := c.value()
				if err == nil && w != nil {
					err = c.stored(w.Commit())
				}
				if err != nil {
					t.Fatal(err)
				}
				c.reset(id, n)
			}
		}
		if got := read(t, contentReader{c: c}, 0, len(model)+1); !bytes.Equal(got, model) {
			t.Fatalf("the content reads %d bytes, not the %d of the model", len(got), len(model))
		}
		if got := committedValue(t, p, c); !bytes.Equal(got, model) {
			t.Fatalf("committed: %d bytes, not the %d of the model", len(got), len(model))
		}
	})
	if streamed == 0 {
		t.Error("no rewrite from offset 0 streamed")
	}
}
