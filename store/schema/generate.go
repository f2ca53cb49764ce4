// Package schema holds the FlatBuffers schemas of the rows ledgerfs stores and
// the Go code flatc generates from them. The generated code is committed; run
// `go generate ./store/schema` after editing a .fbs file (needs flatc, Debian
// package flatbuffers-compiler).
package schema

//go:generate sh -c "flatc --go --go-namespace schema -o . object_identifier.fbs commit.fbs tree_node.fbs file_index.fbs && mv schema/*.go . && rmdir schema"
