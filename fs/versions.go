package fs

import (
	"cmp"
	"context"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"

	gofs "github.com/hanwen/go-fuse/v2/fs"
	"github.com/hanwen/go-fuse/v2/fuse"

	"github.com/ledgerfs/ledgerfs/internal/btree"
	"github.com/ledgerfs/ledgerfs/internal/history"
	"github.com/ledgerfs/ledgerfs/internal/keypath"
	"github.com/ledgerfs/ledgerfs/store"
)

// versionsDir is .ledger/versions or a directory below it: it follows the
// page's current directories, and each file in them is a versionList.
type versionsDir struct {
	metaDir
	comps []string
}

var (
	_ gofs.NodeLookuper  = (*versionsDir)(nil)
	_ gofs.NodeReaddirer = (*versionsDir)(nil)
	_ gofs.NodeGetattrer = (*versionsDir)(nil)
)

func (d *versionsDir) Readdir(ctx context.Context) (gofs.DirStream, syscall.Errno) {
	prefix, err := keypath.Prefix(d.comps)
	if err != nil {
		return nil, syscall.ENOENT
	}
	es, err := listDir(d.pg, prefix, d.comps, nil)
	if err != nil {
		return nil, errno("readdir", err)
	}
	for i := range es {
		es[i].Mode = fuse.S_IFDIR
		es[i].Ino = d.pg.fs.inos.peek(d.pg.metaID(versionsID(prefix + es[i].Name)))
	}
	return listing(d.EmbeddedInode(), es), 0
}

func (d *versionsDir) Lookup(ctx context.Context, name string, out *fuse.EntryOut) (*gofs.Inode, syscall.Errno) {
	child := append(slices.Clone(d.comps), name)
	key, coll, err := keypath.Key(child)
	if err != nil || btree.IsLinkKey(key) {
		return nil, syscall.ENOENT
	}
	isDir := false
	if !coll {
		err := d.pg.view(func(p *store.Page, head *store.Commit, t *btree.Tree) error {
			var err error
			isDir, err = hasPrefixKey(t, key+"/")
			return err
		})
		if err != nil {
			return nil, errno("lookup", err)
		}
	}
	if isDir {
		ch := d.newMeta(ctx, &versionsDir{metaDir: roDir(d.pg), comps: child}, fuse.S_IFDIR, versionsID(key+"/"))
		return ch, getattr(ctx, ch, &out.Attr)
	}
	l := &versionList{metaDir: roDir(d.pg), key: key}
	vs, err := l.versions()
	if err != nil {
		return nil, errno("versions", err)
	}
	if len(vs) == 0 {
		return nil, syscall.ENOENT
	}
	ch := d.newMeta(ctx, l, fuse.S_IFDIR, versionsID(key))
	return ch, getattr(ctx, ch, &out.Attr)
}

// versionList is versions/<path>/: a read-only file per version of the
// entry at path, named so that ls sorts them oldest first
// (history.Version.Name), from the page's versionIndex.
type versionList struct {
	metaDir
	key string
	// The versions as listed at head, until the head moves or a
	// collection prunes: ls -l looks each name up after the listing, and
	// each lookup listed and named every version again (2,000 versions:
	// 4 of the first listing's 7 s).
	mu     sync.Mutex
	vs     []history.Version
	head   store.CommitID
	pruned uint64
}

// versionIndex holds the versions of every key of a page
// (history.VersionIndex), read from the page's version file, brought up to
// date when the head moves and made anew when a collection prunes commits:
// listing the versions of many names costs one history walk, not one each
// (a walk of every name's versions after 200 kills took longer than the
// rest of the test), a commit costs its own diff, and a new mount reads
// what earlier ones walked.
type versionIndex struct {
	mu     sync.Mutex
	head   store.CommitID // x is up to date at head
	pruned uint64
	x      *history.VersionIndex // nil: none yet, or a collection pruned
}

