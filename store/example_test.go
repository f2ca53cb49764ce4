package store_test

import (
	"fmt"
	"io"
	"log"
	"os"

	"github.com/ledgerfs/ledgerfs/store"
)

// Opening a repository, making a ledger and a page, and storing and reading
// back a value in the page's db.
func ExampleOpen() {
	dir, err := os.MkdirTemp("", "ledgerfs-example")
	if err != nil {
		log.Fatal(err)
	}
	defer os.RemoveAll(dir)
	repo, err := store.Open(dir, store.Options{})
	if err != nil {
		log.Fatal(err)
	}
	defer repo.Close()
	if err := repo.CreateLedger("notes"); err != nil {
		log.Fatal(err)
	}
	if err := repo.CreatePage("notes", "inbox"); err != nil {
		log.Fatal(err)
	}
	p, err := repo.Acquire("notes", "inbox") // held until Release
	if err != nil {
		log.Fatal(err)
	}
	defer repo.Release(p)

	w := p.NewValueWriter()
	if _, err := io.WriteString(w, "hello, ledger"); err != nil {
		log.Fatal(err)
	}
	id, size, err := w.Close()
	if err != nil {
		log.Fatal(err)
	}
	r, err := p.OpenValue(id)
	if err != nil {
		log.Fatal(err)
	}
	buf := make([]byte, size)
	if _, err := r.ReadAt(buf, 0); err != nil && err != io.EOF {
		log.Fatal(err)
	}
	pages, _ := repo.Pages("notes")
	fmt.Println(pages, size, string(buf))
	// Output: [inbox] 13 hello, ledger
}
