package metrics

// timedFS's methods: one per request of go-fuse's RawFileSystem that has
// a reply, each timed under its lowercase name. A request go-fuse adds
// later passes through the embedded RawFileSystem untimed until it gets a
// method here.

import (
	"time"

	"github.com/hanwen/go-fuse/v2/fuse"

	"github.com/ledgerfs/ledgerfs/store"
)

func (f *timedFS) Lookup(cancel <-chan struct{}, header *fuse.InHeader, name string, out *fuse.EntryOut) fuse.Status {
	start := time.Now()
	st := f.RawFileSystem.Lookup(cancel, header, name, out)
	if header.NodeId == fuse.FUSE_ROOT_ID && name == store.StatsName {
		if st.Ok() {
			f.stats.Store(out.NodeId)
		}
		return st
	}
	f.m.observe("lookup", start)
	return st
}

func (f *timedFS) GetAttr(cancel <-chan struct{}, input *fuse.GetAttrIn, out *fuse.AttrOut) fuse.Status {
	defer f.observe("getattr", input.NodeId, time.Now())
	return f.RawFileSystem.GetAttr(cancel, input, out)
}

func (f *timedFS) SetAttr(cancel <-chan struct{}, input *fuse.SetAttrIn, out *fuse.AttrOut) fuse.Status {
	defer f.m.observe("setattr", time.Now())
	return f.RawFileSystem.SetAttr(cancel, input, out)
}

func (f *timedFS) Mknod(cancel <-chan struct{}, input *fuse.MknodIn, name string, out *fuse.EntryOut) fuse.Status {
	defer f.m.observe("mknod", time.Now())
	return f.RawFileSystem.Mknod(cancel, input, name, out)
}

func (f *timedFS) Mkdir(cancel <-chan struct{}, input *fuse.MkdirIn, name string, out *fuse.EntryOut) fuse.Status {
	defer f.m.observe("mkdir", time.Now())
	return f.RawFileSystem.Mkdir(cancel, input, name, out)
}

func (f *timedFS) Unlink(cancel <-chan struct{}, header *fuse.InHeader, name string) fuse.Status {
	defer f.m.observe("unlink", time.Now())
	return f.RawFileSystem.Unlink(cancel, header, name)
}

func (f *timedFS) Rmdir(cancel <-chan struct{}, header *fuse.InHeader, name string) fuse.Status {
	defer f.m.observe("rmdir", time.Now())
	return f.RawFileSystem.Rmdir(cancel, header, name)
}

func (f *timedFS) Rename(cancel <-chan struct{}, input *fuse.RenameIn, oldName string, newName string) fuse.Status {
	defer f.m.observe("rename", time.Now())
	return f.RawFileSystem.Rename(cancel, input, oldName, newName)
}

func (f *timedFS) Link(cancel <-chan struct{}, input *fuse.LinkIn, filename string, out *fuse.EntryOut) fuse.Status {
	defer f.m.observe("link", time.Now())
	return f.RawFileSystem.Link(cancel, input, filename, out)
}

func (f *timedFS) Symlink(cancel <-chan struct{}, header *fuse.InHeader, pointedTo string, linkName string, out *fuse.EntryOut) fuse.Status {
	defer f.m.observe("symlink", time.Now())
	return f.RawFileSystem.Symlink(cancel, header, pointedTo, linkName, out)
}

func (f *timedFS) Readlink(cancel <-chan struct{}, header *fuse.InHeader) ([]byte, fuse.Status) {
	defer f.m.observe("readlink", time.Now())
	return f.RawFileSystem.Readlink(cancel, header)
}

func (f *timedFS) Access(cancel <-chan struct{}, input *fuse.AccessIn) fuse.Status {
	defer f.m.observe("access", time.Now())
	return f.RawFileSystem.Access(cancel, input)
}

func (f *timedFS) GetXAttr(cancel <-chan struct{}, header *fuse.InHeader, attr string, dest []byte) (uint32, fuse.Status) {
	defer f.m.observe("getxattr", time.Now())
	return f.RawFileSystem.GetXAttr(cancel, header, attr, dest)
}

func (f *timedFS) ListXAttr(cancel <-chan struct{}, header *fuse.InHeader, dest []byte) (uint32, fuse.Status) {
	defer f.m.observe("listxattr", time.Now())
	return f.RawFileSystem.ListXAttr(cancel, header, dest)
}

func (f *timedFS) SetXAttr(cancel <-chan struct{}, input *fuse.SetXAttrIn, attr string, data []byte) fuse.Status {
	defer f.m.observe("setxattr", time.Now())
	return f.RawFileSystem.SetXAttr(cancel, input, attr, data)
}

func (f *timedFS) RemoveXAttr(cancel <-chan struct{}, header *fuse.InHeader, attr string) fuse.Status {
	defer f.m.observe("removexattr", time.Now())
	return f.RawFileSystem.RemoveXAttr(cancel, header, attr)
}

func (f *timedFS) Create(cancel <-chan struct{}, input *fuse.CreateIn, name string, out *fuse.CreateOut) fuse.Status {
	defer f.m.observe("create", time.Now())
	return f.RawFileSystem.Create(cancel, input, name, out)
}

func (f *timedFS) Tmpfile(cancel <-chan struct{}, input *fuse.CreateIn, out *fuse.CreateOut) fuse.Status {
	defer f.m.observe("tmpfile", time.Now())
	return f.RawFileSystem.Tmpfile(cancel, input, out)
}