// of returns key's versions in p, walking what is new in the history if it
// moved.
func (x *versionIndex) of(p *store.Page, key string) ([]history.Version, error) {
	x.mu.Lock()
	defer x.mu.Unlock()
	head, err := p.Head()
	if err != nil {
		return nil, err
	}
	if pruned := p.Pruned(); x.x == nil || pruned != x.pruned || head.ID != x.head {
		if x.x == nil || pruned != x.pruned {
			if x.x, err = history.OpenVersionIndex(p); err != nil {
				return nil, err
			}
			x.pruned = pruned
		}
		if err := x.x.Update(p); err != nil {
			x.x = nil
			return nil, err
		}
		x.head = head.ID
	}
	return x.x.Of(key)
}

var (
	_ gofs.NodeLookuper  = (*versionList)(nil)
	_ gofs.NodeReaddirer = (*versionList)(nil)
	_ gofs.NodeGetattrer = (*versionList)(nil)
)

// versions lists the versions of the name (history.OfName): each
// version's Entry.Key is where its content is in its commit.
func (l *versionList) versions() ([]history.Version, error) {
	var vs []history.Version
	err := l.withPage(func(p *store.Page) error {
		head, err := p.Head()
		if err != nil {
			return err
		}
		pruned := p.Pruned()
		l.mu.Lock()
		defer l.mu.Unlock()
		if l.vs != nil && l.head == head.ID && l.pruned == pruned {
			vs = l.vs
			return nil
		}
		vs, err = history.OfName(p, l.key, func(key string) ([]history.Version, error) {
			return l.pg.owner.versions.of(p, key)
		})
		if err == nil {
			l.vs, l.head, l.pruned = vs, head.ID, pruned
		}
		return err
	})
	return vs, err
}

func (l *versionList) fileID(v history.Version) string { return versionID(l.key, v.Commit.ID) }

func (l *versionList) Readdir(ctx context.Context) (gofs.DirStream, syscall.Errno) {
	vs, err := l.versions()
	if err != nil {
		return nil, errno("readdir", err)
	}
	es := make([]fuse.DirEntry, len(vs))
	for i, v := range vs {
		es[i] = fuse.DirEntry{Name: v.Name(), Mode: v.Entry.Meta.FileMode() & syscall.S_IFMT, Ino: l.pg.fs.inos.peek(l.pg.metaID(l.fileID(v)))}
	}
	return listing(l.EmbeddedInode(), es), 0
}

// Lookup returns a version as the entry in its commit's snapshot: reading
// it reads the stored value, with the version's mode, mtime and size.
func (l *versionList) Lookup(ctx context.Context, name string, out *fuse.EntryOut) (*gofs.Inode, syscall.Errno) {
	vs, err := l.versions()
	if err != nil {
		return nil, errno("lookup", err)
	}
	// Names start with the generation, which orders vs: only the
	// versions of the name's generation are named to compare.
	gen, _, ok := strings.Cut(name, "_")
	g, err := strconv.ParseUint(gen, 10, 64)
	if !ok || err != nil {
		return nil, syscall.ENOENT
	}
	i, _ := slices.BinarySearchFunc(vs, g, func(v history.Version, g uint64) int { return cmp.Compare(v.Commit.Generation, g) })
	for _, v := range vs[i:] {
		if v.Commit.Generation != g {
			break
		}
		if v.Name() != name {
			continue
		}
		f := &fileNode{pg: l.pg.snapshot(v.Commit), fixed: true, fixedKey: v.Entry.Key}
		mode := v.Entry.Meta.FileMode() & syscall.S_IFMT
		ch := l.NewInode(ctx, f, gofs.StableAttr{Mode: mode, Ino: l.pg.fs.inos.get(l.pg.metaID(l.fileID(v)))})
		// The version's entry is its commit's: no read of that commit's
		// tree (ls of a long history looks up every version).
		fileAttr(l.pg.fs, &out.Attr, ch.StableAttr().Ino, v.Entry.Meta, v.Commit.Timestamp)
		return ch, 0
	}
	return nil, syscall.ENOENT
}
