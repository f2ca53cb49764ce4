package fs

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync/atomic"
	"syscall"

	gofs "github.com/hanwen/go-fuse/v2/fs"
	"github.com/hanwen/go-fuse/v2/fuse"

	"github.com/ledgerfs/ledgerfs/internal/btree"
	"github.com/ledgerfs/ledgerfs/internal/keypath"
	"github.com/ledgerfs/ledgerfs/journal"
	"github.com/ledgerfs/ledgerfs/store"
)

// dirNode is a page's root or a directory inside a page: the keys that
// start with its prefix.
type dirNode struct {
	gofs.Inode
	pg    *pageRef
	below bool // a directory inside the page, not its root
	// removed holds the attributes the directory had when rmdir removed
	// it: a descriptor or working directory still on it sees an empty
	// directory with no link, as on a native filesystem, whatever is made
	// at its name later.
	removed atomic.Pointer[fuse.Attr]
}

var (
	_ gofs.NodeLookuper       = (*dirNode)(nil)
	_ gofs.NodeOpendirHandler = (*dirNode)(nil)
	_ gofs.NodeGetattrer      = (*dirNode)(nil)
	_ gofs.NodeSetattrer      = (*dirNode)(nil)
	_ gofs.NodeMkdirer        = (*dirNode)(nil)
	_ gofs.NodeRmdirer        = (*dirNode)(nil)
	_ gofs.NodeCreater        = (*dirNode)(nil)
	_ gofs.NodeUnlinker       = (*dirNode)(nil)
	_ gofs.NodeRenamer        = (*dirNode)(nil)
	_ gofs.NodeSymlinker      = (*dirNode)(nil)
	_ gofs.NodeLinker         = (*dirNode)(nil)
	_ gofs.NodeMknoder        = (*dirNode)(nil)
	_ gofs.NodeStatfser       = (*dirNode)(nil)
	_ gofs.NodeOnForgetter    = (*dirNode)(nil)
	_ gofs.NodeFsyncer        = (*dirNode)(nil)
)

// Fsync of a directory makes the changes in it durable, as programs that
// create or rename a file and then sync its directory expect (databases,
// git, editors): here every change of the page so far, without waiting
// for their commits (journal.Committer.Sync).
func (d *dirNode) Fsync(ctx context.Context, f gofs.FileHandle, flags uint32) syscall.Errno {
	if d.pg.readOnly() {
		return 0
	}
	return errno("fsync", d.pg.apply(true))
}

// pathFrom returns the components of n's path below the root of page pg,
// and false for a node no longer in the tree (deleted). The root is known by
// what it is, not by which node it is: the kernel may forget a page's root
// and look it up again as a new node while a file below it stays ours (a
// closed file whose commit is queued), and that file is then found again
// under the new root.
func pathFrom(n *gofs.Inode, pg *pageRef) ([]string, bool) {
	var comps []string
	for {
		if d, ok := n.Operations().(*dirNode); ok && !d.below && d.pg == pg {
			break
		}
		name, parent := pg.moves.parent(n)
		if parent == nil {
			return nil, false
		}
		comps = append(comps, name)
		n = parent
	}
	for i, j := 0, len(comps)-1; i < j; i, j = i+1, j-1 {
		comps[i], comps[j] = comps[j], comps[i]
	}
	return comps, true
}

func (d *dirNode) comps() ([]string, bool) {
	return pathFrom(d.EmbeddedInode(), d.pg)
}

// prefix is the key prefix of the directory's keys.
func (d *dirNode) prefix() (string, []string, error) {
	comps, ok := d.comps()
	if !ok {
		return "", nil, syscall.ENOENT
	}
	p, err := keypath.Prefix(comps)
	if err != nil {
		return "", nil, syscall.ENOENT
	}
	return p, comps, nil
}

// childKey returns the key of name in d and whether name is the collision
// form of a file shadowed by a directory.
func (d *dirNode) childKey(name string) (string, bool, error) {
	if len(name) > keypath.MaxComponent {
		return "", false, syscall.ENAMETOOLONG
	}
	comps, ok := d.comps()
	if !ok {
		return "", false, syscall.ENOENT
	}
	key, coll, err := keypath.Key(append(comps, name))
	if err != nil {
		return "", false, syscall.EINVAL
	}
	if btree.IsLinkKey(key) {
		return "", false, syscall.EPERM // the name of a file's entry
	}
	return key, coll, nil
}

// nameErrno is the errno for a name childKey refused: ENAMETOOLONG for a
// name longer than a directory entry's, as ext4 says, or otherwise.
func nameErrno(err error, otherwise syscall.Errno) syscall.Errno {
	if errors.Is(err, syscall.ENAMETOOLONG) {
		return syscall.ENAMETOOLONG
	}
	return otherwise
}

