package mount_test

import (
	"bufio"
	"fmt"
	"io"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

// sqliteShell is a sqlite3 shell on a database, fed statements on its
// input. Each transaction ends with a SELECT that prints its number, which
// the shell writes once its COMMIT returned: with synchronous=FULL the
// transaction is durable by then. .bail stops the shell at the first
// error, which it prints ("disk I/O error").
type sqliteShell struct {
	t     *testing.T
	cmd   *exec.Cmd
	in    io.WriteCloser
	lines chan string
}

func startSQLite(t *testing.T, db, mode string) *sqliteShell {
	t.Helper()
	if _, err := exec.LookPath("sqlite3"); err != nil {
		t.Fatalf("sqlite3 is needed (.ci/run installs it): %v", err)
	}
	sh := &sqliteShell{t: t, cmd: exec.Command("sqlite3", "-batch", db)}
	var err error
	if sh.in, err = sh.cmd.StdinPipe(); err != nil {
		t.Fatal(err)
	}
	stdout, err := sh.cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	sh.cmd.Stderr = sh.cmd.Stdout
	must(t, sh.cmd.Start())
	t.Cleanup(sh.kill)
	sh.lines = make(chan string, 1024)
	go func() {
		s := bufio.NewScanner(stdout)
		for s.Scan() {
			sh.lines <- s.Text()
		}
		close(sh.lines)
	}()
	sh.send(".bail on\nPRAGMA journal_mode=%s;\nPRAGMA synchronous=FULL;\n", mode)
	sh.expect(mode)
	return sh
}

// load makes table t of rows rows of 1,000 bytes, k 0.
func (sh *sqliteShell) load(rows int) {
	sh.t.Helper()
	sh.send("CREATE TABLE t (id INTEGER PRIMARY KEY, k INTEGER, v BLOB);\n"+
		"WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i+1 FROM n WHERE i < %d) INSERT INTO t SELECT i, 0, randomblob(1000) FROM n;\n"+
		"SELECT 'loaded';\n", rows)
	sh.expect("loaded")
}

func (sh *sqliteShell) send(format string, args ...any) {
	sh.t.Helper()
	if _, err := fmt.Fprintf(sh.in, format, args...); err != nil {
		sh.t.Fatalf("sqlite3's input: %v", err)
	}
}

// expect reads the shell's next line of output, which must be want.
func (sh *sqliteShell) expect(want string) {
	sh.t.Helper()
	line, ok := <-sh.lines
	if !ok {
		sh.t.Fatalf("sqlite3 ended before printing %q: %v", want, sh.cmd.Wait())
	}
	if line != want {
		sh.t.Fatalf("sqlite3 printed %q, want %q", line, want)
	}
}

// txRow is the row transaction k updates, of rows.
func txRow(k, rows int) int {
	x := uint64(k) * 0x9e3779b97f4a7c15
	x ^= x >> 31
	return 1 + int(x%uint64(rows))
}

// update sends transactions from to to: transaction k sets k to k and v to
// new bytes in row txRow(k).
func (sh *sqliteShell) update(from, to, rows int) {
	var b strings.Builder
	for k := from; k <= to; k++ {
		fmt.Fprintf(&b, "BEGIN; UPDATE t SET k = %d, v = randomblob(1000) WHERE id = %d; COMMIT; SELECT %d;\n", k, txRow(k, rows), k)
	}
	sh.send("%s", b.String())
}

// confirmed waits until transaction k has printed its number.
func (sh *sqliteShell) confirmed(k int) {
	sh.t.Helper()
	for {
		line, ok := <-sh.lines
		if !ok {
			sh.t.Fatalf("sqlite3 ended before transaction %d: %v", k, sh.cmd.Wait())
		}
		got, err := strconv.Atoi(line)
		if err != nil {
			sh.t.Fatalf("sqlite3 printed %q waiting for transaction %d", line, k)
		}
		if got == k {
			return
		}
	}
}

// close ends the shell's input and waits for it to exit.
func (sh *sqliteShell) close() {
	sh.t.Helper()
	sh.in.Close()
	var rest []string
	for line := range sh.lines {
		rest = append(rest, line)
	}
	if err := sh.cmd.Wait(); err != nil {
		sh.t.Fatalf("sqlite3: %v\n%s", err, strings.Join(rest, "\n"))
	}
}

func (sh *sqliteShell) kill() {
	if sh.cmd.ProcessState == nil {
		sh.cmd.Process.Kill()
		sh.cmd.Wait()
	}
}

// txState is the k of each row updated once transactions 1 to k ran.
func txState(k, rows int) map[int]int {
	want := map[int]int{}
	for i := 1; i <= k; i++ {
		want[txRow(i, rows)] = i
	}
	return want
}

// sqliteState checks the database at db with a new sqlite3 (which
// recovers a hot journal or a WAL) and returns the k of every row updated.
func sqliteState(t *testing.T, db string) map[int]int {
	t.Helper()
	out := run(t, filepath.Dir(db), "sqlite3", "-batch", "-bail", db,
		"PRAGMA integrity_check;", "SELECT id, k FROM t WHERE k > 0;")
	lines := strings.Split(strings.TrimSpace(out), "\n")
	if lines[0] != "ok" {
		t.Fatalf("PRAGMA integrity_check of %s:\n%s", db, out)
	}
	got := map[int]int{}
	for _, l := range lines[1:] {
		id, k, _ := strings.Cut(l, "|")
		i, err1 := strconv.Atoi(id)
		n, err2 := strconv.Atoi(k)
		if err1 != nil || err2 != nil {
			t.Fatalf("sqlite3 printed %q", l)
		}
		got[i] = n
	}
	return got
}

func sameRows(got, want map[int]int) error {
	for id, k := range want {
		if got[id] != k {
			return fmt.Errorf("row %d has k %d, want %d", id, got[id], k)
		}
	}
	for id, k := range got {
		if _, ok := want[id]; !ok {
			return fmt.Errorf("row %d has k %d, updated by no transaction", id, k)
		}
	}
	return nil
}

// SQLite, as applications run it, in both journal modes with
// synchronous=FULL: a database of rows of 1,000 bytes, then one-row
// transactions (each a rollback journal created, fsynced and deleted, or
// frames appended to the WAL and fsynced, with a checkpoint of the WAL
// into the database every 1,000 pages). Every transaction must commit, the database must
// check whole and hold every update, after a clean unmount and, with the
// server killed (kill -9) while transactions run, every transaction whose
// COMMIT had returned. A clean unmount leaves no fsynced change for the
// next mount to replay.
func TestSQLite(t *testing.T) {
	for _, c := range []struct {
		mode string
		rows int
	}{
		{"delete", 10000},
		// Past minCopyFile (64 MiB): the intents timer commits the
		// database from a copy, beside the checkpoints that write it.
		{"wal", 70000},
	} {
		t.Run(c.mode, func(t *testing.T) {
			t.Parallel()
			repo := t.TempDir()
			s := mount(t, repo)
			db := filepath.Join(s.page("l", "p"), "test.db")
			const txs = 800
			sh := startSQLite(t, db, c.mode)
			sh.load(c.rows)
			sh.update(1, txs, c.rows)
			sh.confirmed(txs)
			sh.close()
			if err := sameRows(sqliteState(t, db), txState(txs, c.rows)); err != nil {
				t.Fatalf("after %d transactions: %v", txs, err)
			}
			s.stop()
			if strings.Contains(s.log.String(), "not committed") {
				t.Fatalf("a clean unmount left changes to replay:\n%s", s.log)
			}
			s = mountAt(t, repo, s.mnt)
			if err := sameRows(sqliteState(t, db), txState(txs, c.rows)); err != nil {
				t.Fatalf("after a remount: %v", err)
			}

			// Transactions stream in while the server is killed.
			sh = startSQLite(t, db, c.mode)
			sh.update(txs+1, 3*txs, c.rows)
			killAt := txs + txs/2
			sh.confirmed(killAt)
			s.kill()
			sh.kill()
			s = mountAt(t, repo, s.mnt)
			got := sqliteState(t, db)
			k := 0
			for _, n := range got {
				k = max(k, n)
			}
			if k < killAt {
				t.Fatalf("after the kill the database's last transaction is %d; %d had committed", k, killAt)
			}
			if err := sameRows(got, txState(k, c.rows)); err != nil {
				t.Fatalf("after the kill, at transaction %d: %v", k, err)
			}
			t.Logf("%s: killed after transaction %d's commit; the database holds %d", c.mode, killAt, k)
			s.stop()
		})
	}
}
