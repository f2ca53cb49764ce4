package journal

import (
	"errors"
	"fmt"
	"io"
	"maps"
	"math/rand/v2"
	"reflect"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ledgerfs/ledgerfs/cas"
	"github.com/ledgerfs/ledgerfs/internal/btree"
	"github.com/ledgerfs/ledgerfs/internal/testutil"
	"github.com/ledgerfs/ledgerfs/store"
)

type env struct {
	t    testing.TB
	dir  string
	eng  *Engine // kept across reopen, as its test hooks are
	repo *store.Repository
	p    *store.Page
}

func newEnv(t testing.TB) *env {
	e := &env{t: t, dir: t.TempDir(), eng: NewEngine()}
	e.open()
	if err := e.repo.CreateLedger("l"); err != nil {
		t.Fatal(err)
	}
	if err := e.repo.CreatePage("l", "p"); err != nil {
		t.Fatal(err)
	}
	e.acquire()
	t.Cleanup(func() { e.repo.Close() })
	return e
}

func (e *env) open() {
	r, err := store.Open(e.dir, e.eng.Hooks(store.Options{}))
	if err != nil {
		e.t.Fatal(err)
	}
	e.repo = r
}

func (e *env) acquire() {
	p, err := e.repo.Acquire("l", "p")
	if err != nil {
		e.t.Fatal(err)
	}
	e.p = p
}

// reopen closes the repository (as a crash would leave it: Badger keeps what
// its transactions committed) and opens it again, running recovery.
func (e *env) reopen() {
	e.repo.Close()
	e.open()
	e.acquire()
}

func (e *env) value(s string) btree.Entry {
	w := e.p.NewValueWriter()
	if _, err := w.Write([]byte(s)); err != nil {
		e.t.Fatal(err)
	}
	id, size, err := w.Close()
	if err != nil {
		e.t.Fatal(err)
	}
	return btree.Entry{Value: id, Meta: btree.Meta{Size: size}}
}

func (e *env) put(k, v string) Op { return Op{Key: k, Entry: e.value(v)} }

// state reads the head as key -> content.
func (e *env) state() map[string]string {
	head, err := e.p.Head()
	if err != nil {
		e.t.Fatal(err)
	}
	return e.stateAt(head)
}

func (e *env) stateAt(c *store.Commit) map[string]string {
	out := map[string]string{}
	it := e.p.Tree(c).Seek("")
	for it.Next() {
		en := it.Entry()
		r, err := e.p.OpenValue(en.Value)
		if err != nil {
			e.t.Fatal(err)
		}
		buf := make([]byte, r.Size())
		if _, err := r.ReadAt(buf, 0); err != nil && len(buf) > 0 {
			e.t.Fatal(err)
		}
		out[en.Key] = string(buf)
	}
	if it.Err() != nil {
		e.t.Fatal(it.Err())
	}
	return out
}

func (e *env) verify() map[string]int {
	counts, err := e.p.VerifyRows(func(k string, v []byte) error {
		_, err := DecodeOp(k, v)
		return err
	})
	if err != nil {
		e.t.Fatal(err)
	}
	return counts
}

func TestImplicitCommit(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	c := e.eng.CommitterFor(e.p)
	if err := c.Apply(false, e.put("a", "1"), e.put("b/c", "2")); err != nil {
		t.Fatal(err)
	}
	if err := c.Apply(true, Op{Key: "a", Kind: store.OpDelete}, e.put("d", "big")); err != nil {
		t.Fatal(err)
	}
	want := map[string]string{"b/c": "2", "d": "big"}
	if got := e.state(); !maps.Equal(got, want) {
		t.Fatalf("state %v", got)
	}
	head, _ := e.p.Head()
	if head.Generation != 2 || len(head.Parents) != 1 {
		t.Fatalf("head generation %d parents %d", head.Generation, len(head.Parents))
	}
	counts := e.verify()
	if counts[store.PrefixHeads] != 1 || counts[store.PrefixCommits] != 2 || counts[store.PrefixUnsyncedCommits] != 2 {
		t.Fatalf("rows: %v", counts)
	}
	if counts["journals/{id}/entry/"] != 0 || counts[store.PrefixImplicitMeta] != 0 || counts[store.StatusPrefix(store.Transient)] != 0 {
		t.Fatalf("leftover rows after commit: %v", counts)
	}
	e.reopen()
	if got := e.state(); !maps.Equal(got, want) {
		t.Fatalf("after reopen: %v", got)
	}
}

func TestGroupCommit(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	c := e.eng.CommitterFor(e.p)
	const n = 64
	ops := make([]Op, n)
	for i := range ops {
		ops[i] = e.put(fmt.Sprintf("k%03d", i), fmt.Sprint(i))
	}
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() {
			if err := c.Apply(false, ops[i]); err != nil {
				t.Error(err)
			}
		})
	}
	wg.Wait()
	if got := len(e.state()); got != n {
		t.Fatalf("%d entries, want %d", got, n)
	}
	head, _ := e.p.Head()
	t.Logf("%d concurrent closes made %d commits", n, head.Generation)
	if head.Generation >= n {
		t.Fatalf("%d closes made %d commits: no grouping", n, head.Generation)
	}
}

