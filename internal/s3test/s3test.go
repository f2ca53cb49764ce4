// Package s3test starts S3 servers for tests: gofakes3 in the test's
// process (Fake), and a real server process on 127.0.0.1 (Start):
// versitygw (named by LEDGERFS_TEST_VERSITYGW, found on PATH, or built once
// into the user's cache directory), or MinIO when LEDGERFS_TEST_MINIO names
// its binary. Where no server can be had, a test under CI fails with a
// message that says how to get one; run by hand, it is skipped with it.
package s3test

import (
	"bytes"
	"fmt"
	"io"
	"log"
	"net"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/johannesboyne/gofakes3"
	"github.com/johannesboyne/gofakes3/backend/s3mem"
	"github.com/minio/minio-go/v7/pkg/credentials"

	"github.com/ledgerfs/ledgerfs/internal/remote"
)

// Credentials every server started here takes.
const (
	AccessKey = "ledgerfs-test"
	SecretKey = "ledgerfs-test-secret"
)

// VersitygwVersion is the versitygw release Start builds when none is
// named or on PATH.
const VersitygwVersion = "v1.8.0"

// versitygw returns a versitygw binary: LEDGERFS_TEST_VERSITYGW, else one
// on PATH, else one built with go install into the user's cache directory
// (about a minute, once per machine; a lock keeps test packages that start
// at once from building it twice).
func versitygw() (string, error) {
	if bin := os.Getenv("LEDGERFS_TEST_VERSITYGW"); bin != "" {
		return bin, nil
	}
	if bin, err := exec.LookPath("versitygw"); err == nil {
		return bin, nil
	}
	cache, err := os.UserCacheDir()
	if err != nil {
		return "", err
	}
	dir := filepath.Join(cache, "ledgerfs-test", "versitygw-"+VersitygwVersion)
	bin := filepath.Join(dir, "versitygw")
	if _, err := os.Stat(bin); err == nil {
		return bin, nil
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return "", err
	}
	lock, err := os.OpenFile(filepath.Join(dir, ".lock"), os.O_CREATE|os.O_RDWR, 0o644)
	if err != nil {
		return "", err
	}
	defer lock.Close()
	if err := syscall.Flock(int(lock.Fd()), syscall.LOCK_EX); err != nil {
		return "", err
	}
	if _, err := os.Stat(bin); err == nil {
		return bin, nil // built by another package's tests meanwhile
	}
	tmp, err := os.MkdirTemp(dir, "build-")
	if err != nil {
		return "", err
	}
	defer os.RemoveAll(tmp)
	cmd := exec.Command("go", "install", "github.com/versity/versitygw/cmd/versitygw@"+VersitygwVersion)
	cmd.Env = append(os.Environ(), "GOBIN="+tmp, "GOFLAGS=-buildvcs=false")
	cmd.Dir = tmp
	if out, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("go install versitygw: %v\n%s", err, out)
	}
	return bin, os.Rename(filepath.Join(tmp, "versitygw"), bin)
}

// A Server is an S3 server for one test.
type Server struct {
	// Endpoint is its URL, http://127.0.0.1:PORT.
	Endpoint string
	// Kind names it in messages: gofakes3, versitygw, minio.
	Kind string

	t    testing.TB
	cmd  *exec.Cmd
	args []string
	env  []string
	addr string
	dir  string

	mu   sync.Mutex
	log  bytes.Buffer
	done chan error
}

// Fake starts gofakes3 in the test's process, on a port of its own.
func Fake(t testing.TB) *Server {
	ts := httptest.NewServer(gofakes3.New(s3mem.New()).Server())
	t.Cleanup(ts.Close)
	return &Server{Endpoint: ts.URL, Kind: "gofakes3", t: t}
}