func hasPrefixKey(t *btree.Tree, prefix string) (bool, error) {
	it := t.Prefix(prefix)
	if it.Next() {
		return true, nil
	}
	return false, it.Err()
}

func (d *dirNode) newDir(ctx context.Context, prefix string) *gofs.Inode {
	n := &dirNode{pg: d.pg, below: true}
	return d.NewInode(ctx, n, gofs.StableAttr{Mode: fuse.S_IFDIR, Ino: d.pg.fs.inos.get(d.pg.id('d', prefix))})
}

func (d *dirNode) newFile(ctx context.Context, key string, mode uint32) *gofs.Inode {
	for {
		n := &fileNode{pg: d.pg}
		ch := d.NewInode(ctx, n, gofs.StableAttr{Mode: mode & syscall.S_IFMT, Ino: d.pg.fs.inos.get(d.pg.id('f', key))})
		// go-fuse hands back the node that has the number, if any: one
		// replaced behind since the number was read had it released
		// first (changedBehind), and the next read gives a new one.
		if f, ok := ch.Operations().(*fileNode); !ok || f == n || !f.isBehind() {
			return ch
		}
	}
}

// OnForget drops the node's inode number: the kernel no longer knows it.
func (d *dirNode) OnForget() { d.pg.fs.inos.forget(d.StableAttr().Ino) }

func (d *dirNode) Getattr(ctx context.Context, f gofs.FileHandle, out *fuse.AttrOut) syscall.Errno {
	if a := d.removed.Load(); a != nil {
		out.Attr = *a
		return 0
	}
	prefix, _, err := d.prefix()
	if err != nil {
		return errno("getattr", err)
	}
	return d.attr(prefix, &out.Attr)
}

func (d *dirNode) attr(prefix string, a *fuse.Attr) syscall.Errno {
	m, ts, err := d.meta(prefix)
	if err != nil {
		return errno("getattr", err)
	}
	return d.attrOf(prefix, m, ts, a)
}

// attrOf fills a with the attributes of the directory at prefix, whose
// metadata and shown time meta gave (or the lookup that found it).
func (d *dirNode) attrOf(prefix string, m btree.Meta, ts int64, a *fuse.Attr) syscall.Errno {
	n, err := d.subdirs(prefix)
	if err != nil {
		return errno("getattr", err)
	}
	dirAttr(d.pg.fs, a, d.StableAttr().Ino, m.Mode&0o7777)
	a.Nlink += n
	d.pg.fs.showMeta(a, m, ts)
	return 0
}

// subdirs counts the directories in the directory at prefix, for its link
// count: 2 and one per subdirectory's "..", as ext4 shows it (find and
// rename tests rely on it). The listing skips each subdirectory's keys, so
// it costs one step per name the directory holds.
func (d *dirNode) subdirs(prefix string) (uint32, error) {
	pg := d.pg
	gen := pg.dirGen.Load()
	pg.mu.Lock()
	n, ok := pg.subdirs[prefix]
	ok = ok && pg.subdirsAt == gen
	pg.mu.Unlock()
	if ok {
		return n, nil
	}
	n, err := d.countSubdirs(prefix)
	if err != nil {
		return 0, err
	}
	pg.mu.Lock()
	defer pg.mu.Unlock()
	if pg.subdirs == nil || pg.subdirsAt != gen || len(pg.subdirs) >= maxSubdirCounts {
		if pg.dirGen.Load() != gen {
			return n, nil // changed while counted: counted again next time
		}
		pg.subdirs, pg.subdirsAt = map[string]uint32{}, gen
	}
	pg.subdirs[prefix] = n
	return n, nil
}

// maxSubdirCounts bounds the cache of subdirectory counts of a page.
const maxSubdirCounts = 4096

// countSubdirs is subdirs without its cache.
func (d *dirNode) countSubdirs(prefix string) (uint32, error) {
	seen := map[string]bool{}
	note := func(key string) (skipTo string) {
		rel := key[len(prefix):]
		i := strings.IndexByte(rel, '/')
		if i < 0 || btree.IsLinkKey(key) {
			return ""
		}
		seen[rel[:i]] = true
		return prefix + rel[:i] + "0" // '0' follows '/'
	}
	for _, k := range d.pg.queuedMarkersUnder(prefix) { // before the tree; see listDir
		note(k)
	}
	for k := range d.pg.pendingUnder(prefix) {
		note(k)
	}
	err := d.pg.view(func(p *store.Page, head *store.Commit, t *btree.Tree) error {
		return walkDir(t, prefix, func(e btree.Entry) string { return note(e.Key) })
	})
	return uint32(len(seen)), err
}

