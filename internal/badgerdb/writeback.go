package badgerdb

import (
	"log/slog"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"
)

// StartWriteback asks the kernel to start writing the newest value log in
// dir to disk, without waiting for it, after each full batch of pieces (as
// RocksDB's bytes_per_sync does). Badger msyncs a value-log file when it
// moves on to the next one, inside its single write loop: with the file's
// 64 MiB still dirty, every switch held up all commits, and the chunking
// behind them, for the time the disk took to write it.
func StartWriteback(dir string) {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return
	}
	newest, fid := "", -1
	for _, e := range entries {
		name, ok := strings.CutSuffix(e.Name(), ".vlog")
		if !ok {
			continue
		}
		if n, err := strconv.Atoi(name); err == nil && n > fid {
			newest, fid = e.Name(), n
		}
	}
	if fid < 0 {
		return
	}
	f, err := os.Open(filepath.Join(dir, newest))
	if err != nil {
		return // removed by value-log GC meanwhile
	}
	defer f.Close()
	if err := unix.SyncFileRange(int(f.Fd()), 0, 0, unix.SYNC_FILE_RANGE_WRITE); err != nil {
		slog.Debug("start value-log writeback", "file", f.Name(), "err", err)
	}
}
