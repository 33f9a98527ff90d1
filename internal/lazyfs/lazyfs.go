package lazyfs

import (
	"errors"
	"fmt"
	"io"
	"maps"
	"math"
	"os"
	"path/filepath"
	"sync"
	"syscall"
	"time"

	"github.com/hanwen/go-fuse/v2/fs"
	"github.com/hanwen/go-fuse/v2/fuse"
)

// pageSize is the unit the cache keeps a file's data in.
const pageSize = 4096

// FS is a mounted forgetful filesystem.
type FS struct {
	backing    string
	mountpoint string
	server     *fuse.Server

	// gate is held shared by every operation and exclusively by Crash, so a
	// crash falls between two operations, never inside one.
	gate   sync.RWMutex
	frozen bool

	mu     sync.Mutex
	files  map[key]*cache
	fsyncs map[string]int
}

// key names a file by its backing inode, so that its cache follows it
// through a rename and outlives the kernel forgetting the node.
type key struct{ ino, gen uint64 }

// cache is one file's unsynced data.
type cache struct {
	mu sync.Mutex
	// dirty says the file differs from its backing file; while it does not,
	// reads go to the backing file and the fields below are unused.
	dirty bool
	// size is the file's size as its readers see it.
	size int64
	// hole is where the backing file's bytes stop counting: those at or
	// past it read as zeros (a truncate, or a growth, since the last sync).
	hole int64
	// pages are the pages written since the last sync, by index.
	pages map[int64][]byte
}

// Mount mounts a forgetful view of the directory backing on mountpoint,
// with mount(2) itself (no fusermount; it needs root and /dev/fuse).
func Mount(backing, mountpoint string) (*FS, error) {
	backing, err := filepath.Abs(backing)
	if err != nil {
		return nil, err
	}
	root, err := fs.NewLoopbackRoot(backing)
	if err != nil {
		return nil, fmt.Errorf("lazyfs: %w", err)
	}
	f := &FS{backing: backing, mountpoint: mountpoint, files: map[key]*cache{}, fsyncs: map[string]int{}}
	// No kernel caching of names or attributes: a size the cache changed
	// must be what the next stat sees.
	var zero time.Duration
	opts := &fs.Options{
		EntryTimeout: &zero, AttrTimeout: &zero, NegativeTimeout: &zero,
		MountOptions: fuse.MountOptions{DirectMountStrict: true, FsName: backing, Name: "lazyfs"},
	}
	f.server, err = fs.Mount(mountpoint, &node{LoopbackNode: root.(*fs.LoopbackNode), fs: f}, opts)
	if err != nil {
		return nil, fmt.Errorf("lazyfs: mount %s: %w", mountpoint, err)
	}
	return f, nil
}

// Supported says why FUSE cannot be mounted here, or nil when it can be.
func Supported() error {
	dev, err := os.OpenFile("/dev/fuse", os.O_RDWR, 0)
	if err != nil {
		return fmt.Errorf("lazyfs: FUSE is not available: %w", err)
	}
	dev.Close()
	if os.Geteuid() != 0 {
		return errors.New("lazyfs: mounting without fusermount needs root")
	}
	return nil
}

// Crash freezes the filesystem, as a machine losing its power: every
// operation after it fails with EIO, and every byte not yet synced is gone.
// What a later Mount of the same backing directory shows is what was
// synced.
func (f *FS) Crash() {
	f.gate.Lock()
	defer f.gate.Unlock()
	f.frozen = true
	f.mu.Lock()
	f.files = map[key]*cache{}
	f.mu.Unlock()
}

// Unmount unmounts the filesystem: lazily when a process still has a file
// open on it, as after a crash whose processes are not all gone yet.
func (f *FS) Unmount() error {
	if err := f.server.Unmount(); err != nil {
		if err := syscall.Unmount(f.mountpoint, syscall.MNT_DETACH); err != nil {
			return fmt.Errorf("lazyfs: unmount %s: %w", f.mountpoint, err)
		}
	}
	return nil
}

// Fsyncs counts the fsyncs and fdatasyncs of each file and directory since
// the mount, by its path in the filesystem when it was synced (the root's is
// ""); a write to a file opened O_SYNC or O_DSYNC counts as one.
func (f *FS) Fsyncs() map[string]int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return maps.Clone(f.fsyncs)
}

