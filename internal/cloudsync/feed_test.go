package cloudsync

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/ledgerfs/ledgerfs/internal/remote"
)

// counting is a Backend that counts the requests made through it, by
// kind, and the bytes and listed names they moved.
type counting struct {
	remote.Backend
	mu               sync.Mutex
	n                map[string]int
	up, down, listed int64
	packs            map[string]int // whole reads of each pack, ever
	ranged           []string       // the objects read by range since takeRanged
}

func (c *counting) count(kind string, up, down, listed int) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.n == nil {
		c.n = map[string]int{}
	}
	c.n[kind]++
	c.up += int64(up)
	c.down += int64(down)
	c.listed += int64(listed)
}

// take returns the counts since the last take.
func (c *counting) take() map[string]int {
	c.mu.Lock()
	defer c.mu.Unlock()
	n := c.n
	c.n, c.up, c.down, c.listed = nil, 0, 0, 0
	return n
}

// moved returns the bytes up and down and the names listed since the last
// take.
func (c *counting) moved() (up, down, listed int64) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.up, c.down, c.listed
}

func (c *counting) Create(ctx context.Context, name string, body []byte) error {
	c.count("create", len(body), 0, 0)
	return c.Backend.Create(ctx, name, body)
}

func (c *counting) Put(ctx context.Context, name string, body []byte) error {
	c.count("put", len(body), 0, 0)
	return c.Backend.Put(ctx, name, body)
}

func (c *counting) Get(ctx context.Context, name string) ([]byte, error) {
	b, err := c.Backend.Get(ctx, name)
	if strings.HasPrefix(name, packsDir) {
		c.mu.Lock()
		if c.packs == nil {
			c.packs = map[string]int{}
		}
		c.packs[name]++
		c.mu.Unlock()
	}
	c.count("get", 0, len(b), 0)
	return b, err
}

func (c *counting) GetRange(ctx context.Context, name string, off, n int64) ([]byte, error) {
	b, err := c.Backend.GetRange(ctx, name, off, n)
	c.count("range", 0, len(b), 0)
	c.mu.Lock()
	c.ranged = append(c.ranged, name)
	c.mu.Unlock()
	return b, err
}

// takeRanged returns the objects read by range since the last call.
func (c *counting) takeRanged() []string {
	c.mu.Lock()
	defer c.mu.Unlock()
	r := c.ranged
	c.ranged = nil
	return r
}

func (c *counting) List(ctx context.Context, prefix, startAfter string, fn func(remote.Object) error) error {
	n := 0
	err := c.Backend.List(ctx, prefix, startAfter, func(o remote.Object) error {
		n++
		return fn(o)
	})
	c.count("list "+prefix, 0, 0, n)
	return err
}

func total(n map[string]int) int {
	s := 0
	for _, v := range n {
		s += v
	}
	return s
}

