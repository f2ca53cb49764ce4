package store

import (
	"bufio"
	"errors"
	"os/exec"
	"sync"
	"testing"
	"time"
)

// holdLock has another process (flock(1)) take the exclusive lock of dir
// and keep it until the returned release is called.
func holdLock(t *testing.T, dir string) (release func()) {
	t.Helper()
	cmd := exec.Command("flock", "-x", "-n", dir, "sh", "-c", "echo locked; exec cat")
	in, err := cmd.StdinPipe()
	must(t, err)
	out, err := cmd.StdoutPipe()
	must(t, err)
	must(t, cmd.Start())
	line, err := bufio.NewReader(out).ReadString('\n')
	if err != nil || line != "locked\n" {
		cmd.Process.Kill()
		cmd.Wait()
		t.Fatalf("flock did not take %s: %q %v", dir, line, err)
	}
	var once sync.Once
	release = func() {
		once.Do(func() {
			in.Close()
			cmd.Wait()
		})
	}
	t.Cleanup(release)
	return release
}

// A page db whose lock another process holds for a moment (a child forked
// with a copy of the descriptor, before its exec) opens once the lock is
// let go; held past the wait, the open says the page is in use.
func TestPageLockHeldElsewhere(t *testing.T) {
	r := openRepo(t, t.TempDir(), Options{})
	defer r.Close()
	r.Release(newPage(t, r))
	must(t, r.evict("l", "p"))
	dir := r.pageDir("l", PageIDFor("p"))

	release := holdLock(t, dir)
	waits := 0
	r.lockWaited = func() {
		waits++
		release() // the child reaches exec
	}
	p, err := r.Acquire("l", "p")
	if err != nil {
		t.Fatalf("open after the lock was let go: %v", err)
	}
	if waits == 0 {
		t.Fatal("the open never found the lock held: the test held nothing")
	}
	if _, err := p.Head(); err != nil {
		t.Fatal(err)
	}
	r.Release(p)
	must(t, r.evict("l", "p"))

	release = holdLock(t, dir)
	r.lockWaited, r.lockWait = nil, 50*time.Millisecond
	if _, err := r.Acquire("l", "p"); !errors.Is(err, ErrLocked) {
		t.Fatalf("open with the lock held past the wait: %v, want ErrLocked", err)
	}
	release()
	p, err = r.Acquire("l", "p")
	if err != nil {
		t.Fatalf("open after a refused one: %v", err)
	}
	r.Release(p)
}
