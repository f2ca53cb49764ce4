// Package synclog is a page's sync log: the records that make an fsync
// durable without syncing the page's Badger db.
//
// Syncing a Badger db flushes two sparse, memory-mapped logs (the value log
// and the memtable's), each an allocation the filesystem journals: over a
// millisecond per fsync here, twice a native fsync's whole cost. A sync
// log is a file of fixed size, written with zeros once, so that appending a
// record overwrites blocks already allocated and costs one fdatasync. The
// page db is synced at checkpoints, after which the log starts a new epoch.
//
// Layout: a 4 KiB header (magic, epoch, CRC-32C), then records, each a
// 4-byte little-endian payload length, a 4-byte CRC-32C of the epoch and the
// payload, and the payload (see Record). A reader takes the records of the
// header's epoch in order up to the first that is torn, zero or of another
// epoch: what a crash or an earlier epoch left past the end never reads as a
// record.
package synclog

import (
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"os"
	"path/filepath"

	"golang.org/x/sys/unix"
)

// FileName is the log's name in its page's directory.
const FileName = "ledgerfs-sync.log"

const (
	magic      = "LFSYNC01"
	headerSize = 4096
	frameSize  = 8
)

// DefaultSize is the size of a new log file.
const DefaultSize = 4 << 20

// ErrFull reports an append that does not fit before the next checkpoint.
var ErrFull = errors.New("synclog: log full")

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// Log is an open sync log. It is not safe for concurrent use.
type Log struct {
	f        *os.File
	size     int64
	epoch    uint64
	off      int64 // where the next record goes
	unsynced bool  // records appended since the last Sync
}

// Open opens the log at path, creating it with size bytes if it does not
// exist, and returns it with the records of its current epoch.
func Open(path string, size int64) (*Log, []Record, error) {
	f, err := os.OpenFile(path, os.O_RDWR, 0)
	if errors.Is(err, os.ErrNotExist) {
		l, err := create(path, size)
		return l, nil, err
	}
	if err != nil {
		return nil, nil, fmt.Errorf("synclog: %w", err)
	}
	l, recs, err := read(f)
	if err != nil {
		f.Close()
		return nil, nil, fmt.Errorf("synclog: %s: %w", path, err)
	}
	return l, recs, nil
}

// ReadFile returns the records of the current epoch of the log at path;
// none if there is no log.
func ReadFile(path string) ([]Record, error) {
	f, err := os.Open(path)
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("synclog: %w", err)
	}
	defer f.Close()
	_, recs, err := read(f)
	if err != nil {
		return nil, fmt.Errorf("synclog: %s: %w", path, err)
	}
	return recs, nil
}

// create writes a new log: header and zeros, synced with its directory
// entry, so that appends overwrite allocated blocks.
func create(path string, size int64) (*Log, error) {
	size = max(size, 2*headerSize)
	tmp := path + ".new"
	f, err := os.OpenFile(tmp, os.O_RDWR|os.O_CREATE|os.O_TRUNC, 0o600)
	if err != nil {
		return nil, fmt.Errorf("synclog: %w", err)
	}
	l := &Log{f: f, size: size, epoch: 1, off: headerSize}
	err = l.fill()
	if err == nil {
		err = os.Rename(tmp, path)
	}
	if err == nil {
		err = syncDir(filepath.Dir(path))
	}
	if err != nil {
		f.Close()
		os.Remove(tmp)
		return nil, fmt.Errorf("synclog: create %s: %w", path, err)
	}
	return l, nil
}

func (l *Log) fill() error {
	zeros := make([]byte, 1<<20)
	copy(zeros, l.header())
	for off := int64(0); off < l.size; off += int64(len(zeros)) {
		n := min(int64(len(zeros)), l.size-off)
		if _, err := l.f.WriteAt(zeros[:n], off); err != nil {
			return err
		}
		if off == 0 {
			clear(zeros[:headerSize])
		}
	}
	return l.f.Sync()
}

func syncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	defer d.Close()
	return d.Sync()
}

func (l *Log) header() []byte {
	h := make([]byte, 0, 20)
	h = append(h, magic...)
	h = binary.LittleEndian.AppendUint64(h, l.epoch)
	return binary.LittleEndian.AppendUint32(h, crc32.Checksum(h, castagnoli))
}

