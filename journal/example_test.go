package journal_test

import (
	"fmt"
	"io"
	"log"
	"os"

	"github.com/ledgerfs/ledgerfs/internal/btree"
	"github.com/ledgerfs/ledgerfs/journal"
	"github.com/ledgerfs/ledgerfs/store"
)

// A page's committer: queued changes are recorded in an implicit journal at
// once and land together in a later commit; Wait returns once they have
// landed. (Changes queued within a short quiet time of each other usually
// share one commit; a slow caller may see more than one.)
func ExampleCommitter() {
	eng := journal.NewEngine()
	p, put, done := examplePage(eng)
	defer done()
	c := eng.CommitterFor(p)
	for _, k := range []string{"b", "a", "c"} {
		if err := c.Queue(nil, put(k, "value of "+k)); err != nil {
			log.Fatal(err)
		}
	}
	if err := c.Wait(); err != nil {
		log.Fatal(err)
	}
	head, err := p.Head()
	if err != nil {
		log.Fatal(err)
	}
	it := p.Tree(head).Seek("")
	for it.Next() {
		fmt.Print(it.Entry().Key, " ")
	}
	fmt.Println()
	// Output: a b c
}

// A transaction (an explicit journal) sees the page as it began; its
// commit merges with what landed meanwhile, entry by entry.
func ExampleEngine_Begin() {
	eng := journal.NewEngine()
	p, put, done := examplePage(eng)
	defer done()

	tx, err := eng.Begin(p, true)
	if err != nil {
		log.Fatal(err)
	}
	if err := tx.Apply(put("draft", "moved"), journal.Op{Key: "inbox/draft", Kind: store.OpDelete}); err != nil {
		log.Fatal(err)
	}
	// Meanwhile an ordinary write lands on the page.
	if err := eng.CommitterFor(p).Apply(false, put("counter", "1")); err != nil {
		log.Fatal(err)
	}
	head, err := tx.Commit()
	if err != nil {
		log.Fatal(err)
	}
	it := p.Tree(head).Seek("")
	for it.Next() {
		fmt.Print(it.Entry().Key, " ")
	}
	fmt.Println("with", len(head.Parents), "parents")
	// Output: counter draft with 2 parents
}

// examplePage opens a new repository with one page, l/p, through eng; put
// makes an op that sets key to content. done closes it all.
func examplePage(eng *journal.Engine) (p *store.Page, put func(key, content string) journal.Op, done func()) {
	dir, err := os.MkdirTemp("", "ledgerfs-example")
	if err != nil {
		log.Fatal(err)
	}
	// The engine's hooks commit what a crash left in implicit journals
	// when a page opens, and what is queued before it closes.
	repo, err := store.Open(dir, eng.Hooks(store.Options{}))
	if err != nil {
		log.Fatal(err)
	}
	if err := repo.CreateLedger("l"); err != nil {
		log.Fatal(err)
	}
	if err := repo.CreatePage("l", "p"); err != nil {
		log.Fatal(err)
	}
	if p, err = repo.Acquire("l", "p"); err != nil {
		log.Fatal(err)
	}
	put = func(key, content string) journal.Op {
		w := p.NewValueWriter()
		if _, err := io.WriteString(w, content); err != nil {
			log.Fatal(err)
		}
		id, size, err := w.Close()
		if err != nil {
			log.Fatal(err)
		}
		return journal.Op{Key: key, Entry: btree.Entry{Value: id, Meta: btree.Meta{Size: size}}}
	}
	return p, put, func() {
		repo.Release(p)
		repo.Close()
		os.RemoveAll(dir)
	}
}

// Reading history: every commit stays, and its tree holds the page as it
// was; a commit's parents lead back to the page's first.
func Example_history() {
	eng := journal.NewEngine()
	p, put, done := examplePage(eng)
	defer done()
	c := eng.CommitterFor(p)
	for _, v := range []string{"draft", "final"} {
		if err := c.Apply(false, put("notes", v)); err != nil {
			log.Fatal(err)
		}
	}
	head, err := p.Head()
	if err != nil {
		log.Fatal(err)
	}
	for commit := head; len(commit.Parents) > 0; {
		e, found, err := p.Tree(commit).Get("notes")
		if err != nil || !found {
			log.Fatal("notes missing: ", err)
		}
		r, err := p.OpenValue(e.Value)
		if err != nil {
			log.Fatal(err)
		}
		b := make([]byte, e.Meta.Size)
		if _, err := r.ReadAt(b, 0); err != nil && err != io.EOF {
			log.Fatal(err)
		}
		fmt.Printf("generation %d: %s\n", commit.Generation, b)
		if commit, err = p.Commit(commit.Parents[0]); err != nil {
			log.Fatal(err)
		}
	}
	// Output:
	// generation 2: final
	// generation 1: draft
}
