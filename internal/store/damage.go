package store

import (
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"

	"github.com/dgraph-io/badger/v4"
	"github.com/dgraph-io/badger/v4/table"
	"github.com/dgraph-io/ristretto/v2/z"
	"golang.org/x/sys/unix"
)

// ErrDamaged marks a db that checkDB found damaged.
var ErrDamaged = errors.New("damaged")

// damage is what checkDB found.
type damage struct {
	file, what string
	// readable: a read-only open, which changes nothing, reads the db.
	readable bool
}

func (d *damage) Error() string        { return fmt.Sprintf("%s %s", d.file, d.what) }
func (d *damage) Is(target error) bool { return target == ErrDamaged }

// readableDamage reports whether err is damage a read-only open can live
// with.
func readableDamage(err error) bool {
	var d *damage
	return errors.As(err, &d) && d.readable
}

// checkDB looks, before Badger opens the db at dir, for damage that Badger
// would make worse or die of: a table that panics while it is opened (in
// Badger's own goroutines, which takes the whole process down); a manifest
// that Badger would truncate, or that lists no table while tables exist
// (Badger deletes tables its manifest does not list); and a log with
// entries after a bad one (Badger truncates a log at its first bad entry,
// discarding the rest). A crash leaves none of these: its logs end with at
// most one torn entry, then zeros.
// With full unset it checks the tables only: a read-only open truncates
// and deletes nothing.
func checkDB(dir string, full bool) error {
	tables, err := filepath.Glob(filepath.Join(dir, "*.sst"))
	if err != nil {
		return err
	}
	for _, t := range tables {
		if err := checkTable(t); err != nil {
			return err
		}
	}
	if !full {
		return nil
	}
	if err := checkManifest(dir, len(tables)); err != nil {
		return err
	}
	logs, err := filepath.Glob(filepath.Join(dir, "*.mem"))
	if err != nil {
		return err
	}
	// Badger reads only the newest value log at open.
	vlogs, err := filepath.Glob(filepath.Join(dir, "*.vlog"))
	if err != nil {
		return err
	}
	if len(vlogs) > 0 {
		slices.SortFunc(vlogs, func(a, b string) int { return fileID(a) - fileID(b) })
		logs = append(logs, vlogs[len(vlogs)-1])
	}
	for _, l := range logs {
		if err := checkLog(l); err != nil {
			return err
		}
	}
	return nil
}

func damaged(file, what string) error { return &damage{file: file, what: what} }

func fileID(name string) int {
	base := filepath.Base(name)
	id, _ := strconv.Atoi(strings.TrimSuffix(base, filepath.Ext(base)))
	return id
}

// checkTable opens a table as Badger does, catching its panics.
func checkTable(name string) (err error) {
	mf, err := z.OpenMmapFile(name, os.O_RDONLY, 0)
	if err != nil {
		return fmt.Errorf("open table: %w", err)
	}
	defer func() {
		if r := recover(); r != nil {
			mf.Close(-1)
			err = damaged(name, fmt.Sprintf("cannot be read as a table (%v)", firstLine(r)))
		}
	}()
	t, err := table.OpenTable(mf, table.Options{})
	if err != nil {
		return damaged(name, fmt.Sprintf("cannot be read as a table (%v)", err))
	}
	return t.MmapFile.Close(-1)
}

func firstLine(v any) string {
	s := fmt.Sprint(v)
	s, _, _ = strings.Cut(s, "\n")
	return s
}

