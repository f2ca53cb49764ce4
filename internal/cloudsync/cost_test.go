package cloudsync

import (
	"context"
	"fmt"
	"os"
	"testing"
	"time"

	"github.com/ledgerfs/ledgerfs/internal/btree"
	"github.com/ledgerfs/ledgerfs/internal/remote"
	"github.com/ledgerfs/ledgerfs/internal/s3test"
	"github.com/ledgerfs/ledgerfs/journal"
)

// fill gives page l/p n entries of a few bytes each, in commits of at most
// 10,000 entries.
func (d *device) fill(l, p string, n int) {
	d.t.Helper()
	pg := d.page(l, p)
	defer d.repo.Release(pg)
	for start := 0; start < n; start += 10000 {
		var ops []journal.Op
		for i := start; i < min(n, start+10000); i++ {
			v := fmt.Appendf(nil, "entry %d of %s", i, p)
			w := pg.NewValueWriter()
			_, err := w.Write(v)
			must(d.t, err)
			id, size, err := w.Close()
			must(d.t, err)
			ops = append(ops, journal.Op{Key: fmt.Sprintf("dir%03d/file%07d", i%1000, i), Entry: btree.Entry{Value: id,
				Meta: btree.Meta{Size: size, Mode: 0o100644, MtimeNs: time.Now().UnixNano(), HasMtime: true}}})
		}
		must(d.t, d.eng.CommitterFor(pg).Apply(false, ops...))
	}
}

// TestCostAtScale simulates devices that share an in-process S3 store,
// each a real repository, their clocks one simulated clock: idle minutes
// pass in polls every 2 s (time compressed), and commits of one entry go
// from one device to all others. It reports the requests, bytes and listed
// names per idle device-minute and per commit, which DESIGN.md's cost
// model gives, and fails if they grow with the pages or devices beyond
// what that model says. LEDGERFS_SIM=full runs it at 10 devices × 1,000
// pages × 1,000 entries, and measures a commit in a page of a million
// entries; the default is 5 × 20 × 100 (its time grows with the devices:
// 10 took two minutes under the race detector); -short, 3 × 5 × 10.
func TestCostAtScale(t *testing.T) {
	devices, pages, entries, bigPage := 5, 20, 100, 0
	if os.Getenv("LEDGERFS_SIM") == "full" {
		devices, pages, entries, bigPage = 10, 1000, 1000, 1_000_000
	} else if testing.Short() {
		devices, pages, entries = 3, 5, 10
	}
	ctx := context.Background()
	srv := s3test.Fake(t)
	clock := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	now := func() time.Time { return clock }
	var ds []*device
	var cs []*counting
	for i := range devices {
		be, err := remote.NewS3(ctx, srv.Config("sim", "repo"))
		must(t, err)
		c := &counting{Backend: be}
		d := newDevice(t, fmt.Sprintf("d%d", i), c)
		d.s.now, d.s.Watched = now, true
		d.s.packSize = DefaultPackSize
		ds, cs = append(ds, d), append(cs, c)
	}
	start := time.Now()
	for p := range pages {
		ds[0].fill("sim", fmt.Sprintf("page%04d", p), entries)
	}
	filled := time.Since(start)
	for _, d := range ds {
		d.sync() // the first: every page pushed or pulled
	}
	t.Logf("%d devices, %d pages of %d entries: filled in %v, pulled by all in %v", devices, pages, entries, filled, time.Since(start)-filled)
	for _, c := range cs {
		c.take()
	}

	// Ten idle minutes: a poll every 2 s on every device.
	const poll = 2 * time.Second
	const minutes = 10
	for range int(minutes * time.Minute / poll) {
		clock = clock.Add(poll)
		for _, d := range ds {
			d.sync()
		}
	}
	var idleReq, idleListed int64
	for _, c := range cs {
		_, _, l := c.moved()
		idleListed += l
		idleReq += int64(total(c.take()))
	}
	perMin := float64(idleReq) / float64(devices*minutes)
	t.Logf("idle: %.1f requests per device-minute, %.1f names listed", perMin, float64(idleListed)/float64(devices*minutes))
	// 30 feed listings a minute, and a full scan (the devices' listing and
	// one per other device's log) every five minutes.
	if want := 30 + float64(devices)/5; perMin > want+0.5 {
		t.Fatalf("idle: %.1f requests per device-minute, want at most %.1f", perMin, want)
	}

	// Commits of one entry in one page, each seen by every other device.
	const commits = 10
	var pushReq, pullReq int
	var pushUp, pullDown int64
	for i := range commits {
		ds[0].write("sim", fmt.Sprintf("page%04d", i%pages), fmt.Sprintf("dir000/changed%d", i), []byte("a small change"))
		ds[0].s.Changed("sim", fmt.Sprintf("page%04d", i%pages))
		clock = clock.Add(poll)
		for j, d := range ds {
			st := d.sync()
			up, down, _ := cs[j].moved()
			n := total(cs[j].take())
			if j == 0 {
				if st.CommitsUp != 1 {
					t.Fatalf("commit %d: the device pushed %d commits", i, st.CommitsUp)
				}
				pushReq += n
				pushUp += up
			} else {
				if st.CommitsDown != 1 {
					t.Fatalf("commit %d: device %d pulled %d commits", i, j, st.CommitsDown)
				}
				pullReq += n
				pullDown += down
			}
		}
	}
	perPush := float64(pushReq) / commits
	perPull := float64(pullReq) / float64(commits*(devices-1))
	t.Logf("a commit of one entry: the writer %.1f requests (its poll included), %d bytes up; each other device %.1f requests (its poll included), %d bytes down",
		perPush, pushUp/commits, perPull, pullDown/int64(commits*(devices-1)))
	// The writer: its poll's listing, a pack, a batch, a feed entry; each
	// other device: its listing, the batch, the pack.
	if perPush > 4 || perPull > 3 {
		t.Fatalf("a commit cost %.1f requests to push and %.1f to pull, want at most 4 and 3", perPush, perPull)
	}

	if bigPage > 0 {
		solo := newDevice(t, "solo", &counting{Backend: mustS3(t, srv, "big")})
		start := time.Now()
		solo.fill("sim", "big", bigPage)
		solo.sync()
		t.Logf("a page of %d entries: filled and pushed in %v", bigPage, time.Since(start))
		c := solo.s.be.(*counting)
		c.take()
		solo.write("sim", "big", "dir500/changed", []byte("a small change"))
		solo.sync()
		up, _, _ := c.moved()
		n := total(c.take())
		t.Logf("a commit of one entry in a page of %d entries: %d requests, %d bytes up", bigPage, n, up)
	}
}

func mustS3(t *testing.T, srv *s3test.Server, prefix string) remote.Backend {
	be, err := remote.NewS3(context.Background(), srv.Config("sim", prefix))
	must(t, err)
	return be
}
