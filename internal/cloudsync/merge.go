package cloudsync

import (
	"bytes"
	"fmt"
	"log/slog"
	"path"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/ledgerfs/ledgerfs/cas"
	"github.com/ledgerfs/ledgerfs/internal/btree"
	"github.com/ledgerfs/ledgerfs/store"
)

// A side of a merge: a head, and the device that made it.
type side struct {
	c      *store.Commit
	device string
}

// changed is when an entry of side s was last changed: its modification
// time, or, without one, its head's time.
func changed(e *btree.Entry, s side) int64 {
	if e.Meta.HasMtime {
		return e.Meta.MtimeNs
	}
	return s.c.Timestamp
}

// later reports whether side a's version ea of an entry is the later of
// the two: the later change, then the later head, then the larger head
// id. The same answer on every device.
func later(ea *btree.Entry, a side, eb *btree.Entry, b side) bool {
	if ta, tb := changed(ea, a), changed(eb, b); ta != tb {
		return ta > tb
	}
	if a.c.Timestamp != b.c.Timestamp {
		return a.c.Timestamp > b.c.Timestamp
	}
	return bytes.Compare(a.c.ID[:], b.c.ID[:]) > 0
}

// merge makes the merge commit of two heads whose common ancestor is base,
// entry by entry:
//   - a change on one side only is taken;
//   - the same change on both sides is taken once;
//   - a change and a delete: the change is kept (a modification beats a
//     deletion);
//   - two different changes of an entry: the later one wins (the later
//     modification time, then the later head); the other's content, if
//     it is a regular file (not a link's name, not a conflict file
//     already), is kept next to it as
//     NAME.sync-conflict-YYYYMMDD-HHMMSS-DEVICE.EXT, named from its
//     modification time and the device that wrote it, as Syncthing names
//     them (two devices' versions that lose in different merges keep
//     different names).
//
// A virtual base (virtualBase) holds, of an entry its common ancestors
// (real) held apart, one version, and a conflict file of the other: a
// side still at one ancestor's version, which the other side replaced,
// would look changed from it. An entry both sides changed from base is
// the other side's change, then, if one side holds a version of one of
// real and the other holds none of theirs: that side's writer saw it.
//
// The rules are symmetric and the tree is history-independent, so devices
// that merge the same two heads, either one local, make the same tree and,
// with sorted parents and the later parent's time, the same commit. It
// returns the commit, the pieces it wrote (transient) and the number of
// conflict files.
func merge(p *store.Page, g *graph, base *store.Commit, real []*store.Commit, a, b side, madeBy func(*store.Commit) (string, error)) (*store.Commit, []cas.Digest, int, error) {
	// replaced holds, per side, the base's versions of the files the side
	// changed or deleted: versions its writer saw.
	replaced := map[*store.Commit]map[string]*btree.Entry{}
	changesOf := func(s side) (map[string]*btree.Entry, error) {
		out, was := map[string]*btree.Entry{}, map[string]*btree.Entry{}
		err := p.Nodes().Diff(base.Root, s.c.Root, func(ch btree.Change) error {
			out[ch.Key] = ch.After
			if ch.Before != nil {
				was[ch.Key] = ch.Before
			}
			return nil
		})
		replaced[s.c] = was
		return out, err
	}
	ca, err := changesOf(a)
	if err != nil {
		return nil, nil, 0, fmt.Errorf("cloudsync: merge: %w", err)
	}
	cb, err := changesOf(b)
	if err != nil {
		return nil, nil, 0, fmt.Errorf("cloudsync: merge: %w", err)
	}
	tree := p.Tree(a.c)
	put := func(key string, e *btree.Entry) error {
		if e == nil {
			_, err := tree.Delete(key)
			return err
		}
		ne := *e
		ne.Key = key
		return tree.Put(ne)
	}
	// atAncestor reports whether e is key's entry in one of real.
	atAncestor := func(key string, e *btree.Entry) (bool, error) {
		for _, r := range real {
			re, ok, err := p.Tree(r).Get(key)
			if err != nil {
				return false, err
			}
			if ok && sameEntry(&re, e) || !ok && e == nil {
				return true, nil
			}
		}
		return false, nil
	}
	// unmade reports whether side s, which lacks key, lacks it only because
	// the virtual base made it: key is a conflict file none of the
	// ancestors the base merged holds, of a version s still holds at its
	// file. S never held that conflict file, nor replaced the version (it
	// merged those ancestors' lines later, where the version won, or lost
	// nothing). Taken as a deletion, the other side's copy went, and with
	// it the one copy of a version no device replaced.
	unmade := func(s side, key string) (bool, error) {
		file, ok := conflictOf(key)
		if len(real) < 2 || !ok {
			return false, nil
		}
		for _, r := range real {
			if _, ok, err := p.Tree(r).Get(key); err != nil || ok {
				return false, err
			}
		}
		be, ok, err := p.Tree(base).Get(key)
		if err != nil || !ok {
			return false, err
		}
		se, ok, err := p.Tree(s.c).Get(file)
		return ok && se.Value == be.Value, err
	}
	// Such a side's lack is no change: the other side's copy, the
	// base's, stays, as a conflict file kept since the base (below).
	var stays []string
	for key, aAfter := range ca {
		if _, both := cb[key]; aAfter != nil || both {
			continue
		}
		ok, err := unmade(a, key)
		if err == nil && ok {
			var e btree.Entry
			if e, ok, err = p.Tree(base).Get(key); err == nil && ok {
				stays = append(stays, key)
				err = put(key, &e)
			}
		}
		if err != nil {
			return nil, nil, 0, fmt.Errorf("cloudsync: merge %q: %w", key, err)
		}
	}
	// Conflict files this merge makes go in after every side's change:
	// one may have the name of a conflict file a side deleted (its
	// version then at its file), and which of the two came last went by
	// the order of a map's keys, unlike on another device.
	type conflictFile struct {
		key   string // the file's
		e     *btree.Entry
		loser side
		dev   string
	}
	var made []conflictFile
	conflicts := 0
	for key, bAfter := range cb {
		aAfter, both := ca[key]
		if !both && bAfter == nil {
			if ok, err := unmade(b, key); err != nil {
				return nil, nil, 0, fmt.Errorf("cloudsync: merge %q: %w", key, err)
			} else if ok {
				stays = append(stays, key) // a's copy, the base's
				continue
			}
		}
		var aOld, bOld bool
		if both && len(real) > 1 && !sameEntry(aAfter, bAfter) {
			if aOld, err = atAncestor(key, aAfter); err == nil {
				bOld, err = atAncestor(key, bAfter)
			}
			if err != nil {
				return nil, nil, 0, fmt.Errorf("cloudsync: merge %q: %w", key, err)
			}
		}
		switch {
		case !both:
			err = put(key, bAfter)
		case aOld && !bOld:
			err = put(key, bAfter) // b replaced what a still holds
		case bOld && !aOld:
			// a replaced what b still holds: a's stays
		case sameEntry(aAfter, bAfter):
		case aAfter == nil:
			err = put(key, bAfter) // b changed what a deleted
		case bAfter == nil:
			// a changed what b deleted: a's stays
		case sameContent(aAfter, bAfter):
			// The same content written on both sides is no conflict:
			// the later side's metadata goes with it.
			if !later(aAfter, a, bAfter, b) {
				err = put(key, bAfter)
			}
		default:
			// One side changed the content, the other only the metadata
			// (a chmod): both changes stand.
			if both := apart(replaced[a.c][key], aAfter, bAfter); both != nil {
				err = put(key, both)
				break
			}
			win, lose, loser := aAfter, bAfter, b
			if !later(aAfter, a, bAfter, b) {
				win, lose, loser = bAfter, aAfter, a
			}
			if err = put(key, win); err == nil && keepsConflict(key, lose) {
				var dev string
				if dev, err = writer(p, g, loser, key, lose, madeBy); err == nil {
					conflicts++
					made = append(made, conflictFile{key, lose, loser, dev})
				}
			}
		}
		if err != nil {
			return nil, nil, 0, fmt.Errorf("cloudsync: merge %q: %w", key, err)
		}
	}
	for _, cf := range made {
		at, _, err := freeConflictName(tree, cf.key, cf.e, cf.loser, cf.dev)
		if err == nil {
			err = put(at, cf.e)
		}
		if err != nil {
			return nil, nil, 0, fmt.Errorf("cloudsync: merge %q: %w", cf.key, err)
		}
	}
	// Conflict files kept since the base. A version one side replaced or
	// deleted at its file, by a write whose writer saw it (the side kept
	// no conflict file of it), has lost to a later write of its own: the
	// other side's conflict file of it goes (a file edited on one device
	// while another edited it five times made five conflict files). And
	// one version kept as a conflict file by both sides, under two names,
	// is kept once, under the first name.
	type copyOf struct {
		file string
		v    cas.ObjectIdentifier
	}
	kept := map[copyOf][]string{}
	keptBy := [2]map[copyOf]bool{{}, {}}
	sides := [2]map[string]*btree.Entry{ca, cb}
	for i, ch := range sides {
		for key, e := range ch {
			if file, ok := conflictOf(key); ok && e != nil {
				c := copyOf{file, e.Value}
				keptBy[i][c] = true
				kept[c] = append(kept[c], key)
			}
		}
	}
	// And those that stayed although a side lacked them (unmade), kept by
	// neither side's change.
	for _, key := range stays {
		file, _ := conflictOf(key)
		e, _, err := tree.Get(key)
		if err != nil {
			return nil, nil, 0, fmt.Errorf("cloudsync: merge %q: %w", key, err)
		}
		c := copyOf{file, e.Value}
		kept[c] = append(kept[c], key)
	}
	drop := func(key string) error {
		if _, err := tree.Delete(key); err != nil {
			return fmt.Errorf("cloudsync: merge %q: %w", key, err)
		}
		return nil
	}
	saw := [2]map[string]*btree.Entry{replaced[a.c], replaced[b.c]}
	for c, keys := range kept {
		superseded := false
		for i := range 2 {
			if was := saw[i][c.file]; keptBy[1-i][c] && !keptBy[i][c] && was != nil && was.Value == c.v {
				superseded = true
			}
		}
		// A conflict file of the content its file holds after the
		// merge keeps nothing (two devices wrote the same content, and
		// one's lost to a third's before the other's won).
		if !superseded {
			e, ok, err := tree.Get(c.file)
			if err != nil {
				return nil, nil, 0, fmt.Errorf("cloudsync: merge %q: %w", c.file, err)
			}
			superseded = ok && e.Value == c.v
		}
		slices.Sort(keys)
		keys = slices.Compact(keys)
		if !superseded {
			keys = keys[1:]
		}
		for _, k := range keys {
			if err := drop(k); err != nil {
				return nil, nil, 0, err
			}
			conflicts--
		}
	}
	root, pw, err := p.WriteTree(tree)
	if err != nil {
		return nil, nil, 0, fmt.Errorf("cloudsync: merge: %w", err)
	}
	m, err := store.NewCommit(0, root, a.c, b.c)
	return m, pw.New, max(conflicts, 0), err
}

