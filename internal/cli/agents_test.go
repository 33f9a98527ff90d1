package cli

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// agents check exits 0 with only warnings, 1 on an error, 2 on bad usage,
// and names the file and line of each finding.
func TestAgentsCheck(t *testing.T) {
	dir := t.TempDir()
	write := func(name, src string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(src), 0o644); err != nil {
			t.Fatal(err)
		}
		return p
	}
	run := func(args ...string) (int, string) {
		var out, errOut bytes.Buffer
		code := Main(context.Background(), args, &out, &errOut)
		return code, out.String() + errOut.String()
	}
	for _, tc := range []struct {
		name, src string
		code      int
		want      []string
	}{
		{"ok.md", "---\nname: A\nmodel: script\nsteps: 4\n---\nHi.\n", 0, []string{"A: model script, step cap 4"}},
		{"warn.md", "---\nname: B\nmodel: script\nsteps: -1\ncolour: red\n---\nHi.\n", 0,
			[]string{"warn.md:4: warning", "warn.md:5: warning", "B: model script, step cap 0"}},
		{"dup.md", "---\nname: C\n---\nOne.\n---\nname: C\n---\nTwo.\n", 1, []string{"dup.md:6: error"}},
	} {
		code, out := run("agents", "check", write(tc.name, tc.src))
		if code != tc.code {
			t.Errorf("%s: exit %d, want %d\n%s", tc.name, code, tc.code, out)
		}
		for _, w := range tc.want {
			if !strings.Contains(out, w) {
				t.Errorf("%s: output lacks %q:\n%s", tc.name, w, out)
			}
		}
	}
	if code, _ := run("agents", "check", filepath.Join(dir, "missing.md")); code != 1 {
		t.Errorf("a missing file: exit %d", code)
	}
	if code, _ := run("agents", "lint", "x"); code != ExitUsage {
		t.Errorf("agents lint: exit %d", code)
	}
	if code, out := run("agents", "check", "../../data/AGENTS.md"); code != 0 || !strings.Contains(out, "General") {
		t.Errorf("the shipped agents: exit %d\n%s", code, out)
	}
}
