package mount_test

import (
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/dustin/go-humanize"
)

// daemonCleanup unmounts mnt at the end of a test whose server runs in the
// background, out of the servers the helpers track.
func daemonCleanup(t *testing.T, mnt string) {
	t.Cleanup(func() {
		if mounted(mnt) {
			exec.Command(plainBinary, "umount", mnt).Run()
		}
		if mounted(mnt) {
			abort(mnt)
		}
	})
}

// mount(8) mounts an fstab line of type ledgerfs through /sbin/mount.ledgerfs,
// a link to the binary, with options in -o form; the command returns once
// the mount serves; ledgerfs umount returns once the server has committed
// and exited.
func TestFstabMount(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("mount(8) with a helper in /sbin needs root")
	}
	const helper = "/sbin/mount.ledgerfs"
	if old, err := os.Readlink(helper); err == nil {
		t.Cleanup(func() { os.Remove(helper); os.Symlink(old, helper) })
	} else if _, err := os.Lstat(helper); err == nil {
		t.Fatalf("%s exists and is no link: the test would replace it", helper)
	} else {
		t.Cleanup(func() { os.Remove(helper) })
	}
	os.Remove(helper)
	must(t, os.Symlink(plainBinary, helper))

	dir := t.TempDir()
	repo, mnt, logFile := filepath.Join(dir, "repo"), filepath.Join(dir, "mnt"), filepath.Join(dir, "log")
	must(t, os.Mkdir(mnt, 0o755))
	daemonCleanup(t, mnt)
	fstab := filepath.Join(dir, "fstab")
	line := repo + " " + mnt + " ledgerfs rw,allow_other,cache_timeout=0.5,uid=4242,_netdev,nofail,x-systemd.automount,log_file=" + logFile + " 0 0\n"
	must(t, os.WriteFile(fstab, []byte(line), 0o644))
	if out, err := exec.Command("mount", "-T", fstab, mnt).CombinedOutput(); err != nil {
		t.Fatalf("mount -T %s: %v\n%s", fstab, err, out)
	}
	if !mounted(mnt) {
		t.Fatal("mount returned before the mount served")
	}
	opts := run(t, "/", "findmnt", "-n", "-o", "FSTYPE,OPTIONS", mnt)
	if !strings.HasPrefix(opts, "fuse.ledgerfs ") || !strings.Contains(opts, "allow_other") || !strings.Contains(opts, "default_permissions") {
		t.Errorf("findmnt: %s", opts)
	}
	pg := filepath.Join(mnt, "l", "p")
	must(t, os.MkdirAll(pg, 0o755))
	must(t, os.WriteFile(filepath.Join(pg, "f"), []byte("through fstab"), 0o644))
	if st := stat(t, filepath.Join(pg, "f")); st.Uid != 4242 {
		t.Errorf("uid=4242: the file shows uid %d", st.Uid)
	}
	if out, err := exec.Command(plainBinary, "umount", mnt).CombinedOutput(); err != nil {
		t.Fatalf("ledgerfs umount: %v\n%s", err, out)
	}
	if mounted(mnt) {
		t.Fatal("still mounted after ledgerfs umount")
	}
	// The server has exited: the repository is free for the command line.
	if got := run(t, "/", plainBinary, "cat", repo, "l", "p", "f"); got != "through fstab" {
		t.Errorf("ledgerfs cat after umount: %q", got)
	}
	if b, _ := os.ReadFile(logFile); !strings.Contains(string(b), "msg=serving") || !strings.Contains(string(b), "msg=unmounted") {
		t.Errorf("log file:\n%s", b)
	}

	// A mistyped option fails the mount, with the reason.
	must(t, os.WriteFile(fstab, []byte(strings.Replace(line, "cache_timeout", "cache_timeuot", 1)), 0o644))
	out, err := exec.Command("mount", "-T", fstab, mnt).CombinedOutput()
	if err == nil || !strings.Contains(string(out), `unknown mount option "cache_timeuot=0.5"`) {
		t.Errorf("mount with a mistyped option: %v\n%s", err, out)
	}
	if mounted(mnt) {
		t.Error("mounted despite the mistyped option")
	}
}