// conflictOf returns the key of the file whose conflict file is at key
// (NAME.sync-conflict-YYYYMMDD-HHMMSS-DEVICE.EXT: NAME.EXT), if it is one.
func conflictOf(key string) (string, bool) {
	file, _, ok := splitConflict(key)
	return file, ok
}

// splitConflict splits a conflict file's key into its file's key and the
// DEVICE its name holds.
func splitConflict(key string) (file, dev string, ok bool) {
	dir, name := path.Split(key)
	i := strings.Index(name, conflictMark)
	if i < 0 {
		return "", "", false
	}
	rest, ext := name[i+len(conflictMark):], ""
	if j := strings.IndexByte(rest, '.'); j >= 0 {
		rest, ext = rest[:j], rest[j:]
	}
	// rest is YYYYMMDD-HHMMSS-DEVICE, and -N after it when the name was
	// taken (freeConflictName).
	f := strings.Split(rest, "-")
	return dir + name[:i] + ext, f[min(2, len(f)-1)], true
}

// sameContent reports whether two sides' entries hold the same content as
// the same kind of file.
func sameContent(a, b *btree.Entry) bool {
	return a.Value == b.Value && a.Meta.Size == b.Meta.Size && a.Meta.FileMode()&syscall.S_IFMT == b.Meta.FileMode()&syscall.S_IFMT &&
		a.Meta.Symlink == b.Meta.Symlink && a.Meta.Link == b.Meta.Link
}