// Start starts a real S3 server process on 127.0.0.1 with its data in a
// directory of the test's (MinIO if LEDGERFS_TEST_MINIO names a binary,
// else versitygw) and returns once it answers. The test's cleanup kills
// it.
func Start(t testing.TB) *Server {
	t.Helper()
	s := &Server{t: t, dir: t.TempDir()}
	if bin := os.Getenv("LEDGERFS_TEST_MINIO"); bin != "" {
		s.Kind = "minio"
		s.env = append(os.Environ(), "MINIO_ROOT_USER="+AccessKey, "MINIO_ROOT_PASSWORD="+SecretKey, "MINIO_BROWSER=off")
		s.addr = freeAddr(t)
		s.args = []string{bin, "server", "--quiet", "--address", s.addr, s.dir}
	} else {
		bin, err := versitygw()
		if err != nil {
			msg := fmt.Sprintf("no S3 server for the sync tests (%v): set LEDGERFS_TEST_VERSITYGW to a versitygw binary "+
				"(go install github.com/versity/versitygw/cmd/versitygw@%s) or LEDGERFS_TEST_MINIO to a minio binary", err, VersitygwVersion)
			if os.Getenv("CI") != "" {
				t.Fatal(msg)
			}
			t.Skip(msg)
		}
		s.Kind = "versitygw"
		s.addr = freeAddr(t)
		s.args = []string{bin, "--access", AccessKey, "--secret", SecretKey, "--port", s.addr, "posix", s.dir}
	}
	s.Endpoint = "http://" + s.addr
	s.start()
	t.Cleanup(s.Kill)
	return s
}

// freeAddr returns 127.0.0.1 with a port free now.
func freeAddr(t testing.TB) string {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return "127.0.0.1:" + strconv.Itoa(l.Addr().(*net.TCPAddr).Port)
}

func (s *Server) start() {
	t := s.t
	t.Helper()
	cmd := exec.Command(s.args[0], s.args[1:]...)
	cmd.Env = s.env
	cmd.Stdout, cmd.Stderr = s, s
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		t.Fatalf("start %s: %v", s.Kind, err)
	}
	s.cmd, s.done = cmd, make(chan error, 1)
	go func() { s.done <- cmd.Wait() }()
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		if c, err := net.Dial("tcp", s.addr); err == nil {
			c.Close()
			return
		}
		select {
		case err := <-s.done:
			t.Fatalf("%s exited (%v):\n%s", s.Kind, err, s.output())
		default:
		}
		if time.Now().After(deadline) {
			s.Kill()
			t.Fatalf("%s not answering on %s after 30 s:\n%s", s.Kind, s.addr, s.output())
		}
	}
}

// Write collects the server's output, for messages.
func (s *Server) Write(b []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.log.Write(b)
}

func (s *Server) output() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.log.String()
}

// Kill kills the server process with SIGKILL, as a crash would, and waits
// for it; its data stays for Restart.
func (s *Server) Kill() {
	if s.cmd == nil {
		return
	}
	s.cmd.Process.Kill()
	<-s.done
	s.cmd = nil
}

// Restart starts the killed server again on the same address and data.
func (s *Server) Restart() {
	s.t.Helper()
	if s.cmd != nil {
		s.t.Fatalf("%s restarted while running", s.Kind)
	}
	s.start()
}

// Dir is where a real server keeps its data.
func (s *Server) Dir() string { return filepath.Clean(s.dir) }

func (s *Server) String() string { return fmt.Sprintf("%s at %s", s.Kind, s.Endpoint) }

// Config is how to reach bucket/prefix of the server with its credentials.
func (s *Server) Config(bucket, prefix string) remote.S3Config {
	return remote.S3Config{Endpoint: s.Endpoint, Region: "us-east-1", Bucket: bucket, Prefix: prefix, PathStyle: true,
		Creds: credentials.NewStaticV4(AccessKey, SecretKey, "")}
}

// A Watcher is a proxy in front of a Server that keeps the requests it
// passed, so that a test waits for a request (Await) rather than polling
// the store.
type Watcher struct {
	// Endpoint is the proxy's URL, for clients to use instead of the
	// server's.
	Endpoint string

	mu      sync.Mutex
	seen    []Request
	changed chan struct{} // closed, and replaced, at each request passed
}

