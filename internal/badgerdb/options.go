package badgerdb

import (
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"

	"github.com/dgraph-io/badger/v4"
	"github.com/dgraph-io/badger/v4/options"
)

// ValueThreshold is the size from which a page db keeps a value in its
// value log, and below which in its tables. Static (no VLogPercentile), so
// that a value of at least this size read from a page db lies in a mapped
// value log (see Dropper).
const ValueThreshold = 1 << 10

// badgerOptions are sized for many small dbs in one process: one db per page.
// Badger's defaults (64 MiB memtables, five of them, a 256 MiB block cache,
// values up to 1 MB in the LSM tree) would cost hundreds of MiB per open page.
// Values above a small threshold (chunks, tree nodes) go to the value log,
// which keeps the LSM tree and its memtables small whatever the data size.
func Options(dir string, readOnly bool) badger.Options {
	o := badger.DefaultOptions(dir).
		WithLogger(badgerLogger{slog.Default().With("db", dir)}).
		WithReadOnly(readOnly).
		WithMemTableSize(2 << 20).
		WithNumMemtables(2).
		WithNumLevelZeroTables(4).
		WithNumLevelZeroTablesStall(12).
		WithBaseTableSize(1 << 20).
		WithBaseLevelSize(4 << 20).
		WithValueThreshold(ValueThreshold).
		WithValueLogFileSize(valueLogSizeFor(dir)).
		WithBlockCacheSize(1 << 20).
		WithIndexCacheSize(0).
		WithCompression(options.None).
		// A table block damaged after open is an error at its read,
		// not a panic or wrong keys: CRC-32C of 4 KiB blocks costs little.
		WithChecksumVerificationMode(options.OnBlockRead).
		// And a value-log entry damaged is an error at its read: the
		// CRC-32C of each entry read is what checks a piece read from
		// its page, not a SHA-256 of it (cas.CheckedSource), at a
		// fraction of the CPU.
		WithVerifyValueChecksum(true).
		WithNumCompactors(2).
		WithNumGoroutines(2).
		WithMetricsEnabled(false).
		WithDetectConflicts(false)
	// A compaction keeps up to eight table builders in flight, each with
	// an allocator of twice the table size that Badger then pools, eight
	// per db: 32 MiB of live heap at 2 MiB tables, 16 MiB at 1 MiB.
	// Tables keep one size at every level: with Badger's doubling per
	// level the builders held 70 MiB while 4 GiB were written.
	o.TableSizeMultiplier = 1
	return o
}

// ValueLogFileSize is large because Badger msyncs a value-log file when it
// moves on to the next, within its one write loop, holding up every commit:
// at 64 MiB, sixteen times per GiB written, and 1 GiB streamed in 8.2 s
// against 7.2 s at 256 MiB. The file is mapped and created sparse, so the
// size costs address space, not memory or disk.
const ValueLogFileSize = 256 << 20

// minValueLogFileSize bounds how small valueLogSizeFor makes value logs.
const minValueLogFileSize = 16 << 20

// valueLogSizeFor is the value-log file size of a db in dir: ValueLogFileSize,
// or on a small filesystem a 32nd of it, at least minValueLogFileSize.
// Giving a deleted value's space back rewrites the live rest of its log
// (up to half of it, see reclaimRatio) before the old log goes: on a
// 400 MiB filesystem 256 MiB logs needed 128 MiB free to shrink at all.
func valueLogSizeFor(dir string) int64 {
	_, size, err := Statfs(dir)
	for err != nil {
		// Not made yet: the filesystem it will be made on.
		if dir == filepath.Dir(dir) {
			return ValueLogFileSize
		}
		dir = filepath.Dir(dir)
		_, size, err = Statfs(dir)
	}
	return max(min(ValueLogFileSize, int64(size/32)&^(1<<20-1)), minValueLogFileSize)
}

