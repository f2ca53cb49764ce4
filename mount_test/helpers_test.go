// Package mount_test mounts real ledgerfs filesystems, served by the
// ledgerfs binary in a separate process, and drives them with real tools.
package mount_test

import (
	"bytes"
	"crypto/sha256"
	"errors"
	"flag"
	"fmt"
	"io"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"runtime/pprof"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/moby/sys/mountinfo"
	"golang.org/x/sys/unix"

	"github.com/ledgerfs/ledgerfs/internal/testutil"
)

var (
	// binary is the server under test, built with -race when the tests are.
	binary string
	// plainBinary is built without the race detector, for the tests that
	// measure memory and throughput, and for the kill and fault tests whose
	// load is volume (what survives a kill -9 is the durable state, which
	// the race detector does not see; it triples their CPU time, and the
	// same paths run under it in the other tests).
	plainBinary string
)

func TestMain(m *testing.M) {
	flag.Parse()
	if _, err := os.Stat("/dev/fuse"); err != nil {
		fmt.Fprintln(os.Stderr, "mount tests need /dev/fuse:", err)
		os.Exit(1)
	}
	// Everything the tests make lives under root, so that a run cut short
	// by its timeout can remove it all.
	root, err := os.MkdirTemp("", "ledgerfs-test")
	if err != nil {
		panic(err)
	}
	if bins := os.Getenv("LEDGERFS_TEST_BINARIES"); bins != "" {
		binary, plainBinary, _ = strings.Cut(bins, ":")
	} else if err := build(filepath.Join(root, "bin")); err != nil {
		fmt.Fprintln(os.Stderr, "build ledgerfs:", err)
		os.RemoveAll(root)
		os.Exit(1)
	}
	os.Setenv("TMPDIR", root)
	// A race-built process sleeps a second before it exits (the race
	// runtime's atexit_sleep_ms): every command and every unmount the tests
	// wait on would. Races are reported as they happen, and still fail the
	// process with exit status 66.
	if _, ok := os.LookupEnv("GORACE"); !ok {
		os.Setenv("GORACE", "atexit_sleep_ms=0")
	}
	// The tests mostly wait on servers, each a process of its own: run four
	// at once unless -parallel says how many.
	parallelSet := false
	flag.Visit(func(f *flag.Flag) { parallelSet = parallelSet || f.Name == "test.parallel" })
	if !parallelSet {
		flag.Set("test.parallel", "4")
	}
	// Go's test timeout panics without running cleanups: stop the servers
	// and remove the files a little before it.
	if d := flag.Lookup("test.timeout").Value.(flag.Getter).Get().(time.Duration); d > 0 {
		time.AfterFunc(d-min(30*time.Second, d/2), func() { cleanUp(root) })
	}
	code := m.Run()
	os.RemoveAll(root)
	os.Exit(code)
}

// build builds the server under test into dir.
func build(dir string) error {
	plainBinary = filepath.Join(dir, "ledgerfs")
	binary = plainBinary
	builds := [][]string{{"build", "-o", plainBinary}}
	if raceEnabled {
		binary = filepath.Join(dir, "ledgerfs-race")
		builds = append(builds, []string{"build", "-race", "-o", binary})
	}
	for _, args := range builds {
		cmd := exec.Command("go", append(args, "../cmd/ledgerfs")...)
		cmd.Stdout, cmd.Stderr = os.Stdout, os.Stderr
		if err := cmd.Run(); err != nil {
			return err
		}
	}
	return nil
}

// servers holds the servers still running.
var servers sync.Map // *server → nil

// cleanUp stops every server (SIGTERM, then SIGKILL and a FUSE abort for
// one that does not stop within 10 s), detaches their mounts and removes
// root.
func cleanUp(root string) {
	// What Go's timeout panic would show, before the clean-up changes it.
	fmt.Fprintln(os.Stderr, "mount tests: the timeout is near; goroutines now:")
	pprof.Lookup("goroutine").WriteTo(os.Stderr, 2)
	fmt.Fprintln(os.Stderr, "mount tests: stopping every server and removing", root)
	// A server still running may be what the tests wait on: SIGQUIT has
	// Go print its goroutines to its log, and ends it.
	var left []*server
	servers.Range(func(k, _ any) bool {
		s := k.(*server)
		s.cmd.Process.Signal(syscall.SIGQUIT)
		left = append(left, s)
		return true
	})
	deadline := time.Now().Add(10 * time.Second)
	for _, s := range left {
		select {
		case <-s.exited:
		case <-time.After(time.Until(deadline)):
		}
		// Its stacks, or the end of its log if it printed none.
		const most = 64 << 10
		log := s.log.String()
		if i := strings.Index(log, "SIGQUIT"); i >= 0 {
			log = log[i:min(len(log), i+most)]
		} else {
			log = log[max(0, len(log)-most):]
		}
		fmt.Fprintf(os.Stderr, "mount tests: the server of %s at the timeout:\n%s\n", s.mnt, log)
		if _, running := servers.Load(s); running {
			s.cmd.Process.Kill()
			if err := abort(s.mnt); err != nil {
				fmt.Fprintln(os.Stderr, err)
			}
		}
		detach(s.mnt)
	}
	if err := os.RemoveAll(root); err != nil {
		fmt.Fprintln(os.Stderr, "mount tests:", err)
	}
}

