package piececache

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"testing"

	"pgregory.net/rapid"

	"github.com/ledgerfs/ledgerfs/cas"
)

func piece(i, n int) (cas.Digest, []byte) {
	data := bytes.Repeat([]byte(fmt.Sprintf("piece %d ", i)), n/8+1)[:n]
	return cas.ComputeDigest(cas.KindBlob, false, data), data
}

// TestLRU: against a model of a least-recently-used list, the cache holds
// the pieces the model says, under its limit, across a reopen.
func TestLRU(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		dir, err := os.MkdirTemp("", "piececache")
		if err != nil {
			t.Fatal(err)
		}
		defer os.RemoveAll(dir)
		limit := int64(rapid.IntRange(0, 20000).Draw(t, "limit"))
		c, err := Open(dir, limit)
		if err != nil {
			t.Fatal(err)
		}
		var model []int // most recent first
		sizes := map[int]int{}
		var size int64
		touch := func(i int) {
			for k, m := range model {
				if m == i {
					model = append(model[:k], model[k+1:]...)
					break
				}
			}
			model = append([]int{i}, model...)
		}
		for range rapid.IntRange(1, 60).Draw(t, "steps") {
			i := rapid.IntRange(0, 15).Draw(t, "piece")
			if rapid.Bool().Draw(t, "get") {
				d, want := piece(i, 100*i+300)
				got, ok := c.Get(d)
				inModel := false
				for _, m := range model {
					inModel = inModel || m == i
				}
				if ok != inModel || ok && !bytes.Equal(got, want) {
					t.Fatalf("get %d: %v, the model holds it: %v", i, ok, inModel)
				}
				if ok {
					touch(i)
				}
				continue
			}
			d, data := piece(i, 100*i+300)
			if int64(len(data)) > limit {
				c.Put(d, data)
				continue
			}
			held := false
			for _, m := range model {
				held = held || m == i
			}
			c.Put(d, data)
			if !held {
				model = append([]int{i}, model...)
				sizes[i] = len(data)
				size += int64(len(data))
			}
			for size > limit {
				last := model[len(model)-1]
				model = model[:len(model)-1]
				size -= int64(sizes[last])
			}
		}
		if c.Size() != size || c.Size() > limit {
			t.Fatalf("the cache holds %d bytes, the model %d (limit %d)", c.Size(), size, limit)
		}
		// Reopened, it holds the same pieces.
		c, err = Open(dir, limit)
		if err != nil {
			t.Fatal(err)
		}
		if c.Size() != size {
			t.Fatalf("reopened, the cache holds %d bytes, want %d", c.Size(), size)
		}
		for _, i := range model {
			if d, _ := piece(i, 100*i+300); !c.Has(d) {
				t.Fatalf("reopened, the cache lost piece %d", i)
			}
		}
	})
}

// TestDamaged: a cached file that no longer verifies is a miss, and goes.
func TestDamaged(t *testing.T) {
	dir := t.TempDir()
	c, err := Open(dir, 1<<20)
	if err != nil {
		t.Fatal(err)
	}
	d, data := piece(1, 5000)
	c.Put(d, data)
	var file string
	filepath.WalkDir(dir, func(p string, e os.DirEntry, err error) error {
		if !e.IsDir() {
			file = p
		}
		return nil
	})
	if err := os.WriteFile(file, []byte("not the piece"), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, ok := c.Get(d); ok {
		t.Fatal("a damaged piece was returned")
	}
	if c.Has(d) || c.Size() != 0 {
		t.Fatal("a damaged piece stayed")
	}
	if _, err := os.Stat(file); !os.IsNotExist(err) {
		t.Fatalf("the damaged file stayed: %v", err)
	}
	c.SetLimit(0)
	c.Put(d, data)
	if c.Has(d) {
		t.Fatal("a cache of limit 0 kept a piece")
	}
}
