package store

import (
	"errors"
	"strings"
	"testing"

	"github.com/dgraph-io/badger/v4"
)

// setFormat1 makes r's db look as format 1 wrote it: no format row.
func setFormat1(t *testing.T, r *Repository) {
	t.Helper()
	if err := r.db.Update(func(txn *badger.Txn) error { return txn.Delete([]byte(keyFormat)) }); err != nil {
		t.Fatal(err)
	}
}

func TestFormat1WithPagesIsRefused(t *testing.T) {
	dir := t.TempDir()
	r := openRepo(t, dir, Options{})
	must(t, r.CreateLedger("l"))
	must(t, r.CreatePage("l", "p"))
	setFormat1(t, r)
	if err := r.Close(); err != nil {
		t.Fatal(err)
	}
	for _, ro := range []bool{false, true} {
		_, err := Open(dir, Options{ReadOnly: ro})
		if !errors.Is(err, ErrFormat) || !strings.Contains(err.Error(), "format 1") {
			t.Fatalf("read-only %v: open of a format 1 repository: %v, want ErrFormat naming format 1", ro, err)
		}
	}
	// Refusing wrote nothing: the repository still reads as format 1.
	if _, err := Open(dir, Options{}); !errors.Is(err, ErrFormat) {
		t.Fatalf("second open: %v", err)
	}
}

func TestFormat1WithoutPagesIsUpgraded(t *testing.T) {
	dir := t.TempDir()
	r := openRepo(t, dir, Options{})
	must(t, r.CreateLedger("l"))
	setFormat1(t, r)
	if err := r.Close(); err != nil {
		t.Fatal(err)
	}
	r = openRepo(t, dir, Options{})
	must(t, r.CreatePage("l", "p"))
	if err := r.Close(); err != nil {
		t.Fatal(err)
	}
	r = openRepo(t, dir, Options{}) // format 2 now, with a page
	r.Close()
}

func TestNewerFormatIsRefused(t *testing.T) {
	dir := t.TempDir()
	r := openRepo(t, dir, Options{})
	if err := r.db.Update(func(txn *badger.Txn) error {
		return txn.Set([]byte(keyFormat), EncodeUint64(Format+1))
	}); err != nil {
		t.Fatal(err)
	}
	r.Close()
	if _, err := Open(dir, Options{}); !errors.Is(err, ErrFormat) || !strings.Contains(err.Error(), "newer") {
		t.Fatalf("open of a newer format: %v", err)
	}
}
