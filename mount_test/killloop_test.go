package mount_test

import (
	"bytes"
	"flag"
	"fmt"
	"maps"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/ledgerfs/ledgerfs/internal/history"
	"github.com/ledgerfs/ledgerfs/internal/keypath"
)

var (
	long  = flag.Bool("long", false, "run the long variants (the kill -9 loop: 200 iterations)")
	kills = flag.Int("kills", 0, "iterations of the kill -9 loop (0: 4, or 200 with -long)")
)

// model is what a worker knows of its names: the state each had when its
// last change was acknowledged, and the state an unacknowledged change in
// flight would give it. nil is absent.
type model struct {
	mu    sync.Mutex
	want  map[string][]byte
	maybe map[string][]byte   // only names with a change in flight
	dirty map[string]struct{} // names changed since the last check
	hist  map[string][]string
	acks  int        // changes acknowledged so far
	acked *sync.Cond // on mu, at each acknowledgement
}

// awaitAcks returns once n changes in all were acknowledged, or after 20 s
// (the workers stop at their first error).
func (m *model) awaitAcks(n int) {
	deadline := time.Now().Add(20 * time.Second)
	wake := time.AfterFunc(20*time.Second, func() {
		m.mu.Lock()
		m.acked.Broadcast()
		m.mu.Unlock()
	})
	defer wake.Stop()
	m.mu.Lock()
	defer m.mu.Unlock()
	for m.acks < n && time.Now().Before(deadline) {
		m.acked.Wait()
	}
}

func (m *model) note(name, what string) {
	m.mu.Lock()
	m.hist[name] = append(m.hist[name], what)
	m.mu.Unlock()
}

func (m *model) start(changes map[string][]byte) {
	m.mu.Lock()
	defer m.mu.Unlock()
	for k, v := range changes {
		m.maybe[k] = v
		m.dirty[k] = struct{}{}
	}
}

func (m *model) ack(changes map[string][]byte) {
	m.mu.Lock()
	defer m.mu.Unlock()
	for k, v := range changes {
		m.want[k] = v
		delete(m.maybe, k)
	}
	m.acks++
	m.acked.Broadcast()
}

// TestKillLoop kills the server with SIGKILL again and again, at random
// points of its start, its work and its shutdown, under writers that
// create, overwrite, append, fsync, rename and delete, and transactions
// that merge with them. After each kill a new server must show every
// acknowledged change (a close, rename, unlink or transaction commit that
// returned) and nothing that was never made; at the end every version of
// every present name must read back, every commit must read with its
// changes (ledgerfs log reads the tree nodes each commit has of its own),
// and every row must follow the schema.
// 4 iterations; -long runs 200, -kills=N N (CI runs 50).
func TestKillLoop(t *testing.T) {
	t.Parallel()
	iterations := 4
	switch {
	case *kills > 0:
		iterations = *kills
	case *long:
		iterations = 200
	}
	began := time.Now()
	repo := t.TempDir()
	mnt := filepath.Join(t.TempDir(), "mnt")
	m := &model{want: map[string][]byte{}, maybe: map[string][]byte{}, dirty: map[string]struct{}{}, hist: map[string][]string{}}
	m.acked = sync.NewCond(&m.mu)
	kinds := map[string]int{}
	for it := range iterations {
		s := mountWith(t, plainBinary, repo, mnt)
		pg := filepath.Join(mnt, "l", "p")
		must(t, os.MkdirAll(pg, 0o755))
		checkModel(t, it, pg, m, false)
		stop := make(chan struct{})
		var wg sync.WaitGroup
		for w := range 3 {
			wg.Go(func() { work(it, w, pg, m, stop) })
		}
		wg.Go(func() { transact(it, pg, m, stop) })
		kind := []string{"work", "work", "startup", "shutdown"}[rand.IntN(4)]
		kinds[kind]++
		// The kill comes after a random number of acknowledged changes.
		m.mu.Lock()
		after := m.acks + 20 + rand.IntN(300)
		m.mu.Unlock()
		m.awaitAcks(after)
		switch kind {
		case "work":
			s.kill()
		case "shutdown":
			// Killed as the unmount begins.
			s.cmd.Process.Signal(syscall.SIGTERM)
			s.log.await(t, "msg=unmounting")
			s.kill()
		case "startup":
			s.kill()
			// The next server is killed while it starts.
			cmd := exec.Command(plainBinary, "mount", repo, mnt)
			var out output
			cmd.Stdout, cmd.Stderr = &out, &out
			must(t, cmd.Start())
			exited := make(chan error, 1)
			go func() { exited <- cmd.Wait() }()
			startupEvent(t, it, mnt, &out, exited)
			cmd.Process.Kill()
			<-exited
			detach(mnt)
		}
		close(stop)
		wg.Wait()
	}
	t.Logf("%d kills made in %v", iterations, time.Since(began).Round(time.Second))
	s := mountWith(t, plainBinary, repo, mnt)
	pg := filepath.Join(mnt, "l", "p")
	checkModel(t, iterations, pg, m, true)
	// Every version of every name the page has now reads back whole.
	versions := 0
	listed := map[string][]string{}
	for name, v := range m.want {
		if v == nil {
			continue // versions/ follows the page's current names
		}
		dir := filepath.Join(pg, ".ledger", "versions", name)
		es, err := os.ReadDir(dir)
		if err != nil {
			t.Fatalf("versions of %s: %v", name, err)
		}
		for _, e := range es {
			if _, err := os.ReadFile(filepath.Join(dir, e.Name())); err != nil {
				t.Fatalf("version %s of %s: %v", e.Name(), name, err)
			}
			listed[name] = append(listed[name], e.Name())
			versions++
		}
	}
	s.stop()
	t.Logf("every version read back after %v", time.Since(began).Round(time.Second))
	// The mount listed them from its version file, which the kills may
	// have left short of the commits: each name's list is what a walk of
	// the whole history from scratch finds.
	sameAsWalk(t, repo, "l", "p", listed)
	t.Logf("versions listed as a walk finds them after %v", time.Since(began).Round(time.Second))
	// Every commit reads, with its changes from its parents: ledgerfs log
	// reads the tree nodes each commit has of its own.
	out, err := exec.Command(binary, "log", repo, "l", "p").Output()
	if err != nil {
		t.Fatalf("ledgerfs log: %v", err)
	}
	commits := strings.Count(string(out), "\n")
	verifySchema(t, repo)
	t.Logf("%d kills (%v), %d names, %d versions, %d commits, all readable", iterations, kinds, len(m.want), versions, commits)
}

