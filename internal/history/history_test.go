package history

import (
	"encoding/hex"
	"flag"
	"fmt"
	"maps"
	"math"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	"pgregory.net/rapid"

	"github.com/ledgerfs/ledgerfs/internal/btree"
	"github.com/ledgerfs/ledgerfs/internal/testutil"
	"github.com/ledgerfs/ledgerfs/journal"
	"github.com/ledgerfs/ledgerfs/store"
)

// fataler is what the helpers need of a *testing.T or *rapid.T.
type fataler interface{ Fatal(args ...any) }

// journals commits the tests' changes: one engine for the package's
// repositories, each page with its own committer.
var journals = journal.NewEngine()

// openPage opens a new page in dir; close releases it.
func openPage(t fataler, dir string) (p *store.Page, close func()) {
	r, err := store.Open(dir, journals.Hooks(store.Options{}))
	if err != nil {
		t.Fatal(err)
	}
	if err := r.CreateLedger("l"); err != nil {
		t.Fatal(err)
	}
	if err := r.CreatePage("l", "p"); err != nil {
		t.Fatal(err)
	}
	p, err = r.Acquire("l", "p")
	if err != nil {
		t.Fatal(err)
	}
	return p, func() { r.Release(p); r.Close() }
}

func value(t fataler, p *store.Page, s string) btree.Entry {
	w := p.NewValueWriter()
	if _, err := w.Write([]byte(s)); err != nil {
		t.Fatal(err)
	}
	id, size, err := w.Close()
	if err != nil {
		t.Fatal(err)
	}
	return btree.Entry{Value: id, Meta: btree.Meta{Size: size}}
}

// step is one commit of a generated history and the page state it left.
type step struct {
	c     *store.Commit
	state map[string]string
	// head is false for a transaction's own commit, which never was the
	// page's head (its merge was).
	head bool
}

// build makes a history of n commits from random puts and deletes over a
// few keys, some through transactions that must merge.
func build(t *rapid.T, p *store.Page, n int) []step {
	state := map[string]string{}
	var steps []step
	keys := []string{"a", "b", "c/d", "c/e"}
	commit := func(j *journal.Journal, ops []journal.Op) *store.Commit { return commitOps(t, j, ops...) }
	randomOps := func(label string, st map[string]string) []journal.Op {
		var ops []journal.Op
		for _, k := range rapid.SliceOfNDistinct(rapid.SampledFrom(keys), 1, 3, rapid.ID[string]).Draw(t, label) {
			if _, ok := st[k]; ok && rapid.Bool().Draw(t, label+"-del") {
				ops = append(ops, journal.Op{Key: k, Kind: store.OpDelete})
				delete(st, k)
				continue
			}
			v := fmt.Sprintf("%s-%d", k, rapid.IntRange(0, 3).Draw(t, label+"-v"))
			ops = append(ops, journal.Op{Key: k, Entry: value(t, p, v)})
			st[k] = v
		}
		return ops
	}
	for i := 0; i < n; i++ {
		if rapid.IntRange(0, 4).Draw(t, "txn") > 0 {
			j, err := journals.Begin(p, false)
			if err != nil {
				t.Fatal(err)
			}
			ops := randomOps("ops", state)
			if c := commit(j, ops); c != nil {
				steps = append(steps, step{c: c, state: maps.Clone(state), head: true})
			}
			continue
		}
		// A transaction on the current head, then a plain commit on a
		// different key, then the transaction's commit and its merge.
		tx, err := journals.Begin(p, true)
		if err != nil {
			t.Fatal(err)
		}
		txState := maps.Clone(state)
		txOps := randomOps("txops", txState)
		j, err := journals.Begin(p, false)
		if err != nil {
			t.Fatal(err)
		}
		other := "z"
		state[other] = fmt.Sprintf("z-%d", i)
		if c := commit(j, []journal.Op{{Key: other, Entry: value(t, p, state[other])}}); c != nil {
			steps = append(steps, step{c: c, state: maps.Clone(state), head: true})
		}
		m := commit(tx, txOps)
		if m == nil {
			continue
		}
		for _, op := range txOps {
			if op.IsDelete() {
				delete(state, op.Key)
			} else {
				state[op.Key] = txState[op.Key]
			}
		}
		if len(m.Parents) == 2 {
			txc := m.Parents[0]
			if head := steps[len(steps)-1].c.ID; txc == head {
				txc = m.Parents[1]
			}
			c, err := p.Commit(txc)
			if err != nil {
				t.Fatal(err)
			}
			steps = append(steps, step{c: c, state: txState})
		}
		steps = append(steps, step{c: m, state: maps.Clone(state), head: true})
	}
	return steps
}

