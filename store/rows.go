package store

import (
	"encoding/binary"
	"fmt"
	"strings"

	"github.com/ledgerfs/ledgerfs/cas"
)

// Row key prefixes of a page db, exactly as Ledger documents them ("Data in
// Storage"). No other kinds of rows are written to a page db.
const (
	PrefixCommits         = "commits/"
	PrefixObjects         = "objects/"
	PrefixJournals        = "journals/"
	PrefixExplicitJournal = "journals/E"
	PrefixImplicitJournal = "journals/I"
	PrefixImplicitMeta    = "journals/implicit_metadata/"
	PrefixHeads           = "heads/"
	PrefixUnsyncedCommits = "unsynced/commits/"
	PrefixSyncMetadata    = "sync_metadata/"
)

// PieceStatus is where a piece is on its way to the cloud.
type PieceStatus string

const (
	// Transient pieces are used by a journal that is not committed yet.
	Transient PieceStatus = "transient"
	// Local pieces are used by a commit that is not synced yet.
	Local PieceStatus = "local"
	// Synced pieces are in the cloud.
	Synced PieceStatus = "synced"
)

// Statuses lists the piece statuses in the order a piece moves through them.
var Statuses = []PieceStatus{Transient, Local, Synced}

// StatusPrefix returns the prefix of the status rows of s.
func StatusPrefix(s PieceStatus) string { return string(s) + "/object_digests/" }

// commitKey is the row of a commit.
func commitKey(id CommitID) []byte { return []byte(PrefixCommits + string(id[:])) }

// objectKey is the row of a piece.
func objectKey(d cas.Digest) []byte { return []byte(PrefixObjects + string(d)) }

// statusKey is the status row of a piece.
func statusKey(s PieceStatus, d cas.Digest) []byte { return []byte(StatusPrefix(s) + string(d)) }

// headKey is the row of a head commit.
func headKey(id CommitID) []byte { return []byte(PrefixHeads + string(id[:])) }

// unsyncedCommitKey is the row of a commit not yet synced.
func unsyncedCommitKey(id CommitID) []byte { return []byte(PrefixUnsyncedCommits + string(id[:])) }

// JournalID names a journal: 'E' (explicit) or 'I' (implicit) followed by
// 16 hex digits, so that the rows' keys parse at a fixed offset.
type JournalID string

// JournalIDLen is the length of a journal id.
const JournalIDLen = 17

// Explicit reports whether the journal is explicit (a transaction).
func (j JournalID) Explicit() bool { return len(j) > 0 && j[0] == 'E' }

// Valid reports whether j has the form of a journal id.
func (j JournalID) Valid() bool {
	if len(j) != JournalIDLen || (j[0] != 'E' && j[0] != 'I') {
		return false
	}
	for _, c := range j[1:] {
		if !('0' <= c && c <= '9' || 'a' <= c && c <= 'f') {
			return false
		}
	}
	return true
}

// journalPrefix is the prefix of every row of journal j.
func journalPrefix(j JournalID) string { return PrefixJournals + string(j) + "/" }

// journalEntryPrefix is the prefix of journal j's entry rows.
func journalEntryPrefix(j JournalID) string { return journalPrefix(j) + "entry/" }

// journalEntryKey is the row of key in journal j.
func journalEntryKey(j JournalID, key string) []byte {
	return []byte(journalEntryPrefix(j) + key)
}

// journalClearKey is the row that marks journal j as clearing the page.
func journalClearKey(j JournalID) []byte { return []byte(journalPrefix(j) + "C") }

// implicitMetaKey is the row holding an implicit journal's base commit.
func implicitMetaKey(j JournalID) []byte { return []byte(PrefixImplicitMeta + string(j)) }

// ParseJournalRow splits a journals/ row key into the journal id and the rest
// ("entry/{key}" or "C").
func ParseJournalRow(key []byte) (JournalID, string, bool) {
	s, ok := strings.CutPrefix(string(key), PrefixJournals)
	if !ok || len(s) < JournalIDLen+1 || s[JournalIDLen] != '/' {
		return "", "", false
	}
	j := JournalID(s[:JournalIDLen])
	if !j.Valid() {
		return "", "", false
	}
	return j, s[JournalIDLen+1:], true
}

// EncodeUint64 is Ledger's encoding of timestamps and generations in row
// values: 8 bytes, little-endian.
func EncodeUint64(v uint64) []byte {
	return binary.LittleEndian.AppendUint64(nil, v)
}

// DecodeUint64 parses EncodeUint64's output.
func DecodeUint64(b []byte) (uint64, error) {
	if len(b) != 8 {
		return 0, fmt.Errorf("store: %d-byte integer value, want 8", len(b))
	}
	return binary.LittleEndian.Uint64(b), nil
}
