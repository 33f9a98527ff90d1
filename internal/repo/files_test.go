package repo_test

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// maxTracked is the largest file git may track: a build output or a data
// dump committed once stays in every clone's history for ever.
const maxTracked = 1 << 20

// allowed are the tracked files that may be larger: the screenshots the
// docs show, which grow with the UI and cannot be made from the source.
var allowed = map[string]bool{
	"docs/timeline.png": true,
	"docs/ui.png":       true,
}

// TestNoLargeFiles fails on any file git tracks that is over 1 MiB and not
// in allowed.
func TestNoLargeFiles(t *testing.T) {
	root := gitRoot(t)
	cmd := exec.Command("git", "ls-files", "-z")
	cmd.Dir = root
	out, err := cmd.Output()
	if err != nil {
		t.Skipf("git ls-files: %v (not a git checkout)", err)
	}
	n := 0
	for _, name := range strings.Split(string(out), "\x00") {
		if name == "" {
			continue
		}
		n++
		// Lstat: a tracked symlink is stored as its target's name.
		fi, err := os.Lstat(filepath.Join(root, name))
		if err != nil {
			continue // deleted in the work tree, not yet committed
		}
		if fi.Size() > maxTracked && !allowed[name] {
			t.Errorf("%s is %.1f MB: a tracked file may be at most 1 MB (build outputs belong in .gitignore; a necessary large file goes in this test's allow-list)",
				name, float64(fi.Size())/(1<<20))
		}
	}
	if n == 0 {
		t.Fatal("git ls-files listed nothing")
	}
}

func gitRoot(t *testing.T) string {
	t.Helper()
	cmd := exec.Command("git", "rev-parse", "--show-toplevel")
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Skipf("git rev-parse: %v %s (not a git checkout)", err, stderr.String())
	}
	return strings.TrimSpace(string(out))
}