// commitOps applies ops to j and commits it.
func commitOps(t fataler, j *journal.Journal, ops ...journal.Op) *store.Commit {
	if err := j.Apply(ops...); err != nil {
		t.Fatal(err)
	}
	c, err := j.Commit()
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func contents(t fataler, p *store.Page, c *store.Commit) map[string]string {
	out := map[string]string{}
	it := p.Tree(c).Seek("")
	for it.Next() {
		e := it.Entry()
		r, err := p.OpenValue(e.Value)
		if err != nil {
			t.Fatal(err)
		}
		b := make([]byte, e.Meta.Size)
		if _, err := r.ReadAt(b, 0); err != nil && len(b) > 0 {
			t.Fatal(err)
		}
		out[e.Key] = string(b)
	}
	if it.Err() != nil {
		t.Fatal(it.Err())
	}
	return out
}

func TestHistoryMatchesModel(t *testing.T) {
	dir := t.TempDir()
	n := 0
	rapid.Check(t, func(t *rapid.T) {
		n++
		p, close := openPage(t, fmt.Sprintf("%s/%d", dir, n))
		defer close()
		steps := build(t, p, rapid.IntRange(1, 12).Draw(t, "commits"))

		// Walk: every commit once, newest first, then the first commit.
		var walked []*store.Commit
		if err := Walk(p, func(c *store.Commit, _ []*store.Commit) error { walked = append(walked, c); return nil }); err != nil {
			t.Fatal(err)
		}
		if len(walked) != len(steps)+1 || walked[len(walked)-1].ID != store.FirstCommitID {
			t.Fatalf("walk: %d commits, want %d and the first", len(walked), len(steps)+1)
		}
		for i := 1; i < len(walked); i++ {
			if walked[i].Timestamp > walked[i-1].Timestamp {
				t.Fatalf("walk: commit %d is newer than commit %d", i, i-1)
			}
		}

		byID := map[store.CommitID]map[string]string{store.FirstCommitID: {}}
		for _, s := range steps {
			byID[s.c.ID] = s.state
		}
		prev := map[string]string{}
		for _, s := range steps {
			if got := contents(t, p, s.c); !maps.Equal(got, s.state) {
				t.Fatalf("commit %s: %v, want %v", s.c.ID, got, s.state)
			}
			if !s.head {
				continue
			}
			// The page as of a head's time is that head; just before it, the
			// one before.
			at, err := AsOf(p, time.Unix(0, s.c.Timestamp))
			if err != nil || !maps.Equal(contents(t, p, at), s.state) {
				t.Fatalf("as of %d: %v, want %v (%v)", s.c.Timestamp, contents(t, p, at), s.state, err)
			}
			before, err := AsOf(p, time.Unix(0, s.c.Timestamp-1))
			if err != nil || !maps.Equal(contents(t, p, before), prev) {
				t.Fatalf("just before %d: %v, want %v (%v)", s.c.Timestamp, contents(t, p, before), prev, err)
			}
			prev = s.state
		}
		// A scan of the commits finds what the walk does.
		for _, s := range steps {
			for _, ns := range []int64{s.c.Timestamp, s.c.Timestamp - 1, s.c.Timestamp + 1} {
				walked, err := asOf(p, time.Unix(0, ns), math.MaxInt)
				if err != nil {
					t.Fatal(err)
				}
				scanned, err := asOf(p, time.Unix(0, ns), 1)
				if err != nil || scanned.ID != walked.ID {
					t.Fatalf("as of %d: the scan found %s, the walk %s (%v)", ns, scanned.ID, walked.ID, err)
				}
			}
		}

		// Versions of each key: the states it took in successive commits,
		// where the key's content changed; AllVersions gives the same in
		// one walk.
		all, err := AllVersions(p)
		if err != nil {
			t.Fatal(err)
		}
		for _, k := range []string{"a", "b", "c/d", "c/e", "z"} {
			vs, err := Versions(p, k)
			if err != nil {
				t.Fatal(err)
			}
			if !slices.EqualFunc(vs, all[k], func(a, b Version) bool { return a.Commit.ID == b.Commit.ID && a.Entry == b.Entry }) {
				t.Fatalf("versions of %s: AllVersions %d, Versions %d", k, len(all[k]), len(vs))
			}
			// A version where the key is set and differs from every parent.
			var want []string
			for _, st := range steps {
				v, ok := st.state[k]
				if !ok {
					continue
				}
				changed := true
				for _, pid := range st.c.Parents {
					if pv, ok := byID[pid][k]; ok && pv == v {
						changed = false
					}
				}
				if changed {
					want = append(want, v)
				}
			}
			var got []string
			for i, v := range vs {
				got = append(got, contents(t, p, v.Commit)[k])
				if i > 0 && vs[i-1].Name() >= v.Name() {
					t.Fatalf("version names out of order: %s, %s", vs[i-1].Name(), v.Name())
				}
			}
			if strings.Join(got, ",") != strings.Join(want, ",") {
				t.Fatalf("versions of %s: %v, want %v", k, got, want)
			}
		}

		// Resolve by full id, by prefix and by time.
		last := steps[len(steps)-1].c
		for _, s := range []string{last.ID.String(), last.ID.String()[:12], FormatTime(last.Timestamp)} {
			c, err := Resolve(p, s)
			if err != nil || c.ID != last.ID {
				t.Fatalf("resolve %s: %v, %v", s, c, err)
			}
		}
		if _, err := Resolve(p, "not-a-commit"); err == nil {
			t.Fatal("resolved a bad name")
		}
	})
}

func TestLogAndChanged(t *testing.T) {
	p, close := openPage(t, t.TempDir())
	defer close()
	var commits []*store.Commit
	for i := 0; i < 5; i++ {
		j, err := journals.Begin(p, false)
		if err != nil {
			t.Fatal(err)
		}
		var ops []journal.Op
		for k := 0; k <= i; k++ {
			ops = append(ops, journal.Op{Key: fmt.Sprintf("k%d", k), Entry: value(t, p, fmt.Sprint(i))})
		}
		if err := j.Apply(ops...); err != nil {
			t.Fatal(err)
		}
		c, err := j.Commit()
		if err != nil {
			t.Fatal(err)
		}
		commits = append(commits, c)
	}
	var b strings.Builder
	if err := WriteLog(&b, p); err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimSuffix(b.String(), "\n"), "\n")
	if len(lines) != len(commits)+1 {
		t.Fatalf("log has %d lines, want %d:\n%s", len(lines), len(commits)+1, b.String())
	}
	for i, line := range lines[:len(commits)] {
		c := commits[len(commits)-1-i]
		f := strings.Fields(line)
		// Commit i rewrote keys k0..k(i-1) with a new value and added k(i).
		want := []string{hex.EncodeToString(c.ID[:]), fmt.Sprint(c.Generation), FormatTime(c.Timestamp), c.Parents[0].String(), fmt.Sprint(len(commits) - i)}
		if strings.Join(f, " ") != strings.Join(want, " ") {
			t.Fatalf("log line %d:\n%s\nwant\n%s", i, line, strings.Join(want, " "))
		}
	}
	if !strings.HasPrefix(lines[len(lines)-1], strings.Repeat("0", 64)+" 0 ") {
		t.Fatalf("last log line %q is not the first commit", lines[len(lines)-1])
	}
	// An all-zero prefix names the first commit, unless a stored one
	// shares it.
	shared := false
	for _, c := range commits {
		shared = shared || strings.HasPrefix(c.ID.String(), "0000")
	}
	c, err := Resolve(p, "0000")
	if shared != (err != nil) || err == nil && c.ID != store.FirstCommitID {
		t.Fatalf("Resolve(0000) = %v, %v (a stored commit shares the prefix: %v)", c, err, shared)
	}
}