// mount -d returns non-zero with the reason when the server cannot serve.
func TestDaemonModeFailure(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	mnt := filepath.Join(dir, "mnt")
	must(t, os.MkdirAll(mnt, 0o755))
	must(t, os.WriteFile(filepath.Join(mnt, "x"), nil, 0o644))
	logFile := filepath.Join(dir, "log")
	out, err := exec.Command(plainBinary, "mount", "-d", "--log-file", logFile, filepath.Join(dir, "repo"), mnt).CombinedOutput()
	if err == nil || !strings.Contains(string(out), "is not empty") || !strings.Contains(string(out), logFile) {
		t.Fatalf("mount -d over a non-empty directory: %v\n%s", err, out)
	}
	if mounted(mnt) {
		detach(mnt)
		t.Fatal("mounted")
	}
}

// Under systemd (Type=notify) the server sends READY=1 once the mount
// serves and STOPPING=1 when it begins to stop.
func TestSystemdNotify(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	sock := filepath.Join(dir, "notify")
	conn, err := net.ListenUnixgram("unixgram", &net.UnixAddr{Name: sock, Net: "unixgram"})
	must(t, err)
	defer conn.Close()
	mnt := filepath.Join(dir, "mnt")
	cmd := exec.Command(plainBinary, "mount", filepath.Join(dir, "repo"), mnt)
	cmd.Env = append(os.Environ(), "NOTIFY_SOCKET="+sock)
	var log output
	cmd.Stdout, cmd.Stderr = &log, &log
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGTERM}
	must(t, cmd.Start())
	defer func() {
		cmd.Process.Kill()
		cmd.Wait()
		if mounted(mnt) {
			detach(mnt)
		}
	}()
	next := func() string {
		t.Helper()
		buf := make([]byte, 256)
		conn.SetReadDeadline(time.Now().Add(time.Minute)) // a server that never notifies
		n, err := conn.Read(buf)
		if err != nil {
			t.Fatalf("no notification: %v\n%s", err, log.String())
		}
		return string(buf[:n])
	}
	if got := next(); got != "READY=1" {
		t.Fatalf("first notification %q, want READY=1", got)
	}
	if !mounted(mnt) {
		t.Fatal("READY=1 before the mount served")
	}
	must(t, cmd.Process.Signal(syscall.SIGTERM))
	if got := next(); got != "STOPPING=1" {
		t.Fatalf("notification after SIGTERM %q, want STOPPING=1", got)
	}
	if err := cmd.Wait(); err != nil {
		t.Fatalf("server exited with %v\n%s", err, log.String())
	}
}

// scrape reads the metrics at url as name{labels} -> value.
func scrape(t *testing.T, url string) map[string]float64 {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	must(t, err)
	return parseMetrics(t, b)
}

// parseMetrics reads metrics in Prometheus's text format as
// name{labels} -> value.
func parseMetrics(t *testing.T, b []byte) map[string]float64 {
	t.Helper()
	out := map[string]float64{}
	for _, line := range strings.Split(string(b), "\n") {
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		i := strings.LastIndexByte(line, ' ')
		v, err := strconv.ParseFloat(line[i+1:], 64)
		if err != nil {
			t.Fatalf("metrics line %q: %v", line, err)
		}
		out[line[:i]] = v
	}
	return out
}