// checkModel compares the page with what was acknowledged: the names
// changed since the last check, or all.
func checkModel(t *testing.T, it int, pg string, m *model, all bool) {
	t.Helper()
	m.mu.Lock()
	defer m.mu.Unlock()
	for name, want := range m.want {
		if _, dirty := m.dirty[name]; !dirty && !all {
			continue
		}
		got, err := os.ReadFile(filepath.Join(pg, name))
		if os.IsNotExist(err) {
			got = nil
		} else if err != nil {
			t.Fatalf("iteration %d: %s: %v", it, name, err)
		}
		maybe, inFlight := m.maybe[name]
		switch {
		case bytes.Equal(got, want) && (got == nil) == (want == nil):
			m.want[name] = want
		case inFlight && bytes.Equal(got, maybe) && (got == nil) == (maybe == nil):
			m.want[name] = maybe
		default:
			t.Fatalf("iteration %d: %s is %s, acknowledged %s (in flight: %v %s)\nits history: %v", it, name, show(got), show(want), inFlight, show(maybe), m.hist[name])
		}
	}
	for name, maybe := range m.maybe {
		if _, known := m.want[name]; known {
			continue
		}
		got, err := os.ReadFile(filepath.Join(pg, name))
		if err == nil && bytes.Equal(got, maybe) {
			m.want[name] = maybe
		} else if err == nil {
			t.Fatalf("iteration %d: %s is %s, never acknowledged (in flight %s)", it, name, show(got), show(maybe))
		}
	}
	clear(m.maybe)
	clear(m.dirty)
}

func show(b []byte) string {
	if b == nil {
		return "absent"
	}
	return fmt.Sprintf("%d bytes %x…", len(b), b[:min(len(b), 6)])
}

