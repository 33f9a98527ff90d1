package cli

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// agents check exits 0 with only warnings, 1 on an error (what cannot run as
// written included), 2 on bad usage,
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
		{"ok.md", "---\nname: A\nmodel: script\nsteps: 4\n---\nHi.\n", 0, []string{"A: model script, step cap 4, budget 50 (default), timeout 24h0m0s (default)"}},
		{"warn.md", "---\nname: B\nmodel: script\ntools: echo\napproval: [write_file]\n---\nHi.\n", 0,
			[]string{"warn.md:4: warning", "warn.md:5: warning", "B: model script, step cap 200"}},
		{"invalid.md", "---\nname: B\nmodel: script\nsteps: -1\ncolour: red\n---\nHi.\n", 1,
			[]string{"invalid.md:4: error", "invalid.md:5: error"}},
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

// TestTryHint: dev's try: line names what dev serves: the agent only among
// several, a scripted model only when the agent's own cannot be called.
func TestTryHint(t *testing.T) {
	var stderr bytes.Buffer
	c := &command{name: "dev", stderr: &stderr}
	noKey := func(string) string { return "" }
	withKey := func(k string) string {
		if k == "OPENAI_API_KEY" {
			return "sk-test"
		}
		return ""
	}
	repo, dir, cleanup, err := c.loadAgents(filepath.Join("..", "..", "data", "AGENTS.md"))
	if err != nil {
		t.Fatal(err)
	}
	cleanup()
	for _, tc := range []struct {
		env  func(string) string
		want string
	}{
		{noKey, "submit --watch --agent General --model script:scripts/demo.yaml 'hello'"},
		{withKey, "submit --watch --agent General 'hello'"},
	} {
		if got := tryHint(repo, dir, "", tc.env); got != tc.want {
			t.Errorf("tryHint(data/AGENTS.md) = %q, want %q", got, tc.want)
		}
	}
	// An agent on the bare script model needs a script: dev's own.
	wf, wfDir, cleanup, err := c.loadAgents(filepath.Join("..", "..", "examples", "workflow", "AGENTS.md"))
	if err != nil {
		t.Fatal(err)
	}
	cleanup()
	if got, want := tryHint(wf, wfDir, "/data/try.yaml", noKey), "submit --watch --script /data/try.yaml 'hello'"; got != want {
		t.Errorf("tryHint(examples/workflow) = %q, want %q", got, want)
	}
	// Without --agents in a directory with no data/AGENTS.md: the built-in
	// General agent, alone and scripted.
	t.Chdir(t.TempDir())
	set, dir, cleanup, err := c.loadAgents("")
	if err != nil {
		t.Fatal(err)
	}
	defer cleanup()
	if got, want := tryHint(set, dir, "", noKey), "submit --watch 'hello'"; got != want {
		t.Errorf("tryHint(built-in) = %q, want %q", got, want)
	}
	if !strings.Contains(stderr.String(), "built-in General agent") {
		t.Errorf("loadAgents did not say it serves the built-in agents: %q", stderr.String())
	}
	// demo and dev print the file's warnings whatever their log level.
	bad := filepath.Join(t.TempDir(), "AGENTS.md")
	if err := os.WriteFile(bad, []byte("---\nname: A\nmodel: script\ntols: [echo]\n---\nhi\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	stderr.Reset()
	if _, _, _, err := c.loadAgents(bad); err != nil || !strings.Contains(stderr.String(), `AGENTS.md:4: warning: unknown key "tols"`) {
		t.Errorf("loadAgents(a file with a typo): %v, printed %q", err, stderr.String())
	}
	// A named file that is missing is an error, not the built-in agents.
	if _, _, _, err := c.loadAgents("nosuch.md"); err == nil {
		t.Error("loadAgents(nosuch.md) loaded something")
	}
}