// --metrics serves Prometheus metrics that follow a workload: FUSE
// operations, bytes, commits, deduplication and the open pages' dbs.
func TestMetrics(t *testing.T) {
	t.Parallel()
	s := mountPlain(t, t.TempDir(), "--metrics", "127.0.0.1:0")
	s.log.await(t, `msg="metrics listening"`)
	_, addr, _ := strings.Cut(s.log.String(), `msg="metrics listening" addr=`)
	addr, _, _ = strings.Cut(addr, "\n")
	url := "http://" + addr + "/metrics"
	before := scrape(t, url)
	pg := s.page("m", "p")
	data := content(7, 1<<20)
	for i := range 5 {
		must(t, os.WriteFile(filepath.Join(pg, fmt.Sprint("f", i)), data, 0o644)) // the same content: deduplicated
	}
	for i := range 5 {
		b, err := os.ReadFile(filepath.Join(pg, fmt.Sprint("f", i)))
		must(t, err)
		if len(b) != len(data) {
			t.Fatalf("read %d bytes", len(b))
		}
	}
	syncDir(t, pg)
	// A name the kernel has not seen is looked up in the committed tree:
	// the reads above may all have been served by the closed files'
	// content while their commit was queued.
	if _, err := os.Stat(filepath.Join(pg, "absent")); !os.IsNotExist(err) {
		t.Fatalf("stat of an absent name: %v", err)
	}
	after := scrape(t, url)
	grew := func(name string, by float64) {
		t.Helper()
		if d := after[name] - before[name]; d < by {
			t.Errorf("%s grew by %v, want at least %v", name, d, by)
		}
	}
	grew(`ledgerfs_fuse_op_duration_seconds_count{op="write"}`, 5)
	grew(`ledgerfs_fuse_op_duration_seconds_count{op="create"}`, 5)
	grew(`ledgerfs_fuse_op_duration_seconds_count{op="fsyncdir"}`, 1)
	grew(`ledgerfs_written_bytes_total`, 5<<20)
	grew(`ledgerfs_commit_changes_count{kind="queued"}`, 1)
	grew(`ledgerfs_commit_changes_sum{kind="queued"}`, 5)
	grew(`ledgerfs_piece_bytes_written_total{result="stored"}`, 1<<20)
	grew(`ledgerfs_piece_bytes_written_total{result="deduplicated"}`, 4<<20)
	if after[`ledgerfs_open_pages`] < 1 || after[`ledgerfs_page_db_bytes{ledger="m",page="p",part="vlog"}`] < 1<<20 {
		t.Errorf("open pages %v, page m/p's value log %v bytes", after[`ledgerfs_open_pages`], after[`ledgerfs_page_db_bytes{ledger="m",page="p",part="vlog"}`])
	}
	if after[`ledgerfs_cache_lookups_total{cache="node",result="hit"}`]+after[`ledgerfs_cache_lookups_total{cache="node",result="miss"}`] < 1 {
		t.Error("no lookups in the node cache")
	}
	if after[`ledgerfs_read_bytes_total`] < 1 {
		t.Errorf("no bytes read: %v (the kernel may have served reads from its cache, but not all)", after[`ledgerfs_read_bytes_total`])
	}
}

// The mount's root has a hidden, read-only .stats file with the metrics as
// text, which ledgerfs stats shows as a line per interval.
func TestStatsFile(t *testing.T) {
	t.Parallel()
	s := mountPlain(t, t.TempDir())
	pg := s.page("m", "p")
	must(t, os.WriteFile(filepath.Join(pg, "f"), content(1, 100000), 0o644))
	syncDir(t, pg)
	stats := filepath.Join(s.mnt, ".stats")
	b, err := os.ReadFile(stats)
	must(t, err)
	if !strings.Contains(string(b), "ledgerfs_written_bytes_total 100000") {
		t.Errorf(".stats has no 100000 bytes written:\n%s", b)
	}
	if slices.Contains(ls(t, s.mnt), ".stats") {
		t.Error(".stats is listed")
	}
	if err := os.WriteFile(stats, nil, 0o644); err == nil {
		t.Error(".stats was written")
	}
	if err := os.Mkdir(filepath.Join(s.mnt, ".stats2"), 0o755); err != nil {
		t.Errorf("a ledger named .stats2: %v", err)
	}
	// Given a page, ledgerfs stats finds its mount's .stats.
	out := run(t, "/", plainBinary, "stats", "--interval", "100ms", "--count", "3", pg)
	lines := strings.Split(strings.TrimSpace(out), "\n")
	if len(lines) != 4 || !strings.Contains(lines[0], "ops/s") {
		t.Errorf("ledgerfs stats printed:\n%s", out)
	}
	// Reads of .stats are not the mount's work: ledgerfs stats made an
	// idle mount show 14 operations a second.
	ops := func() (n int) {
		b, err := os.ReadFile(stats)
		must(t, err)
		for _, l := range strings.Split(string(b), "\n") {
			if strings.HasPrefix(l, "ledgerfs_fuse_op_duration_seconds_count") {
				v, _ := strconv.Atoi(l[strings.LastIndexByte(l, ' ')+1:])
				n += v
			}
		}
		return n
	}
	before := ops()
	for range 20 {
		ops()
	}
	if n := ops() - before; n >= 20 {
		t.Errorf("21 reads of .stats counted %d operations", n)
	}
}

