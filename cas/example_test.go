package cas_test

import (
	"bytes"
	"fmt"
	"io"
	"log"

	"github.com/restic/chunker"

	"github.com/ledgerfs/ledgerfs/cas"
)

// pieces is a Sink and a Source in memory; the store keeps them in a
// page's db.
type pieces map[cas.Digest][]byte

func (p pieces) Put(d cas.Digest, data []byte) error {
	p[d] = bytes.Clone(data)
	return nil
}

func (p pieces) Get(d cas.Digest, buf []byte) ([]byte, error) {
	data, ok := p[d]
	if !ok {
		return nil, fmt.Errorf("piece %s: not stored", d)
	}
	return append(buf[:0], data...), nil
}

// A value written twice is stored once: its chunks, and the index over
// them, are named by their content.
func Example() {
	pol := chunker.Pol(0x3DA3358B4DC173) // devices that share pieces share it
	value := bytes.Repeat([]byte("ledgerfs keeps every version, "), 100_000)
	store := pieces{}
	var ids []cas.ObjectIdentifier
	for range 2 {
		w := cas.NewWriter(store, pol, cas.KindBlob)
		if _, err := w.Write(value); err != nil {
			log.Fatal(err)
		}
		id, size, err := w.Close()
		if err != nil {
			log.Fatal(err)
		}
		if size != uint64(len(value)) {
			log.Fatalf("wrote %d bytes, want %d", size, len(value))
		}
		ids = append(ids, id)
	}
	fmt.Println("same id:", ids[0] == ids[1], "index:", ids[0].Digest.IsIndex())
	stored := 0
	for _, data := range store {
		stored += len(data)
	}
	fmt.Println("stored less than one copy:", stored < len(value))

	r, err := cas.NewReader(store, ids[0], nil)
	if err != nil {
		log.Fatal(err)
	}
	tail := make([]byte, 30)
	if _, err := r.ReadAt(tail, int64(len(value)-30)); err != nil && err != io.EOF {
		log.Fatal(err)
	}
	fmt.Printf("%q\n", tail)
	// Output:
	// same id: true index: true
	// stored less than one copy: true
	// "ledgerfs keeps every version, "
}
