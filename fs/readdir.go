package fs

import (
	"context"
	"slices"
	"strings"
	"syscall"

	gofs "github.com/hanwen/go-fuse/v2/fs"
	"github.com/hanwen/go-fuse/v2/fuse"

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

func (d *dirNode) Readdir(ctx context.Context) (gofs.DirStream, syscall.Errno) {
	prefix, comps, err := d.prefix()
	if err != nil {
		return nil, errno("readdir", err)
	}
	es, err := listDir(d.pg, prefix, comps)
	if err != nil {
		return nil, errno("readdir", err)
	}
	return listing(d.EmbeddedInode(), es), 0
}

// listDir lists the directory at comps (key prefix prefix) of a page view:
// a name per file and subdirectory, with the collision names of files
// shadowed by directories, and the files created but not committed yet.
func listDir(pg *pageRef, prefix string, comps []string) ([]fuse.DirEntry, error) {
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
		return walkDir(t, prefix, func(e btree.Entry) string {
			return addKey(e.Key, e.Meta.FileMode()&syscall.S_IFMT, isMarker(e), e.Meta.Link)
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