// A commit that takes long lets the next batch grow for longer and hold
// more changes; cheap commits bring the pace back to the default.
func TestPaceFollowsCommitCost(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	c := e.eng.CommitterFor(e.p)
	pace := func() (time.Duration, int) {
		c.mu.Lock()
		defer c.mu.Unlock()
		return c.delay, c.maxOps
	}
	if d, n := pace(); d != batchDelay || n != batchOps {
		t.Fatalf("a new committer paces %v and %d changes, want %v and %d", d, n, batchDelay, batchOps)
	}
	// The commit looks slow: the clock that times it moves on while it runs.
	const slow = 60 * time.Millisecond
	var ahead atomic.Int64
	// The cheap commits below are timed by a clock that stands still: on a
	// loaded machine a real one can make a one-entry commit look slow.
	var still atomic.Pointer[time.Time]
	e.eng.clock = func() time.Time {
		if t := still.Load(); t != nil {
			return *t
		}
		return time.Now().Add(time.Duration(ahead.Load()))
	}
	t.Cleanup(func() { e.eng.clock = time.Now })
	e.eng.crashAt = func(step string) error {
		if step == "nodes-written" {
			ahead.Add(int64(slow))
		}
		return nil
	}
	err := c.Apply(false, e.put("slow", "1"))
	e.eng.crashAt = nil
	if err != nil {
		t.Fatal(err)
	}
	d, n := pace()
	if d < paceFactor*slow || n <= batchOps {
		t.Fatalf("after a %v commit the next batch grows for %v and %d changes, want at least %v and over %d", slow, d, n, paceFactor*slow, batchOps)
	}
	if d > maxBatchDelay {
		t.Fatalf("batch delay %v over the bound %v", d, maxBatchDelay)
	}
	now := e.eng.clock()
	still.Store(&now)
	for i := range 8 {
		if err := c.Apply(false, e.put(fmt.Sprint("fast", i), "1")); err != nil {
			t.Fatal(err)
		}
	}
	if d, n := pace(); d != batchDelay || n != batchOps {
		t.Fatalf("after cheap commits the pace is %v and %d changes, want %v and %d", d, n, batchDelay, batchOps)
	}
}

// A queued batch's commit takes the time of its latest change, which
// Latest showed while the batch was queued.
func TestQueuedCommitTakesLatestChangeTime(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	// Each reading of the clock a millisecond past the last: the changes
	// are at distinct times.
	var ticks atomic.Int64
	e.eng.clock = func() time.Time { return time.Now().Add(time.Duration(ticks.Add(1)) * time.Millisecond) }
	c := e.eng.CommitterFor(e.p)
	if c.Latest() != 0 {
		t.Fatalf("latest %d before any change", c.Latest())
	}
	for round := range 3 {
		before := must(e.p.Head())
		landed := make(chan error, 5)
		for i := range 5 {
			if err := c.Queue(func(err error) { landed <- err }, e.put(fmt.Sprintf("k%d-%d", round, i), "v")); err != nil {
				t.Fatal(err)
			}
		}
		queued := c.Latest()
		// The batch lands when it is due, not hurried by a waiter.
		for range 5 {
			if err := <-landed; err != nil {
				t.Fatal(err)
			}
		}
		head := must(e.p.Head())
		if head.ID == before.ID {
			t.Fatalf("round %d: batch did not land", round)
		}
		if head.Timestamp != queued {
			t.Fatalf("round %d: commit time %d, want the latest change's %d (landed %v later)",
				round, head.Timestamp, queued, time.Duration(head.Timestamp-queued))
		}
	}
}

func TestTransactionCommitAndRollback(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	c := e.eng.CommitterFor(e.p)
	if err := c.Apply(false, e.put("keep", "0")); err != nil {
		t.Fatal(err)
	}
	j, err := e.eng.Begin(e.p, true)
	if err != nil {
		t.Fatal(err)
	}
	if err := j.Apply(e.put("x", "1"), e.put("y", "2"), Op{Key: "keep", Kind: store.OpDelete}); err != nil {
		t.Fatal(err)
	}
	if op, ok, _ := j.Get("x"); !ok || op.IsDelete() {
		t.Fatal("journal does not show its own write")
	}
	if got := e.state(); len(got) != 1 {
		t.Fatalf("transaction visible before commit: %v", got)
	}
	if counts := e.verify(); counts["journals/{id}/entry/"] != 3 {
		t.Fatalf("explicit journal rows: %v", counts)
	}
	if _, err := j.Commit(); err != nil {
		t.Fatal(err)
	}
	if got := e.state(); !maps.Equal(got, map[string]string{"x": "1", "y": "2"}) {
		t.Fatalf("after commit: %v", got)
	}
	j2, _ := e.eng.Begin(e.p, true)
	if err := j2.Apply(e.put("z", "3")); err != nil {
		t.Fatal(err)
	}
	if err := j2.Rollback(); err != nil {
		t.Fatal(err)
	}
	if _, ok := e.state()["z"]; ok {
		t.Fatal("rolled back change visible")
	}
	if _, err := j2.Commit(); !errors.Is(err, ErrDone) {
		t.Fatalf("commit after rollback: %v", err)
	}
	if counts := e.verify(); counts["journals/{id}/entry/"] != 0 {
		t.Fatalf("rows left: %v", counts)
	}
}