// server is a ledgerfs mount process.
type server struct {
	t    testing.TB
	repo string
	mnt  string
	cmd  *exec.Cmd
	log  *output
	done chan error
	// exited is closed once the process has ended (done is for stop).
	exited chan struct{}
}

// mount serves repo at a new mount point until the test ends.
func mount(t testing.TB, repo string, args ...string) *server {
	t.Helper()
	mnt := filepath.Join(t.TempDir(), "mnt")
	return mountAt(t, repo, mnt, args...)
}

// mountPlain serves repo with the server built without the race detector,
// for tests whose point is what tools see of much data: a race-built
// server's CPU time (several times a plain one's) would dominate the suite
// there. Tests of concurrency use mount.
func mountPlain(t testing.TB, repo string, args ...string) *server {
	t.Helper()
	return mountWith(t, plainBinary, repo, filepath.Join(t.TempDir(), "mnt"), args...)
}

func mountAt(t testing.TB, repo, mnt string, args ...string) *server {
	return mountWith(t, binary, repo, mnt, args...)
}

func mountWith(t testing.TB, bin, repo, mnt string, args ...string) *server {
	t.Helper()
	return mountEnv(t, bin, nil, repo, mnt, args...)
}

// mountEnv serves repo with bin, env added to the test's environment.
func mountEnv(t testing.TB, bin string, env []string, repo, mnt string, args ...string) *server {
	t.Helper()
	s := &server{t: t, repo: repo, mnt: mnt, log: &output{}, done: make(chan error, 1)}
	s.cmd = exec.Command(bin, append(append([]string{"mount"}, args...), repo, mnt)...)
	s.cmd.Env = append(os.Environ(), env...)
	s.cmd.Stdout, s.cmd.Stderr = s.log, s.log
	// If the test process dies, the server unmounts and ends.
	s.cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGTERM}
	if err := s.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	servers.Store(s, nil)
	s.exited = make(chan struct{})
	go func() {
		err := s.cmd.Wait()
		servers.Delete(s)
		close(s.exited)
		s.done <- err
	}()
	deadline := time.Now().Add(20 * time.Second)
	for !mounted(mnt) {
		select {
		case err := <-s.done:
			t.Fatalf("ledgerfs mount exited (%v):\n%s", err, s.log)
		default:
		}
		if time.Now().After(deadline) {
			s.cmd.Process.Kill()
			t.Fatalf("not mounted after 20s:\n%s", s.log)
		}
		time.Sleep(20 * time.Millisecond)
	}
	if err := pollOnce(mnt); err != nil {
		s.cmd.Process.Kill()
		t.Fatalf("poll the mount at %s once: %v\n%s", mnt, err, s.log)
	}
	t.Cleanup(func() {
		s.stop()
		// A failure's cause is often in the server's log: a sync that
		// failed, a commit that was dropped.
		if t.Failed() {
			t.Logf("the log of the mount at %s (last %d lines):\n%s", mnt, logTail, tail(s.log.String(), logTail))
		}
	})
	return s
}

// pollOnce asks the server of the mount at mnt, once, whether its files
// can be polled, as go-fuse's WaitMount does (the server does not: see
// internal/server). The kernel asks the first time a process adds a file
// of a FUSE mount to an epoll set, and holds the set's lock until the
// answer comes. Go's runtime adds every file it opens to its one set, so
// until then every goroutine of this process that waits on a descriptor
// waits too, those copying the servers' logs among them: the README's
// command once hung so for 22 minutes, its timeout unable to fire, a
// server answering nothing. poll(2) here asks from this goroutine's thread
// alone; go-fuse answers ENOSYS, and the kernel asks no more.
func pollOnce(mnt string) error {
	fd, err := unix.Open(filepath.Join(mnt, ".go-fuse-epoll-hack"), unix.O_RDONLY|unix.O_CLOEXEC, 0)
	if err != nil {
		return err
	}
	defer unix.Close(fd)
	_, err = unix.Poll([]unix.PollFd{{Fd: int32(fd), Events: unix.POLLIN}}, 0)
	return err
}

// logTail is how many lines of a server's log a failed test shows.
const logTail = 80

