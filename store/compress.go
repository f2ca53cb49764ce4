package store

import (
	"errors"
	"fmt"
	"runtime"
	"slices"
	"sync"

	"github.com/dgraph-io/badger/v4"
	"github.com/klauspost/compress/zstd"

	"github.com/ledgerfs/ledgerfs/cas"
)

// How a piece's row value is encoded, in Badger's per-entry user-meta
// byte: the value is the piece itself, or a zstd frame of it. The digest is
// always that of the piece, so dedup and verification see the same bytes
// whatever the encoding (as v7files keeps the SHA-1 of the original).
const (
	encodingRaw  byte = 0
	encodingZstd byte = 1
)

// compressMin is the smallest piece worth compressing: a zstd frame's
// header and a row's overhead eat what a smaller one would save.
const compressMin = 256

var (
	zstdOnce sync.Once
	zstdEnc  *zstd.Encoder
	zstdDec  *zstd.Decoder
)

// zstdCodecs are shared: EncodeAll and DecodeAll may run concurrently, each
// on one of a few pooled states, so memory stays bounded by GOMAXPROCS.
func zstdCodecs() (*zstd.Encoder, *zstd.Decoder) {
	zstdOnce.Do(func() {
		var err error
		zstdEnc, err = zstd.NewWriter(nil,
			zstd.WithEncoderLevel(zstd.SpeedFastest),
			zstd.WithEncoderConcurrency(runtime.GOMAXPROCS(0)),
			zstd.WithLowerEncoderMem(true),
			zstd.WithZeroFrames(true))
		if err != nil {
			panic(err) // the options are constants
		}
		zstdDec, err = zstd.NewReader(nil, zstd.WithDecoderConcurrency(0), zstd.WithDecoderLowmem(true), zstd.WithDecoderMaxMemory(1<<26))
		if err != nil {
			panic(err)
		}
	})
	return zstdEnc, zstdDec
}

// encodePiece returns what to store for a piece: zstd when that saves at
// least an eighth, else the piece as it is.
func encodePiece(data []byte) ([]byte, byte) {
	if len(data) < compressMin {
		return data, encodingRaw
	}
	enc, _ := zstdCodecs()
	c := enc.EncodeAll(data, make([]byte, 0, len(data)-len(data)/8))
	if len(c) > len(data)-len(data)/8 {
		return data, encodingRaw
	}
	return c, encodingZstd
}

// decodePiece appends the piece a stored value encodes to dst.
func decodePiece(dst, stored []byte, encoding byte) ([]byte, error) {
	switch encoding {
	case encodingRaw:
		return append(dst, stored...), nil
	case encodingZstd:
		_, dec := zstdCodecs()
		out, err := dec.DecodeAll(stored, dst)
		if err != nil {
			return dst, fmt.Errorf("store: decompress piece: %w", err)
		}
		return out, nil
	}
	return dst, fmt.Errorf("store: piece stored with unknown encoding %d", encoding)
}

// Compression reports whether the repository stores new pieces
// compressed: yes unless its repository/compression row says "none".
func (r *Repository) Compression() (bool, error) {
	on := true
	err := r.db.View(func(txn *badger.Txn) error {
		it, err := txn.Get([]byte(keyCompression))
		if errors.Is(err, badger.ErrKeyNotFound) {
			return nil
		}
		if err != nil {
			return err
		}
		return it.Value(func(v []byte) error {
			switch string(v) {
			case "zstd":
			case "none":
				on = false
			default:
				return fmt.Errorf("store: unknown compression %q", v)
			}
			return nil
		})
	})
	return on, err
}

// SetCompression sets how new pieces are stored from now on; pieces
// already stored stay as they are, and every reader reads both.
func (r *Repository) SetCompression(on bool) error {
	v := "none"
	if on {
		v = "zstd"
	}
	err := r.db.Update(func(txn *badger.Txn) error { return txn.Set([]byte(keyCompression), []byte(v)) })
	if err == nil {
		r.compress.Store(on)
	}
	return err
}

// CompressNew compresses the pieces written since version since (0: all)
// that are stored as they are, from the piece from on (all, if empty),
// rewriting each row whose zstd frame saves at least an eighth; it returns
// the db's version at its start (to pass as since next time, once a run
// has gone through every piece), the piece it stopped at (empty if it went
// through all), how many pieces it compressed and the bytes they no longer
// take. It reads keys first (versions and encodings are in them) and a
// value only when it is a candidate. A collection calls it on an idle page,
// when the repository compresses; stop, polled between pieces, ends it
// early, and a later call goes on from where it stopped.
func (p *Page) CompressNew(since uint64, from cas.Digest, stop func() bool) (upTo uint64, stopped cas.Digest, n int, saved int64, err error) {
	if err := p.check(); err != nil {
		return since, "", 0, 0, err
	}
	if !p.Writable() || !p.repo.compress.Load() {
		return since, "", 0, 0, nil
	}
	upTo = p.db.MaxVersion()
	err = p.recovering(func() error {
		txn := p.db.NewTransaction(false)
		defer txn.Discard()
		prefix := []byte(PrefixObjects)
		it := txn.NewIterator(badger.IteratorOptions{Prefix: prefix})
		defer it.Close()
		var batch []*badger.Entry
		pending := 0
		flush := func() error {
			if len(batch) == 0 {
				return nil
			}
			wb := p.db.NewWriteBatch()
			defer wb.Cancel()
			for _, e := range batch {
				if err := wb.SetEntry(e); err != nil {
					return err
				}
			}
			batch, pending = batch[:0], 0
			return wb.Flush()
		}
		for it.Seek(append(slices.Clip(prefix), from...)); it.Valid(); it.Next() {
			item := it.Item()
			if item.Version() <= since || item.UserMeta() != encodingRaw || item.ValueSize() < compressMin {
				continue
			}
			if stop != nil && stop() {
				stopped = cas.Digest(item.Key()[len(prefix):])
				break
			}
			var c []byte
			var enc byte
			err := item.Value(func(v []byte) error {
				c, enc = encodePiece(v)
				if enc == encodingZstd {
					saved += int64(len(v) - len(c))
				}
				return nil
			})
			if err != nil {
				return err
			}
			if enc != encodingZstd {
				continue
			}
			batch = append(batch, badger.NewEntry(item.KeyCopy(nil), c).WithMeta(encodingZstd))
			n++
			if pending += len(c); pending >= flushBytes {
				if err := flush(); err != nil {
					return err
				}
			}
		}
		return flush()
	})
	if err != nil {
		return since, "", n, saved, fmt.Errorf("store: compress pieces of %s/%s: %w", p.Ledger, p.Name, err)
	}
	return upTo, stopped, n, saved, nil
}