func TestTransactionMerge(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	c := e.eng.CommitterFor(e.p)
	if err := c.Apply(false, e.put("a", "base"), e.put("b", "base"), e.put("c", "base")); err != nil {
		t.Fatal(err)
	}
	j, _ := e.eng.Begin(e.p, true)
	if err := j.Apply(e.put("a", "txn"), e.put("b", "txn"), Op{Key: "c", Kind: store.OpDelete}); err != nil {
		t.Fatal(err)
	}
	// The head moves on meanwhile.
	if err := c.Apply(false, e.put("b", "other"), e.put("d", "other")); err != nil {
		t.Fatal(err)
	}
	head, _ := e.p.Head()
	m, err := j.Commit()
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]string{"a": "txn", "b": "txn", "d": "other"}
	if got := e.state(); !maps.Equal(got, want) {
		t.Fatalf("merged state %v, want %v", got, want)
	}
	if len(m.Parents) != 2 || m.Generation != max(head.Generation, 2)+1 {
		t.Fatalf("merge: %d parents, generation %d", len(m.Parents), m.Generation)
	}
	heads, _ := e.p.Heads()
	if len(heads) != 1 || heads[0].ID != m.ID {
		t.Fatalf("%d heads after merge", len(heads))
	}
	// The transaction's own commit, on its base, is the other parent.
	other := m.Parents[0]
	if other == head.ID {
		other = m.Parents[1]
	}
	tc, err := e.p.Commit(other)
	if err != nil {
		t.Fatal(err)
	}
	if got := e.stateAt(tc); !maps.Equal(got, map[string]string{"a": "txn", "b": "txn"}) {
		t.Fatalf("transaction commit %v", got)
	}
}

func TestClear(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	if err := e.eng.CommitterFor(e.p).Apply(false, e.put("a", "1"), e.put("b", "2")); err != nil {
		t.Fatal(err)
	}
	j, _ := e.eng.Begin(e.p, true)
	if err := j.Apply(e.put("early", "dropped by clear")); err != nil {
		t.Fatal(err)
	}
	if err := j.Clear(); err != nil {
		t.Fatal(err)
	}
	if err := j.Apply(e.put("c", "3")); err != nil {
		t.Fatal(err)
	}
	if counts := e.verify(); counts["journals/{id}/C"] != 1 {
		t.Fatalf("clear row missing: %v", counts)
	}
	if _, err := j.Commit(); err != nil {
		t.Fatal(err)
	}
	if got := e.state(); !maps.Equal(got, map[string]string{"c": "3"}) {
		t.Fatalf("after clear: %v", got)
	}
}

func TestRecoveryOnOpen(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	if err := e.eng.CommitterFor(e.p).Apply(false, e.put("a", "1")); err != nil {
		t.Fatal(err)
	}
	// A transaction and an implicit journal left open by a crash.
	tx, _ := e.eng.Begin(e.p, true)
	if err := tx.Apply(e.put("tx", "lost")); err != nil {
		t.Fatal(err)
	}
	im, _ := e.eng.Begin(e.p, false)
	if err := im.Apply(e.put("b", "kept"), Op{Key: "a", Kind: store.OpDelete}); err != nil {
		t.Fatal(err)
	}
	// A value written but never journaled.
	e.value("orphan value that no journal references, long enough not to be inline")
	e.reopen()
	if got := e.state(); !maps.Equal(got, map[string]string{"b": "kept"}) {
		t.Fatalf("after recovery: %v", got)
	}
	counts := e.verify()
	if counts["journals/{id}/entry/"] != 0 || counts[store.PrefixImplicitMeta] != 0 || counts[store.StatusPrefix(store.Transient)] != 0 {
		t.Fatalf("rows left after recovery: %v", counts)
	}
	// The orphan and the lost transaction's value were collected.
	if counts[store.PrefixObjects] != counts[store.StatusPrefix(store.Local)] {
		t.Fatalf("objects %d, local %d", counts[store.PrefixObjects], counts[store.StatusPrefix(store.Local)])
	}
}

// Changes a crash left in implicit journals are committed with the time
// their journal began, when the first of them was accepted, not when
// recovery ran: history as of a time after a close returned shows it.
func TestRecoveredChangesKeepTheirTime(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	before := time.Now().UnixNano()
	j1, err := e.eng.Begin(e.p, false)
	if err != nil {
		t.Fatal(err)
	}
	accepted1 := time.Now().UnixNano()
	if err := j1.Apply(e.put("a", "1")); err != nil {
		t.Fatal(err)
	}
	j2, err := e.eng.Begin(e.p, false)
	if err != nil {
		t.Fatal(err)
	}
	accepted2 := time.Now().UnixNano()
	if err := j2.Apply(e.put("b", "2")); err != nil {
		t.Fatal(err)
	}
	e.reopen()
	head := must(e.p.Head())
	if len(head.Parents) != 1 {
		t.Fatalf("head has %d parents", len(head.Parents))
	}
	first := must(e.p.Commit(head.Parents[0]))
	if first.Timestamp < before || first.Timestamp > accepted1 {
		t.Errorf("first recovered commit at %d, want within [%d, %d]", first.Timestamp, before, accepted1)
	}
	if head.Timestamp <= first.Timestamp || head.Timestamp > accepted2 {
		t.Errorf("second recovered commit at %d, want within (%d, %d]", head.Timestamp, first.Timestamp, accepted2)
	}
}

var errCrash = errors.New("simulated crash")

