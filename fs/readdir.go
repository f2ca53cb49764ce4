package fs

import (
	"context"
	"slices"
	"strings"
	"syscall"

	gofs "github.com/hanwen/go-fuse/v2/fs"
	"github.com/hanwen/go-fuse/v2/fuse"

	"github.com/ledgerfs/ledgerfs/cas"
	"github.com/ledgerfs/ledgerfs/internal/btree"
	"github.com/ledgerfs/ledgerfs/internal/keypath"
	"github.com/ledgerfs/ledgerfs/store"
)

// listing is the stream of a directory's entries es, after "." and "..":
// the kernel lists what the filesystem returns, and programs that count a
// directory's entries or walk it by readdir expect both.
func listing(n *gofs.Inode, es []fuse.DirEntry) gofs.DirStream {
	dots := []fuse.DirEntry{{Name: ".", Mode: fuse.S_IFDIR, Ino: n.StableAttr().Ino}, {Name: "..", Mode: fuse.S_IFDIR, Ino: n.StableAttr().Ino}}
	if _, parent := n.Parent(); parent != nil {
		dots[1].Ino = parent.StableAttr().Ino
	}
	return gofs.NewListDirStream(append(dots, es...))
}

// OpendirHandle opens the directory for a listing, which is taken at its
// first read (go-fuse's own handle does the same) and which answers
// READDIRPLUS's lookup of each name it lists from what it found in the
// tree (Lookup).
func (d *dirNode) OpendirHandle(ctx context.Context, flags uint32) (gofs.FileHandle, uint32, syscall.Errno) {
	return &dirHandle{d: d}, 0, 0
}

// A dirHandle is an open directory of a page view.
type dirHandle struct {
	d     *dirNode
	ds    gofs.DirStream // the listing, from the first read on
	known *listed        // what the listing found in the tree
}

var (
	_ gofs.FileReaddirenter = (*dirHandle)(nil)
	_ gofs.FileSeekdirer    = (*dirHandle)(nil)
	_ gofs.FileReleasedirer = (*dirHandle)(nil)
	_ gofs.FileLookuper     = (*dirHandle)(nil)
)

func (h *dirHandle) list() syscall.Errno {
	if h.ds != nil {
		return 0
	}
	prefix, comps, err := h.d.prefix()
	if err != nil {
		return errno("readdir", err)
	}
	h.known = &listed{}
	es, err := listDir(h.d.pg, prefix, comps, h.known)
	if err != nil {
		h.known = nil
		return errno("readdir", err)
	}
	h.ds = listing(h.d.EmbeddedInode(), es)
	return 0
}

func (h *dirHandle) Readdirent(ctx context.Context) (*fuse.DirEntry, syscall.Errno) {
	if eno := h.list(); eno != 0 {
		return nil, eno
	}
	if !h.ds.HasNext() {
		return nil, 0
	}
	e, eno := h.ds.Next()
	return &e, eno
}

func (h *dirHandle) Seekdir(ctx context.Context, off uint64) syscall.Errno {
	if eno := h.list(); eno != 0 {
		return eno
	}
	return h.ds.(gofs.FileSeekdirer).Seekdir(ctx, off)
}

func (h *dirHandle) Releasedir(ctx context.Context, flags uint32) { h.ds, h.known = nil, nil }

// Lookup is READDIRPLUS's lookup of a name the listing just gave. It is
// the directory's Lookup, which reads the tree for the name unless the
// tree is the one listed: its facts are then the listing's.
func (h *dirHandle) Lookup(ctx context.Context, name string, out *fuse.EntryOut) (*gofs.Inode, syscall.Errno) {
	return h.d.lookupKnowing(ctx, name, out, h.known)
}

// nameFacts is what the tree holds for a name (dirNode.lookup): the file
// entry at its key, and whether keys lie under it as a directory's, the
// first of them the directory's marker.
type nameFacts struct {
	entry       btree.Entry
	isFile      bool
	isDir       bool
	marker      btree.Entry
	markerFound bool
}

// lookFor reads the facts for the name at key from t.
func lookFor(t *btree.Tree, key string) (nameFacts, error) {
	var nf nameFacts
	var err error
	if nf.entry, nf.isFile, err = t.Get(key); err != nil {
		return nf, err
	}
	// The first key under the directory is its marker, if it has one.
	it := t.Prefix(key + "/")
	if it.Next() {
		nf.isDir = true
		if e := it.Entry(); e.Key == key+"/" {
			nf.marker, nf.markerFound = e, true
		}
	}
	return nf, it.Err()
}

