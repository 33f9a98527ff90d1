package lazyfs

import (
	"context"
	"errors"
	"io"
	"os"
	"path/filepath"
	"syscall"

	"github.com/hanwen/go-fuse/v2/fs"
	"github.com/hanwen/go-fuse/v2/fuse"
)

// node is a loopback node whose files' data goes through the cache, and
// whose operations stop at a crash.
type node struct {
	*fs.LoopbackNode
	fs *FS
}

var (
	_ fs.NodeWrapChilder    = (*node)(nil)
	_ fs.NodeLookuper       = (*node)(nil)
	_ fs.NodeGetattrer      = (*node)(nil)
	_ fs.NodeStatxer        = (*node)(nil)
	_ fs.NodeSetattrer      = (*node)(nil)
	_ fs.NodeOpener         = (*node)(nil)
	_ fs.NodeCreater        = (*node)(nil)
	_ fs.NodeUnlinker       = (*node)(nil)
	_ fs.NodeRenamer        = (*node)(nil)
	_ fs.NodeCopyFileRanger = (*node)(nil)
	_ fs.NodeTmpfiler       = (*node)(nil)
	_ fs.NodeMkdirer        = (*node)(nil)
	_ fs.NodeRmdirer        = (*node)(nil)
	_ fs.NodeMknoder        = (*node)(nil)
	_ fs.NodeSymlinker      = (*node)(nil)
	_ fs.NodeLinker         = (*node)(nil)
	_ fs.NodeSetxattrer     = (*node)(nil)
	_ fs.NodeRemovexattrer  = (*node)(nil)
	_ fs.NodeOpendirHandler = (*node)(nil)
	_ fs.NodeReaddirer      = (*node)(nil)

	_ fs.FileReader    = (*file)(nil)
	_ fs.FileWriter    = (*file)(nil)
	_ fs.FileFsyncer   = (*file)(nil)
	_ fs.FileFlusher   = (*file)(nil)
	_ fs.FileReleaser  = (*file)(nil)
	_ fs.FileGetattrer = (*file)(nil)
)

// WrapChild makes every node of the tree a node of this filesystem.
func (n *node) WrapChild(ctx context.Context, ops fs.InodeEmbedder) fs.InodeEmbedder {
	return &node{LoopbackNode: ops.(*fs.LoopbackNode), fs: n.fs}
}

func (n *node) key() key {
	a := n.StableAttr()
	return key{a.Ino, a.Gen}
}

// backing is the node's path in the backing directory.
func (n *node) backing() string { return filepath.Join(n.RootData.Path, n.Path(nil)) }

func keyOf(in *fs.Inode) key {
	a := in.StableAttr()
	return key{a.Ino, a.Gen}
}

func (n *node) Lookup(ctx context.Context, name string, out *fuse.EntryOut) (*fs.Inode, syscall.Errno) {
	if !n.fs.enter() {
		return nil, syscall.EIO
	}
	defer n.fs.exit()
	ch, e := n.LoopbackNode.Lookup(ctx, name, out)
	if e == 0 {
		n.fs.patch(keyOf(ch), &out.Attr.Size, &out.Attr.Blocks)
	}
	return ch, e
}

func (n *node) Getattr(ctx context.Context, fh fs.FileHandle, out *fuse.AttrOut) syscall.Errno {
	if !n.fs.enter() {
		return syscall.EIO
	}
	defer n.fs.exit()
	if f, ok := fh.(*file); ok {
		return f.getattr(out)
	}
	if e := n.LoopbackNode.Getattr(ctx, nil, out); e != 0 {
		return e
	}
	n.fs.patch(n.key(), &out.Size, &out.Blocks)
	return 0
}

func (n *node) Statx(ctx context.Context, fh fs.FileHandle, flags, mask uint32, out *fuse.StatxOut) syscall.Errno {
	if !n.fs.enter() {
		return syscall.EIO
	}
	defer n.fs.exit()
	if e := n.LoopbackNode.Statx(ctx, nil, flags, mask, out); e != 0 {
		return e
	}
	n.fs.patch(n.key(), &out.Size, &out.Blocks)
	return 0
}