// TestRecoveryOfTwoImplicitJournals: a crash can leave the journal being
// committed and the next one, which a queued close filled meanwhile.
// Recovery commits them in the order they began, so the later change to a
// key wins, and keeps every piece of the first one's commit.
func TestRecoveryOfTwoImplicitJournals(t *testing.T) {
	t.Parallel()
	for k := range 8 {
		e := newEnv(t)
		var base []Op
		for i := range 600 {
			base = append(base, e.put(fmt.Sprintf("k%04d", i), fmt.Sprintf("base-%d-%0100d", i, i)))
		}
		if err := e.eng.CommitterFor(e.p).Apply(false, base...); err != nil {
			t.Fatal(err)
		}
		j1, _ := e.eng.Begin(e.p, false)
		if err := j1.Apply(e.put("same", "first"), e.put("k0300", fmt.Sprintf("first-%0100d", k))); err != nil {
			t.Fatal(err)
		}
		j2, _ := e.eng.Begin(e.p, false)
		if err := j2.Apply(e.put("same", "second"), e.put("k0301", fmt.Sprintf("second-%0100d", k))); err != nil {
			t.Fatal(err)
		}
		want := e.state()
		want["same"] = "second"
		want["k0300"] = fmt.Sprintf("first-%0100d", k)
		want["k0301"] = fmt.Sprintf("second-%0100d", k)
		if k%2 == 1 {
			// The first commit cut short after its atomic step: its pieces
			// are still transient when the second commits on top.
			e.eng.crashAt = func(step string) error {
				if step == "committed" {
					return errCrash
				}
				return nil
			}
			if _, err := j1.Commit(); !errors.Is(err, errCrash) {
				t.Fatalf("commit: %v", err)
			}
			e.eng.crashAt = nil
		}
		e.reopen()
		if got := e.state(); !maps.Equal(got, want) {
			t.Fatalf("run %d: same=%q k0300 ok=%v k0301 ok=%v, %d entries (want %d)", k, got["same"],
				got["k0300"] == want["k0300"], got["k0301"] == want["k0301"], len(got), len(want))
		}
		counts := e.verify()
		if counts[store.StatusPrefix(store.Transient)] != 0 || counts[store.PrefixObjects] != counts[store.StatusPrefix(store.Local)] {
			t.Fatalf("run %d: rows after recovery: %v", k, counts)
		}
		e.repo.Close()
	}
}

// TestCrashAtEveryStep stops a commit at each of its steps, reopens the page
// and checks that it holds the old or the new state, never a mix, with rows
// that match the schema and every piece of the head readable and local, for
// a large journal and for a small one (a file's fsync).
func TestCrashAtEveryStep(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		name  string
		ops   int
		steps []string // of a commit not stopped, in order, repeats dropped
	}{
		{"large", 2500, []string{"nodes-written", "committed", "journal-deleted", "status-batch"}},
		{"small", 20, []string{"nodes-written", "committed", "journal-deleted", "status-batch"}},
	} {
		t.Run(c.name, func(t *testing.T) { crashAtEveryStep(t, c.ops, c.steps) })
	}
}

func crashAtEveryStep(t *testing.T, nops int, steps []string) {
	for k := 0; ; k++ {
		e := newEnv(t)
		c := e.eng.CommitterFor(e.p)
		var old []Op
		for i := range 300 {
			old = append(old, e.put(fmt.Sprintf("k%04d", i), fmt.Sprintf("old-%d-%0200d", i, i)))
		}
		if err := c.Apply(false, old...); err != nil {
			t.Fatal(err)
		}
		before := e.state()

		j, _ := e.eng.Begin(e.p, k%2 == 1) // alternate implicit and explicit
		var ops []Op
		rng := rand.New(rand.NewPCG(uint64(k), 1))
		for i := range nops {
			if rng.IntN(4) == 0 {
				ops = append(ops, Op{Key: fmt.Sprintf("k%04d", rng.IntN(300)), Kind: store.OpDelete})
			} else {
				ops = append(ops, e.put(fmt.Sprintf("n%05d", i), fmt.Sprintf("new-%d-%0100d", i, i)))
			}
		}
		if err := j.Apply(ops...); err != nil {
			t.Fatal(err)
		}
		n := 0
		crashed := ""
		var seen []string
		e.eng.crashAt = func(step string) error {
			if len(seen) == 0 || seen[len(seen)-1] != step {
				seen = append(seen, step)
			}
			if n == k/2 {
				crashed = step
				return errCrash
			}
			n++
			return nil
		}
		_, err := j.Commit()
		e.eng.crashAt = nil
		if crashed == "" {
			if err != nil {
				t.Fatal(err)
			}
			if !slices.Equal(seen, steps) {
				t.Fatalf("commit went through steps %v, want %v", seen, steps)
			}
			return
		}
		want := maps.Clone(before)
		for _, op := range ops {
			if op.IsDelete() {
				delete(want, op.Key)
			}
		}
		for _, op := range ops {
			if !op.IsDelete() {
				r, _ := e.p.OpenValue(op.Entry.Value)
				buf := make([]byte, r.Size())
				r.ReadAt(buf, 0)
				want[op.Key] = string(buf)
			}
		}
		e.reopen()
		got := e.state()
		committed := crashed != "nodes-written"
		implicit := k%2 == 0
		switch {
		case maps.Equal(got, want) && (committed || implicit):
		case maps.Equal(got, before) && !committed && !implicit:
		default:
			t.Fatalf("crash at %s (implicit %v): %d entries, old %d, new %d", crashed, implicit, len(got), len(before), len(want))
		}
		counts := e.verify()
		if counts[store.StatusPrefix(store.Transient)] != 0 || counts["journals/{id}/entry/"] != 0 {
			t.Fatalf("crash at %s: rows left: %v", crashed, counts)
		}
		if counts[store.PrefixObjects] != counts[store.StatusPrefix(store.Local)] {
			t.Fatalf("crash at %s: %d objects, %d local", crashed, counts[store.PrefixObjects], counts[store.StatusPrefix(store.Local)])
		}
		t.Logf("crash at %s: %d entries, ok", crashed, len(got))
		e.repo.Close()
	}
}