// TestIdleRoundIsOneRequest: once every page was pushed, a round of a
// watched syncer with nothing new makes one request, a listing of the
// change feed, whatever the number of devices and pages; a change on
// another device is found through it.
func TestIdleRoundIsOneRequest(t *testing.T) {
	dir, err := remote.NewDir(t.TempDir())
	must(t, err)
	c := &counting{Backend: dir}
	a := newDevice(t, "a", c)
	a.s.Watched = true
	others := []*device{newDevice(t, "b", dir), newDevice(t, "c", dir), newDevice(t, "d", dir)}
	for i, d := range others {
		for _, p := range []string{"p1", "p2", "p3"} {
			d.write("l", p, d.name, []byte{byte(i)})
		}
		d.sync()
	}
	a.write("l", "mine", "k", []byte("v"))
	a.sync() // the first: a full scan of the logs, and a push of every page
	for _, d := range others {
		d.sync()
	}
	a.sync()
	c.take()
	for range 3 {
		if st := a.sync(); st != (Stats{}) {
			t.Fatalf("an idle round moved %+v", st)
		}
		if n := c.take(); total(n) != 1 || n["list "+feedDir] != 1 {
			t.Fatalf("an idle round made %v, want one listing of the feed", n)
		}
	}
	others[1].write("l", "p2", "new", []byte("new"))
	others[1].sync()
	a.sync()
	if got := a.files("l", "p2")["new"]; got != "new" {
		t.Fatalf("a change announced in the feed was not pulled: %q", got)
	}
	if n := c.take(); n["list "+logsDir+others[1].s.device+"/"] != 0 || n["list "+devicesDir] != 0 {
		t.Fatalf("a round within the full-scan interval listed logs or devices: %v", n)
	}
	// A commit made through the committer without telling the watched
	// syncer is not pushed by a round: Changed is what makes it go.
	a.write("l", "mine", "k2", []byte("v2"))
	if st := a.sync(); st.CommitsUp != 0 {
		t.Fatalf("a round pushed a page nobody said changed: %+v", st)
	}
	a.s.Changed("l", "mine")
	if st := a.sync(); st.CommitsUp != 1 {
		t.Fatalf("a round after Changed pushed %d commits, want 1", st.CommitsUp)
	}
}

// TestLostAnnouncement: a batch whose feed entry never reached the store
// (the device stopped between the two) is found by the next full scan of
// the logs, and by the device's own next round, which announces it.
func TestLostAnnouncement(t *testing.T) {
	root := t.TempDir()
	dir, err := remote.NewDir(root)
	must(t, err)
	a, b := newDevice(t, "a", dir), newDevice(t, "b", dir)
	a.sync()
	b.sync()
	b.write("l", "p", "k", []byte("v"))
	b.sync()
	entries, err := filepath.Glob(filepath.Join(root, strings.TrimSuffix(feedDir, "/"), "*"))
	must(t, err)
	if len(entries) == 0 {
		t.Fatal("a push wrote no feed entry")
	}
	for _, e := range entries {
		must(t, os.Remove(e))
	}
	a.sync()
	if ok, _ := a.repo.HasPage("l", "p"); ok {
		t.Fatal("a batch with no feed entry was found within the full-scan interval: the feed is not what is read")
	}
	a.s.scannedAt = a.s.scannedAt.Add(-fullScanEvery) // time passes
	a.sync()
	if got := a.files("l", "p")["k"]; got != "v" {
		t.Fatalf("a full scan did not find the unannounced batch: %q", got)
	}
	// b's state says announced; a lost entry of a round cut short is
	// written by the next round, which finds the row behind the log.
	must(t, b.repo.SetSyncState(map[string][]byte{stateAnnounced: nil}))
	b.sync()
	entries, err = filepath.Glob(filepath.Join(root, strings.TrimSuffix(feedDir, "/"), "*"))
	must(t, err)
	if len(entries) != 1 {
		t.Fatalf("the next round wrote %d feed entries, want 1", len(entries))
	}

}

// TestWatchedPushesMerges: a merge a pull makes is a commit no journal
// told of; a watched syncer pushes it all the same.
func TestWatchedPushesMerges(t *testing.T) {
	dir, err := remote.NewDir(t.TempDir())
	must(t, err)
	a, b := newDevice(t, "a", dir), newDevice(t, "b", dir)
	a.s.Watched = true
	a.sync()
	b.write("l", "p", "from-b", []byte("b"))
	b.sync()
	a.write("l", "p", "from-a", []byte("a"))
	a.s.Changed("l", "p")
	must(t, a.s.Push(context.Background(), &Stats{})) // without pulling first
	if st := a.sync(); st.Merges != 1 {
		t.Fatalf("a's round made %d merges, want 1", st.Merges)
	}
	a.settled("l", "p")
	b.sync()
	if a.head("l", "p") != b.head("l", "p") {
		t.Fatal("the devices did not converge")
	}
}
