package cloudsync

import (
	"context"
	"testing"

	"github.com/ledgerfs/ledgerfs/internal/remote"
	"github.com/ledgerfs/ledgerfs/internal/s3test"
)

// BenchmarkPush pushes a page holding one 256 MiB file to a real S3 server
// (versitygw): the work of `ledgerfs sync` after a large write, without
// the process start.
func BenchmarkPush(b *testing.B) {
	const size = 256 << 20
	srv := s3test.Start(b)
	data := random(9, size)
	b.SetBytes(size)
	for i := range b.N {
		be, err := remote.NewS3(context.Background(), srv.Config("bench", string(rune('a'+i%26))+"push"))
		must(b, err)
		b.StopTimer()
		d := newDevice(b, "bench", be)
		d.s.packSize = DefaultPackSize
		d.write("l", "p", "big", data)
		b.StartTimer()
		if _, err := d.s.Sync(context.Background()); err != nil {
			b.Fatal(err)
		}
		b.StopTimer()
	}
}

// discard is a Backend that takes every write and keeps nothing: what a
// push costs on this side of the network.
type discard struct{ remote.Backend }

func (discard) Put(context.Context, string, []byte) error    { return nil }
func (discard) Create(context.Context, string, []byte) error { return nil }

// BenchmarkPushRead is BenchmarkPush with a store that discards what it is
// sent: the reading and packing of the pieces alone.
func BenchmarkPushRead(b *testing.B) {
	const size = 256 << 20
	data := random(9, size)
	b.SetBytes(size)
	for range b.N {
		b.StopTimer()
		dir, err := remote.NewDir(b.TempDir())
		must(b, err)
		d := newDevice(b, "bench", discard{dir})
		d.s.packSize = DefaultPackSize
		d.write("l", "p", "big", data)
		b.StartTimer()
		if _, err := d.s.Sync(context.Background()); err != nil {
			b.Fatal(err)
		}
	}
}