// checkManifest replays the manifest as Badger does.
func checkManifest(dir string, tables int) error {
	name := filepath.Join(dir, badger.ManifestFilename)
	f, err := os.Open(name)
	if errors.Is(err, os.ErrNotExist) {
		if tables > 0 {
			return damaged(name, "is missing while the db has tables")
		}
		return nil
	}
	if err != nil {
		return err
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return err
	}
	m, end, err := badger.ReplayManifestFile(f, 0, badger.DefaultOptions(dir))
	switch {
	case err != nil:
		return damaged(name, fmt.Sprintf("cannot be read (%v)", err))
	case end < fi.Size():
		return damaged(name, fmt.Sprintf("is cut short: %d of its %d bytes can be read", end, fi.Size()))
	case len(m.Tables) == 0 && tables > 0:
		return damaged(name, fmt.Sprintf("lists no table while the db has %d", tables))
	}
	return nil
}

// Badger's log entry: meta, user meta, uvarint key length, value length and
// expiry, the key, the value, then a big-endian CRC-32C of all before it.
const (
	logHeaderSize = 20 // a log file's header: key id and IV
	maxEntryHead  = 2 + 3*binary.MaxVarintLen64
)

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// checkLog reads a log's entries from the start: where they stop, the rest
// of the file must be one torn entry at most, then zeros.
func checkLog(name string) error {
	f, err := os.Open(name)
	if err != nil {
		return err
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return err
	}
	size := fi.Size()
	if size <= logHeaderSize {
		return nil
	}
	data, err := unix.Mmap(int(f.Fd()), 0, int(size), unix.PROT_READ, unix.MAP_SHARED)
	if err != nil {
		return fmt.Errorf("map %s: %w", name, err)
	}
	defer unix.Munmap(data)
	for off := int64(logHeaderSize); ; {
		n, kv, ok := entryHead(data[off:])
		switch {
		case !ok:
			return checkTail(name, f, data, off, off+maxEntryHead)
		case n == 0: // a zero header: the end
			return checkTail(name, f, data, off, off)
		}
		if kv > uint64(size) {
			return checkTail(name, f, data, off, off+n)
		}
		end := off + n + int64(kv) + crc32.Size
		if end > size {
			return nil // torn at the end of the file
		}
		body := data[off : end-crc32.Size]
		if crc32.Checksum(body, castagnoli) != binary.BigEndian.Uint32(data[end-crc32.Size:end]) {
			return checkTail(name, f, data, off, end)
		}
		off = end
	}
}

// entryHead decodes an entry's header: its length (0 for a header of
// zeros) and the key and value lengths together; not ok where no entry can
// start.
func entryHead(b []byte) (n int64, kv uint64, ok bool) {
	if len(b) < 5 {
		return 0, 0, false
	}
	i := 2
	var lens [3]uint64
	for j := range lens {
		v, c := binary.Uvarint(b[i:])
		if c <= 0 {
			return 0, 0, false
		}
		lens[j] = v
		i += c
	}
	if lens[0] > 1<<16 { // Badger's key length limit
		return 0, 0, false
	}
	if allZero(b[:i]) {
		return 0, 0, true
	}
	return int64(i), lens[0] + lens[1], true
}

// checkTail reports damage if the log has a non-zero byte at or after
// from: entries follow the one at stop, where Badger would cut the log.
func checkTail(name string, f *os.File, data []byte, stop, from int64) error {
	size := int64(len(data))
	for off := from; off < size; {
		// Skip holes: logs are created sparse at their full size.
		start, err := unix.Seek(int(f.Fd()), off, unix.SEEK_DATA)
		if err != nil || start >= size {
			return nil // ENXIO: no data after off
		}
		end, err := unix.Seek(int(f.Fd()), start, unix.SEEK_HOLE)
		if err != nil || end > size {
			end = size
		}
		if i := slices.IndexFunc(data[start:end], func(b byte) bool { return b != 0 }); i >= 0 {
			return &damage{file: name, readable: true,
				what: fmt.Sprintf("has a bad entry at offset %d and data after it (at offset %d of %d): Badger would cut the log there", stop, start+int64(i), size)}
		}
		off = end
	}
	return nil
}

func allZero(b []byte) bool { return !slices.ContainsFunc(b, func(c byte) bool { return c != 0 }) }