// apart merges two sides' changes of an entry when one changed its content
// and the other its metadata alone (mode, owner, extended attributes),
// field by field from base; nil when they do not fall apart so.
func apart(base, a, b *btree.Entry) *btree.Entry {
	if base == nil {
		return nil
	}
	content, meta := a, b
	switch {
	case sameContent(base, b) && !sameContent(base, a):
	case sameContent(base, a) && !sameContent(base, b):
		content, meta = b, a
	default:
		return nil
	}
	out := *content
	if meta.Meta.Mode != base.Meta.Mode && meta.Meta.FileMode()&syscall.S_IFMT == content.Meta.FileMode()&syscall.S_IFMT {
		out.Meta.Mode = meta.Meta.Mode
	}
	if meta.Meta.HasOwner != base.Meta.HasOwner || meta.Meta.Uid != base.Meta.Uid || meta.Meta.Gid != base.Meta.Gid {
		out.Meta.Uid, out.Meta.Gid, out.Meta.HasOwner = meta.Meta.Uid, meta.Meta.Gid, meta.Meta.HasOwner
	}
	if meta.Meta.Xattrs != base.Meta.Xattrs {
		out.Meta.Xattrs = meta.Meta.Xattrs
	}
	if meta.Meta.HasCtime && (!out.Meta.HasCtime || meta.Meta.CtimeNs > out.Meta.CtimeNs) {
		out.Meta.CtimeNs, out.Meta.HasCtime = meta.Meta.CtimeNs, true
	}
	return &out
}