// meta returns the metadata of the directory at prefix: its marker's, queued
// or committed, or a 0755 directory's of the mount's owner; and the time it
// shows if the marker has none.
func (d *dirNode) meta(prefix string) (btree.Meta, int64, error) {
	var m btree.Meta
	var ts int64
	queued, isQueued := d.pg.queuedMarker(prefix) // before the tree; see listDir
	err := d.pg.view(func(p *store.Page, head *store.Commit, t *btree.Tree) error {
		ts = d.pg.shownTime(p, head)
		var marker btree.Entry
		var found bool
		if !isQueued && prefix != "" && strings.HasSuffix(prefix, "/") {
			var err error
			if marker, found, err = t.Get(prefix); err != nil {
				return err
			}
		}
		m = dirMeta(queued, isQueued, marker, found)
		return nil
	})
	return m, ts, err
}

// dirMeta is the metadata a directory shows: its queued marker's, else
// its marker's in the tree, else a 0755 directory's.
func dirMeta(queued btree.Entry, isQueued bool, marker btree.Entry, found bool) btree.Meta {
	switch {
	case isQueued:
		return queued.Meta
	case found && marker.Meta.IsDir():
		return marker.Meta
	}
	return btree.Meta{Mode: syscall.S_IFDIR | 0o755}
}

func (d *dirNode) Statfs(ctx context.Context, out *fuse.StatfsOut) syscall.Errno {
	return statfs(d.pg.fs, out)
}

// Lookup answers with the entry the page's head holds. A change the mount
// did not make can land meanwhile, and its catch-up look for the node
// before go-fuse makes it d's child: nothing then drops the answer, with
// the attributes of the version before, from the kernel's cache. An
// answer that a catch-up raced is not cached.
func (d *dirNode) Lookup(ctx context.Context, name string, out *fuse.EntryOut) (*gofs.Inode, syscall.Errno) {
	return d.lookupKnowing(ctx, name, out, nil)
}

// lookupKnowing is Lookup, with what a listing found in the tree (see
// dirHandle.Lookup), if known is not nil.
func (d *dirNode) lookupKnowing(ctx context.Context, name string, out *fuse.EntryOut, known *listed) (*gofs.Inode, syscall.Errno) {
	seen := d.pg.behind.Load()
	ch, eno := d.lookup(ctx, name, out, known)
	if eno != 0 || ch == nil {
		return ch, eno
	}
	if d.pg.behind.Load() != seen {
		out.SetEntryTimeout(0)
		out.SetAttrTimeout(0)
	}
	return ch, 0
}

func (d *dirNode) lookup(ctx context.Context, name string, out *fuse.EntryOut, known *listed) (*gofs.Inode, syscall.Errno) {
	comps, ok := d.comps()
	switch {
	case d.removed.Load() != nil:
		return nil, syscall.ENOENT
	case !ok:
		return nil, syscall.ESTALE // dropped behind (see fileNode.entry)
	}
	if name == store.ReservedName && !d.below && d.pg.v.showsHistory() {
		ch := d.NewInode(ctx, &historyRoot{roDir(d.pg)}, gofs.StableAttr{Mode: fuse.S_IFDIR, Ino: d.pg.fs.inos.get(d.pg.metaID(""))})
		return ch, getattr(ctx, ch, &out.Attr)
	}
	if len(name) > keypath.MaxComponent {
		return nil, syscall.ENAMETOOLONG
	}
	child := append(comps, name)
	if keypath.IsContinuation(name) {
		prefix, err := keypath.Prefix(child)
		if err != nil {
			return nil, syscall.ENOENT
		}
		found := false
		err = d.pg.view(func(p *store.Page, head *store.Commit, t *btree.Tree) error {
			it := t.Prefix(prefix)
			for it.Next() && !found {
				found = pathHasPrefix(keypath.Path(it.Entry().Key, false), child)
			}
			return it.Err()
		})
		if err != nil {
			return nil, errno("lookup", err) // an I/O error is not ENOENT
		}
		if !found {
			return nil, syscall.ENOENT
		}
		ch := d.newDir(ctx, prefix)
		return ch, ch.Operations().(*dirNode).attr(prefix, &out.Attr)
	}
	key, coll, err := keypath.Key(child)
	if err != nil {
		return nil, syscall.ENOENT
	}
	if f := d.pg.pendingFile(key); f != nil && !coll {
		return f.EmbeddedInode(), f.fillAttrAt(key, &out.Attr)
	}
	if btree.IsLinkKey(key) {
		return nil, syscall.ENOENT // a file's entry, not a name
	}
	// A directory's attributes come from the same look at the tree as the
	// name (meta's, one view and one seek fewer a directory): READDIRPLUS
	// looks up every name it lists.
	var nf nameFacts
	var headTs, dirTs int64
	var linked *fileNode                                          // pending at the link key the name points at
	queued, markerQueued, pendingDir := d.pg.dirQueued(key + "/") // before the tree; see listDir
	err = d.pg.view(func(p *store.Page, head *store.Commit, t *btree.Tree) error {
		var err error
		if nf, err = known.factsOf(t, key); err != nil {
			return err
		}
		entry, isFile := &nf.entry, nf.isFile
		if g := entry.Meta.Link; isFile && g != "" {
			if linked = d.pg.pendingFile(g); linked == nil {
				var found bool
				if *entry, found, err = t.Follow(*entry); err != nil {
					return err
				} else if !found {
					return fmt.Errorf("name %q points at %q, which the page does not hold: %w", key, g, syscall.EIO)
				}
			}
		}
		if isFile && !entry.Meta.HasMtime {
			headTs = d.pg.shownTime(p, head) // shown only without an mtime of its own
		}
		if nf.isDir || pendingDir {
			dirTs = d.pg.shownTime(p, head)
		}
		return nil
	})
	if err != nil {
		return nil, errno("lookup", err)
	}
	entry, isFile, isDir := nf.entry, nf.isFile, nf.isDir || pendingDir
	marker, markerFound := nf.marker, nf.markerFound
	switch {
	case coll && isFile && isDir, !coll && isFile && !isDir:
		if linked != nil {
			return linked.EmbeddedInode(), linked.fillAttrAt(entry.Meta.Link, &out.Attr)
		}
		// A file open for writing shows what is written, not what was
		// last committed: the kernel takes a lookup's size as the file's.
		if ch := d.GetChild(name); ch != nil {
			if f, ok := ch.Operations().(*fileNode); ok && f.hasContent() {
				return ch, f.fillAttrAt(key, &out.Attr)
			}
		}
		entry.Meta = d.pg.withQueuedAtime(entry.Key, entry.Meta)
		ch := d.newFile(ctx, entry.Key, entry.Meta.FileMode())
		f := ch.Operations().(*fileNode)
		if g := entry.Key; btree.IsLinkKey(g) {
			f.setLinked(g)
		}
		f.shown(entry.Meta, headTs)
		fileAttr(d.pg.fs, &out.Attr, ch.StableAttr().Ino, entry.Meta, headTs)
		return ch, 0
	case !coll && isDir:
		ch := d.newDir(ctx, key+"/")
		return ch, ch.Operations().(*dirNode).attrOf(key+"/", dirMeta(queued, markerQueued, marker, markerFound), dirTs, &out.Attr)
	}
	return nil, syscall.ENOENT
}