func (n *node) Setattr(ctx context.Context, fh fs.FileHandle, in *fuse.SetAttrIn, out *fuse.AttrOut) syscall.Errno {
	if !n.fs.enter() {
		return syscall.EIO
	}
	defer n.fs.exit()
	rest := *in
	if size, ok := in.GetSize(); ok {
		c := n.fs.cacheOf(n.key())
		c.mu.Lock()
		err := c.begin(func() (int64, error) {
			if f, ok := fh.(*file); ok {
				return f.backingSize()
			}
			st, err := os.Lstat(n.backing())
			if err != nil {
				return 0, err
			}
			return st.Size(), nil
		})
		if err == nil {
			c.truncate(int64(size))
		}
		c.mu.Unlock()
		if err != nil {
			return errno(err)
		}
		rest.Valid &^= fuse.FATTR_SIZE
	}
	if e := n.LoopbackNode.Setattr(ctx, nil, &rest, out); e != 0 {
		return e
	}
	n.fs.patch(n.key(), &out.Size, &out.Blocks)
	return 0
}

// openBacking opens the backing file for reading and writing, whatever the
// caller asked (a sync through a read-only descriptor writes the cache
// through it), and with none of the flags the cache does itself (O_TRUNC,
// O_APPEND, O_SYNC).
func (n *node) openBacking(path string) (*os.File, error) {
	f, err := os.OpenFile(path, os.O_RDWR, 0)
	if err != nil {
		f, err = os.OpenFile(path, os.O_RDONLY, 0)
	}
	return f, err
}

func (n *node) Open(ctx context.Context, flags uint32) (fs.FileHandle, uint32, syscall.Errno) {
	if !n.fs.enter() {
		return nil, 0, syscall.EIO
	}
	defer n.fs.exit()
	bf, err := n.openBacking(n.backing())
	if err != nil {
		return nil, 0, errno(err)
	}
	f := &file{n: n, f: bf, sync: flags&syscall.O_DSYNC != 0}
	if flags&syscall.O_TRUNC != 0 && flags&syscall.O_ACCMODE != syscall.O_RDONLY {
		if err := f.truncate(); err != nil {
			bf.Close()
			return nil, 0, errno(err)
		}
	}
	// Direct I/O: every read and write comes here, none is served from or
	// kept in the kernel's page cache, which a crash would not drop.
	return f, fuse.FOPEN_DIRECT_IO, 0
}

func (n *node) Create(ctx context.Context, name string, flags, mode uint32, out *fuse.EntryOut) (*fs.Inode, fs.FileHandle, uint32, syscall.Errno) {
	if !n.fs.enter() {
		return nil, nil, 0, syscall.EIO
	}
	defer n.fs.exit()
	ch, lf, _, e := n.LoopbackNode.Create(ctx, name, flags&^(syscall.O_TRUNC|syscall.O_APPEND|syscall.O_DSYNC|syscall.O_SYNC), mode, out)
	if e != 0 {
		return nil, nil, 0, e
	}
	if r, ok := lf.(fs.FileReleaser); ok {
		r.Release(ctx)
	}
	child := ch.Operations().(*node)
	bf, err := n.openBacking(filepath.Join(n.backing(), name))
	if err != nil {
		return nil, nil, 0, errno(err)
	}
	f := &file{n: child, f: bf, sync: flags&syscall.O_DSYNC != 0}
	if flags&syscall.O_TRUNC != 0 {
		if err := f.truncate(); err != nil {
			bf.Close()
			return nil, nil, 0, errno(err)
		}
	}
	n.fs.patch(child.key(), &out.Attr.Size, &out.Attr.Blocks)
	return ch, f, fuse.FOPEN_DIRECT_IO, 0
}

func (n *node) Unlink(ctx context.Context, name string) syscall.Errno {
	if !n.fs.enter() {
		return syscall.EIO
	}
	defer n.fs.exit()
	ch := n.GetChild(name)
	e := n.LoopbackNode.Unlink(ctx, name)
	if e == 0 && ch != nil {
		n.fs.drop(keyOf(ch))
	}
	return e
}