func TestRowsAfterMixedWorkload(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	c := e.eng.CommitterFor(e.p)
	big := make([]byte, 3<<20)
	for i := range big {
		big[i] = byte(i * 2654435761 >> 13)
	}
	w := e.p.NewValueWriter()
	if _, err := w.Write(big); err != nil {
		t.Fatal(err)
	}
	id, size, _ := w.Close()
	if err := c.Apply(false, Op{Key: "big", Entry: btree.Entry{Value: id, Meta: btree.Meta{Size: size, Mode: 0o100600, MtimeNs: 12345, HasMtime: true}}}); err != nil {
		t.Fatal(err)
	}
	if err := c.Apply(false, e.put("small", "x"), Op{Key: "link", Entry: btree.Entry{Value: cas.ObjectIdentifier{Digest: cas.ComputeDigest(cas.KindBlob, false, nil)}, Meta: btree.Meta{Mode: 0o120777, Symlink: "small"}}}); err != nil {
		t.Fatal(err)
	}
	tx, _ := e.eng.Begin(e.p, true)
	if err := tx.Apply(e.put("pending", "p")); err != nil {
		t.Fatal(err)
	}
	if err := tx.Clear(); err != nil {
		t.Fatal(err)
	}
	im, _ := e.eng.Begin(e.p, false)
	// Written as rows, as a close's put with its value's last pieces is
	// (ApplyWith): changes with no pieces of their own go to the sync log
	// in place of rows until a checkpoint (store.Durability.Queue).
	if err := im.ApplyWith(e.p.PutJournalEntries, e.put("open", fmt.Sprintf("%0100d", 7)), Op{Key: "small", Kind: store.OpDelete}); err != nil {
		t.Fatal(err)
	}
	counts := e.verify()
	for _, k := range []string{store.PrefixCommits, store.PrefixObjects, store.PrefixHeads, store.PrefixUnsyncedCommits, store.PrefixImplicitMeta, "journals/{id}/entry/", "journals/{id}/C", store.StatusPrefix(store.Local), store.StatusPrefix(store.Transient)} {
		if counts[k] == 0 {
			t.Errorf("no %s rows after the workload: %v", k, counts)
		}
	}
	en, ok, _ := e.p.Tree(must(e.p.Head())).Get("big")
	if !ok || en.Meta.Mode != 0o100600 || en.Meta.MtimeNs != 12345 {
		t.Fatalf("metadata lost: %+v", en.Meta)
	}
	// Opening the db directly with Badger shows only documented rows.
	dir := e.p.Dir()
	e.repo.Close()
	if _, err := store.VerifyDir(dir, func(k string, v []byte) error { _, err := DecodeOp(k, v); return err }); err != nil {
		t.Fatal(err)
	}
}

func must[T any](v T, err error) T {
	if err != nil {
		panic(err)
	}
	return v
}

func FuzzDecodeOp(f *testing.F) {
	f.Add([]byte("D"))
	f.Add(EncodeOp(atimeOp("k", -1)))
	f.Add(EncodeOp(Op{Key: "k", Entry: btree.Entry{Value: cas.ObjectIdentifier{Digest: cas.ComputeDigest(cas.KindBlob, false, []byte("v"))}, Meta: btree.Meta{Size: 1, Mode: 0o100644, Symlink: "t"}}}))
	f.Fuzz(func(t *testing.T, b []byte) {
		op, err := DecodeOp("k", b)
		if err != nil {
			return
		}
		op2, err := DecodeOp("k", EncodeOp(op))
		if err != nil || !reflect.DeepEqual(op2, op) {
			t.Fatalf("round trip: %+v vs %+v (%v)", op, op2, err)
		}
	})
}

// A queued commit that fails is reported to its done callback and to the
// next Apply, once; its change stays in the journal for the next start.
func TestQueuedCommitFailureIsReported(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	c := e.eng.CommitterFor(e.p)
	e.eng.crashAt = func(step string) error {
		if step == "nodes-written" {
			return errCrash
		}
		return nil
	}
	done := make(chan error, 1)
	if err := c.Queue(func(err error) { done <- err }, e.put("a", "1")); err != nil {
		t.Fatal(err)
	}
	err := <-done
	e.eng.crashAt = nil
	if !errors.Is(err, errCrash) {
		t.Fatalf("done got %v", err)
	}
	if err := c.Apply(false, e.put("b", "2")); !errors.Is(err, errCrash) {
		t.Fatalf("next Apply: %v", err)
	}
	if err := c.Wait(); err != nil {
		t.Fatalf("reported twice: %v", err)
	}
	if got := e.state(); !maps.Equal(got, map[string]string{"b": "2"}) {
		t.Fatalf("before restart: %v", got)
	}
	e.reopen()
	if got := e.state(); !maps.Equal(got, map[string]string{"a": "1", "b": "2"}) {
		t.Fatalf("after restart: %v", got)
	}
}

// A page closed for being idle while a change queued on it has yet to
// commit (a close does not hold the page open) commits the change before
// its db closes, rather than failing it on a closed db.
func TestIdlePageClosesAfterQueuedCommit(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	eng := NewEngine()
	r, err := store.Open(dir, eng.Hooks(store.Options{MaxIdlePages: 1}))
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	must(0, r.CreateLedger("l"))
	for _, name := range []string{"a", "b", "c"} {
		must(0, r.CreatePage("l", name))
	}
	p := must(r.Acquire("l", "a"))
	w := p.NewValueWriter()
	if _, err := w.Write([]byte("queued")); err != nil {
		t.Fatal(err)
	}
	id, size, err := w.Close()
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	c := eng.CommitterFor(p)
	if err := c.Queue(func(err error) { done <- err }, Op{Key: "k", Entry: btree.Entry{Value: id, Meta: btree.Meta{Size: size}}}); err != nil {
		t.Fatal(err)
	}
	r.Release(p)
	// Two more pages used and released push "a" out of the idle list.
	for _, name := range []string{"b", "c"} {
		r.Release(must(r.Acquire("l", name)))
	}
	if err := <-done; err != nil {
		t.Fatalf("queued commit of an evicted page: %v", err)
	}
	p = must(r.Acquire("l", "a"))
	defer r.Release(p)
	if _, ok, err := p.Tree(must(p.Head())).Get("k"); !ok || err != nil {
		t.Fatalf("queued change not in the head after the page was closed and reopened: %v, %v", ok, err)
	}
}