// sameEntry compares two sides' results, the access time aside (a read
// moves it on every device).
func sameEntry(a, b *btree.Entry) bool {
	if a == nil || b == nil {
		return a == b
	}
	x, y := *a, *b
	x.Meta.AtimeNs, x.Meta.HasAtime, y.Meta.AtimeNs, y.Meta.HasAtime = 0, false, 0, false
	return x == y
}

// conflictMark is in the name of every conflict file.
const conflictMark = ".sync-conflict-"

// keepsConflict reports whether the losing entry at key is kept as a
// conflict file: a regular file, not a name of a hard-linked file, not a
// conflict file itself.
func keepsConflict(key string, e *btree.Entry) bool {
	return e.Meta.FileMode()&syscall.S_IFMT == syscall.S_IFREG && e.Meta.Link == "" &&
		!btree.IsLinkKey(key) && !strings.Contains(path.Base(key), conflictMark)
}

// writer returns the device that wrote version e of key in side s's
// history: the maker of the first commit, walking back from s's head
// through parents that hold the same version, whose parents do not.
func writer(p *store.Page, g *graph, s side, key string, e *btree.Entry, madeBy func(*store.Commit) (string, error)) (string, error) {
	c := s.c
	for {
		var next *store.Commit
		for _, pid := range c.Parents {
			pc, err := g.commit(pid)
			if err != nil {
				return "", err
			}
			if pc == nil {
				continue // pruned: the walk ends
			}
			pe, ok, err := p.Tree(pc).Get(key)
			if err != nil {
				return "", err
			}
			if ok && sameEntry(&pe, e) {
				next = pc
				break
			}
		}
		if next == nil {
			return madeBy(c)
		}
		c = next
	}
}

