package badgerdb

import (
	"crypto/rand"
	mrand "math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"testing"
)

func must(t testing.TB, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

// closedLog writes 8 MiB of random values, 256 KiB each, to a new db with
// Options, closes it, and returns its value log.
func closedLog(t *testing.T) string {
	t.Helper()
	dir := t.TempDir()
	db, err := Open(Options(dir, false))
	must(t, err)
	for i := range 32 {
		v := make([]byte, 256<<10)
		rand.Read(v)
		wb := db.NewWriteBatch()
		must(t, wb.Set([]byte{byte(i)}, v))
		must(t, wb.Flush())
	}
	must(t, db.Close())
	logs, err := filepath.Glob(filepath.Join(dir, "*.vlog"))
	if err != nil || len(logs) == 0 {
		t.Fatalf("no value log in %s: %v", dir, err)
	}
	slices.SortFunc(logs, func(a, b string) int { return FileID(a) - FileID(b) })
	return logs[len(logs)-1]
}

// What a crash leaves is no damage: a log cut anywhere (a torn last entry)
// and padded with zeros, as a log created sparse at full size is. Bytes
// flipped before the last entry are damage, unless they land in its zeros.
func TestLogDamageTellsCrashFromDamage(t *testing.T) {
	orig, err := os.ReadFile(closedLog(t))
	must(t, err)
	name := filepath.Join(t.TempDir(), "000001.vlog")
	for i := range 50 {
		cut := logHeaderSize + mrand.IntN(len(orig)-logHeaderSize)
		must(t, os.WriteFile(name, orig[:cut], 0o644))
		must(t, os.Truncate(name, int64(len(orig))+1<<20))
		if err := checkLog(name); err != nil {
			t.Fatalf("run %d: log cut at %d of %d and padded: %v", i, cut, len(orig), err)
		}
	}
	// A torn entry whose first bytes were never stored: Go's copy stores
	// them last.
	var ends []int
	for off := logHeaderSize; ; {
		n, ok := wholeEntry(orig[off:])
		if !ok {
			break
		}
		off += int(n)
		ends = append(ends, off)
	}
	if len(ends) < 4 {
		t.Fatalf("only %d entries in the log", len(ends))
	}
	for i := range 30 {
		e := mrand.IntN(len(ends) - 1)
		start, end := ends[e], ends[e+1]
		torn := slices.Clone(orig[:start+mrand.IntN(end-start)+1])
		clear(torn[start:min(len(torn), start+32)])
		must(t, os.WriteFile(name, torn, 0o644))
		must(t, os.Truncate(name, int64(len(orig))+1<<20))
		if err := checkLog(name); err != nil {
			t.Fatalf("run %d: entry %d torn, its head missing: %v", i, e, err)
		}
	}
	// A byte flipped in the first half (the values are 256 KiB each, so
	// the last entry starts after it).
	for i := range 20 {
		b := slices.Clone(orig)
		at := logHeaderSize + mrand.IntN(len(b)/2-logHeaderSize)
		b[at] ^= 0x5a
		must(t, os.WriteFile(name, b, 0o644))
		if err := checkLog(name); !ReadableDamage(err) {
			t.Fatalf("run %d: byte %d of %d flipped: %v, want damage", i, at, len(b), err)
		}
	}
}