// enter admits an operation unless the filesystem has crashed; exit ends it.
func (f *FS) enter() bool {
	f.gate.RLock()
	if f.frozen {
		f.gate.RUnlock()
		return false
	}
	return true
}

func (f *FS) exit() { f.gate.RUnlock() }

// cacheOf is the cache of the file k, made on first use.
func (f *FS) cacheOf(k key) *cache {
	f.mu.Lock()
	defer f.mu.Unlock()
	c := f.files[k]
	if c == nil {
		c = &cache{}
		f.files[k] = c
	}
	return c
}

// drop forgets the cache of a file that no name leads to any more.
func (f *FS) drop(k key) {
	f.mu.Lock()
	defer f.mu.Unlock()
	delete(f.files, k)
}

func (f *FS) synced(path string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.fsyncs[path]++
}

// patch sets the size of attributes read from the backing file to what
// the cache holds.
func (f *FS) patch(k key, size, blocks *uint64) {
	f.mu.Lock()
	c := f.files[k]
	f.mu.Unlock()
	if c == nil {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.dirty {
		*size = uint64(c.size)
		*blocks = (uint64(c.size) + 511) / 512
	}
}

// begin makes the cache the file's truth from here on, its size that of the
// backing file.
func (c *cache) begin(backingSize func() (int64, error)) error {
	if c.dirty {
		return nil
	}
	size, err := backingSize()
	if err != nil {
		return err
	}
	c.dirty, c.size, c.hole, c.pages = true, size, math.MaxInt64, map[int64][]byte{}
	return nil
}

// load reads page idx as the file has it: the backing file's bytes up to
// the hole and the size, zeros after.
func (c *cache) load(r io.ReaderAt, idx int64) ([]byte, error) {
	if p := c.pages[idx]; p != nil {
		return p, nil
	}
	p := make([]byte, pageSize)
	base := idx * pageSize
	if limit := min(c.hole, c.size); base < limit {
		if _, err := r.ReadAt(p[:min(pageSize, limit-base)], base); err != nil && !errors.Is(err, io.EOF) {
			return nil, err
		}
	}
	return p, nil
}

func (c *cache) read(r io.ReaderAt, buf []byte, off int64) (int, error) {
	end := min(off+int64(len(buf)), c.size)
	n := 0
	for pos := off; pos < end; {
		p, err := c.load(r, pos/pageSize)
		if err != nil {
			return n, err
		}
		k := copy(buf[n:end-off], p[pos%pageSize:])
		n += k
		pos += int64(k)
	}
	return n, nil
}

func (c *cache) write(r io.ReaderAt, data []byte, off int64) error {
	if end := off + int64(len(data)); end > c.size {
		// The backing file's bytes past the old end are not the file's.
		c.hole = min(c.hole, c.size)
		c.size = end
	}
	for n := 0; n < len(data); {
		pos := off + int64(n)
		p, err := c.load(r, pos/pageSize)
		if err != nil {
			return err
		}
		c.pages[pos/pageSize] = p
		n += copy(p[pos%pageSize:], data[n:])
	}
	return nil
}

func (c *cache) truncate(size int64) {
	if size < c.size {
		for idx, p := range c.pages {
			switch base := idx * pageSize; {
			case base >= size:
				delete(c.pages, idx)
			case base+pageSize > size:
				clear(p[size-base:])
			}
		}
	}
	c.hole = min(c.hole, c.size, size)
	c.size = size
}

// flush writes the cache through to the backing file. The backing
// directory stands for the disk, which does not crash: once written there,
// data is synced, and no fsync of the backing file is needed.
func (c *cache) flush(f *os.File) error {
	if !c.dirty {
		return nil
	}
	st, err := f.Stat()
	if err != nil {
		return err
	}
	if c.hole < st.Size() {
		if err := f.Truncate(c.hole); err != nil {
			return err
		}
	}
	for idx, p := range c.pages {
		base := idx * pageSize
		if base >= c.size {
			continue
		}
		if _, err := f.WriteAt(p[:min(pageSize, c.size-base)], base); err != nil {
			return err
		}
	}
	if err := f.Truncate(c.size); err != nil {
		return err
	}
	c.dirty, c.pages = false, nil
	return nil
}

// errno is the errno of an error from the backing directory.
func errno(err error) syscall.Errno {
	if err == nil {
		return 0
	}
	return fs.ToErrno(err)
}
