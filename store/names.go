package store

import (
	"crypto/sha256"
	"encoding/base64"
	"errors"
	"fmt"
	"strings"
	"syscall"
)

// PageID is Ledger's 16-byte page id.
type PageID [16]byte

// PageIDFor derives a page's id from its name, so that two devices that
// create a page of the same name agree on its id.
func PageIDFor(name string) PageID {
	h := sha256.Sum256([]byte(name))
	return PageID(h[:16])
}

func (id PageID) String() string { return base64.URLEncoding.EncodeToString(id[:]) }

// ErrBadName reports a ledger or page name that cannot be a directory name.
var ErrBadName = errors.New("invalid name")

// ReservedName is the name inside a page that holds history, transactions
// and status; no ledger or page may take it.
const ReservedName = ".ledger"

// StatsName is the name at a mount's root of its statistics, which no
// ledger may take.
const StatsName = ".stats"

// CollectName is the name at a mount's root of the file that starts and
// shows collections, which no ledger may take.
const CollectName = ".collect"

// CheckName checks that a ledger or page name is usable as one directory
// name.
func CheckName(name string) error {
	switch {
	case name == "" || name == "." || name == "..":
		return fmt.Errorf("%w: %q", ErrBadName, name)
	case len(name) > 255:
		return fmt.Errorf("%w: %d bytes, the limit is 255: %w", ErrBadName, len(name), syscall.ENAMETOOLONG)
	case strings.ContainsAny(name, "/\x00"):
		return fmt.Errorf("%w: %q contains '/' or NUL", ErrBadName, name)
	case name == ReservedName:
		return fmt.Errorf("%w: %q is reserved", ErrBadName, name)
	}
	return nil
}

// checkLedgerName checks a ledger name: its folder's name (see
// ledgerFolder) must be one directory name too, which limits it to 189
// bytes.
func checkLedgerName(name string) error {
	if err := CheckName(name); err != nil {
		return err
	}
	if name == StatsName || name == CollectName {
		return fmt.Errorf("%w: %q is reserved for the mount's statistics and collections", ErrBadName, name)
	}
	if n := len(ledgerFolder(name)); n > 255 {
		return fmt.Errorf("%w: a ledger name of %d bytes is stored as a folder name of %d bytes; the limit is 189 bytes: %w", ErrBadName, len(name), n, syscall.ENAMETOOLONG)
	}
	return nil
}

// ledgerFolder is the name of a ledger's folder on disk, under
// {repo}/1/ledgers/: its name in web-safe base64.
func ledgerFolder(ledger string) string { return base64.URLEncoding.EncodeToString([]byte(ledger)) }