// A transaction that commits after the head moved lands two commits: its
// own, on its base, and the merge. A crash after the atomic step leaves
// both commits' new nodes transient; recovery must keep those of the
// transaction's commit too, though no head's tree reaches them: history
// reads every commit back whole.
func TestCrashDuringMergeKeepsHistory(t *testing.T) {
	t.Parallel()
	for _, step := range []string{"committed", "journal-deleted"} {
		t.Run(step, func(t *testing.T) {
			e := newEnv(t)
			c := e.eng.CommitterFor(e.p)
			var base []Op
			for i := range 300 {
				base = append(base, e.put(fmt.Sprintf("k%04d", i), fmt.Sprintf("base-%d-%0200d", i, i)))
			}
			if err := c.Apply(false, base...); err != nil {
				t.Fatal(err)
			}
			j := must(e.eng.Begin(e.p, true))
			if err := j.Apply(e.put("k0001", "txn"), e.put("k0002", "txn")); err != nil {
				t.Fatal(err)
			}
			if err := c.Apply(false, e.put("k0150", "moved")); err != nil { // the head moves on
				t.Fatal(err)
			}
			e.eng.crashAt = func(s string) error {
				if s == step {
					return errCrash
				}
				return nil
			}
			_, err := j.Commit()
			e.eng.crashAt = nil
			if !errors.Is(err, errCrash) {
				t.Fatalf("commit: %v, want the simulated crash at %s", err, step)
			}
			e.reopen()
			head := must(e.p.Head())
			if len(head.Parents) != 2 {
				t.Fatalf("head %s has %d parents, want the merge's 2", head.ID, len(head.Parents))
			}
			// Every commit of the history reads back whole.
			seen := map[store.CommitID]bool{}
			queue := []store.CommitID{head.ID}
			for len(queue) > 0 {
				id := queue[0]
				queue = queue[1:]
				if seen[id] || id == store.FirstCommitID {
					continue
				}
				seen[id] = true
				cm, err := e.p.Commit(id)
				if err != nil {
					t.Fatalf("commit %s: %v", id, err)
				}
				it := e.p.Tree(cm).Seek("")
				for it.Next() {
					r, err := e.p.OpenValue(it.Entry().Value)
					if err != nil {
						t.Fatalf("commit %s, %s: %v", id, it.Entry().Key, err)
					}
					if _, err := r.ReadAt(make([]byte, r.Size()), 0); err != nil && !errors.Is(err, io.EOF) {
						t.Fatalf("commit %s, %s: %v", id, it.Entry().Key, err)
					}
				}
				if err := it.Err(); err != nil {
					t.Fatalf("commit %s after a crash at %s: %v", id, step, err)
				}
				queue = append(queue, cm.Parents...)
			}
			if v := e.state()["k0001"]; v != "txn" {
				t.Fatalf("k0001 = %.10q after recovery, want the transaction's", v)
			}
			counts := e.verify()
			if counts[store.PrefixObjects] != counts[store.StatusPrefix(store.Local)] {
				t.Fatalf("%d objects, %d local", counts[store.PrefixObjects], counts[store.StatusPrefix(store.Local)])
			}
		})
	}
}

// The pieces of a value that no commit took (a file written and removed
// before its close) are deleted when the page closes, not left for its
// next open; those a commit took stay.
func TestCloseCollectsUntakenPieces(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	if err := e.eng.CommitterFor(e.p).Apply(false, e.put("kept", strings.Repeat("kept ", 100000))); err != nil {
		t.Fatal(err)
	}
	e.value(strings.Repeat("dropped ", 100000))
	if has, err := e.p.HasTransient(); err != nil || !has {
		t.Fatalf("transient pieces before close: %v, %v", has, err)
	}
	e.repo.Release(e.p)
	if err := e.repo.Close(); err != nil {
		t.Fatal(err)
	}
	r, err := store.Open(e.dir, store.Options{}) // no recovery to hide a leftover
	if err != nil {
		t.Fatal(err)
	}
	e.repo = r
	e.acquire()
	if has, err := e.p.HasTransient(); err != nil || has {
		t.Fatalf("transient pieces after close: %v, %v", has, err)
	}
	if got := e.state()["kept"]; got != strings.Repeat("kept ", 100000) {
		t.Fatalf("kept value reads %d bytes", len(got))
	}
}

func atimeOp(key string, ns int64) Op {
	op := Op{Key: key, Kind: store.OpAtime}
	op.Entry.Meta.AtimeNs, op.Entry.Meta.HasAtime = ns, true
	return op
}

// headEntry reads key's entry at the page's head.
func (e *env) headEntry(key string) (btree.Entry, bool) {
	head, err := e.p.Head()
	if err != nil {
		e.t.Fatal(err)
	}
	en, ok, err := e.p.Tree(head).Get(key)
	if err != nil {
		e.t.Fatal(err)
	}
	return en, ok
}

