package bench

import (
	"context"
	"io"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/restic/chunker"

	"github.com/ledgerfs/ledgerfs/cas"
)

func TestRun(t *testing.T) {
	dir := t.TempDir()
	o := Defaults()
	o.BigFileSize, o.BlockSize = 3<<20+5, 1<<20
	o.SmallFiles, o.TinyFiles = 3, 7
	phases := map[string]int{}
	o.Progress = func(phase string, done, total int) {
		if done < 1 || done > total {
			t.Errorf("progress %s: %d of %d", phase, done, total)
		}
		phases[phase] = max(phases[phase], done)
	}
	rep, err := Run(context.Background(), dir, o)
	if err != nil {
		t.Fatal(err)
	}
	if len(rep.Results) != 10 {
		t.Fatalf("%d results, want 10", len(rep.Results))
	}
	if w, r := rep.Results[0], rep.Results[1]; w.Bytes != o.BigFileSize || r.Bytes != o.BigFileSize || w.Ops != 4 {
		t.Fatalf("big file: wrote %d bytes in %d ops, read %d", w.Bytes, w.Ops, r.Bytes)
	}
	for _, r := range rep.Results {
		if r.OpsPerSec <= 0 || r.P50 > r.P90 || r.P90 > r.P99 || r.P99 > r.Max {
			t.Errorf("%s: %+v", r.Phase, r)
		}
	}
	if phases["create 4 KiB files"] != 7 || phases["read big file"] != 4 {
		t.Errorf("progress: %v", phases)
	}
	var b strings.Builder
	if err := rep.WriteTable(&b); err != nil || strings.Count(b.String(), "\n") != 11 {
		t.Fatalf("table:\n%s (%v)", b.String(), err)
	}
	if es, _ := os.ReadDir(dir); len(es) != 0 {
		t.Fatalf("bench left %d entries behind", len(es))
	}
}

func TestRunCancelled(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := Run(ctx, t.TempDir(), Defaults()); err == nil {
		t.Fatal("a cancelled run succeeded")
	}
	if _, err := Run(context.Background(), "/nonexistent", Defaults()); err == nil {
		t.Fatal("a run in a missing directory succeeded")
	}
}

// The big file's blocks must not repeat under ledgerfs's content-defined
// chunking: windows of one random pool at shifted offsets, which the
// benchmark once wrote, made 93 % of its chunks repeats, and a deduplicating
// filesystem looked faster than it is.
func TestBigFileDoesNotDeduplicate(t *testing.T) {
	o := Defaults()
	o.BigFileSize, o.BlockSize = 24<<20, 1<<20
	r := &runner{ctx: context.Background(), o: o, rep: &Report{}, rng: rand.NewChaCha8([32]byte{1})}
	path := filepath.Join(t.TempDir(), "big")
	if err := r.writeBig(path); err != nil {
		t.Fatal(err)
	}
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	s := &pieceCount{seen: map[cas.Digest]bool{}}
	w := cas.NewWriter(s, chunker.Pol(0x3DA3358B4DC173), cas.KindBlob)
	if _, err := io.Copy(w, f); err != nil {
		t.Fatal(err)
	}
	if _, _, err := w.Close(); err != nil {
		t.Fatal(err)
	}
	if s.pieces < 300 || s.repeats > 0 {
		t.Fatalf("%d of %d pieces repeat earlier ones", s.repeats, s.pieces)
	}
}

// pieceCount is a cas.Sink that counts the pieces it was given before.
type pieceCount struct {
	seen            map[cas.Digest]bool
	pieces, repeats int
}

func (s *pieceCount) Put(d cas.Digest, _ []byte) error {
	s.pieces++
	if s.seen[d] {
		s.repeats++
	}
	s.seen[d] = true
	return nil
}