// work makes random changes to worker w's names until stop or an error
// (the server is gone).
func work(it, w int, pg string, m *model, stop chan struct{}) {
	r := rand.New(rand.NewPCG(uint64(it), uint64(w)))
	var mine []string
	m.mu.Lock()
	prefix := fmt.Sprintf("w%d-", w)
	for name, v := range m.want {
		if strings.HasPrefix(name, prefix) && v != nil {
			mine = append(mine, name)
		}
	}
	m.mu.Unlock()
	for n := 0; ; n++ {
		select {
		case <-stop:
			return
		default:
		}
		op := r.IntN(10)
		if len(mine) == 0 {
			op = 0
		}
		var err error
		switch {
		case op < 4: // create or overwrite, sometimes fsynced
			name := fmt.Sprintf("%s%d-%d", prefix, it, n)
			if op == 3 {
				name = mine[r.IntN(len(mine))]
			}
			data := content(it*100000+w*10000+n, 1+r.IntN(300_000))
			m.start(map[string][]byte{name: data})
			err = writeFile(filepath.Join(pg, name), data, os.O_TRUNC, op == 2)
			m.note(name, fmt.Sprintf("it%d write %d err=%v t=%s", it, len(data), err, time.Now().Format("05.000")))
			if err == nil {
				m.ack(map[string][]byte{name: data})
				if op != 3 {
					mine = append(mine, name)
				}
			}
		case op < 6: // append
			name := mine[r.IntN(len(mine))]
			m.mu.Lock()
			old := m.want[name]
			m.mu.Unlock()
			more := content(n, 1+r.IntN(5000))
			data := append(bytes.Clone(old), more...)
			m.start(map[string][]byte{name: data})
			err = writeFile(filepath.Join(pg, name), more, os.O_APPEND, false)
			m.note(name, fmt.Sprintf("it%d append %d->%d err=%v t=%s", it, len(old), len(data), err, time.Now().Format("05.000")))
			if err == nil {
				m.ack(map[string][]byte{name: data})
			}
		case op < 8: // rename to a new name
			i := r.IntN(len(mine))
			from, to := mine[i], fmt.Sprintf("%s%d-%d-r", prefix, it, n)
			m.mu.Lock()
			data := m.want[from]
			m.mu.Unlock()
			ch := map[string][]byte{from: nil, to: data}
			m.start(ch)
			err = os.Rename(filepath.Join(pg, from), filepath.Join(pg, to))
			m.note(to, fmt.Sprintf("it%d renamed from %s err=%v", it, from, err))
			m.note(from, fmt.Sprintf("it%d renamed to %s err=%v", it, to, err))
			if err == nil {
				m.ack(ch)
				mine[i] = to
			}
		default: // delete
			i := r.IntN(len(mine))
			name := mine[i]
			m.start(map[string][]byte{name: nil})
			if err = os.Remove(filepath.Join(pg, name)); err == nil {
				m.ack(map[string][]byte{name: nil})
				mine = append(mine[:i], mine[i+1:]...)
			}
		}
		if err != nil {
			return
		}
	}
}

// writeFile writes data with the given flag, fsyncing if asked; an
// error from any step (the close included) leaves the change unacknowledged.
func writeFile(path string, data []byte, flag int, sync bool) error {
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|flag, 0o644)
	if err != nil {
		return err
	}
	_, err = f.Write(data)
	if err == nil && sync {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	return err
}

// transact commits transactions of two new files each, which merge with
// the workers' changes.
func transact(it int, pg string, m *model, stop chan struct{}) {
	for n := 0; ; n++ {
		select {
		case <-stop:
			return
		default:
		}
		name := fmt.Sprintf("t%d-%d", it, n)
		dir := filepath.Join(pg, ".ledger", "transactions", name)
		if os.Mkdir(dir, 0o755) != nil {
			return
		}
		ch := map[string][]byte{}
		for k := range 2 {
			file := fmt.Sprintf("x%d-%d-%d", it, n, k)
			ch[file] = content(it*1000+n*10+k, 2000+k*50_000)
			if os.WriteFile(filepath.Join(dir, file), ch[file], 0o644) != nil {
				return
			}
		}
		m.start(ch)
		if os.Rename(dir, filepath.Join(pg, ".ledger", "commit", name)) != nil {
			return
		}
		m.ack(ch)
	}
}

// sameAsWalk fails unless each name's versions in listed are those a walk
// of the page's history from scratch finds: every name's by one walk
// (history.AllVersions), and a few names' by a walk each, looking the name
// up in every commit (history.Versions, which costs a walk per name: 50
// kills left enough history and names for that to take over 8 minutes).
func sameAsWalk(t *testing.T, repo, ledger, page string, listed map[string][]string) {
	t.Helper()
	p, release := readPage(t, repo, ledger, page)
	defer release()
	all, err := history.AllVersions(p)
	must(t, err)
	fromAll := func(key string) ([]history.Version, error) { return all[key], nil }
	eachKey := func(key string) ([]history.Version, error) { return history.Versions(p, key) }
	names := slices.Sorted(maps.Keys(listed))
	for i, name := range names {
		key, _, err := keypath.Key(strings.Split(name, "/"))
		must(t, err)
		of := fromAll
		if i%max(1, len(names)/4) == 0 {
			of = eachKey
		}
		vs, err := history.OfName(p, key, of)
		must(t, err)
		names := listed[name]
		var walked []string
		for _, v := range vs {
			walked = append(walked, v.Name())
		}
		if !slices.Equal(names, walked) {
			t.Fatalf("versions/%s lists %d versions, a walk of the history finds %d:\n%v\n%v", name, len(names), len(walked), names, walked)
		}
	}
}
