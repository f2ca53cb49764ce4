package fs

import (
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/restic/chunker"
	"pgregory.net/rapid"

	"github.com/ledgerfs/ledgerfs/cas"
	"github.com/ledgerfs/ledgerfs/internal/btree"
)

// memPieces holds a tree's pieces in memory.
type memPieces map[cas.Digest][]byte

func (m memPieces) Put(d cas.Digest, b []byte) error {
	m[d] = append([]byte(nil), b...)
	return nil
}

func (m memPieces) Get(d cas.Digest, buf []byte) ([]byte, error) {
	b, ok := m[d]
	if !ok {
		return nil, cas.ErrNotFound
	}
	return append(buf[:0], b...), nil
}

// walkDir, stepping over the keys it skips before it seeks, calls its
// function with exactly the entries a seek past each skip reaches: every
// name of the directory once, whatever the subdirectories hold.
func TestWalkDirSkipsAsASeekDoes(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		s := btree.NewStore(memPieces{}, chunker.Pol(0x3DA3358B4DC173), nil)
		tr := s.Open(btree.EmptyRoot)
		var keys []string
		for i := range rapid.IntRange(0, 60).Draw(t, "names") {
			// "n1/..." skips to "n10", a name of its own.
			name := fmt.Sprintf("n%d", rapid.IntRange(0, 200).Draw(t, "name"))
			keys = append(keys, "d/"+name)
			// A subdirectory: its marker alone, or many keys.
			for j := range rapid.SampledFrom([]int{0, 1, 1, 3, 20}).Draw(t, "under") {
				keys = append(keys, fmt.Sprintf("d/%s/k%02d", name, j))
			}
			if i%7 == 0 {
				keys = append(keys, "e/"+name) // after the directory
			}
		}
		keys = append(keys, "c", "d/")
		for i, k := range keys {
			if err := tr.Put(btree.Entry{Key: k, Value: cas.ObjectIdentifier{Digest: cas.ComputeDigest(cas.KindBlob, false, []byte(fmt.Sprint(i)))}}); err != nil {
				t.Fatal(err)
			}
		}
		skip := func(key string) string {
			rel := key[len("d/"):]
			if i := strings.IndexByte(rel, '/'); i >= 0 {
				return "d/" + rel[:i] + "0"
			}
			return ""
		}
		var want []string
		it := tr.Prefix("d/")
		for it.Next() {
			k := it.Entry().Key
			want = append(want, k)
			if to := skip(k); to != "" {
				it = tr.SeekPrefix(to, "d/")
			}
		}
		if it.Err() != nil {
			t.Fatal(it.Err())
		}
		var got []string
		if err := walkDir(tr, "d/", func(e btree.Entry) string {
			got = append(got, e.Key)
			return skip(e.Key)
		}); err != nil {
			t.Fatal(err)
		}
		if !slices.Equal(got, want) {
			t.Fatalf("walkDir saw %q, a seek past each skip %q", got, want)
		}
	})
}
