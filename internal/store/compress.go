package store

import (
	"errors"
	"fmt"
	"runtime"
	"sync"

	"github.com/dgraph-io/badger/v4"
	"github.com/klauspost/compress/zstd"
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