// repoDBOptions are for the small repository db.
func SmallOptions(dir string, readOnly bool) badger.Options {
	return Options(dir, readOnly).WithMemTableSize(1 << 20).WithValueLogFileSize(16 << 20)
}

// badgerLogger sends Badger's logs to slog, one level down: Badger reports
// routine work (compactions, replays) at INFO.
type badgerLogger struct{ l *slog.Logger }

func (b badgerLogger) Errorf(f string, a ...any) { b.l.Error(fmt.Sprintf(f, a...)) }
func (b badgerLogger) Warningf(f string, a ...any) {
	msg := fmt.Sprintf(f, a...)
	// Badger reports its block cache statistics as warnings every minute;
	// the cache is small on purpose (many dbs, values in the value log).
	if strings.HasPrefix(msg, "Block cache might be too small") || strings.HasPrefix(msg, "Cache life expectancy") {
		b.l.Debug(msg)
		return
	}
	b.l.Warn(msg)
}
func (b badgerLogger) Infof(f string, a ...any)  { b.l.Debug(fmt.Sprintf(f, a...)) }
func (b badgerLogger) Debugf(f string, a ...any) {}

// openBadger opens a db. A crash between creating a value log or a
// memtable's log and writing its header leaves an empty file, and Badger
// then refuses the db ("...: Create a new file"); such a file holds
// nothing, so it is removed first.
//
// It refuses a damaged db first (see checkDB): Badger would make the damage
// worse, or panic in goroutines of its own and take the process down.
func Open(o badger.Options) (*badger.DB, error) {
	if err := prepare(o); err != nil {
		return nil, err
	}
	return badger.Open(o)
}

// OpenManaged is Open in Badger's managed mode, for a db opened alone to
// be compacted: its caller says below which version compactions may drop
// deleted and replaced rows (SetDiscardTs). Opened otherwise, a
// compaction right after Open may find Badger's read watermark not yet
// set (a goroutine sets it after Open returns) and keep every such row:
// a pruning for space then freed nothing on disk in about 1 of 40 runs.
func OpenManaged(o badger.Options) (*badger.DB, error) {
	if err := prepare(o); err != nil {
		return nil, err
	}
	return badger.OpenManaged(o)
}

// prepare checks the db in o.Dir and removes the empty logs a crash left.
func prepare(o badger.Options) error {
	if err := Check(o.Dir, !o.ReadOnly); err != nil {
		return err
	}
	if o.ReadOnly {
		return nil
	}
	return removeEmptyLogs(o.Dir, o.ValueDir)
}

func removeEmptyLogs(dir, valueDir string) error {
	empty, err := EmptyLogs(dir, valueDir)
	if err != nil {
		return err
	}
	for _, name := range empty {
		slog.Info("removing an empty log a crash left", "file", name)
		if err := os.Remove(name); err != nil {
			return fmt.Errorf("remove empty log: %w", err)
		}
	}
	return nil
}

// emptyLogs lists the empty memtable and value-log files of a db: a read-only
// open cannot use them (Badger sizes a new log, which a file opened
// read-only refuses: "truncate: invalid argument").
func EmptyLogs(dir, valueDir string) ([]string, error) {
	mem, err := filepath.Glob(filepath.Join(dir, "*.mem"))
	if err != nil {
		return nil, err
	}
	vlog, err := filepath.Glob(filepath.Join(valueDir, "*.vlog"))
	if err != nil {
		return nil, err
	}
	var out []string
	for _, name := range append(mem, vlog...) {
		if fi, err := os.Stat(name); err == nil && fi.Size() == 0 {
			out = append(out, name)
		}
	}
	return out, nil
}

// needsReplay reports whether a read-only open failed because a crash left
// a db's logs unfinished. Badger flattens the errors it wraps to text.
func NeedsReplay(err error) bool {
	return err != nil && strings.Contains(err.Error(), badger.ErrTruncateNeeded.Error())
}