func (n *node) Rename(ctx context.Context, name string, newParent fs.InodeEmbedder, newName string, flags uint32) syscall.Errno {
	if !n.fs.enter() {
		return syscall.EIO
	}
	defer n.fs.exit()
	src, dst := n.GetChild(name), newParent.EmbeddedInode().GetChild(newName)
	e := n.LoopbackNode.Rename(ctx, name, newParent, newName, flags)
	// A file renamed over another unlinks it (an exchange does not).
	if e == 0 && dst != nil && dst != src && flags&fs.RENAME_EXCHANGE == 0 {
		n.fs.drop(keyOf(dst))
	}
	return e
}

// CopyFileRange is refused: the kernel copies with read and write instead,
// through the cache.
func (n *node) CopyFileRange(ctx context.Context, fhIn fs.FileHandle, offIn uint64, out *fs.Inode, fhOut fs.FileHandle, offOut uint64, length uint64, flags uint64) (uint32, syscall.Errno) {
	return 0, syscall.EOPNOTSUPP
}

// Tmpfile is refused: a file without a name has no place in the cache's
// accounting.
func (n *node) Tmpfile(ctx context.Context, flags, mode uint32, out *fuse.EntryOut) (*fs.Inode, fs.FileHandle, uint32, syscall.Errno) {
	return nil, nil, 0, syscall.EOPNOTSUPP
}

// The operations below only change metadata, which reaches the backing
// directory at once; they stop at a crash like the others.

func (n *node) Mkdir(ctx context.Context, name string, mode uint32, out *fuse.EntryOut) (*fs.Inode, syscall.Errno) {
	if !n.fs.enter() {
		return nil, syscall.EIO
	}
	defer n.fs.exit()
	return n.LoopbackNode.Mkdir(ctx, name, mode, out)
}

func (n *node) Rmdir(ctx context.Context, name string) syscall.Errno {
	if !n.fs.enter() {
		return syscall.EIO
	}
	defer n.fs.exit()
	return n.LoopbackNode.Rmdir(ctx, name)
}

func (n *node) Mknod(ctx context.Context, name string, mode, rdev uint32, out *fuse.EntryOut) (*fs.Inode, syscall.Errno) {
	if !n.fs.enter() {
		return nil, syscall.EIO
	}
	defer n.fs.exit()
	return n.LoopbackNode.Mknod(ctx, name, mode, rdev, out)
}

func (n *node) Symlink(ctx context.Context, target, name string, out *fuse.EntryOut) (*fs.Inode, syscall.Errno) {
	if !n.fs.enter() {
		return nil, syscall.EIO
	}
	defer n.fs.exit()
	return n.LoopbackNode.Symlink(ctx, target, name, out)
}

func (n *node) Link(ctx context.Context, target fs.InodeEmbedder, name string, out *fuse.EntryOut) (*fs.Inode, syscall.Errno) {
	if !n.fs.enter() {
		return nil, syscall.EIO
	}
	defer n.fs.exit()
	return n.LoopbackNode.Link(ctx, target, name, out)
}

func (n *node) Setxattr(ctx context.Context, attr string, data []byte, flags uint32) syscall.Errno {
	if !n.fs.enter() {
		return syscall.EIO
	}
	defer n.fs.exit()
	return n.LoopbackNode.Setxattr(ctx, attr, data, flags)
}

func (n *node) Removexattr(ctx context.Context, attr string) syscall.Errno {
	if !n.fs.enter() {
		return syscall.EIO
	}
	defer n.fs.exit()
	return n.LoopbackNode.Removexattr(ctx, attr)
}

func (n *node) OpendirHandle(ctx context.Context, flags uint32) (fs.FileHandle, uint32, syscall.Errno) {
	if !n.fs.enter() {
		return nil, 0, syscall.EIO
	}
	defer n.fs.exit()
	h, fl, errno := n.LoopbackNode.OpendirHandle(ctx, flags)
	if s, ok := h.(dirStream); ok && errno == 0 {
		return &dir{dirStream: s, n: n}, fl, 0
	}
	return h, fl, errno
}

// dirStream is what go-fuse's loopback directory handle does.
type dirStream interface {
	fs.FileReaddirenter
	fs.FileSeekdirer
	fs.FileReleasedirer
	fs.FileFsyncdirer
	fs.FileIoctler
}