func TestParseTime(t *testing.T) {
	for s, want := range map[string]int64{
		"1700000000":                     1700000000e9,
		"2023-11-14T22:13:20Z":           1700000000e9,
		"2023-11-14T23:13:20+01:00":      1700000000e9,
		"2023-11-14T22:13:20.000000005Z": 1700000000e9 + 5,
		// Past what commit times hold (2262): the last time, not one
		// wrapped around to before 1970.
		"9223372037":           math.MaxInt64,
		"9999-01-01T00:00:00Z": math.MaxInt64,
		"-9223372037":          math.MinInt64,
	} {
		got, err := ParseTime(s)
		if err != nil || got.UnixNano() != want {
			t.Errorf("ParseTime(%q) = %v, %v; want %d", s, got, err, want)
		}
	}
	for _, s := range []string{"", "yesterday", "2023-11-14"} {
		if _, err := ParseTime(s); err == nil {
			t.Errorf("ParseTime(%q) succeeded", s)
		}
	}
}

// tempDir is a directory for state shared by benchmarks, removed by
// TestMain.
func tempDir() (string, error) {
	if sharedDir == "" {
		d, err := os.MkdirTemp("", "ledgerfs-history-")
		if err != nil {
			return "", err
		}
		sharedDir = d
	}
	return sharedDir, nil
}

