// Package format is ledgerfs's on-disk format at the bottom of the layers:
// the FlatBuffers schemas of the rows a page stores (commits, tree nodes,
// file indexes, object identifiers), the Go code flatc generates from them,
// and the checks that decode untrusted bytes without a panic escaping.
//
// The generated code is committed; run `go generate ./internal/format`
// after editing a .fbs file (needs flatc, Debian package
// flatbuffers-compiler).
//
// Layers, from the top: cmd → server → fs → journal, history → store →
// btree, cas → format. This package imports nothing of ledgerfs.
package format

//go:generate sh -c "flatc --go --go-namespace format -o . object_identifier.fbs commit.fbs tree_node.fbs file_index.fbs && mv format/*.go . && rmdir format"
