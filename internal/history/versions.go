package history

import (
	"cmp"
	"encoding/hex"
	"errors"
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
	all := make(map[string][]Version, len(x.byKey))
	for key := range x.byKey {
		vs, err := x.Of(key)
		if err != nil {
			return nil, err
		}
		all[key] = vs
	}
	return all, nil
}

// A VersionIndex is AllVersions kept up to date as the page's head moves:
// an Update walks only the commits it has not walked yet, so after a
// commit the versions of a page with 20,000 commits cost that commit's
// diff, not 20,000 (5.7 s). One opened from the page's version file
// (OpenVersionIndex) starts from what earlier walks and landings recorded
// there, and records what it walks; what it read is decoded only for the
// keys asked for. A collection that pruned commits needs a new index. It
// is not safe for concurrent use.
type VersionIndex struct {
	byKey  map[string][]indexed // each key's versions, oldest first
	walked map[store.CommitID]bool
	// file: the index reads and extends the page's version file, which it
	// has read up to end.
	file bool
	end  int64
}

// NewVersionIndex returns an empty index, kept in memory only.
func NewVersionIndex() *VersionIndex {
	return &VersionIndex{byKey: map[string][]indexed{}, walked: map[store.CommitID]bool{store.FirstCommitID: true}}
}

// OpenVersionIndex returns the index the page's version file holds (see
// versionsMagic), which its Update keeps and extends.
func OpenVersionIndex(p *store.Page) (*VersionIndex, error) {
	x := NewVersionIndex()
	x.file = true
	if _, err := x.readFile(p); err != nil {
		return nil, err
	}
	return x, nil
}

// IndexPage brings the version file of the named page up to date with the
// commits its heads reach, for commits that came other than through a
// mount's journals, which record theirs as they land: those a sync pulled.
// The first listing of a name's versions then reads the file, where it
// walked every pulled commit (6 s for 20,000). A page deleted since is no
// error.
func IndexPage(repo *store.Repository, ledger, page string) error {
	p, err := repo.Acquire(ledger, page)
	if errors.Is(err, store.ErrNotFound) {
		return nil
	}
	if err != nil {
		return err
	}
	defer repo.Release(p)
	x, err := OpenVersionIndex(p)
	if err != nil {
		return err
	}
	return x.Update(p)
}

// Of returns key's versions, oldest first.
func (x *VersionIndex) Of(key string) ([]Version, error) {
	is := x.byKey[key]
	out := make([]Version, len(is))
	for i := range is {
		v, err := is[i].version()
		if err != nil {
			return nil, fmt.Errorf("history: versions of %q: %w", key, err)
		}
		out[i] = v
	}
	return out, nil
}

// readFile adds the records the version file holds past what x has read:
// those of commits landed meanwhile (IndexLanded), or walked by another
// index of the page. It returns the commits they record.
func (x *VersionIndex) readFile(p *store.Page) (map[store.CommitID]bool, error) {
	recs, end, err := readVersionFile(p.VersionsPath(), x.end)
	if err != nil {
		return nil, err
	}
	x.end = end
	read := make(map[store.CommitID]bool, len(recs))
	for _, r := range recs {
		read[r.c.id] = true
	}
	x.add(covered(recs, x.walked))
	return read, nil
}

// Update adds the versions of the commits the page's heads reach that the
// index has not walked, and records them in the version file if x reads
// one.
func (x *VersionIndex) Update(p *store.Page) error {
	pruned := p.Pruned()
	if x.file {
		if _, err := x.readFile(p); err != nil {
			return err
		}
	}
	w, err := NewWalker(p)
	if err != nil {
		return err
	}
	w.skip(x.walked)
	var recs []versionRecord
	for {
		c, parents, err := w.Next(p)
		if err == io.EOF {
			break
		}
		if err != nil {
			return fmt.Errorf("history: versions: %w", err)
		}
		rec, err := record(p, c, parents)
		if err != nil {
			return fmt.Errorf("history: versions: %w", err)
		}
		recs = append(recs, rec)
	}
	for _, r := range recs {
		x.walked[r.c.id] = true
	}
	x.add(recs)
	if !x.file || len(recs) == 0 || !p.Writable() {
		return nil
	}
	p.Lock()
	defer p.Unlock()
	if p.Pruned() != pruned {
		return nil // the records may describe commits pruned meanwhile
	}
	// Landings append under the lock: what they added during the walk
	// comes first, and where it ends is where these go. Another index
	// (a mount's listing beside the indexing of a pull) may have walked
	// the same commits: their records are not written twice.
	read, err := x.readFile(p)
	if err != nil {
		return err
	}
	recs = slices.DeleteFunc(recs, func(r versionRecord) bool { return read[r.c.id] })
	if len(recs) == 0 {
		return nil
	}
	x.end, err = writeRecords(p.VersionsPath(), recs, true, x.end)
	return err
}

