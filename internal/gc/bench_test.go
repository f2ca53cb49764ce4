package gc_test

import (
	"fmt"
	"testing"

	"github.com/ledgerfs/ledgerfs/internal/btree"
	"github.com/ledgerfs/ledgerfs/internal/gc"
	"github.com/ledgerfs/ledgerfs/internal/retention"
	"github.com/ledgerfs/ledgerfs/journal"
	"github.com/ledgerfs/ledgerfs/store"
)

// historyCommits is the history of the page in BenchmarkCollect20k: as
// many commits as half an hour of ordinary use made in one page (an npm
// install, a git checkout, edits), each a new 4 KiB version of one of 500
// files.
const historyCommits = 20000

// BenchmarkCollect20k times an explicit collection (.collect, ledgerfs gc)
// of a page with 20,000 commits: with the default policy, which keeps
// every commit of the last hour (all of them), and with one that keeps
// the last 100. Run with -benchtime 1x: a page once collected is left as
// it is by the next collection.
func BenchmarkCollect20k(b *testing.B) {
	for _, c := range []struct {
		name   string
		policy retention.Policy
	}{
		{"default", retention.Default},
		{"last100", retention.Policy{Last: 100}},
	} {
		b.Run(c.name, func(b *testing.B) {
			for b.Loop() {
				b.StopTimer()
				repo := longPage(b)
				b.StartTimer()
				r, err := gc.CollectPage(repo, "l", "p", gc.PageOptions{Policy: &c.policy, Wait: true})
				if err != nil {
					b.Fatal(err)
				}
				b.ReportMetric(float64(r.Pruned), "pruned")
				b.ReportMetric(float64(r.Deleted), "deleted")
			}
		})
	}
}

// longPage makes a repository whose page l/p has historyCommits commits.
func longPage(b *testing.B) *store.Repository {
	repo := newRepo(b)
	p, err := repo.Acquire("l", "p")
	if err != nil {
		b.Fatal(err)
	}
	defer repo.Release(p)
	for i := range historyCommits {
		w := p.NewValueWriter()
		if _, err := w.Write(content(i, 4096)); err != nil {
			b.Fatal(err)
		}
		id, size, err := w.Close()
		if err != nil {
			b.Fatal(err)
		}
		j, err := journals.Begin(p, false)
		if err != nil {
			b.Fatal(err)
		}
		key := fmt.Sprintf("src/f%03d", i%500)
		if err := j.Apply(journal.Op{Key: key, Entry: btree.Entry{Value: id, Meta: btree.Meta{Size: size}}}); err != nil {
			b.Fatal(err)
		}
		if _, err := j.Commit(); err != nil {
			b.Fatal(err)
		}
	}
	return repo
}