// An access time sets the atime of whatever entry its key holds when the
// journal commits: it never brings back content, not after a put in the
// same journal, a delete, or a transaction that landed first.
func TestAtimeOps(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	c := e.eng.CommitterFor(e.p)
	if err := c.Apply(false, e.put("b", "b1"), e.put("d", "d1"), e.put("k", "k1"), e.put("late", "l1")); err != nil {
		t.Fatal(err)
	}
	if op, err := DecodeOp("k", EncodeOp(atimeOp("k", 42))); err != nil || !reflect.DeepEqual(op, atimeOp("k", 42)) {
		t.Fatalf("round trip: %+v, %v", op, err)
	}
	j, err := e.eng.Begin(e.p, false)
	if err != nil {
		t.Fatal(err)
	}
	txn, err := e.eng.Begin(e.p, true)
	if err != nil {
		t.Fatal(err)
	}
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	must(j.Apply(e.put("a", "a1")))
	must(j.Apply(atimeOp("a", 1)))                    // folded into the put
	must(j.Apply(atimeOp("b", 2)))                    // on the head's entry
	must(j.Apply(atimeOp("c", 3)))                    // no such key: nothing
	must(j.Apply(Op{Key: "d", Kind: store.OpDelete})) //
	must(j.Apply(atimeOp("d", 4)))                    // after a delete: nothing
	must(j.Apply(atimeOp("late", 5)))                 //
	must(j.Apply(e.put("late", "l2")))                // a put after it wins
	must(j.Apply(atimeOp("k", 6)))                    // the transaction lands first
	must(txn.Apply(e.put("k", "k2")))
	if _, err := txn.Commit(); err != nil {
		t.Fatal(err)
	}
	if _, err := j.Commit(); err != nil {
		t.Fatal(err)
	}
	want := map[string]string{"a": "a1", "b": "b1", "k": "k2", "late": "l2"}
	if got := e.state(); !maps.Equal(got, want) {
		t.Fatalf("state %v, want %v", got, want)
	}
	for key, at := range map[string]int64{"a": 1, "b": 2, "k": 6} {
		if en, _ := e.headEntry(key); !en.Meta.HasAtime || en.Meta.AtimeNs != at {
			t.Errorf("%s: atime %v %d, want %d", key, en.Meta.HasAtime, en.Meta.AtimeNs, at)
		}
	}
	if en, _ := e.headEntry("late"); en.Meta.HasAtime {
		t.Errorf("late: atime %d kept over a later put", en.Meta.AtimeNs)
	}
	if _, ok := e.headEntry("c"); ok {
		t.Error("an access time made entry c")
	}
}

// Recovery commits an access time a crash left in an implicit journal.
func TestRecoveredAtime(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	if err := e.eng.CommitterFor(e.p).Apply(false, e.put("f", "content")); err != nil {
		t.Fatal(err)
	}
	j, err := e.eng.Begin(e.p, false)
	if err != nil {
		t.Fatal(err)
	}
	if err := j.Apply(atimeOp("f", 77)); err != nil {
		t.Fatal(err)
	}
	e.reopen() // as a crash leaves it: the journal's rows, no commit
	if en, _ := e.headEntry("f"); en.Meta.AtimeNs != 77 || e.state()["f"] != "content" {
		t.Fatalf("after recovery: atime %d, state %v", en.Meta.AtimeNs, e.state())
	}
}

// A value with runs of zeros (the same chain of index pieces over every
// chunk of a run) commits with every piece local: the walk that marks them
// skips a subtree it has walked, and none it has not.
func TestCommitMarksRepeatedSubtreesLocal(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	content := string(testutil.Random(1, 0, 100<<10)) + string(make([]byte, 3<<20)) +
		string(testutil.Random(2, 0, 50<<10)) + string(make([]byte, 1<<20+123))
	c := e.eng.CommitterFor(e.p)
	if err := c.Apply(true, e.put("sparse", content), e.put("other", "x")); err != nil {
		t.Fatal(err)
	}
	if got := e.state(); got["sparse"] != content {
		t.Fatal("the value with runs of zeros reads back otherwise")
	}
	counts := e.verify()
	if counts[store.StatusPrefix(store.Transient)] != 0 || counts[store.PrefixObjects] != counts[store.StatusPrefix(store.Local)] {
		t.Fatalf("after the commit: %d transient, %d objects, %d local", counts[store.StatusPrefix(store.Transient)], counts[store.PrefixObjects], counts[store.StatusPrefix(store.Local)])
	}
}