func (f *timedFS) Open(cancel <-chan struct{}, input *fuse.OpenIn, out *fuse.OpenOut) fuse.Status {
	defer f.observe("open", input.NodeId, time.Now())
	return f.RawFileSystem.Open(cancel, input, out)
}

func (f *timedFS) Read(cancel <-chan struct{}, input *fuse.ReadIn, buf []byte) (fuse.ReadResult, fuse.Status) {
	defer f.observe("read", input.NodeId, time.Now())
	r, st := f.RawFileSystem.Read(cancel, input, buf)
	if st.Ok() && r != nil && input.NodeId != f.stats.Load() {
		f.m.bytesRead.Add(float64(r.Size()))
	}
	return r, st
}

func (f *timedFS) Lseek(cancel <-chan struct{}, in *fuse.LseekIn, out *fuse.LseekOut) fuse.Status {
	defer f.observe("lseek", in.NodeId, time.Now())
	return f.RawFileSystem.Lseek(cancel, in, out)
}

func (f *timedFS) GetLk(cancel <-chan struct{}, input *fuse.LkIn, out *fuse.LkOut) fuse.Status {
	defer f.m.observe("getlk", time.Now())
	return f.RawFileSystem.GetLk(cancel, input, out)
}

func (f *timedFS) SetLk(cancel <-chan struct{}, input *fuse.LkIn) fuse.Status {
	defer f.m.observe("setlk", time.Now())
	return f.RawFileSystem.SetLk(cancel, input)
}

func (f *timedFS) SetLkw(cancel <-chan struct{}, input *fuse.LkIn) fuse.Status {
	defer f.m.observe("setlkw", time.Now())
	return f.RawFileSystem.SetLkw(cancel, input)
}

func (f *timedFS) Write(cancel <-chan struct{}, input *fuse.WriteIn, data []byte) (uint32, fuse.Status) {
	defer f.m.observe("write", time.Now())
	n, st := f.RawFileSystem.Write(cancel, input, data)
	f.m.bytesWritten.Add(float64(n))
	return n, st
}

func (f *timedFS) Writev(cancel <-chan struct{}, input *fuse.WriteIn, data [][]byte) (uint32, fuse.Status) {
	defer f.m.observe("write", time.Now()) // what go-fuse serves writes with
	n, st := f.RawFileSystem.Writev(cancel, input, data)
	f.m.bytesWritten.Add(float64(n))
	return n, st
}

func (f *timedFS) CopyFileRange(cancel <-chan struct{}, input *fuse.CopyFileRangeIn) (uint32, fuse.Status) {
	defer f.m.observe("copyfilerange", time.Now())
	return f.RawFileSystem.CopyFileRange(cancel, input)
}

func (f *timedFS) Ioctl(cancel <-chan struct{}, input *fuse.IoctlIn, inbuf []byte, output *fuse.IoctlOut, outbuf []byte) fuse.Status {
	defer f.m.observe("ioctl", time.Now())
	return f.RawFileSystem.Ioctl(cancel, input, inbuf, output, outbuf)
}

func (f *timedFS) Flush(cancel <-chan struct{}, input *fuse.FlushIn) fuse.Status {
	defer f.observe("flush", input.NodeId, time.Now())
	return f.RawFileSystem.Flush(cancel, input)
}

func (f *timedFS) Fsync(cancel <-chan struct{}, input *fuse.FsyncIn) fuse.Status {
	defer f.m.observe("fsync", time.Now())
	return f.RawFileSystem.Fsync(cancel, input)
}

func (f *timedFS) Fallocate(cancel <-chan struct{}, input *fuse.FallocateIn) fuse.Status {
	defer f.m.observe("fallocate", time.Now())
	return f.RawFileSystem.Fallocate(cancel, input)
}

func (f *timedFS) OpenDir(cancel <-chan struct{}, input *fuse.OpenIn, out *fuse.OpenOut) fuse.Status {
	defer f.m.observe("opendir", time.Now())
	return f.RawFileSystem.OpenDir(cancel, input, out)
}

func (f *timedFS) ReadDir(cancel <-chan struct{}, input *fuse.ReadIn, out *fuse.DirEntryList) fuse.Status {
	defer f.m.observe("readdir", time.Now())
	return f.RawFileSystem.ReadDir(cancel, input, out)
}

func (f *timedFS) ReadDirPlus(cancel <-chan struct{}, input *fuse.ReadIn, out *fuse.DirEntryList) fuse.Status {
	defer f.m.observe("readdirplus", time.Now())
	return f.RawFileSystem.ReadDirPlus(cancel, input, out)
}

func (f *timedFS) FsyncDir(cancel <-chan struct{}, input *fuse.FsyncIn) fuse.Status {
	defer f.m.observe("fsyncdir", time.Now())
	return f.RawFileSystem.FsyncDir(cancel, input)
}

func (f *timedFS) StatFs(cancel <-chan struct{}, input *fuse.InHeader, out *fuse.StatfsOut) fuse.Status {
	defer f.m.observe("statfs", time.Now())
	return f.RawFileSystem.StatFs(cancel, input, out)
}

func (f *timedFS) Statx(cancel <-chan struct{}, input *fuse.StatxIn, out *fuse.StatxOut) fuse.Status {
	defer f.m.observe("statx", time.Now())
	return f.RawFileSystem.Statx(cancel, input, out)
}
