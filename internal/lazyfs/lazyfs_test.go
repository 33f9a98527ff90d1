package lazyfs

import (
	"bytes"
	"errors"
	"os"
	"path/filepath"
	"syscall"
	"testing"
)

// requireFUSE skips a test where FUSE cannot be mounted, and fails it under
// CI=true, where it must run.
func requireFUSE(t *testing.T) {
	t.Helper()
	if err := Supported(); err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatalf("CI=true: %v", err)
		}
		t.Skipf("%v: the forgetful filesystem cannot be tested here", err)
	}
}

// disk is a backing directory and the mounts of it a test makes one after
// another, as a machine's disk and its boots.
type disk struct {
	t        *testing.T
	backing  string
	mnt      string
	fs       *FS
	unmounts int
}

func newDisk(t *testing.T) *disk {
	t.Helper()
	requireFUSE(t)
	d := &disk{t: t, backing: t.TempDir(), mnt: t.TempDir()}
	d.mount()
	t.Cleanup(func() {
		if d.fs != nil {
			d.fs.Unmount()
		}
	})
	return d
}

func (d *disk) mount() {
	d.t.Helper()
	f, err := Mount(d.backing, d.mnt)
	if err != nil {
		d.t.Fatal(err)
	}
	d.fs = f
}

// reboot crashes the filesystem, unmounts it and mounts it again.
func (d *disk) reboot() {
	d.t.Helper()
	d.fs.Crash()
	if _, err := os.Stat(d.path("")); !errors.Is(err, syscall.EIO) {
		d.t.Errorf("a stat after the crash: %v, want EIO", err)
	}
	if err := d.fs.Unmount(); err != nil {
		d.t.Fatal(err)
	}
	d.fs = nil
	d.mount()
}

func (d *disk) path(name string) string { return filepath.Join(d.mnt, name) }

func (d *disk) write(name string, data []byte, flag int) *os.File {
	d.t.Helper()
	f, err := os.OpenFile(d.path(name), os.O_RDWR|os.O_CREATE|flag, 0o644)
	if err != nil {
		d.t.Fatal(err)
	}
	if _, err := f.Write(data); err != nil {
		d.t.Fatal(err)
	}
	return f
}

func (d *disk) want(name string, want []byte) {
	d.t.Helper()
	got, err := os.ReadFile(d.path(name))
	if err != nil {
		d.t.Fatal(err)
	}
	if !bytes.Equal(got, want) {
		d.t.Fatalf("%s holds %d bytes %.40q…, want %d bytes %.40q…", name, len(got), got, len(want), want)
	}
	st, err := os.Stat(d.path(name))
	if err != nil {
		d.t.Fatal(err)
	}
	if st.Size() != int64(len(want)) {
		d.t.Fatalf("%s: stat says %d bytes, want %d", name, st.Size(), len(want))
	}
}

func pattern(n int, seed byte) []byte {
	b := make([]byte, n)
	for i := range b {
		b[i] = seed + byte(i%251)
	}
	return b
}

// A file written and closed reads back whole, on the mount, while the disk
// holds none of it.
func TestWrittenDataSurvivesCloseButNotTheDisk(t *testing.T) {
	d := newDisk(t)
	data := pattern(10_000, 'a')
	d.write("f", data, 0).Close()
	d.want("f", data)
	if st, err := os.Stat(filepath.Join(d.backing, "f")); err != nil || st.Size() != 0 {
		t.Fatalf("the backing file before a sync: %v, %v", st.Size(), err)
	}
}

// A crash drops what was not synced: a file created and never synced comes
// back empty, one synced and then appended to comes back as synced.
func TestCrashDropsUnsyncedData(t *testing.T) {
	d := newDisk(t)
	synced := pattern(5000, 'a')
	f := d.write("synced", synced, 0)
	if err := f.Sync(); err != nil {
		t.Fatal(err)
	}
	if _, err := f.Write(pattern(3000, 'x')); err != nil {
		t.Fatal(err)
	}
	f.Close()
	d.write("lost", pattern(100, 'b'), 0).Close()
	if err := os.Mkdir(d.path("dir"), 0o755); err != nil {
		t.Fatal(err)
	}
	d.reboot()
	d.want("synced", synced)
	d.want("lost", nil)
	if st, err := os.Stat(d.path("dir")); err != nil || !st.IsDir() {
		t.Fatalf("a directory made before the crash: %v", err)
	}
}

