package format

import (
	"encoding/binary"
	"fmt"
)

// DecodeError reports bytes that do not parse as the structure expected.
type DecodeError struct {
	What string
	Err  error
}

func (e *DecodeError) Error() string { return fmt.Sprintf("decode %s: %v", e.What, e.Err) }
func (e *DecodeError) Unwrap() error { return e.Err }

// Decode runs fn, turning a panic into a DecodeError. The FlatBuffers Go
// runtime has no verifier and indexes out of range on malformed input, so
// every decoder fully converts its buffer to Go values inside Decode.
func Decode(what string, fn func() error) (err error) {
	defer func() {
		if r := recover(); r != nil {
			err = &DecodeError{What: what, Err: fmt.Errorf("malformed flatbuffer: %v", r)}
		}
	}()
	if err := fn(); err != nil {
		return &DecodeError{What: what, Err: err}
	}
	return nil
}

// SizePrefixed splits a size-prefixed flatbuffer off the front of buf.
func SizePrefixed(buf []byte) (n int, body []byte, err error) {
	if len(buf) < 4 {
		return 0, nil, fmt.Errorf("short buffer (%d bytes)", len(buf))
	}
	size := binary.LittleEndian.Uint32(buf)
	if uint64(size) > uint64(len(buf)-4) {
		return 0, nil, fmt.Errorf("size prefix %d exceeds buffer (%d bytes)", size, len(buf)-4)
	}
	return int(size), buf[4 : 4+size], nil
}

// CheckRoot checks that a flatbuffer's root offset lies inside it, the one
// check the generated GetRootAs functions skip.
func CheckRoot(buf []byte) error {
	if len(buf) < 8 {
		return fmt.Errorf("short buffer (%d bytes)", len(buf))
	}
	if off := binary.LittleEndian.Uint32(buf); uint64(off)+4 > uint64(len(buf)) {
		return fmt.Errorf("root offset %d outside buffer", off)
	}
	return nil
}

// CheckVector rejects a vector length that cannot fit in buf: every element
// takes at least 4 bytes, so a larger count is corrupt (and would otherwise
// make the decoder allocate whatever the count says).
func CheckVector(what string, n int, buf []byte) error {
	if n < 0 || n > len(buf)/4 {
		return fmt.Errorf("%s: %d elements cannot fit in %d bytes", what, n, len(buf))
	}
	return nil
}
