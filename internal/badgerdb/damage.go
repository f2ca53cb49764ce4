package badgerdb

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
	"github.com/dgraph-io/badger/v4/options"
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
func ReadableDamage(err error) bool {
	var d *damage
	return errors.As(err, &d) && d.readable
}

// checkDB looks, before Badger opens the db at dir, for damage that Badger
// would make worse or die of: a table that panics while it is opened (in
// Badger's own goroutines, which takes the whole process down); a manifest
// that Badger would truncate, or that lists no table while a whole table
// exists (Badger deletes tables its manifest does not list); and a log
// with entries after a bad one (Badger truncates a log at its first bad
// entry, discarding the rest). A crash leaves none of these: tables it cut
// short are not in the manifest yet, and its logs end with at most one
// torn entry.
// With full unset it checks the tables only: a read-only open truncates
// and deletes nothing.
func Check(dir string, full bool) error {
	tables, err := filepath.Glob(filepath.Join(dir, "*.sst"))
	if err != nil {
		return err
	}
	listed, err := checkManifest(dir, full)
	if err != nil {
		return err
	}
	whole := 0 // unlisted tables that open
	for _, t := range tables {
		if tm, ok := listed[uint64(FileID(t))]; ok {
			if err := checkTable(t, tm.Compression); err != nil {
				return err
			}
			continue
		}
		// Written by this repository's options, or by Badger's defaults.
		for _, c := range []options.CompressionType{options.None, options.Snappy, options.ZSTD} {
			if checkTable(t, c) == nil {
				whole++
				break
			}
		}
	}
	if !full {
		return nil
	}
	if len(listed) == 0 && whole > 0 {
		return damaged(filepath.Join(dir, badger.ManifestFilename), fmt.Sprintf("lists no table while the db has %d", whole))
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
		slices.SortFunc(vlogs, func(a, b string) int { return FileID(a) - FileID(b) })
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

// FileID is the number in the name of a Badger file (000012.vlog: 12).
func FileID(name string) int {
	base := filepath.Base(name)
	id, _ := strconv.Atoi(strings.TrimSuffix(base, filepath.Ext(base)))
	return id
}

// checkTable opens a table as Badger does, catching its panics.
func checkTable(name string, c options.CompressionType) (err error) {
	mf, err := z.OpenMmapFile(name, os.O_RDONLY, 0)
	if err != nil {
		return fmt.Errorf("open table: %w", err)
	}
	defer func() {
		if r := recover(); r != nil {
			mf.Close(-1)
			err = damaged(name, fmt.Sprintf("cannot be read as a table (%v)", FirstLine(r)))
		}
	}()
	// Badger's default block size; the table's own is in its index.
	t, err := table.OpenTable(mf, table.Options{Compression: c, BlockSize: 4 << 10})
	if err != nil {
		return damaged(name, fmt.Sprintf("cannot be read as a table (%v)", err))
	}
	return t.MmapFile.Close(-1)
}

// FirstLine is the first line of v, what Badger panicked with, say.
func FirstLine(v any) string {
	s := fmt.Sprint(v)
	s, _, _ = strings.Cut(s, "\n")
	return s
}

// checkManifest replays the manifest as Badger does and returns the
// tables it lists; with full set, a manifest cut short is damage.
func checkManifest(dir string, full bool) (map[uint64]badger.TableManifest, error) {
	name := filepath.Join(dir, badger.ManifestFilename)
	f, err := os.Open(name)
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return nil, err
	}
	m, end, err := badger.ReplayManifestFile(f, 0, badger.DefaultOptions(dir))
	switch {
	case err != nil:
		return nil, damaged(name, fmt.Sprintf("cannot be read (%v)", err))
	case full && end < fi.Size():
		return nil, damaged(name, fmt.Sprintf("is cut short: %d of its %d bytes can be read", end, fi.Size()))
	}
	return m.Tables, nil
}

// Badger's log entry: meta, user meta, uvarint key length, value length and
// expiry, the key, the value, then a big-endian CRC-32C of all before it.
const (
	logHeaderSize = 20 // a log file's header: key id and IV
)

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// checkLog reads a log's entries from the start up to the first that is
// not whole. That is the end of the log, or a torn entry a crash left:
// Badger writes an entry with one copy, which the kill can cut anywhere
// (Go's copy stores an entry's first bytes last), and zeros follow it.
// If a whole entry follows instead, the log is damaged.
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
	off := int64(logHeaderSize)
	for {
		n, ok := wholeEntry(data[off:])
		if !ok {
			break
		}
		off += n
	}
	at, found, err := entryAfter(f, data, off)
	if err != nil || !found {
		return err
	}
	return &damage{file: name, readable: true,
		what: fmt.Sprintf("has a bad entry at offset %d and whole entries after it (at offset %d of %d): Badger would cut the log there", off, at, size)}
}

// wholeEntry reports the length of the entry at the start of b if it is
// whole: a header Badger writes (no expiry: ledgerfs sets none), its key
// and value, and their CRC.
func wholeEntry(b []byte) (int64, bool) {
	if len(b) < 5 || b[0]&0x30 != 0 { // meta bits Badger does not use
		return 0, false
	}
	i := 2
	var lens [3]uint64
	for j := range lens {
		v, c := binary.Uvarint(b[i:])
		if c <= 0 {
			return 0, false
		}
		lens[j] = v
		i += c
	}
	klen, vlen := lens[0], lens[1]
	// A key carries an 8-byte version; Badger's limit is 64 KiB.
	if klen < 8 || klen > 1<<16 || lens[2] != 0 || vlen > uint64(len(b)) {
		return 0, false
	}
	end := i + int(klen+vlen)
	if end+crc32.Size > len(b) {
		return 0, false
	}
	if crc32.Checksum(b[:end], castagnoli) != binary.BigEndian.Uint32(b[end:end+crc32.Size]) {
		return 0, false
	}
	return int64(end + crc32.Size), true
}

// entryAfter looks for a whole entry starting after offset stop, skipping
// holes (logs are created sparse at their full size).
func entryAfter(f *os.File, data []byte, stop int64) (int64, bool, error) {
	size := int64(len(data))
	for off := stop + 1; off < size; {
		start, err := unix.Seek(int(f.Fd()), off, unix.SEEK_DATA)
		if err != nil || start >= size {
			return 0, false, nil // ENXIO: no data after off
		}
		start = max(start, off)
		end, err := unix.Seek(int(f.Fd()), start, unix.SEEK_HOLE)
		if err != nil || end > size {
			end = size
		}
		for p := start; p < end; p++ {
			if _, ok := wholeEntry(data[p:]); ok {
				return p, true, nil
			}
		}
		off = end
	}
	return 0, false, nil
}