// fdatasync and a write to a file opened O_SYNC or O_DSYNC sync as fsync
// does; each counts as a sync of its file, and a directory's fsync as one
// of the directory.
func TestEverySyncSurvives(t *testing.T) {
	d := newDisk(t)
	a := d.write("fdatasync", pattern(4097, 'a'), 0)
	if err := syscall.Fdatasync(int(a.Fd())); err != nil {
		t.Fatal(err)
	}
	a.Close()
	d.write("osync", pattern(9000, 'b'), os.O_SYNC).Close()
	d.write("odsync", pattern(10, 'c'), syscall.O_DSYNC).Close()
	// A sync through another descriptor, opened read-only, writes the file.
	d.write("other", pattern(300, 'd'), 0).Close()
	r, err := os.Open(d.path("other"))
	if err != nil {
		t.Fatal(err)
	}
	if err := r.Sync(); err != nil {
		t.Fatal(err)
	}
	r.Close()
	// A directory's fsync counts too (a rename made durable, as
	// nats-server's writeAtomically does), and its entries still read.
	if err := os.Mkdir(d.path("dir"), 0o755); err != nil {
		t.Fatal(err)
	}
	d.write("dir/f", pattern(10, 'e'), 0).Close()
	dir, err := os.Open(d.path("dir"))
	if err != nil {
		t.Fatal(err)
	}
	if err := dir.Sync(); err != nil {
		t.Fatal(err)
	}
	if names, err := dir.Readdirnames(-1); err != nil || len(names) != 1 || names[0] != "f" {
		t.Errorf("the synced directory reads %q, %v", names, err)
	}
	dir.Close()
	counts := d.fs.Fsyncs()
	for _, name := range []string{"fdatasync", "osync", "odsync", "other", "dir"} {
		if counts[name] != 1 {
			t.Errorf("%s: %d syncs counted, want 1", name, counts[name])
		}
	}
	if counts["dir/f"] != 0 {
		t.Errorf("dir/f: %d syncs counted, want 0", counts["dir/f"])
	}
	d.reboot()
	d.want("fdatasync", pattern(4097, 'a'))
	d.want("osync", pattern(9000, 'b'))
	d.want("odsync", pattern(10, 'c'))
	d.want("other", pattern(300, 'd'))
}

// A truncate is data: seen at once, lost in a crash unless synced; a file
// cut and then written past its new end reads zeros in between.
func TestTruncate(t *testing.T) {
	d := newDisk(t)
	full := pattern(10_000, 'a')
	f := d.write("f", full, 0)
	if err := f.Sync(); err != nil {
		t.Fatal(err)
	}
	if err := f.Truncate(100); err != nil {
		t.Fatal(err)
	}
	d.want("f", full[:100])
	f.Close()
	d.reboot()
	d.want("f", full)

	if err := os.Truncate(d.path("f"), 100); err != nil {
		t.Fatal(err)
	}
	f, err := os.OpenFile(d.path("f"), os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.WriteAt([]byte("end"), 8000); err != nil {
		t.Fatal(err)
	}
	want := append(append(append([]byte{}, full[:100]...), make([]byte, 7900)...), "end"...)
	d.want("f", want)
	if err := f.Sync(); err != nil {
		t.Fatal(err)
	}
	f.Close()
	// O_TRUNC at open, not synced: lost.
	d.write("f", []byte("short"), os.O_TRUNC).Close()
	d.want("f", []byte("short"))
	d.reboot()
	d.want("f", want)
}

// A file's unsynced data follows it through a rename, and a sync by its
// new name keeps it.
func TestRenameKeepsTheCache(t *testing.T) {
	d := newDisk(t)
	d.write("tmp", pattern(6000, 'a'), 0).Close()
	if err := os.Rename(d.path("tmp"), d.path("final")); err != nil {
		t.Fatal(err)
	}
	d.want("final", pattern(6000, 'a'))
	f, err := os.OpenFile(d.path("final"), os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	if err := f.Sync(); err != nil {
		t.Fatal(err)
	}
	f.Close()
	d.write("gone", []byte("x"), 0).Close()
	if err := os.Remove(d.path("gone")); err != nil {
		t.Fatal(err)
	}
	d.reboot()
	d.want("final", pattern(6000, 'a'))
	if _, err := os.Stat(d.path("gone")); !os.IsNotExist(err) {
		t.Fatalf("a removed file: %v", err)
	}
}