// maxListed bounds the names a listing keeps facts for (listed): about
// 300 bytes each, for as long as the directory is open.
const maxListed = 1 << 14

// listed is what a listing found in the tree for each name it listed, by
// key, and which tree that was: a lookup in the same tree finds the same.
type listed struct {
	tree  cas.ObjectIdentifier
	ok    bool             // the tree had an identity (btree.Tree.Identity)
	names map[string]int32 // index in facts
	// facts are in chunks of factsChunk: one slice grown by appending
	// copied each name's facts (about 300 bytes) again at each doubling,
	// 5 % of the server's CPU under stress-ng --dir. The first chunk grows
	// as a slice does.
	facts [][]nameFacts
}

// factsChunk is the number of names' facts a chunk of listed.facts holds.
const factsChunk = 256

// fact returns the facts at index i.
func (l *listed) fact(i int32) *nameFacts { return &l.facts[i/factsChunk][i%factsChunk] }

// factsOf returns the facts for the name at key in t: the listing's, if l
// was taken of t and holds the name, else read from t.
func (l *listed) factsOf(t *btree.Tree, key string) (nameFacts, error) {
	if l != nil && l.ok {
		if id, ok := t.Identity(); ok && id == l.tree {
			if i, ok := l.names[key]; ok {
				return *l.fact(i), nil
			}
		}
	}
	return lookFor(t, key)
}

// start readies l for a walk of t.
func (l *listed) start(t *btree.Tree) {
	if l.tree, l.ok = t.Identity(); l.ok {
		l.names = map[string]int32{}
	}
}

// drop forgets what l noted: it cannot answer for the tree.
func (l *listed) drop() { l.ok, l.names, l.facts = false, nil, nil }

// see notes the entry e under prefix that a walk of the tree gave, and
// skipTo, the key the walk goes on from. It reads keys as lookFor does, by
// their bytes: e is the file entry at its key, or the first entry under the
// directory its key is under; the walk gives every key under prefix but
// those after a directory's first, which it steps over (skipTo), and link
// keys, which are no name's.
func (l *listed) see(prefix string, e btree.Entry, skipTo string) {
	if l == nil || !l.ok || btree.IsLinkKey(e.Key) {
		return
	}
	rest := e.Key[len(prefix):]
	if rest == "" {
		return // the directory's own marker
	}
	key, dir := e.Key, false
	if i := strings.IndexByte(rest, '/'); i >= 0 {
		key, dir = e.Key[:len(prefix)+i], true
	}
	// Stepped over, the rest of the directory's keys: key+"0" onwards.
	if skipTo != "" && (!dir || len(skipTo) != len(key)+1 || skipTo[len(key)] != '0' || skipTo[:len(key)] != key) {
		l.drop() // what is stepped over is not known
		return
	}
	i, ok := l.names[key]
	if !ok {
		i = int32(len(l.names)) // each name noted has its facts
		if i >= maxListed {
			l.drop()
			return
		}
		switch {
		case i == 0:
			l.facts = [][]nameFacts{nil} // grown as needed: most listings are short
		case i%factsChunk == 0:
			l.facts = append(l.facts, make([]nameFacts, 0, factsChunk))
		}
		last := &l.facts[len(l.facts)-1]
		*last = append(*last, nameFacts{})
		l.names[key] = i
	}
	nf := l.fact(i)
	switch {
	case !dir:
		nf.entry, nf.isFile = e, true
	case !nf.isDir: // the first key under the directory
		nf.isDir = true
		if len(e.Key) == len(key)+1 { // key+"/"
			nf.marker, nf.markerFound = e, true
		}
	}
}

