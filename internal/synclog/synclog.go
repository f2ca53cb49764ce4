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
// Layout: the file is two halves, each a 4 KiB header (magic, epoch,
// CRC-32C) and then records, each a 4-byte little-endian payload length, a
// 4-byte CRC-32C of the epoch and the payload, and the payload (see
// Record). The half whose header has the higher epoch is the current one;
// a reader takes the records of that epoch in order up to the first that is
// torn, zero or of another epoch: what a crash or an earlier epoch left past
// the end never reads as a record. A new epoch is begun in the other half,
// its records (those a checkpoint must carry over: fsyncs whose changes are
// not in the db yet) written and synced before its header, so that a crash
// at any point leaves one whole epoch to read. Logs of the first format
// (magic LFSYNC01: one header, the whole file one epoch) are still read.
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
	magic      = "LFSYNC02"
	magicV1    = "LFSYNC01"
	headerSize = 4096
	frameSize  = 8
)

// DefaultSize is the size of a new log file.
const DefaultSize = 8 << 20

// ErrFull reports an append that does not fit before the next checkpoint.
var ErrFull = errors.New("synclog: log full")

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// Log is an open sync log. It is not safe for concurrent use.
type Log struct {
	f     *os.File
	path  string // the file's name: f's may be that of the file it was written as
	size  int64
	epoch uint64
	// next is the epoch the next Reset begins: past any a crashed Reset
	// may have left records of in the other half without its header.
	next uint64
	// start and end bound the current epoch's records; a log of the first
	// format has one region, and begins the second format at its Reset.
	start, end int64
	v1         bool
	off        int64 // where the next record goes
	unsynced   bool  // records appended since the last Sync
}