// Unseen keeps a version a local write never saw (journal.UnseenFunc):
// e, which the head holds at key while the write committing worked from
// value saw. If another device wrote e — a sync landed it after the file
// was opened or its close queued — the write and e are concurrent: e is
// kept as a conflict file named after its writer, as a merge keeps a
// losing version, and the write, this device's latest, takes key. A
// version this device wrote is replaced, as one descriptor's close
// replaces another's. A conflict file of saw goes: a merge since the
// open set it aside, and the write replaced it, as merge drops a conflict
// file of a version its writer replaced.
func (s *Syncer) Unseen(p *store.Page, head *store.Commit, t *btree.Tree, key string, saw cas.ObjectIdentifier, e btree.Entry) error {
	dir, stem, _ := splitName(key)
	var stale []string
	it := t.Prefix(dir + stem + conflictMark)
	for it.Next() {
		if c := it.Entry(); c.Value == saw {
			if file, ok := conflictOf(c.Key); ok && file == key {
				stale = append(stale, c.Key)
			}
		}
	}
	if err := it.Err(); err != nil {
		return err
	}
	for _, k := range stale {
		if _, err := t.Delete(k); err != nil {
			return err
		}
	}
	if !keepsConflict(key, &e) {
		return nil
	}
	hs := side{c: head}
	dev, err := writer(p, &graph{p: p}, hs, key, &e, func(c *store.Commit) (string, error) { return s.madeBy(p, c) })
	if err != nil || dev == s.device {
		return err
	}
	at, held, err := freeConflictName(t, key, &e, hs, dev)
	if err != nil || held {
		return err
	}
	slog.Info("kept a version another device wrote while this one was open", "page", p.Ledger+"/"+p.Name, "file", key, "as", at)
	e.Key = at
	return t.Put(e)
}

// conflictName is the n'th name of the conflict file of key's losing
// version e, of side s, written by device dev:
// NAME.sync-conflict-YYYYMMDD-HHMMSS-DEVICE.EXT (the time e changed, UTC;
// DEVICE the first 7 characters of dev, in capitals), with -n after
// DEVICE from the second on.
func conflictName(key string, e *btree.Entry, s side, dev string, n int) string {
	dir, stem, ext := splitName(key)
	dev = strings.ToUpper(dev)
	if len(dev) > 7 {
		dev = dev[:7]
	}
	t := time.Unix(0, changed(e, s)).UTC().Format("20060102-150405")
	if n > 1 {
		dev += "-" + strconv.Itoa(n)
	}
	return dir + stem + conflictMark + t + "-" + dev + ext
}

// freeConflictName returns where tree t keeps the conflict file of key's
// losing version e, of side s, written by device dev: conflictName's, or,
// when t holds another version there (two versions one device wrote in one
// second lost to others), the first of its names with -2, -3, … after
// DEVICE that is free or holds e. Taking the name anyway replaced the
// version it held, the one copy left of it. Held reports t holds e there
// already.
func freeConflictName(t *btree.Tree, key string, e *btree.Entry, s side, dev string) (at string, held bool, err error) {
	for n := 1; ; n++ {
		at = conflictName(key, e, s, dev, n)
		o, ok, err := t.Get(at)
		if err != nil || !ok {
			return at, false, err
		}
		if o.Value == e.Value {
			return at, true, nil
		}
	}
}

// splitName splits key into its directory, the stem of its name and its
// extension, as conflict files are named: NAME.EXT, a name that is all
// extension (".bashrc") all stem.
func splitName(key string) (dir, stem, ext string) {
	dir, name := path.Split(key)
	ext = path.Ext(name)
	if ext == name {
		ext = ""
	}
	return dir, strings.TrimSuffix(name, ext), ext
}