// A Request is one request a Watcher passed, with its response's status.
type Request struct {
	Method, Path string
	Status       int
}

// Watch starts a Watcher in front of s; the test's cleanup stops it. A
// request while the server is down gets 502 from the proxy.
func (s *Server) Watch(t testing.TB) *Watcher {
	target, err := url.Parse(s.Endpoint)
	if err != nil {
		t.Fatal(err)
	}
	rp := httputil.NewSingleHostReverseProxy(target)
	rp.ErrorLog = log.New(io.Discard, "", 0) // a 502 is recorded, not logged
	w := &Watcher{changed: make(chan struct{})}
	ts := httptest.NewServer(http.HandlerFunc(func(rw http.ResponseWriter, r *http.Request) {
		sw := &statusWriter{ResponseWriter: rw, status: http.StatusOK}
		rp.ServeHTTP(sw, r)
		w.mu.Lock()
		w.seen = append(w.seen, Request{r.Method, r.URL.Path, sw.status})
		close(w.changed)
		w.changed = make(chan struct{})
		w.mu.Unlock()
	}))
	t.Cleanup(ts.Close)
	w.Endpoint = ts.URL
	return w
}

// Count is how many requests passed so far match.
func (w *Watcher) Count(match func(Request) bool) int {
	w.mu.Lock()
	defer w.mu.Unlock()
	n := 0
	for _, r := range w.seen {
		if match(r) {
			n++
		}
	}
	return n
}

// Await returns once n requests that match have passed; it fails the test
// if quit is closed first, or after a minute.
func (w *Watcher) Await(t testing.TB, what string, n int, match func(Request) bool, quit <-chan struct{}) {
	t.Helper()
	defer logWait(t, what, time.Now())
	timeout := time.NewTimer(time.Minute)
	defer timeout.Stop()
	for {
		w.mu.Lock()
		ch := w.changed
		w.mu.Unlock()
		if w.Count(match) >= n {
			return
		}
		select {
		case <-ch:
		case <-quit:
			t.Fatalf("%s: ended before it", what)
		case <-timeout.C:
			t.Fatalf("%s: not within a minute", what)
		}
	}
}

// Until returns once cond holds, checking it at the start and after each
// request the proxy passes: for what a client of the proxy does between
// its requests (a mount polls through it, so every poll is one). It fails
// the test after d.
func (w *Watcher) Until(t testing.TB, what string, d time.Duration, cond func() bool) {
	t.Helper()
	defer logWait(t, what, time.Now())
	timeout := time.NewTimer(d)
	defer timeout.Stop()
	for {
		w.mu.Lock()
		ch := w.changed
		w.mu.Unlock()
		if cond() {
			return
		}
		select {
		case <-ch:
		case <-timeout.C:
			t.Fatalf("%s: not within %v", what, d)
		}
	}
}

// logWait tells -v how long a wait took: where a slow test spends its time.
func logWait(t testing.TB, what string, since time.Time) {
	t.Helper()
	t.Logf("%s: after %v", what, time.Since(since).Round(time.Millisecond))
}

// PackPut matches a pack's upload that the store took.
func PackPut(r Request) bool {
	return r.Method == http.MethodPut && strings.Contains(r.Path, "/packs/") && r.Status == http.StatusOK
}

// PackDelete matches a pack's delete that the store took.
func PackDelete(r Request) bool {
	return r.Method == http.MethodDelete && strings.Contains(r.Path, "/packs/") && r.Status < 300
}

// PackGet matches a pack read from the store.
func PackGet(r Request) bool {
	return r.Method == http.MethodGet && strings.Contains(r.Path, "/packs/") && r.Status < 300
}

type statusWriter struct {
	http.ResponseWriter
	status int
}

func (w *statusWriter) WriteHeader(code int) {
	w.status = code
	w.ResponseWriter.WriteHeader(code)
}