var sharedDir string

// Under the race detector the property tests draw 30 cases: each commits
// histories to a db, several times slower there.
func TestMain(m *testing.M) {
	flag.Parse()
	testutil.FewerCasesUnderRace(30)
	code := m.Run()
	if sharedDir != "" {
		os.RemoveAll(sharedDir)
	}
	os.Exit(code)
}

// A name's versions follow the file it names once it has hard links: the
// versions written through its other names are its too, and a version's
// Entry.Key is where its content is.
func TestOfName(t *testing.T) {
	p, done := openPage(t, t.TempDir())
	defer done()
	g := btree.LinkPrefix + "0123456789abcdef"
	commit := func(ops ...journal.Op) {
		t.Helper()
		if err := journals.CommitterFor(p).Apply(false, ops...); err != nil {
			t.Fatal(err)
		}
	}
	name := func(key string) journal.Op {
		e := value(t, p, "")
		e.Meta = btree.Meta{Mode: 0o100000, Link: g}
		return journal.Op{Key: key, Entry: e}
	}
	file := func(content string, nlink uint32) journal.Op {
		e := value(t, p, content)
		e.Meta.Nlink = nlink
		return journal.Op{Key: g, Entry: e}
	}
	commit(journal.Op{Key: "a", Entry: value(t, p, "v1")})
	commit(file("v1", 2), name("a"), name("b")) // ln a b
	commit(file("v2", 2))                       // a write through b
	commit(journal.Op{Key: "c", Entry: value(t, p, "other")})
	commit(file("v3", 2))
	commit(journal.Op{Key: "b", Kind: store.OpDelete}, file("v3", 1)) // rm b
	commit(file("v4", 1))                                             // a write through a

	versions := func(key string) []string {
		vs, err := OfName(p, key, func(k string) ([]Version, error) { return Versions(p, k) })
		if err != nil {
			t.Fatal(err)
		}
		var out []string
		for _, v := range vs {
			r, err := p.OpenValue(v.Entry.Value)
			if err != nil {
				t.Fatal(err)
			}
			b := make([]byte, v.Entry.Meta.Size)
			if _, err := r.ReadAt(b, 0); err != nil && len(b) > 0 {
				t.Fatal(err)
			}
			at := "own"
			if v.Entry.Key == g {
				at = "link"
			}
			out = append(out, fmt.Sprintf("%d:%s@%s", v.Commit.Generation, b, at))
		}
		return out
	}
	if got, want := versions("a"), []string{"1:v1@own", "2:v1@link", "3:v2@link", "5:v3@link", "6:v3@link", "7:v4@link"}; !slices.Equal(got, want) {
		t.Errorf("versions of a: %v, want %v", got, want)
	}
	if got, want := versions("b"), []string{"2:v1@link", "3:v2@link", "5:v3@link"}; !slices.Equal(got, want) {
		t.Errorf("versions of b: %v, want %v", got, want)
	}
}

// TestVersionIndexFollowsHistory: an index updated after each part of a
// random history (merges included) holds what AllVersions finds walking
// the whole of it from scratch, in the same order.
func TestVersionIndexFollowsHistory(t *testing.T) {
	dir := t.TempDir()
	n := 0
	rapid.Check(t, func(t *rapid.T) {
		n++
		p, close := openPage(t, fmt.Sprintf("%s/%d", dir, n))
		defer close()
		x := NewVersionIndex()
		for part := range rapid.IntRange(1, 4).Draw(t, "parts") {
			build(t, p, rapid.IntRange(1, 5).Draw(t, fmt.Sprintf("commits%d", part)))
			if err := x.Update(p); err != nil {
				t.Fatal(err)
			}
			sameVersions(t, fmt.Sprintf("part %d", part), p, x)
		}
	})
}