// listDir lists the directory at comps (key prefix prefix) of a page view:
// a name per file and subdirectory, with the collision names of files
// shadowed by directories, and the files created but not committed yet.
// If known is not nil, what the walk finds in the tree is noted in it.
func listDir(pg *pageRef, prefix string, comps []string, known *listed) ([]fuse.DirEntry, error) {
	var es []fuse.DirEntry
	var order []string // the key each of es is listed by
	index := map[string]int{}
	files := map[string]string{} // name -> key of files listed, for collisions
	add := func(name string, mode uint32, id, by string) int {
		if i, ok := index[name]; ok {
			return i
		}
		index[name] = len(es)
		es = append(es, fuse.DirEntry{Name: name, Mode: mode, Ino: pg.fs.inos.peek(id)})
		order = append(order, by)
		return len(es) - 1
	}
	addKey := func(key string, mode uint32, marker bool, link string) (skipTo string) {
		if btree.IsLinkKey(key) {
			return btree.LinkEnd // files' entries, not names
		}
		p := keypath.Path(key, false)
		if !pathHasPrefix(p, comps) {
			return ""
		}
		rel := p[len(comps):]
		if len(rel) == 1 {
			if marker && key == prefix {
				return "" // this directory's own marker
			}
			if i, ok := index[rel[0]]; ok && es[i].Mode == fuse.S_IFDIR {
				// A directory of the same name came first: not possible in
				// key order, but pending files are added late.
				cp := keypath.Path(key, true)
				add(cp[len(cp)-1], mode, pg.id('f', key), key)
				return ""
			}
			id := pg.id('f', key)
			if link != "" {
				id = pg.id('f', link) // a name of a file with hard links
			}
			add(rel[0], mode, id, key)
			files[rel[0]] = key
			return ""
		}
		childPrefix, err := keypath.Prefix(p[:len(comps)+1])
		if err != nil {
			return ""
		}
		if fk, ok := files[rel[0]]; ok {
			// File "a" and directory "a/": the file takes its collision name.
			i := index[rel[0]]
			cp := keypath.Path(fk, true)
			es[i].Name = cp[len(cp)-1]
			delete(index, rel[0])
			index[es[i].Name] = i
			delete(files, rel[0])
		}
		add(rel[0], fuse.S_IFDIR, pg.id('d', childPrefix), childPrefix)
		if strings.HasSuffix(childPrefix, "/") {
			// Skip the rest of the subdirectory: '0' follows '/'.
			return childPrefix[:len(childPrefix)-1] + "0"
		}
		return ""
	}
	// Pending files and queued markers first: one that lands meanwhile is
	// in the tree read after, as it leaves pending only once its commit is
	// the head.
	pending := pg.pendingUnder(prefix)
	markers := pg.queuedMarkersUnder(prefix)
	err := pg.view(func(p *store.Page, head *store.Commit, t *btree.Tree) error {
		if known != nil {
			known.start(t)
		}
		return walkDir(t, prefix, func(e btree.Entry) string {
			skip := addKey(e.Key, e.Meta.FileMode()&syscall.S_IFMT, isMarker(e), e.Meta.Link)
			known.see(prefix, e, skip)
			return skip
		})
	})
	if err != nil {
		return nil, err
	}
	for key, f := range pending {
		addKey(key, f.mode()&syscall.S_IFMT, false, "")
	}
	for _, key := range markers {
		addKey(key, fuse.S_IFDIR, true, "")
	}
	if len(pending) > 0 || len(markers) > 0 {
		// Listed in key order, as the tree lists them: ls -f, and programs
		// that merge listings, see no difference once the commit lands.
		idx := make([]int, len(es))
		for i := range idx {
			idx[i] = i
		}
		slices.SortStableFunc(idx, func(a, b int) int { return strings.Compare(order[a], order[b]) })
		sorted := make([]fuse.DirEntry, len(es))
		for i, j := range idx {
			sorted[i] = es[j]
		}
		es = sorted
	}
	return es, nil
}

// walkDir calls fn with the entries of t under prefix, in key order; fn
// returns a key to go on from (past a subdirectory's keys), or "". Up to
// seekAfter entries are stepped over before a seek: a subdirectory often
// holds its marker alone, and a seek from the root past each one made
// listing a directory of 8,000 empty subdirectories cost more than
// everything else about it.
func walkDir(t *btree.Tree, prefix string, fn func(btree.Entry) (skipTo string)) error {
	it := t.Prefix(prefix)
	skipTo, stepped := "", 0
	for it.Next() {
		e := it.Entry()
		if skipTo != "" {
			if e.Key < skipTo {
				if stepped++; stepped == seekAfter {
					it, skipTo = t.SeekPrefix(skipTo, prefix), ""
				}
				continue
			}
			skipTo = ""
		}
		if skip := fn(e); skip != "" {
			skipTo, stepped = skip, 0
		}
	}
	return it.Err()
}

// seekAfter is how many entries walkDir steps over before it seeks.
const seekAfter = 8
