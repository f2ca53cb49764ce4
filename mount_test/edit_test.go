package mount_test

import (
	"bytes"
	"crypto/sha256"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"golang.org/x/sys/unix"
)

// statsOf reads the mount's .stats file as name{labels} -> value.
func statsOf(t *testing.T, mnt string) map[string]float64 {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(mnt, ".stats"))
	must(t, err)
	out := map[string]float64{}
	for _, line := range strings.Split(string(b), "\n") {
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		i := strings.LastIndexByte(line, ' ')
		v, err := strconv.ParseFloat(line[i+1:], 64)
		if err != nil {
			t.Fatalf(".stats line %q: %v", line, err)
		}
		out[line[:i]] = v
	}
	return out
}

// A 4 KiB write and fdatasync into a large file commits by editing the
// file's value: each commit chunks a few chunks, not the file, and every
// commit's version reads back as the file was then.
func TestSmallWritesCommitByEditing(t *testing.T) {
	t.Parallel()
	repo := t.TempDir()
	s := mountPlain(t, repo)
	pg := s.page("e", "p")
	path := filepath.Join(pg, "db")
	data := content(7, 48<<20)
	must(t, os.WriteFile(path, data, 0o644))
	syncDir(t, pg)
	before := statsOf(t, s.mnt)

	f, err := os.OpenFile(path, os.O_RDWR, 0)
	must(t, err)
	defer f.Close()
	r := rand.New(rand.NewPCG(3, 3))
	const writes = 40
	sums := map[[32]byte]bool{sha256.Sum256(data): true}
	for i := range writes {
		off := r.Int64N(int64(len(data)) - 4096)
		if i == writes-1 {
			off = int64(len(data)) // the last one grows the file
		}
		block := content(100+i, 4096)
		_, err := f.WriteAt(block, off)
		must(t, err)
		must(t, unix.Fdatasync(int(f.Fd())))
		data = append(data[:off:off], append(block, data[min(off+4096, int64(len(data))):]...)...)
		sums[sha256.Sum256(data)] = true
	}
	must(t, f.Close())
	if got, err := os.ReadFile(path); err != nil || !bytes.Equal(got, data) {
		t.Fatalf("the file after %d writes differs (%v)", writes, err)
	}

	after := statsOf(t, s.mnt)
	edits := after["ledgerfs_value_edits_total"] - before["ledgerfs_value_edits_total"]
	chunked := after[`ledgerfs_value_edit_bytes_total{what="chunked"}`] - before[`ledgerfs_value_edit_bytes_total{what="chunked"}`]
	probed := after[`ledgerfs_value_edit_bytes_total{what="probed"}`] - before[`ledgerfs_value_edit_bytes_total{what="probed"}`]
	if edits < writes {
		t.Fatalf("%v of %d commits edited the value", edits, writes)
	}
	t.Logf("%v edits chunked %v bytes and probed %v: %.0f per commit", edits, chunked, probed, (chunked+probed)/edits)
	if per := (chunked + probed) / edits; per > 256<<10 {
		t.Errorf("each commit chunked %.0f bytes of a %d-byte file", per, len(data))
	}

	// Every version is one of the file's states, and there is one per
	// commit.
	vdir := filepath.Join(pg, ".ledger", "versions", "db")
	versions := ls(t, vdir)
	if len(versions) != writes+1 {
		t.Errorf("%d versions, want %d", len(versions), writes+1)
	}
	for _, v := range versions[len(versions)-3:] {
		b, err := os.ReadFile(filepath.Join(vdir, v))
		must(t, err)
		if !sums[sha256.Sum256(b)] {
			t.Errorf("version %s is none of the file's states", v)
		}
	}

	// Each commit marked the pieces it added local, and only those: none
	// is left transient, and every piece the versions reach is sound.
	s.stop()
	if out, code := fsck(t, repo); code != 0 || strings.Contains(out, "transient") {
		t.Errorf("fsck after the edits (exit %d):\n%s", code, out)
	}
}
