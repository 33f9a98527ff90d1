package blackbox

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/jetloop/jetloop/internal/events"
	"github.com/jetloop/jetloop/internal/testkit"
)

// mcpBin is an MCP server installed by make test from the lock file in
// internal/tools/testdata/mcp. Without it the test skips, or fails in CI.
func mcpBin(t *testing.T, root, name string) string {
	t.Helper()
	path := filepath.Join(root, "internal", "tools", "testdata", "mcp", "node_modules", ".bin", name)
	if _, err := os.Stat(path); err != nil {
		msg := fmt.Sprintf("the MCP server %s is not installed (%v): run make mcp-servers", name, err)
		if os.Getenv("CI") != "" {
			t.Fatal(msg)
		}
		t.Skip(msg)
	}
	return path
}

// TestMCPToolsInATurn runs a turn through the real orchestrator whose model
// calls the tools of two real MCP servers, served by toolworker --mcp next
// to a built-in tool; --tools picks among both. Its servers do not outlive
// the worker.
func TestMCPToolsInATurn(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and starts the binaries and MCP servers")
	}
	root := repoRoot(t)
	everything, filesystem := mcpBin(t, root, "mcp-server-everything"), mcpBin(t, root, "mcp-server-filesystem")
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "notes.txt"), []byte("served over MCP\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	srv := testkit.Start(t)
	url := srv.ClientURL()
	_, js := srv.Connect(t)
	t.Cleanup(func() { testkit.CheckLogs(t, js) })
	worker := start(t, root, "toolworker", "--nats", url, "--root", root,
		"--mcp", "everything="+everything+" stdio",
		"--mcp", fmt.Sprintf("fs=%s '%s'", filesystem, dir),
		"--tools", "echo,everything__get-sum,fs__read_text_file")
	orch := start(t, root, "orchestrator", "--nats", url, "--agents", "data/AGENTS.md", "--ack-wait", "5s", "--allow-scripts")
	testkit.WaitFor(t, "the tool worker to serve", func() bool { return strings.Contains(worker.out.String(), "serving") })
	testkit.WaitFor(t, "the orchestrator to serve", func() bool { return strings.Contains(orch.out.String(), "serving") })
	for _, tool := range []string{"echo", "everything__get-sum", "fs__read_text_file"} {
		testkit.WaitTool(t, js, tool)
	}
	servers := children(worker.cmd.Process.Pid)

	script := filepath.Join(dir, "script.yaml")
	if err := os.WriteFile(script, []byte(fmt.Sprintf(`responses:
  - text: "Adding and reading at once."
    tool_calls:
      - {name: everything__get-sum, arguments: {a: 20, b: 22}}
      - {name: fs__read_text_file, arguments: {path: %q}}
  - text: "A file outside the server's directory."
    tool_calls:
      - {name: fs__read_text_file, arguments: {path: /etc/hostname}}
  - text: "42, and the notes say: served over MCP."
`, filepath.Join(dir, "notes.txt"))), 0o644); err != nil {
		t.Fatal(err)
	}
	out, code := run(t, root, "submit", "--nats", url, "--watch", "--turn", "mcp-turn", "--agent", "General",
		"--script", script, "Add and read")
	if code != 0 {
		t.Fatalf("submit --watch exited %d:\n%s", code, out)
	}
	log := turnLog(t, js, "mcp-turn")
	var started events.TurnStartedData
	var done []events.ToolCompletedData
	for _, e := range log {
		switch e.Type {
		case events.TurnStarted:
			noErr(t, json.Unmarshal(e.Data, &started))
		case events.ToolCompleted:
			var d events.ToolCompletedData
			noErr(t, json.Unmarshal(e.Data, &d))
			done = append(done, d)
		}
	}
	// --tools chose among the built-in and the MCP tools alike.
	if want := []string{"ask_user", "echo", "everything__get-sum", "fs__read_text_file"}; !slices.Equal(sortedCopy(started.Tools), want) {
		t.Errorf("tools offered %v, want %v", started.Tools, want)
	}
	if len(done) != 3 {
		t.Fatalf("%d tool results, want 3:\n%s", len(done), out)
	}
	slices.SortFunc(done[:2], func(a, b events.ToolCompletedData) int { return strings.Compare(a.Name, b.Name) })
	if d := done[0]; d.Name != "everything__get-sum" || d.IsError || !strings.Contains(d.Output, "42") {
		t.Errorf("get-sum: %+v", d)
	}
	if d := done[1]; d.Name != "fs__read_text_file" || d.IsError || d.Output != "served over MCP\n" {
		t.Errorf("read_text_file: %+v", d)
	}
	if d := done[2]; !d.IsError || !strings.Contains(d.Output, "denied") {
		t.Errorf("a read outside the server's directory: %+v", d)
	}

	if code := orch.stop(t); code != 0 {
		t.Fatalf("orchestrator exited %d after SIGTERM", code)
	}
	if code := worker.stop(t); code != 0 {
		t.Fatalf("toolworker exited %d after SIGTERM", code)
	}
	if len(servers) < 2 {
		t.Logf("cannot tell the worker's children (%v); not checking that they stopped", servers)
		return
	}
	for _, pid := range servers {
		testkit.WaitFor(t, fmt.Sprintf("MCP server %d to stop", pid), func() bool { return gone(pid) })
	}
}

// TestMCPFlagErrors: a malformed --mcp is a usage error (exit 2), a server
// that does not start fails the worker (exit 1), before it serves anything.
func TestMCPFlagErrors(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and starts the binaries")
	}
	srv := testkit.Start(t)
	for _, tc := range []struct {
		flag string
		code int
		says string
	}{
		{"no-command", 2, "want NAME=COMMAND"},
		{"bad.name=cat", 2, "the name must be"},
		{"x=run 'unterminated", 2, "unterminated"},
		{"fails=sh -c 'echo broken config >&2; exit 3'", 1, "broken config"},
	} {
		p := start(t, t.TempDir(), "toolworker", "--nats", srv.ClientURL(), "--mcp", tc.flag)
		done := make(chan error, 1)
		go func() { done <- p.cmd.Wait() }()
		var err error
		select {
		case err = <-done:
		case <-time.After(time.Minute):
			_ = p.cmd.Process.Kill()
			t.Fatalf("--mcp %q: the worker did not exit:\n%s", tc.flag, p.out.String())
		}
		if code := p.cmd.ProcessState.ExitCode(); code != tc.code || !strings.Contains(p.out.String(), tc.says) {
			t.Errorf("--mcp %q: exit %d (%v), want %d saying %q:\n%s", tc.flag, code, err, tc.code, tc.says, p.out.String())
		}
	}
}

// children lists a process's child processes (Linux /proc; none elsewhere).
func children(pid int) []int {
	tasks, _ := filepath.Glob(fmt.Sprintf("/proc/%d/task/*/children", pid))
	var out []int
	for _, f := range tasks {
		data, err := os.ReadFile(f)
		if err != nil {
			continue
		}
		for _, field := range strings.Fields(string(data)) {
			if n, err := strconv.Atoi(field); err == nil {
				out = append(out, n)
			}
		}
	}
	return out
}

// gone reports whether a process has exited (a zombie waiting for its new
// parent to reap it counts as exited).
func gone(pid int) bool {
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return true
	}
	// The state follows the command name in parentheses.
	i := strings.LastIndexByte(string(data), ')')
	return i < 0 || strings.HasPrefix(strings.TrimSpace(string(data[i+1:])), "Z")
}

func sortedCopy(s []string) []string {
	s = slices.Clone(s)
	slices.Sort(s)
	return s
}

func noErr(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}