// add adds the versions recs made, keeping each key's oldest first.
func (x *VersionIndex) add(recs []versionRecord) {
	touched := map[string]bool{}
	for _, r := range recs {
		for _, v := range r.versions {
			x.byKey[v.key] = append(x.byKey[v.key], v)
			touched[v.key] = true
		}
	}
	for key := range touched {
		// Oldest first, as a walk from scratch would give them.
		slices.SortStableFunc(x.byKey[key], func(a, b indexed) int { return a.c.compare(b.c.commitOrder) })
	}
}

// IndexLanded records in the page's version file the versions commits
// made, commits that just landed on commits on (the journal's Landed
// observer; the parents not among either are read), so that a mount's
// first listing of versions finds them there. The caller holds the page's
// lock. A page whose history begins with them gets a new file; a page
// without one keeps none until a listing walks its history.
func IndexLanded(p *store.Page, commits, on []*store.Commit) error {
	if len(commits) == 0 || !p.Writable() {
		return nil
	}
	known := map[store.CommitID]*store.Commit{}
	landing := map[store.CommitID]bool{store.FirstCommitID: true}
	for _, c := range on {
		known[c.ID] = c
	}
	for _, c := range commits {
		known[c.ID], landing[c.ID] = c, true
	}
	// A new file only for a page whose history begins here: every parent
	// is the first commit or one of commits.
	create := true
	recs := make([]versionRecord, 0, len(commits))
	for _, c := range commits {
		parents := make([]*store.Commit, 0, len(c.Parents))
		for _, id := range c.Parents {
			create = create && landing[id]
			pc, ok := known[id]
			if !ok {
				var err error
				if pc, err = p.Commit(id); err != nil {
					return fmt.Errorf("history: index landed commit %s: %w", c.ID, err)
				}
			}
			parents = append(parents, pc)
		}
		rec, err := record(p, c, parents)
		if err != nil {
			return fmt.Errorf("history: index landed commit %s: %w", c.ID, err)
		}
		recs = append(recs, rec)
	}
	_, err := writeRecords(p.VersionsPath(), recs, create, -1)
	return err
}

// record finds the versions commit c made, compared with the parents a
// walk gave it: with none, every entry of its tree; otherwise each entry
// it sets differently from its first parent (btree.Store.Diff: the cost is
// what changed), unless another parent has it so.
func record(p *store.Page, c *store.Commit, parents []*store.Commit) (versionRecord, error) {
	rec := versionRecord{c: walkedCommit(c)}
	for _, pc := range parents {
		rec.parents = append(rec.parents, pc.ID)
	}
	version := func(e btree.Entry) {
		rec.versions = append(rec.versions, indexed{c: rec.c, key: e.Key, e: &e})
	}
	if len(parents) == 0 {
		it := p.Tree(c).Seek("")
		for it.Next() {
			version(it.Entry())
		}
		return rec, it.Err()
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
		return rec, err
	}
	for _, e := range changed {
		new := true
		for _, pc := range parents[1:] {
			pe, found, err := p.Tree(pc).Get(e.Key)
			if err != nil {
				return rec, err
			}
			if found && withoutAtime(pe) == withoutAtime(e) {
				new = false // carried over from this parent
				break
			}
		}
		if new {
			version(e)
		}
	}
	return rec, nil
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
