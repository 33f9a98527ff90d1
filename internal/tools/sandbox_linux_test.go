//go:build linux

package tools_test

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
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
