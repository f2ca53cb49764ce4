package fs

import "github.com/ledgerfs/ledgerfs/store"

// Inode ids are the strings the inode table numbers (see inoTable): one per
// object the kernel may hold, the same at every lookup, so that a node keeps
// its number while the kernel knows it. They are built here only:
//
//	S\0                                     the .stats file
//	L\0{ledger}                             a ledger
//	P\0{ledger}\0{page}                     a page's root
//	P\0{ledger}\0{page}\0{view}{kind}{key}  a node of one view of a page
//
// view is empty for the live page, C{commit}\0 for a snapshot and
// T{journal}\0 for a transaction; kind is 'f' for a file (key: its key), 'd'
// for a directory (key: its prefix) and 'L' for a node under .ledger (key:
// its path there). A rename moves every id under the renamed prefix.

// statsID is the inode id of the .stats file.
const statsID = "S\x00"

// collectID is the inode id of the .collect file.
const collectID = "G\x00"

// ledgerID is the inode id of a ledger.
func ledgerID(name string) string { return "L\x00" + name }

// pageID is the inode id of a page's root; ids of its nodes extend it.
func pageID(ledger, name string) string { return "P\x00" + ledger + "\x00" + name }

// ledgerPagesPrefix is the prefix of the ids of a ledger's pages and all
// their nodes.
func ledgerPagesPrefix(ledger string) string { return "P\x00" + ledger + "\x00" }

// pageNodesPrefix is the prefix of the ids of a page's nodes, in any view.
func pageNodesPrefix(ledger, name string) string { return pageID(ledger, name) + "\x00" }

// snapshotTag and txnTag set the ids of a snapshot's or a transaction's
// nodes apart from the live page's and from each other's.
func snapshotTag(c *store.Commit) string { return "C" + c.ID.String() + "\x00" }
func txnTag(j store.JournalID) string    { return "T" + string(j) + "\x00" }

// id is the inode id of a node of the view: kind 'f' for a file, 'd' for a
// directory prefix, 'L' for a path under .ledger.
func (pg *pageRef) id(kind byte, key string) string {
	l, n := pg.names()
	return pageNodesPrefix(l, n) + pg.tag + string(kind) + key
}

// metaID is the inode id of a node under .ledger.
func (pg *pageRef) metaID(path string) string { return pg.id('L', path) }

// versionsID is the path under .ledger of key's versions directory.
func versionsID(key string) string { return "versions\x00" + key }

// versionID is the path under .ledger of key's version in commit c.
func versionID(key string, c store.CommitID) string { return versionsID(key) + "\x00" + c.String() }