// A value reaching more pieces than a landing's walk looks up one at a
// time (store.ScanTransientAfter) is marked from a scan of the transient rows: every piece
// it reaches that was transient becomes local, a piece another write left
// transient stays so, and a piece already synced stays synced.
func TestLandingOfManyPiecesMovesStatusesForward(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	c := e.eng.CommitterFor(e.p)
	old := string(testutil.Random(1, 0, 512<<10))
	oldEntry := e.value(old)
	if err := c.Apply(true, Op{Key: "old", Entry: oldEntry}); err != nil {
		t.Fatal(err)
	}
	pieces := func(id cas.ObjectIdentifier) []cas.Digest {
		var ds []cas.Digest
		err := cas.Walk(e.p, id, func(d cas.Digest) (bool, error) { return !d.IsInline(), nil },
			func(d cas.Digest) error { ds = append(ds, d); return nil })
		if err != nil {
			t.Fatal(err)
		}
		return ds
	}
	synced := pieces(oldEntry.Value)
	if err := e.p.SetStatus(store.Synced, synced); err != nil { // as a push leaves them
		t.Fatal(err)
	}
	pending := pieces(e.value(string(testutil.Random(3, 0, 64<<10))).Value) // never committed

	// More pieces than store.ScanTransientAfter, then old's chunks again: the walk
	// reaches those after it has switched to its scan.
	bigEntry := e.value(string(testutil.Random(2, 0, 24<<20)) + old)
	reached := len(pieces(bigEntry.Value)) // from its root, as the landing's walk
	if reached <= store.ScanTransientAfter {
		t.Fatalf("the value reaches %d pieces, no more than ScanTransientAfter (%d)", reached, store.ScanTransientAfter)
	}
	if err := c.Apply(true, Op{Key: "big", Entry: bigEntry}); err != nil {
		t.Fatal(err)
	}
	counts := e.verify()
	if got := counts[store.StatusPrefix(store.Synced)]; got != len(synced) {
		t.Errorf("%d synced pieces after the landing, want %d (old's)", got, len(synced))
	}
	if got := counts[store.StatusPrefix(store.Transient)]; got != len(pending) {
		t.Errorf("%d transient pieces after the landing, want %d (the pending write's)", got, len(pending))
	}
	if got, want := counts[store.PrefixObjects], counts[store.StatusPrefix(store.Synced)]+counts[store.StatusPrefix(store.Local)]+counts[store.StatusPrefix(store.Transient)]; got != want {
		t.Errorf("%d objects, %d status rows", got, want)
	}
	shared := 0
	for _, d := range pieces(bigEntry.Value) {
		if slices.Contains(synced, d) {
			shared++
		}
	}
	if shared == 0 {
		t.Fatal("the big value shares no piece with old: the synced check checks nothing")
	}
}

// A put that says which value its writer saw (Op.Saw) asks the engine's
// UnseenFunc about another version the head holds at its key, with the
// value it saw; a second put of the key in one journal was made from the
// first, so the question is about what the first saw. Without another
// version, or without a function, nothing is asked.
func TestUnseenVersions(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	c := e.eng.CommitterFor(e.p)
	if err := c.Apply(false, e.put("f", "0"), e.put("g", "0")); err != nil {
		t.Fatal(err)
	}
	v0 := e.value("0").Value
	var asked []string
	e.eng.KeepUnseen(func(p *store.Page, head *store.Commit, tr *btree.Tree, key string, saw cas.ObjectIdentifier, got btree.Entry) error {
		asked = append(asked, key)
		if saw != v0 {
			t.Errorf("%s: asked with the value its second put saw", key)
		}
		got.Key = key + ".kept"
		return tr.Put(got)
	})
	saw := func(op Op, v cas.ObjectIdentifier) Op { op.Saw = &v; return op }
	// The head holds what the writer saw: nothing to ask.
	if err := c.Apply(false, saw(e.put("f", "1"), v0)); err != nil {
		t.Fatal(err)
	}
	if len(asked) != 0 {
		t.Fatalf("asked about %v, which the writer saw", asked)
	}
	// g changed behind a writer that saw "0": two puts in one journal,
	// the second made from the first's value.
	if err := c.Apply(false, e.put("g", "other")); err != nil {
		t.Fatal(err)
	}
	j, err := e.eng.Begin(e.p, false)
	if err != nil {
		t.Fatal(err)
	}
	first := saw(e.put("g", "2"), v0)
	if err := j.Apply(first); err != nil {
		t.Fatal(err)
	}
	if err := j.Apply(saw(e.put("g", "3"), first.Entry.Value)); err != nil {
		t.Fatal(err)
	}
	if _, err := j.Commit(); err != nil {
		t.Fatal(err)
	}
	want := map[string]string{"f": "1", "g": "3", "g.kept": "other"}
	if got := e.state(); !maps.Equal(got, want) || !slices.Equal(asked, []string{"g"}) {
		t.Fatalf("state %v, asked about %v: want %v, asked about g", got, asked, want)
	}
}

// The Landed observer runs before the commit drops the nodes it replaced
// from the node cache: indexing the landed versions diffs the trees before
// and after, and would otherwise decode the replaced nodes again (in rm -rf
// of 100,000 entries, most of the mount's decoding).
func TestLandedObserverFindsReplacedNodesDecoded(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	c := e.eng.CommitterFor(e.p)
	v := e.value("v")
	ops := make([]Op, 20000) // many more nodes than a commit replaces
	for i := range ops {
		ops[i] = Op{Key: fmt.Sprintf("dir/%06d", i), Entry: v}
	}
	if err := c.Apply(false, ops...); err != nil {
		t.Fatal(err)
	}
	gone := []string{"dir/000007", "dir/012345"}
	for _, k := range gone { // as the lookups before the unlinks
		if _, ok := e.headEntry(k); !ok {
			t.Fatalf("%s missing", k)
		}
	}
	var observed, misses, changes int
	e.eng.Observe(Observers{Landed: func(p *store.Page, commits, on []*store.Commit) error {
		before := e.repo.CacheStats().NodeMisses
		err := p.Nodes().Diff(on[0].Root, commits[0].Root, func(btree.Change) error { changes++; return nil })
		misses += int(e.repo.CacheStats().NodeMisses - before)
		observed++
		return err
	}})
	del := []Op{{Key: gone[0], Kind: store.OpDelete}, {Key: gone[1], Kind: store.OpDelete}}
	if err := c.Apply(false, del...); err != nil {
		t.Fatal(err)
	}
	if observed != 1 || changes != len(gone) {
		t.Fatalf("observer ran %d times and saw %d changes; want 1 and %d", observed, changes, len(gone))
	}
	if misses != 0 {
		t.Errorf("diffing the landed commit with its parent decoded %d nodes again", misses)
	}
}