// dir is an open directory, whose fsyncs are counted. Metadata is never
// lost (doc.go), so they sync nothing more.
type dir struct {
	dirStream
	n *node
}

func (d *dir) Fsyncdir(ctx context.Context, flags uint32) syscall.Errno {
	if !d.n.fs.enter() {
		return syscall.EIO
	}
	defer d.n.fs.exit()
	if errno := d.dirStream.Fsyncdir(ctx, flags); errno != 0 {
		return errno
	}
	d.n.fs.synced(d.n.Path(nil))
	return 0
}

func (n *node) Readdir(ctx context.Context) (fs.DirStream, syscall.Errno) {
	if !n.fs.enter() {
		return nil, syscall.EIO
	}
	defer n.fs.exit()
	return n.LoopbackNode.Readdir(ctx)
}

// file is an open file: a descriptor of the backing file, read from while
// the file is clean and written to only by a sync.
type file struct {
	n *node
	f *os.File
	// sync says the file was opened O_SYNC or O_DSYNC: each write is synced
	// before it returns.
	sync bool
}

func (f *file) backingSize() (int64, error) {
	st, err := f.f.Stat()
	if err != nil {
		return 0, err
	}
	return st.Size(), nil
}

func (f *file) truncate() error {
	c := f.n.fs.cacheOf(f.n.key())
	c.mu.Lock()
	defer c.mu.Unlock()
	if err := c.begin(f.backingSize); err != nil {
		return err
	}
	c.truncate(0)
	return nil
}

func (f *file) Read(ctx context.Context, buf []byte, off int64) (fuse.ReadResult, syscall.Errno) {
	if !f.n.fs.enter() {
		return nil, syscall.EIO
	}
	defer f.n.fs.exit()
	c := f.n.fs.cacheOf(f.n.key())
	c.mu.Lock()
	defer c.mu.Unlock()
	var n int
	var err error
	if c.dirty {
		n, err = c.read(f.f, buf, off)
	} else {
		n, err = f.f.ReadAt(buf, off)
	}
	if err != nil && !errors.Is(err, io.EOF) {
		return nil, errno(err)
	}
	return fuse.ReadResultData(buf[:n]), 0
}

func (f *file) Write(ctx context.Context, data []byte, off int64) (uint32, syscall.Errno) {
	if !f.n.fs.enter() {
		return 0, syscall.EIO
	}
	defer f.n.fs.exit()
	c := f.n.fs.cacheOf(f.n.key())
	c.mu.Lock()
	defer c.mu.Unlock()
	if err := c.begin(f.backingSize); err != nil {
		return 0, errno(err)
	}
	if err := c.write(f.f, data, off); err != nil {
		return 0, errno(err)
	}
	if f.sync {
		if err := c.flush(f.f); err != nil {
			return 0, errno(err)
		}
		f.n.fs.synced(f.n.Path(nil))
	}
	return uint32(len(data)), 0
}

func (f *file) Fsync(ctx context.Context, flags uint32) syscall.Errno {
	if !f.n.fs.enter() {
		return syscall.EIO
	}
	defer f.n.fs.exit()
	c := f.n.fs.cacheOf(f.n.key())
	c.mu.Lock()
	err := c.flush(f.f)
	c.mu.Unlock()
	if err != nil {
		return errno(err)
	}
	f.n.fs.synced(f.n.Path(nil))
	return 0
}

func (f *file) getattr(out *fuse.AttrOut) syscall.Errno {
	var st syscall.Stat_t
	if err := syscall.Fstat(int(f.f.Fd()), &st); err != nil {
		return errno(err)
	}
	out.FromStat(&st)
	f.n.fs.patch(f.n.key(), &out.Size, &out.Blocks)
	return 0
}

func (f *file) Getattr(ctx context.Context, out *fuse.AttrOut) syscall.Errno {
	if !f.n.fs.enter() {
		return syscall.EIO
	}
	defer f.n.fs.exit()
	return f.getattr(out)
}

// Flush (a close) syncs nothing: the data stays in the cache.
func (f *file) Flush(ctx context.Context) syscall.Errno { return 0 }

func (f *file) Release(ctx context.Context) syscall.Errno {
	return errno(f.f.Close())
}
