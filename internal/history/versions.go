package history

import (
	"cmp"
	"encoding/hex"
	"fmt"
	"io"
	"slices"

	"github.com/ledgerfs/ledgerfs/internal/btree"
	"github.com/ledgerfs/ledgerfs/store"
)

// Version is one distinct version of an entry: the entry as a commit set it.
type Version struct {
	Commit *store.Commit
	Entry  btree.Entry
}

// Name is the version's file name in a versions/ view:
// "{generation}_{time}_{short id}", with the generation zero-padded so that
// names sort oldest first.
func (v Version) Name() string {
	return fmt.Sprintf("%010d_%s_%s", v.Commit.Generation, FormatTime(v.Commit.Timestamp), hex.EncodeToString(v.Commit.ID[:4]))
}

// Versions returns the versions of key, oldest first: an entry is a new
// version in every commit that sets it differently from all the commit's
// parents (so a merge that only carries a change over adds none), its access
// time aside. A
// deletion ends a version without making one. Each commit is compared with
// its parents along the key's path only (btree.Store.KeyChanged).
func Versions(p *store.Page, key string) ([]Version, error) {
	var out []Version
	err := Walk(p, func(c *store.Commit, parents []*store.Commit) error {
		e, ok, changed, err := changedFromParents(p, c, parents, key)
		if err != nil {
			return err
		}
		if ok && changed {
			out = append(out, Version{Commit: c, Entry: e})
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("history: versions of %q: %w", key, err)
	}
	slices.Reverse(out)
	return out, nil
}

// AllVersions returns the versions of every key, each oldest first, as
// Versions gives them one key at a time, in one walk of the history: each
// commit is diffed with its first parent (btree.Store.Diff), so the walk
// costs what changed, not the number of keys. Listing the versions of many
// names costs one walk instead of one each.
func AllVersions(p *store.Page) (map[string][]Version, error) {
	x := NewVersionIndex()
	if err := x.Update(p); err != nil {
		return nil, err
	}
	return x.All, nil
}

// A VersionIndex is AllVersions kept up to date as the page's head moves:
// an Update walks only the commits it has not walked yet, so after a
// commit the versions of a page with 20,000 commits cost that commit's
// diff, not 20,000 (5.7 s). A collection that pruned commits needs a new
// index.
type VersionIndex struct {
	// All holds every key's versions, oldest first.
	All    map[string][]Version
	walked map[store.CommitID]bool
}

// NewVersionIndex returns an empty index.
func NewVersionIndex() *VersionIndex {
	return &VersionIndex{All: map[string][]Version{}, walked: map[store.CommitID]bool{}}
}

// Update adds the versions of the commits the page's heads reach that the
// index has not walked.
func (x *VersionIndex) Update(p *store.Page) error {
	w, err := NewWalker(p)
	if err != nil {
		return err
	}
	w.skip(x.walked)
	touched := map[string]bool{}
	var visited []store.CommitID
	for {
		c, parents, err := w.Next(p)
		if err == io.EOF {
			break
		}
		if err != nil {
			return fmt.Errorf("history: versions: %w", err)
		}
		visited = append(visited, c.ID)
		if err := x.add(p, c, parents, touched); err != nil {
			return fmt.Errorf("history: versions: %w", err)
		}
	}
	for _, id := range visited {
		x.walked[id] = true
	}
	for key := range touched {
		// Oldest first, as a walk from scratch would give them.
		slices.SortStableFunc(x.All[key], func(a, b Version) int {
			switch {
			case newer(b.Commit, a.Commit):
				return -1
			case newer(a.Commit, b.Commit):
				return 1
			}
			return 0
		})
	}
	return nil
}

// add records the versions commit c made, with the parents a walk gave it.
func (x *VersionIndex) add(p *store.Page, c *store.Commit, parents []*store.Commit, touched map[string]bool) error {
	if len(parents) == 0 {
		it := p.Tree(c).Seek("")
		for it.Next() {
			e := it.Entry()
			x.All[e.Key] = append(x.All[e.Key], Version{Commit: c, Entry: e})
			touched[e.Key] = true
		}
		return it.Err()
	}
	var changed []btree.Entry
	err := p.Nodes().Diff(parents[0].Root, c.Root, func(ch btree.Change) error {
		// A read's new access time is no new version.
		if ch.After != nil && (ch.Before == nil || withoutAtime(*ch.Before) != withoutAtime(*ch.After)) {
			changed = append(changed, *ch.After)
		}
		return nil
	})
	if err != nil {
		return err
	}
	for _, e := range changed {
		new := true
		for _, pc := range parents[1:] {
			pe, found, err := p.Tree(pc).Get(e.Key)
			if err != nil {
				return err
			}
			if found && withoutAtime(pe) == withoutAtime(e) {
				new = false // carried over from this parent
				break
			}
		}
		if new {
			x.All[e.Key] = append(x.All[e.Key], Version{Commit: c, Entry: e})
			touched[e.Key] = true
		}
	}
	return nil
}

// changedFromParents reports key's entry in c and whether it differs from
// the entry in every parent.
func changedFromParents(p *store.Page, c *store.Commit, parents []*store.Commit, key string) (btree.Entry, bool, bool, error) {
	if len(parents) == 0 {
		e, ok, err := p.Tree(c).Get(key)
		return e, ok, ok, err
	}
	var e btree.Entry
	var ok bool
	for _, pc := range parents {
		var changed bool
		var err error
		e, ok, changed, err = p.Nodes().KeyChanged(c.Root, pc.Root, key)
		if err != nil || !ok || !changed {
			return e, ok, false, err
		}
		// A read's new access time is no new version.
		if pe, found, err := p.Tree(pc).Get(key); err != nil {
			return e, ok, false, err
		} else if found && withoutAtime(pe) == withoutAtime(e) {
			return e, ok, false, nil
		}
	}
	return e, ok, true, nil
}

func withoutAtime(e btree.Entry) btree.Entry {
	e.Meta.AtimeNs, e.Meta.HasAtime = 0, false
	return e
}

// OfName returns the versions a name showed, oldest first: its entry's,
// and while it was a name of a file with hard links (btree.Meta.Link),
// that file's entry's versions instead, each with the file's key as its
// Entry.Key. of gives a key's versions (Versions, or an index of them).
func OfName(p *store.Page, key string, of func(key string) ([]Version, error)) ([]Version, error) {
	vs, err := of(key)
	if err != nil {
		return nil, err
	}
	var out []Version
	seen := map[store.CommitID]bool{}
	var links []string
	for _, v := range vs {
		seen[v.Commit.ID] = true
		g := v.Entry.Meta.Link
		if g == "" {
			out = append(out, v)
			continue
		}
		if !slices.Contains(links, g) {
			links = append(links, g)
		}
		e, found, err := p.Tree(v.Commit).Get(g)
		if err != nil {
			return nil, err
		}
		if found {
			out = append(out, Version{Commit: v.Commit, Entry: e})
		}
	}
	for _, g := range links {
		gvs, err := of(g)
		if err != nil {
			return nil, err
		}
		for _, gv := range gvs {
			if seen[gv.Commit.ID] {
				continue
			}
			// A version of the file while key was one of its names.
			e, found, err := p.Tree(gv.Commit).Get(key)
			if err != nil {
				return nil, err
			}
			if found && e.Meta.Link == g {
				seen[gv.Commit.ID] = true
				out = append(out, gv)
			}
		}
	}
	slices.SortStableFunc(out, func(a, b Version) int { return cmp.Compare(a.Commit.Generation, b.Commit.Generation) })
	return out, nil
}
