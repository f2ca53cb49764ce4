package history

import (
	"fmt"
	"io"
	"os"
	"sync"
	"testing"
	"time"

	"github.com/ledgerfs/ledgerfs/journal"
	"github.com/ledgerfs/ledgerfs/store"
)

const benchCommits = 10000

var (
	benchOnce sync.Once
	benchPage *store.Page
	benchMid  time.Time
)

// longHistory is a page with 10,000 commits over 500 keys; every 10th
// commit also changes "tracked", which so has 1,000 versions.
func longHistory(b *testing.B) *store.Page {
	benchOnce.Do(func() {
		dir, err := tempDir()
		if err != nil {
			b.Fatal(err)
		}
		p, _ := openPage(b, dir) // kept open for all benchmarks
		for i := range benchCommits {
			j, err := journals.Begin(p, false)
			if err != nil {
				b.Fatal(err)
			}
			ops := []journal.Op{{Key: fmt.Sprintf("k%03d", i%500), Entry: value(b, p, fmt.Sprint(i))}}
			if i%10 == 0 {
				ops = append(ops, journal.Op{Key: "tracked", Entry: value(b, p, fmt.Sprint("t", i))})
			}
			if err := j.Apply(ops...); err != nil {
				b.Fatal(err)
			}
			c, err := j.Commit()
			if err != nil {
				b.Fatal(err)
			}
			if i == benchCommits/2 {
				benchMid = time.Unix(0, c.Timestamp)
			}
		}
		benchPage = p
	})
	if benchPage == nil {
		b.Fatal("no history page")
	}
	return benchPage
}

// BenchmarkIDs10k lists the commit ids, as .ledger/commits/ does.
func BenchmarkIDs10k(b *testing.B) {
	p := longHistory(b)
	for b.Loop() {
		n := 0
		if err := IDs(p, func(store.CommitID) error { n++; return nil }); err != nil || n != benchCommits+1 {
			b.Fatal(n, err)
		}
	}
}

// BenchmarkVersions10k finds the 1,000 versions of one entry across 10,000
// commits, as .ledger/versions/<path>/ does.
func BenchmarkVersions10k(b *testing.B) {
	p := longHistory(b)
	for b.Loop() {
		vs, err := Versions(p, "tracked")
		if err != nil || len(vs) != benchCommits/10 {
			b.Fatal(len(vs), err)
		}
	}
}

// BenchmarkLog10k writes the log of 10,000 commits with the number of keys
// each changed, as .ledger/log does.
func BenchmarkLog10k(b *testing.B) {
	p := longHistory(b)
	for b.Loop() {
		if err := WriteLog(io.Discard, p); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkAsOf10k finds the head at a time halfway through 10,000
// commits, as .ledger/at/<time> does.
func BenchmarkAsOf10k(b *testing.B) {
	p := longHistory(b)
	for b.Loop() {
		if _, err := AsOf(p, benchMid); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkOpenVersionIndex10k reads the version file of 10,000 commits,
// as a mount's first listing of versions/ does.
func BenchmarkOpenVersionIndex10k(b *testing.B) {
	p := longHistory(b)
	x, err := OpenVersionIndex(p)
	if err == nil {
		err = x.Update(p)
	}
	if err != nil {
		b.Fatal(err)
	}
	for b.Loop() {
		x, err := OpenVersionIndex(p)
		if err != nil || len(x.byKey["tracked"]) != benchCommits/10 {
			b.Fatal(len(x.byKey["tracked"]), err)
		}
	}
}

// BenchmarkCommitIndexed commits one changed key on a page of 500 keys,
// with its versions indexed as it lands (IndexLanded) or not: what
// indexing adds to a commit.
func BenchmarkCommitIndexed(b *testing.B) {
	for _, on := range []bool{false, true} {
		b.Run(fmt.Sprint("indexed=", on), func(b *testing.B) {
			dir, err := os.MkdirTemp("", "ledgerfs-history-bench-")
			if err != nil {
				b.Fatal(err)
			}
			defer os.RemoveAll(dir)
			p, close := openPage(b, dir)
			defer close()
			j, err := journals.Begin(p, false)
			if err != nil {
				b.Fatal(err)
			}
			for i := range 500 {
				if err := j.Apply(journal.Op{Key: fmt.Sprintf("k%03d", i), Entry: value(b, p, "v")}); err != nil {
					b.Fatal(err)
				}
			}
			if _, err := j.Commit(); err != nil {
				b.Fatal(err)
			}
			indexLandings.Store(on)
			defer indexLandings.Store(false)
			for i := 0; b.Loop(); i++ {
				j, err := journals.Begin(p, false)
				if err != nil {
					b.Fatal(err)
				}
				if err := j.Apply(journal.Op{Key: fmt.Sprintf("k%03d", i%500), Entry: value(b, p, fmt.Sprint(i))}); err != nil {
					b.Fatal(err)
				}
				if _, err := j.Commit(); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