// mount -t fuse.ledgerfs runs mount.fuse3, which runs "ledgerfs REPO
// MOUNTPOINT -o OPTIONS" through the shell: the binary takes that for a
// mount, though the same words typed in a shell are an error.
func TestFuseTypeMount(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("mount(8) needs root")
	}
	if _, err := exec.LookPath("mount.fuse3"); err != nil {
		t.Fatalf("mount.fuse3 is needed (package fuse3, which .ci/run installs): %v", err)
	}
	// mount(8) runs its helpers with a PATH of its own: the binary goes
	// where a package would put it.
	const installed = "/sbin/ledgerfs"
	if old, err := os.Readlink(installed); err == nil {
		t.Cleanup(func() { os.Remove(installed); os.Symlink(old, installed) })
	} else if _, err := os.Lstat(installed); err == nil {
		t.Fatalf("%s exists and is no link: the test would replace it", installed)
	} else {
		t.Cleanup(func() { os.Remove(installed) })
	}
	os.Remove(installed)
	must(t, os.Symlink(plainBinary, installed))
	dir := t.TempDir()
	repo, mnt, logFile := filepath.Join(dir, "repo"), filepath.Join(dir, "mnt"), filepath.Join(dir, "log")
	must(t, os.Mkdir(mnt, 0o755))
	daemonCleanup(t, mnt)
	cmd := exec.Command("mount", "-t", "fuse.ledgerfs", repo, mnt, "-o", "log_file="+logFile)
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("mount -t fuse.ledgerfs: %v\n%s", err, out)
	}
	if !mounted(mnt) {
		t.Fatal("mount returned before the mount served")
	}
	pg := filepath.Join(mnt, "l", "p")
	must(t, os.MkdirAll(pg, 0o755))
	must(t, os.WriteFile(filepath.Join(pg, "f"), []byte("through mount.fuse3"), 0o644))
	if out, err := exec.Command(plainBinary, "umount", mnt).CombinedOutput(); err != nil {
		t.Fatalf("ledgerfs umount: %v\n%s", err, out)
	}
	if got := run(t, "/", plainBinary, "cat", repo, "l", "p", "f"); got != "through mount.fuse3" {
		t.Errorf("ledgerfs cat after umount: %q", got)
	}
	// Typed in a shell, the same words mount nothing.
	out, err := exec.Command(plainBinary, repo, mnt).CombinedOutput()
	if err == nil || mounted(mnt) || !strings.Contains(string(out), "unknown command") {
		t.Fatalf("ledgerfs REPO MNT in a shell: %v, mounted %v\n%s", err, mounted(mnt), out)
	}
}

// A mount scrubs its pages in the background (--scrub-every), and .stats
// counts what it hashed.
func TestScrubInTheBackground(t *testing.T) {
	t.Parallel()
	s := mountPlain(t, t.TempDir(), "--scrub-every", "200ms", "--scrub-rate", "64MiB")
	pg := s.page("m", "p")
	must(t, os.WriteFile(filepath.Join(pg, "f"), content(3, 3<<20), 0o644))
	syncDir(t, pg)
	scrubbed := func(what string) float64 {
		b, err := os.ReadFile(filepath.Join(s.mnt, ".stats"))
		must(t, err)
		prefix := `ledgerfs_scrubbed_total{what="` + what + `"} `
		for _, l := range strings.Split(string(b), "\n") {
			if v, ok := strings.CutPrefix(l, prefix); ok {
				f, _ := strconv.ParseFloat(v, 64)
				return f
			}
		}
		return 0
	}
	// The scrub logs each page once .stats counts it; the page may be
	// scrubbed before the file is in it, so wait for a scrub of 3 MiB.
	s.log.awaitThat(t, "scrub of m/p's 3 MiB", func(log string) bool {
		for _, l := range strings.Split(log, "\n") {
			_, v, ok := strings.Cut(l, `msg=scrubbed page=m/p bytes="`)
			if !ok {
				continue
			}
			v, _, _ = strings.Cut(v, `"`)
			if n, err := humanize.ParseBytes(v); err == nil && n >= 3<<20 {
				return true
			}
		}
		return false
	})
	if scrubbed("bytes") < 3<<20 {
		t.Fatalf("a page of 3 MiB scrubbed: %v pages, %v bytes\n%s", scrubbed("pages"), scrubbed("bytes"), s.log)
	}
	if n := scrubbed("damaged"); n != 0 {
		t.Fatalf("the scrub found %v damaged pieces in a whole page", n)
	}
}