// read parses the header and the records of its epoch.
func read(f *os.File) (*Log, []Record, error) {
	st, err := f.Stat()
	if err != nil {
		return nil, nil, err
	}
	data := make([]byte, st.Size())
	if _, err := io.ReadFull(f, data); err != nil {
		return nil, nil, err
	}
	epoch, recs, end, err := Parse(data)
	if err != nil {
		return nil, nil, err
	}
	return &Log{f: f, size: st.Size(), epoch: epoch, off: end}, recs, nil
}

// Parse reads a whole log file's bytes: its epoch, the records of that
// epoch and where the next record would go. Only a bad header is an error.
func Parse(data []byte) (epoch uint64, recs []Record, end int64, err error) {
	if len(data) < 2*headerSize || string(data[:len(magic)]) != magic {
		return 0, nil, 0, errors.New("not a sync log")
	}
	h := data[:len(magic)+8]
	if crc32.Checksum(h, castagnoli) != binary.LittleEndian.Uint32(data[len(h):]) {
		return 0, nil, 0, errors.New("sync log header damaged")
	}
	epoch = binary.LittleEndian.Uint64(data[len(magic):])
	off := int64(headerSize)
	for off+frameSize <= int64(len(data)) {
		n := int64(binary.LittleEndian.Uint32(data[off:]))
		sum := binary.LittleEndian.Uint32(data[off+4:])
		if n == 0 || n > int64(len(data))-off-frameSize {
			break
		}
		payload := data[off+frameSize : off+frameSize+n]
		if checksum(epoch, payload) != sum {
			break
		}
		var r Record
		if r.UnmarshalBinary(payload) != nil {
			break // written whole but not by this code: stop as at a tear
		}
		recs = append(recs, r)
		off += frameSize + n
	}
	return epoch, recs, off, nil
}

func checksum(epoch uint64, payload []byte) uint32 {
	var e [8]byte
	binary.LittleEndian.PutUint64(e[:], epoch)
	return crc32.Update(crc32.Checksum(e[:], castagnoli), castagnoli, payload)
}

// Room reports whether n more payload bytes fit before the next checkpoint.
func (l *Log) Room(n int) bool { return l.off+frameSize+int64(n) <= l.size }

// Empty reports whether the current epoch has no record.
func (l *Log) Empty() bool { return l.off == headerSize }

// Epoch is the current epoch: it changes at each Reset.
func (l *Log) Epoch() uint64 { return l.epoch }

// Append writes r after the records so far; Sync makes it durable.
func (l *Log) Append(r *Record) error {
	payload, err := r.MarshalBinary()
	if err != nil {
		return err
	}
	if !l.Room(len(payload)) {
		return ErrFull
	}
	frame := make([]byte, frameSize, frameSize+len(payload))
	binary.LittleEndian.PutUint32(frame, uint32(len(payload)))
	binary.LittleEndian.PutUint32(frame[4:], checksum(l.epoch, payload))
	frame = append(frame, payload...)
	if _, err := l.f.WriteAt(frame, l.off); err != nil {
		return fmt.Errorf("synclog: append: %w", err)
	}
	l.off += int64(len(frame))
	l.unsynced = true
	return nil
}

// Unsynced reports whether records were appended since the last Sync.
func (l *Log) Unsynced() bool { return l.unsynced }

// Sync makes the records appended so far durable.
func (l *Log) Sync() error {
	if !l.unsynced {
		return nil
	}
	if err := unix.Fdatasync(int(l.f.Fd())); err != nil {
		return fmt.Errorf("synclog: sync: %w", err)
	}
	l.unsynced = false
	return nil
}

// Reset starts a new epoch with no record, durably: the caller has made
// what the records held durable elsewhere.
func (l *Log) Reset() error {
	if l.Empty() {
		return nil
	}
	l.epoch++
	if _, err := l.f.WriteAt(l.header(), 0); err != nil {
		return fmt.Errorf("synclog: reset: %w", err)
	}
	if err := unix.Fdatasync(int(l.f.Fd())); err != nil {
		return fmt.Errorf("synclog: reset: %w", err)
	}
	l.off, l.unsynced = headerSize, false
	return nil
}

// Close closes the file.
func (l *Log) Close() error { return l.f.Close() }