// tail returns the last n lines of s.
func tail(s string, n int) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	return strings.Join(lines[max(0, len(lines)-n):], "\n")
}

// output collects a server's stdout and stderr; tests read it while the
// server still writes.
type output struct {
	mu    sync.Mutex
	b     bytes.Buffer
	wrote chan struct{} // closed and replaced at each write
}

func (o *output) Write(p []byte) (int, error) {
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.wrote != nil {
		close(o.wrote)
		o.wrote = nil
	}
	return o.b.Write(p)
}

// await waits up to 20 s for the output to contain want: a log line is
// the event to wait for.
func (o *output) await(t testing.TB, want string) {
	t.Helper()
	o.awaitThat(t, fmt.Sprintf("%q", want), func(s string) bool { return strings.Contains(s, want) })
}

// awaitThat waits up to 20 s for the output to satisfy done, checked at
// each write; what says what is awaited.
func (o *output) awaitThat(t testing.TB, what string, done func(string) bool) {
	t.Helper()
	timeout := make(chan struct{})
	defer time.AfterFunc(20*time.Second, func() { close(timeout) }).Stop()
	if !o.until(done, timeout) {
		t.Fatalf("no %s in the output within 20 s:\n%s", what, o)
	}
}

// awaitCount waits until want occurs n times in the output, or the
// process exits (exited gets its result, and keeps it for the caller); it
// reports whether it occurred.
func (o *output) awaitCount(want string, n int, exited chan error) bool {
	gone := make(chan struct{})
	go func() {
		err := <-exited
		close(gone)
		exited <- err
	}()
	return o.until(func(s string) bool { return strings.Count(s, want) >= n }, gone)
}

// until waits, at each write, for the output to satisfy done, or for stop;
// it reports whether done was met.
func (o *output) until(done func(string) bool, stop <-chan struct{}) bool {
	return o.untilBytes(func(b []byte) bool { return done(string(b)) }, stop)
}

// size is how much output there is so far: a mark for untilAfter.
func (o *output) size() int {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.b.Len()
}

// untilAfter is until want is in the output written after mark (size),
// read where it is: a debug log grows large.
func (o *output) untilAfter(mark int, want string, stop <-chan struct{}) bool {
	return o.untilBytes(func(b []byte) bool { return bytes.Contains(b[mark:], []byte(want)) }, stop)
}

func (o *output) untilBytes(done func([]byte) bool, stop <-chan struct{}) bool {
	for {
		o.mu.Lock()
		if done(o.b.Bytes()) {
			o.mu.Unlock()
			return true
		}
		if o.wrote == nil {
			o.wrote = make(chan struct{})
		}
		wrote := o.wrote
		o.mu.Unlock()
		select {
		case <-wrote:
		case <-stop:
			return false
		}
	}
}

func (o *output) String() string {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.b.String()
}

func mounted(mnt string) bool {
	ms, err := mountinfo.GetMounts(mountinfo.SingleEntryFilter(mnt))
	return err == nil && len(ms) > 0
}

// stop asks the server to unmount (SIGTERM) and waits for it.
func (s *server) stop() {
	if s.cmd.ProcessState != nil {
		return
	}
	s.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case err := <-s.done:
		if err != nil {
			s.t.Errorf("ledgerfs mount exited with %v:\n%s", err, s.log)
		}
	case <-time.After(60 * time.Second):
		s.cmd.Process.Kill()
		<-s.done
		s.t.Errorf("ledgerfs mount did not stop within 60s:\n%s", s.log)
	}
	if mounted(s.mnt) {
		s.t.Errorf("%s still mounted after the server stopped", s.mnt)
		detach(s.mnt)
	}
	if strings.Contains(s.log.String(), "level=ERROR") || strings.Contains(s.log.String(), "panic") {
		s.t.Errorf("server log has errors:\n%s", s.log)
	}
}

// kill ends the server with SIGKILL, as a crash would, and detaches the
// dead mount.
// kill kills the server with SIGKILL. A thread of a killed server that was
// invalidating a name (a transaction's commit does) waits, unkillable, for
// the directory's lock, which a client holds while it waits for a reply the
// dead server never sends; the process cannot exit until the connection is
// aborted, which is what a user does then (fusectl's abort, umount -f).
// After 10 s kill does that, and logs it.
func (s *server) kill() {
	s.cmd.Process.Kill()
	select {
	case <-s.done:
	case <-time.After(10 * time.Second):
		s.t.Logf("the killed server did not exit within 10 s (a thread waits in the kernel for a directory's lock); aborting its connection")
		if err := abort(s.mnt); err != nil {
			s.t.Log(err)
		}
		<-s.done
	}
	detach(s.mnt)
}