// Open opens the log at path, creating it with size bytes if it does not
// exist, and returns it with the records of its current epoch.
func Open(path string, size int64) (*Log, []Record, error) {
	f, err := os.OpenFile(path, os.O_RDWR, 0)
	if errors.Is(err, os.ErrNotExist) {
		l, err := create(path, size, 1, nil)
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
	l.path = path
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

// create writes a new log of epoch: header, the records carry and zeros,
// synced with its directory entry, so that appends overwrite allocated
// blocks.
func create(path string, size int64, epoch uint64, carry []*Record) (*Log, error) {
	size = max(size, 4*headerSize)
	tmp := path + ".new"
	f, err := os.OpenFile(tmp, os.O_RDWR|os.O_CREATE|os.O_TRUNC, 0o600)
	if err != nil {
		return nil, fmt.Errorf("synclog: %w", err)
	}
	l := &Log{f: f, path: path, size: size, epoch: epoch, next: epoch + 1, start: headerSize, end: size / 2, off: headerSize}
	err = l.fill(carry)
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

func (l *Log) fill(carry []*Record) error {
	recs, err := frames(l.epoch, carry)
	if err != nil {
		return err
	}
	if headerSize+int64(len(recs)) > l.end {
		return ErrFull
	}
	zeros := make([]byte, max(1<<20, headerSize+len(recs)))
	copy(zeros, l.header())
	copy(zeros[headerSize:], recs)
	l.off += int64(len(recs) - frameSize)
	for off := int64(0); off < l.size; off += int64(len(zeros)) {
		n := min(int64(len(zeros)), l.size-off)
		if _, err := l.f.WriteAt(zeros[:n], off); err != nil {
			return err
		}
		if off == 0 {
			clear(zeros)
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

func (l *Log) header() []byte { return header(magic, l.epoch) }

func header(m string, epoch uint64) []byte {
	h := make([]byte, 0, 20)
	h = append(h, m...)
	h = binary.LittleEndian.AppendUint64(h, epoch)
	return binary.LittleEndian.AppendUint32(h, crc32.Checksum(h, castagnoli))
}

// readHeader returns the epoch of the header at the start of b, if it is
// a whole one with magic m.
func readHeader(b []byte, m string) (uint64, bool) {
	if len(b) < len(m)+12 || string(b[:len(m)]) != m {
		return 0, false
	}
	h := b[:len(m)+8]
	if crc32.Checksum(h, castagnoli) != binary.LittleEndian.Uint32(b[len(h):]) {
		return 0, false
	}
	return binary.LittleEndian.Uint64(b[len(m):]), true
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
	p, err := parse(data)
	if err != nil {
		return nil, nil, err
	}
	return &Log{f: f, size: st.Size(), epoch: p.epoch, next: p.newest + 2, start: p.start, end: p.endRegion,
		v1: p.v1, off: p.off}, p.recs, nil
}

// Parse reads a whole log file's bytes: its epoch, the records of that
// epoch and where the next record would go. Only a log with no whole
// header is an error.
func Parse(data []byte) (epoch uint64, recs []Record, end int64, err error) {
	p, err := parse(data)
	return p.epoch, p.recs, p.off, err
}

type parsed struct {
	epoch, newest    uint64
	start, endRegion int64
	v1               bool
	recs             []Record
	off              int64
}

func parse(data []byte) (parsed, error) {
	size := int64(len(data))
	if size < 2*headerSize {
		return parsed{}, errors.New("not a sync log")
	}
	if e, ok := readHeader(data, magicV1); ok {
		p := parsed{epoch: e, newest: e, start: headerSize, endRegion: size, v1: true}
		p.recs, p.off = records(data[:size], e, headerSize)
		return p, nil
	}
	if size < 4*headerSize {
		return parsed{}, errors.New("not a sync log")
	}
	half := size / 2
	var p parsed
	found := false
	for h := int64(0); h < 2*half; h += half {
		e, ok := readHeader(data[h:], magic)
		if !ok {
			continue
		}
		p.newest = max(p.newest, e)
		if !found || e > p.epoch {
			p.epoch, p.start, p.endRegion, found = e, h+headerSize, min(h+half, size), true
		}
	}
	if !found {
		if string(data[:len(magicV1)]) == magicV1 || string(data[:len(magic)]) == magic {
			return parsed{}, errors.New("sync log header damaged")
		}
		return parsed{}, errors.New("not a sync log")
	}
	p.recs, p.off = records(data[:p.endRegion], p.epoch, p.start)
	return p, nil
}

// records reads the records of epoch from off on, up to the first that is
// not one, and returns them with where the next would go.
func records(data []byte, epoch uint64, off int64) ([]Record, int64) {
	var recs []Record
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
	return recs, off
}

func checksum(epoch uint64, payload []byte) uint32 {
	var e [8]byte
	binary.LittleEndian.PutUint64(e[:], epoch)
	return crc32.Update(crc32.Checksum(e[:], castagnoli), castagnoli, payload)
}

// Room reports whether n more payload bytes fit before the next checkpoint.
func (l *Log) Room(n int) bool { return l.off+2*frameSize+int64(n) <= l.end }

// Holds reports whether an empty epoch of a log of size bytes takes
// records of n payload bytes in all, k records: what a new log, or a
// checkpoint's new epoch, must hold.
func Holds(size int64, n, k int) bool {
	return headerSize+int64(k+1)*frameSize+int64(n) <= size/2
}

// Empty reports whether the current epoch has no record.
func (l *Log) Empty() bool { return l.off == l.start }

// Epoch is the current epoch: it changes at each Reset.
func (l *Log) Epoch() uint64 { return l.epoch }

// Append writes rs after the records so far, all or none of them, in one
// write (a rename's records cost one system call, not three); Sync makes
// them durable.
func (l *Log) Append(rs ...*Record) error {
	// The records of the current epoch, followed by an empty frame: the
	// log ends there, whatever an earlier use of the same bytes left
	// after it.
	frame, err := frames(l.epoch, rs)
	if err != nil {
		return err
	}
	if !l.Room(len(frame) - 2*frameSize) {
		return ErrFull
	}
	if _, err := l.f.WriteAt(frame, l.off); err != nil {
		return fmt.Errorf("synclog: append: %w", err)
	}
	l.off += int64(len(frame) - frameSize)
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
	if err := l.fdatasync(); err != nil {
		return fmt.Errorf("synclog: sync: %w", err)
	}
	l.unsynced = false
	return nil
}

func (l *Log) fdatasync() error {
	return unix.Fdatasync(int(l.f.Fd()))
}

// Reset starts a new epoch holding only carry, durably: the caller has made
// what the other records held durable elsewhere. The new epoch is written
// in the other half of the file, its records synced before its header, so
// that a crash leaves either the old epoch whole or the new one.
func (l *Log) Reset(carry ...*Record) error {
	if l.Empty() && len(carry) == 0 && !l.v1 {
		return nil
	}
	if l.v1 {
		// The first format has no second half: this epoch rewrites the
		// file in the current one, through a new file.
		return l.rewrite(carry)
	}
	half := l.size / 2
	start := int64(headerSize)
	if l.start < half {
		start = half + headerSize
	}
	epoch, end := l.next, start-headerSize+half
	buf, err := frames(epoch, carry)
	if err != nil {
		return fmt.Errorf("synclog: reset: %w", err)
	}
	if start+int64(len(buf)) > end {
		return fmt.Errorf("synclog: reset: %w", ErrFull)
	}
	if _, err := l.f.WriteAt(buf, start); err != nil {
		return fmt.Errorf("synclog: reset: %w", err)
	}
	if len(carry) > 0 {
		if err := l.fdatasync(); err != nil {
			return fmt.Errorf("synclog: reset: %w", err)
		}
	}
	if _, err := l.f.WriteAt(header(magic, epoch), start-headerSize); err != nil {
		return fmt.Errorf("synclog: reset: %w", err)
	}
	if err := l.fdatasync(); err != nil {
		return fmt.Errorf("synclog: reset: %w", err)
	}
	l.epoch, l.next, l.start, l.end = epoch, epoch+1, start, end
	l.off, l.unsynced = start+int64(len(buf)-frameSize), false
	return nil
}

// frames encodes records as a run of frames of epoch, ending with an empty
// frame.
func frames(epoch uint64, recs []*Record) ([]byte, error) {
	buf := make([]byte, 0, frameSize)
	for _, r := range recs {
		payload, err := r.MarshalBinary()
		if err != nil {
			return nil, err
		}
		buf = binary.LittleEndian.AppendUint32(buf, uint32(len(payload)))
		buf = binary.LittleEndian.AppendUint32(buf, checksum(epoch, payload))
		buf = append(buf, payload...)
	}
	return append(buf, make([]byte, frameSize)...), nil
}

// rewrite replaces a log of the first format with a new one holding carry,
// of at least DefaultSize: an epoch of the first format had the whole file,
// one of this format has half.
func (l *Log) rewrite(carry []*Record) error {
	return l.replace(max(l.size, DefaultSize), carry)
}

// Size is the log file's size.
func (l *Log) Size() int64 { return l.size }

// Grow replaces the log with a new file of size bytes and a new epoch
// holding only carry, as Reset does: the other records of the current
// epoch are dropped, so the caller must need none of them (their changes
// are in the db, or no replay needs them). The new file is written and
// synced before it is renamed over the old one, so a crash leaves one or
// the other whole.
func (l *Log) Grow(size int64, carry ...*Record) error { return l.replace(size, carry) }

// replace writes a new log file of size bytes holding carry in an epoch
// past any of this one's, and renames it over this one.
func (l *Log) replace(size int64, carry []*Record) error {
	n, err := create(l.path, size, l.next, carry)
	if err != nil {
		return err
	}
	l.f.Close()
	*l = *n
	return nil
}

// Close closes the file.
func (l *Log) Close() error { return l.f.Close() }
