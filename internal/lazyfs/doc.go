// Package lazyfs is a FUSE filesystem that forgets, after LazyFS (the
// filesystem Jepsen runs under databases to pull the power on them): it
// passes every operation through to a backing directory, except that the
// data written to a file stays in a page cache of its own until that file
// is fsynced. Reads see the cache, so to the processes on the mount nothing
// is missing; a crash (FS.Crash) freezes the filesystem and drops every byte
// that was not synced, and a mount of the same backing directory shows only
// what was.
//
// What counts as synced: data written before an fsync or fdatasync of the
// file (through any of its descriptors) returned, and a write to a file
// opened O_SYNC or O_DSYNC once the write returned. Size changes (a write
// past the end, a truncate, open with O_TRUNC) are data: they are cached
// and synced the same way.
//
// What it simplifies, so that what the tests find is about data the
// program did not sync, not about the filesystem:
//   - Metadata operations (create, mkdir, rename, unlink, link, chmod,
//     utimes) reach the backing directory at once and are never lost, as
//     if every directory were fsynced after each. A file created and never
//     synced comes back empty, not absent.
//   - No torn or reordered writes: a crash drops all of a file's unsynced
//     data, never part of it; a sync writes all of it.
//   - The cache is per file, not per page of the device: one file's fsync
//     syncs nothing of another's.
//   - fallocate, copy_file_range and O_TMPFILE are refused (EOPNOTSUPP), so
//     data never bypasses the cache; the kernel falls back to read and write
//     where it can.
//   - Files are opened with direct I/O (no kernel page cache), so a shared
//     writable mmap is not supported.
//   - After a crash every operation fails with EIO until the filesystem is
//     unmounted; it does not block like a dead disk.
//
// internal/lazyfs/lazyfsd serves it as a process of its own, for tests that
// crash it under other processes.
package lazyfs
