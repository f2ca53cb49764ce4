package testutil

import "runtime"

// LiveHeap returns the bytes of live heap objects after a collection: what
// a test holds, less the garbage it made.
func LiveHeap() uint64 {
	runtime.GC()
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	return m.HeapAlloc
}
