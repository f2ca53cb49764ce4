// Package badgerdb is the machinery of ledgerfs's Badger dbs that knows
// nothing of Ledger's rows: options sized for many small dbs in one
// process (Options), checks for damage that Badger would make worse or die
// of, made before it opens a db (Check, Open), the trimmer that keeps the
// pages of mapped value logs and tables out of the process (Trimmer), the
// read-ahead of mapped value logs (ReadAheads), the start of a value log's
// writeback (StartWriteback), and the free space kept on the filesystem
// (Space).
//
// Layer: below store, which owns the rows; it imports no ledgerfs package.
package badgerdb
