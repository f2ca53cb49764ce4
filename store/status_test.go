package store

import (
	"slices"
	"testing"

	"github.com/ledgerfs/ledgerfs/cas"
	"github.com/ledgerfs/ledgerfs/internal/testutil"
)

// A scan of the transient rows answers as a lookup of each would, for every
// digest up to where its bound stopped it, and for no digest after.
func TestScanTransientAnswersAsLookups(t *testing.T) {
	t.Parallel()
	p := testPage(t)
	pw := p.NewPieceWriter()
	var all []cas.Digest
	for i := range 300 {
		data := testutil.Random(uint64(i), 0, 100+i)
		d := cas.ComputeDigest(cas.KindBlob, false, data)
		if err := pw.Put(d, data); err != nil {
			t.Fatal(err)
		}
		all = append(all, d)
	}
	if err := pw.Flush(); err != nil {
		t.Fatal(err)
	}
	if err := p.SetStatus(Local, all[:100]); err != nil {
		t.Fatal(err)
	}
	if err := p.SetStatus(Synced, all[100:150]); err != nil {
		t.Fatal(err)
	}
	inline := cas.ComputeDigest(cas.KindBlob, false, []byte("tiny"))
	for _, max := range []int{1, 37, 150, 1000} {
		s, err := p.scanTransient(max)
		if err != nil {
			t.Fatal(err)
		}
		var known, transient int
		for _, d := range all {
			got, ok := s.lookup(d)
			want, err := p.IsTransient(d)
			if err != nil {
				t.Fatal(err)
			}
			if !ok {
				continue
			}
			known++
			if got != want {
				t.Fatalf("max %d: scan says %s transient %v, a lookup %v", max, d, got, want)
			}
			if got {
				transient++
			}
		}
		if transient != min(max, 150) {
			t.Errorf("max %d: the scan knew %d transient pieces, want %d", max, transient, min(max, 150))
		}
		sorted := slices.Sorted(slices.Values(all))
		if max >= 150 && known != len(all) {
			t.Errorf("max %d: the scan read every transient row but knew %d of %d digests", max, known, len(all))
		}
		if max < 150 {
			// It knows every digest up to the last it read, and none after.
			last := s.through
			for _, d := range sorted {
				if _, ok := s.lookup(d); ok != (string(d) <= last) {
					t.Fatalf("max %d: digest %s known %v, the scan stopped at %x", max, d, ok, last)
				}
			}
		}
		if _, ok := s.lookup(inline); ok {
			t.Errorf("max %d: the scan claims to know an inline piece", max)
		}
	}
}
