package journal

import (
	"fmt"
	"math/rand/v2"
	"strconv"
	"testing"

	"github.com/ledgerfs/ledgerfs/internal/btree"
	"github.com/ledgerfs/ledgerfs/store"
)

// BenchmarkApplyDelete removes one entry per Apply from a directory of n, as
// a sequential unlink does: it waits for its own commit. In key order the
// commits rewrite the same leaf; in random order (rm above 10,000 entries
// removes in inode order) each rewrites another.
func BenchmarkApplyDelete(b *testing.B) {
	for _, n := range []int{1_000, 30_000} {
		for _, order := range []string{"sorted", "random"} {
			b.Run(strconv.Itoa(n)+"/"+order, func(b *testing.B) {
				e := newEnv(b)
				c := e.eng.CommitterFor(e.p)
				v := e.value("x")
				keys := make([]string, n)
				for i := range keys {
					keys[i] = fmt.Sprintf("many/e%07d", i)
				}
				fill := func() {
					for i := 0; i < n; i += maxImplicitOps {
						var ops []Op
						for _, k := range keys[i:min(i+maxImplicitOps, n)] {
							ops = append(ops, Op{Key: k, Entry: v})
						}
						if err := c.Apply(false, ops...); err != nil {
							b.Fatal(err)
						}
					}
					if order == "random" {
						rand.Shuffle(len(keys), func(i, j int) { keys[i], keys[j] = keys[j], keys[i] })
					}
				}
				fill()
				i := 0
				for b.Loop() {
					if i == n {
						b.StopTimer()
						fill()
						i = 0
						b.StartTimer()
					}
					if err := c.Apply(false, Op{Key: keys[i], Kind: store.OpDelete}); err != nil {
						b.Fatal(err)
					}
					i++
				}
			})
		}
	}
}

// BenchmarkQueueClose is a stream of closes of new 4 KiB files, as a create
// loop makes them: each stores its value and queues its entry, the value's
// last pieces and the journal row in one db transaction; the committer
// commits them in batches behind. The time per close includes the commits.
func BenchmarkQueueClose(b *testing.B) {
	e := newEnv(b)
	c := e.eng.CommitterFor(e.p)
	data := make([]byte, 4096)
	rng := rand.New(rand.NewPCG(1, 2))
	i := 0
	for b.Loop() {
		for j := range data {
			data[j] = byte(rng.Uint32())
		}
		w := e.p.NewValueWriter()
		if _, err := w.Write(data); err != nil {
			b.Fatal(err)
		}
		id, size, err := w.End()
		if err != nil {
			b.Fatal(err)
		}
		key := fmt.Sprintf("small/f%07d", i)
		op := Op{Key: key, Entry: btree.Entry{Key: key, Value: id, Meta: btree.Meta{Mode: 0o100644, Size: size}}}
		if err := c.QueueWith(w.CommitJournal, nil, op); err != nil {
			b.Fatal(err)
		}
		i++
	}
	if err := c.Wait(); err != nil {
		b.Fatal(err)
	}
}