func detach(mnt string) {
	if err := syscall.Unmount(mnt, syscall.MNT_DETACH); err != nil {
		exec.Command("fusermount3", "-u", "-z", mnt).Run()
	}
}

// rss returns the server's peak and current resident set size in KiB.
func (s *server) rss() (peak, cur int) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", s.cmd.Process.Pid))
	if err != nil {
		return 0, 0
	}
	for _, line := range strings.Split(string(b), "\n") {
		f := strings.Fields(line)
		if len(f) >= 2 && f[0] == "VmHWM:" {
			peak, _ = strconv.Atoi(f[1])
		}
		if len(f) >= 2 && f[0] == "VmRSS:" {
			cur, _ = strconv.Atoi(f[1])
		}
	}
	return peak, cur
}

// rssAnon returns the server's resident anonymous memory in KiB: its Go
// heap and Badger's allocations. Mapped file pages (the page dbs' logs and
// tables) are page cache, which the kernel reclaims: not the bound.
func (s *server) rssAnon() int {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", s.cmd.Process.Pid))
	if err != nil {
		return 0
	}
	for _, line := range strings.Split(string(b), "\n") {
		if f := strings.Fields(line); len(f) >= 2 && f[0] == "RssAnon:" {
			n, _ := strconv.Atoi(f[1])
			return n
		}
	}
	return 0
}

// peakAnon samples the server's rssAnon every 20 ms until the returned
// function is called, which returns the largest seen, in KiB.
func (s *server) peakAnon() func() int {
	stop, done := make(chan struct{}), make(chan int)
	go func() {
		peak := s.rssAnon()
		t := time.NewTicker(20 * time.Millisecond)
		defer t.Stop()
		for {
			select {
			case <-stop:
				done <- max(peak, s.rssAnon())
				return
			case <-t.C:
				peak = max(peak, s.rssAnon())
			}
		}
	}()
	return func() int { close(stop); return <-done }
}

// page creates ledger l and page p and returns the page's path.
func (s *server) page(l, p string) string {
	s.t.Helper()
	dir := filepath.Join(s.mnt, l, p)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		s.t.Fatal(err)
	}
	return dir
}

// syncDir fsyncs a directory of a page, which makes every change of the
// page durable without waiting for its commit, then reads the page's
// .ledger/latest, which waits for every commit queued (history shows every
// change that returned): it returns once every change of the page queued
// so far has landed, the barrier tests wait on, and the next change starts
// a commit of its own.
func syncDir(t testing.TB, dir string) {
	t.Helper()
	d, err := os.Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	if err := d.Sync(); err != nil {
		t.Fatalf("fsync %s: %v", dir, err)
	}
	settlePage(t, dir)
}

// settlePage waits until every commit queued in the page that holds dir
// has landed: a read of history (here .ledger/latest) waits for them.
func settlePage(t testing.TB, dir string) {
	t.Helper()
	for d := dir; d != filepath.Dir(d); d = filepath.Dir(d) {
		if _, err := os.Lstat(filepath.Join(d, ".ledger")); err != nil {
			continue
		}
		// A page with no commit yet has no latest: settled all the same.
		if _, err := os.Readlink(filepath.Join(d, ".ledger", "latest")); err != nil && !errors.Is(err, fs.ErrNotExist) {
			t.Fatalf("settle the page of %s: %v", dir, err)
		}
		return
	}
}

func run(t testing.TB, dir string, name string, args ...string) string {
	t.Helper()
	cmd := exec.Command(name, args...)
	cmd.Dir = dir
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("%s %s: %v\n%s", name, strings.Join(args, " "), err, out)
	}
	return string(out)
}

func ls(t testing.TB, dir string) []string {
	t.Helper()
	es, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, e := range es {
		out = append(out, e.Name())
	}
	slices.Sort(out) // ReadDir sorts by name already; keep the test honest
	return out
}

func must(t testing.TB, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

func sortLines(s string) string {
	var l []string
	for _, line := range strings.Split(strings.TrimSpace(s), "\n") {
		if !strings.HasSuffix(line, " ./") {
			l = append(l, line)
		}
	}
	slices.Sort(l)
	return strings.Join(l, "\n")
}

// content is n bytes that do not compress, the same for the same seed; a
// shorter one is a prefix of a longer one.
func content(seed, n int) []byte { return testutil.Random(uint64(seed), 0, n) }

func sha(t testing.TB, path string) string {
	f, err := os.Open(path)
	must(t, err)
	defer f.Close()
	h := sha256.New()
	if _, err := io.Copy(h, f); err != nil {
		t.Fatal(err)
	}
	return fmt.Sprintf("%x", h.Sum(nil))
}

// commitCount is the number of commits .ledger/log lists.
func commitCount(t *testing.T, meta string) int {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(meta, "log"))
	must(t, err)
	return strings.Count(string(b), "\n")
}