func pathHasPrefix(p, prefix []string) bool {
	if len(p) <= len(prefix) {
		return false
	}
	for i := range prefix {
		if p[i] != prefix[i] {
			return false
		}
	}
	return true
}

func (d *dirNode) Setattr(ctx context.Context, f gofs.FileHandle, in *fuse.SetAttrIn, out *fuse.AttrOut) syscall.Errno {
	// A page's root has no marker: its attributes are the page's, and a
	// change of them succeeds and is not kept.
	eno := d.changeMarker(0, func(m *btree.Meta) (bool, syscall.Errno) {
		return d.pg.fs.setAttrs(m, in), 0
	})
	if eno != 0 {
		return eno
	}
	prefix, _, err := d.prefix()
	if err != nil {
		return errno("setattr", err)
	}
	return d.attr(prefix, &out.Attr)
}

// changeMarker applies change to the directory's marker, which holds its
// permission bits, owner, times and extended attributes, and whose mode is
// always a directory's; change reports whether it changed them. A page's
// root has no marker: onRoot is the answer there.
func (d *dirNode) changeMarker(onRoot syscall.Errno, change func(m *btree.Meta) (bool, syscall.Errno)) syscall.Errno {
	if d.pg.readOnly() {
		return syscall.EROFS
	}
	prefix, _, err := d.prefix()
	if err != nil {
		return errno("setattr", err)
	}
	if !strings.HasSuffix(prefix, "/") {
		return onRoot
	}
	marker, queued := d.pg.queuedMarker(prefix)
	if !queued {
		err := d.pg.view(func(p *store.Page, head *store.Commit, t *btree.Tree) error {
			var ok bool
			var err error
			marker, ok, err = t.Get(prefix)
			if !ok || !marker.Meta.IsDir() {
				marker = dirMarker(btree.Meta{Mode: syscall.S_IFDIR | 0o755, MtimeNs: d.pg.shownTime(p, head), HasMtime: true})
			}
			return err
		})
		if err != nil {
			return errno("setattr", err)
		}
	}
	changed, eno := change(&marker.Meta)
	if eno != 0 || !changed {
		return eno
	}
	if d.pg.v.queues() {
		err = d.pg.queueMarker(prefix, marker)
	} else {
		err = d.pg.apply(false, journal.Op{Key: prefix, Kind: store.OpMarker, Entry: marker})
	}
	return errno("setattr", err)
}
