//go:build linux

package tools_test

import (
	"context"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/jetloop/jetloop/internal/tools"
)

// TestFileToolsDoNotBlockOnAFIFO: a FIFO under the root (a repository may
// hold one, a shell command can make one) is refused at once by every file
// tool. Opening one blocks until its other end is opened, past the call's
// deadline and any abort, so a call would hold its slot and the worker's
// drain forever.
func TestFileToolsDoNotBlockOnAFIFO(t *testing.T) {
	ts, root := builtins(t, false)
	must(t, syscall.Mkfifo(filepath.Join(root, "pipe"), 0o644))
	must(t, os.MkdirAll(filepath.Join(root, "fifos"), 0o755))
	must(t, syscall.Mkfifo(filepath.Join(root, "fifos", "p.txt"), 0o644))
	for _, c := range []struct {
		tool, args string
		refused    bool
	}{
		{"read_file", `{"path":"pipe"}`, true},
		{"list_dir", `{"path":"pipe"}`, true},
		{"write_file", `{"path":"pipe","content":"x"}`, true},
		{"grep", `{"pattern":"x","path":"pipe"}`, false},
		{"grep", `{"pattern":"x","path":"fifos","glob":"*.txt"}`, false},
	} {
		ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
		done := make(chan error, 1)
		go func() {
			_, err := ts[c.tool].Call(ctx, json.RawMessage(c.args))
			done <- err
		}()
		// Not a measure of speed: a call still blocked long after its
		// context ended is blocked for good.
		select {
		case err := <-done:
			if c.refused && err == nil {
				t.Errorf("%s %s: no error", c.tool, c.args)
			}
		case <-time.After(30 * time.Second):
			t.Fatalf("%s %s is still blocked on the FIFO", c.tool, c.args)
		}
		cancel()
	}
}

// A directory the worker cannot read is left out of a search, which goes on
// with the others. Root reads every directory, so the test needs another
// user to show anything.
func TestGrepSkipsADirectoryItCannotRead(t *testing.T) {
	if os.Geteuid() == 0 {
		t.Skip("root reads every directory")
	}
	ts, root := builtins(t, false)
	must(t, os.MkdirAll(filepath.Join(root, "locked"), 0o755))
	must(t, os.WriteFile(filepath.Join(root, "locked", "x.go"), []byte("func Foo\n"), 0o644))
	must(t, os.Chmod(filepath.Join(root, "locked"), 0))
	t.Cleanup(func() { _ = os.Chmod(filepath.Join(root, "locked"), 0o755) })
	res, err := call(t, ts["grep"], `{"pattern":"func Foo"}`)
	if err != nil || !strings.Contains(res.Output, "pkg/b.go:3: func Foo") {
		t.Errorf("grep = %q, %v", res.Output, err)
	}
}

// A file with a second hard link is refused by every file tool: the link
// may bring a file from outside the root in (a hard link needs no access to
// the directory it points into), and writing through it would change the
// other name too. Nothing is read, nothing is written, nothing is left.
func TestHardLinkedFilesAreRefused(t *testing.T) {
	ts, root := builtins(t, false)
	secret := filepath.Join(filepath.Dir(root), "secret")
	must(t, os.Link(secret, filepath.Join(root, "linked")))
	must(t, os.Link(filepath.Join(root, "a.txt"), filepath.Join(root, "pkg", "twin.txt")))
	for _, c := range []struct{ tool, args string }{
		{"read_file", `{"path":"linked"}`},
		{"read_file", `{"path":"pkg/twin.txt"}`},
		{"read_file", `{"path":"a.txt"}`},
		{"grep", `{"pattern":"hunter","path":"linked"}`},
		{"write_file", `{"path":"linked","content":"overwritten"}`},
		{"write_file", `{"path":"pkg/twin.txt","content":"overwritten"}`},
	} {
		res, err := call(t, ts[c.tool], c.args)
		var he *tools.HardLinkError
		if !errors.As(err, &he) || he.Links != 2 {
			t.Errorf("%s %s = %q, %v; want a hard-link refusal", c.tool, c.args, res.Output, err)
		}
		if strings.Contains(res.Output, "hunter2") {
			t.Errorf("%s %s leaked the secret", c.tool, c.args)
		}
	}
	// A search of the whole root skips them and goes on.
	res, err := call(t, ts["grep"], `{"pattern":"hunter|one|func Foo"}`)
	if err != nil || res.Output != "pkg/b.go:3: func Foo() {}\n" {
		t.Errorf("grep = %q, %v", res.Output, err)
	}
	if data, _ := os.ReadFile(secret); string(data) != "hunter2\n" {
		t.Errorf("the file outside the root holds %q", data)
	}
	if data, _ := os.ReadFile(filepath.Join(root, "a.txt")); string(data) != "one\ntwo\nthree\nfour\n" {
		t.Errorf("a.txt holds %q", data)
	}
	for _, dir := range []string{root, filepath.Join(root, "pkg")} {
		if left := temps(t, dir); len(left) > 0 {
			t.Errorf("a refused write left %q in %s", left, dir)
		}
	}
	// Once the other name is gone the file is an ordinary one again.
	must(t, os.Remove(filepath.Join(root, "pkg", "twin.txt")))
	if _, err := call(t, ts["write_file"], `{"path":"a.txt","content":"new\n"}`); err != nil {
		t.Errorf("write after the link went: %v", err)
	}
}

// A write replaces its target with a new file rather than writing into the
// old one: a reader that opened the old file keeps reading it whole, and a
// FIFO in the way is refused without blocking or leaving a temporary file.
func TestWritesReplaceTheFileWhole(t *testing.T) {
	ts, root := builtins(t, false)
	old, err := os.Open(filepath.Join(root, "a.txt"))
	must(t, err)
	defer old.Close()
	if _, err := call(t, ts["write_file"], `{"path":"a.txt","content":"replaced"}`); err != nil {
		t.Fatal(err)
	}
	before := make([]byte, 64)
	n, _ := old.Read(before)
	if string(before[:n]) != "one\ntwo\nthree\nfour\n" {
		t.Errorf("a reader of the old file saw %q", before[:n])
	}
	must(t, syscall.Mkfifo(filepath.Join(root, "pipe"), 0o644))
	if _, err := call(t, ts["write_file"], `{"path":"pipe","content":"x"}`); err == nil {
		t.Error("a write onto a FIFO")
	}
	if left := temps(t, root); len(left) > 0 {
		t.Errorf("left %q", left)
	}
}

// A file made read-only is not replaced, although a rename would only need
// the directory's permission. Root writes every file, so the test needs
// another user to show anything.
func TestReadOnlyFilesAreNotReplaced(t *testing.T) {
	if os.Geteuid() == 0 {
		t.Skip("root writes every file")
	}
	ts, root := builtins(t, false)
	must(t, os.Chmod(filepath.Join(root, "a.txt"), 0o444))
	if _, err := call(t, ts["write_file"], `{"path":"a.txt","content":"x"}`); err == nil {
		t.Error("a read-only file was replaced")
	}
	if data, _ := os.ReadFile(filepath.Join(root, "a.txt")); string(data) != "one\ntwo\nthree\nfour\n" {
		t.Errorf("a.txt holds %q", data)
	}
	if left := temps(t, root); len(left) > 0 {
		t.Errorf("left %q", left)
	}
}
