// Package blackbox runs the real binaries as separate processes against a
// real server: what an operator starts is what is tested.
package blackbox

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/jetloop/jetloop/internal/events"
	"github.com/jetloop/jetloop/internal/testkit"
	"github.com/nats-io/nats.go/jetstream"
)

var (
	buildOnce sync.Once
	binDir    string
	buildErr  error
)

// binaries builds cmd/... once per test run.
func binaries(t *testing.T) string {
	t.Helper()
	buildOnce.Do(func() {
		binDir, buildErr = os.MkdirTemp("", "jetloop-bin-")
		if buildErr != nil {
			return
		}
		cmd := exec.Command("go", "build", "-race", "-o", binDir+string(filepath.Separator), "github.com/jetloop/jetloop/cmd/...")
		out, err := cmd.CombinedOutput()
		if err != nil {
			buildErr = errors.New(string(out))
		}
	})
	if buildErr != nil {
		t.Fatalf("build: %v", buildErr)
	}
	return binDir
}

func TestMain(m *testing.M) {
	// The binaries the tests run are built with -race, whose runtime sleeps
	// a second before the process exits, for reports still on their way:
	// a second of every command the tests run. A race is reported when it
	// happens, and the exit code (66) says so all the same.
	if os.Getenv("GORACE") == "" {
		os.Setenv("GORACE", "atexit_sleep_ms=0")
	}
	code := m.Run()
	for _, dir := range []string{binDir, plainDir} {
		if dir != "" {
			os.RemoveAll(dir)
		}
	}
	os.Exit(code)
}

// process is a started binary whose output is kept for the test's log.
type process struct {
	cmd *exec.Cmd
	out *syncBuffer
}

type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

func start(t *testing.T, dir, name string, args ...string) *process {
	t.Helper()
	return startPath(t, dir, filepath.Join(binaries(t), name), args...)
}

// startPath is start of the binary at path.
func startPath(t *testing.T, dir, path string, args ...string) *process {
	t.Helper()
	name := filepath.Base(path)
	cmd := exec.Command(path, args...)
	cmd.Dir = dir
	out := &syncBuffer{}
	cmd.Stdout, cmd.Stderr = out, out
	cmd.Env = append(os.Environ(), "NO_COLOR=1")
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	p := &process{cmd: cmd, out: out}
	t.Cleanup(func() {
		if cmd.ProcessState == nil {
			_ = cmd.Process.Kill()
			_ = cmd.Wait()
		}
		if t.Failed() {
			t.Logf("%s output:\n%s", name, out.String())
		}
	})
	return p
}

// stop sends SIGTERM and returns the exit code.
func (p *process) stop(t *testing.T) int {
	t.Helper()
	_ = p.cmd.Process.Signal(syscall.SIGTERM)
	done := make(chan error, 1)
	go func() { done <- p.cmd.Wait() }()
	select {
	case <-done:
	case <-time.After(60 * time.Second):
		_ = p.cmd.Process.Kill()
		t.Fatalf("%s did not stop on SIGTERM", p.cmd.Path)
	}
	return p.cmd.ProcessState.ExitCode()
}

func run(t *testing.T, dir string, args ...string) (string, int) {
	t.Helper()
	// Built first: the first test to build them, under load, would spend
	// the command's two minutes on the build.
	bin := filepath.Join(binaries(t), "jetloop")
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, bin, args...)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "NO_COLOR=1")
	out, err := cmd.CombinedOutput()
	var exit *exec.ExitError
	if err != nil && !errors.As(err, &exit) {
		t.Fatalf("jetloop %v: %v\n%s", args, err, out)
	}
	return string(out), cmd.ProcessState.ExitCode()
}

func repoRoot(t *testing.T) string {
	t.Helper()
	root, err := filepath.Abs("../..")
	if err != nil {
		t.Fatal(err)
	}
	return root
}

// TestProcessesRunATurn starts the orchestrator and the tool worker as
// processes, submits the demo turn with jetloop submit --watch, and stops
// both with SIGTERM: each exits 0.
func TestProcessesRunATurn(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and starts the binaries")
	}
	srv := testkit.Start(t)
	url := srv.ClientURL()
	root := repoRoot(t)
	_, js := srv.Connect(t)
	t.Cleanup(func() { testkit.CheckLogs(t, js) })
	worker := start(t, root, "toolworker", "--nats", url, "--root", root)
	orch := start(t, root, "orchestrator", "--nats", url, "--agents", "data/AGENTS.md", "--ack-wait", "5s", "--allow-scripts")

	// The turn is offered the tools the worker advertised: wait until it has.
	testkit.WaitFor(t, "the tool worker to serve", func() bool { return strings.Contains(worker.out.String(), "serving") })
	testkit.WaitFor(t, "the orchestrator to serve", func() bool { return strings.Contains(orch.out.String(), "serving") })
	for _, tool := range []string{"read_file", "list_dir", "grep", "write_file", "echo", "sleep"} {
		testkit.WaitTool(t, js, tool)
	}

	out, code := run(t, root, "submit", "--nats", url, "--watch", "--turn", "proc-turn", "--agent", "General",
		"--model", "script:scripts/demo.yaml", "What is this project?")
	if code != 0 {
		t.Fatalf("submit --watch exited %d:\n%s", code, out)
	}
	for _, want := range []string{"turn.started", "step.started", "tool.completed", "turn.finished", "completed"} {
		if !strings.Contains(out, want) {
			t.Fatalf("the trace lacks %q:\n%s", want, out)
		}
	}
	checkReplay(t, root, url, js, "proc-turn")

	if code := orch.stop(t); code != 0 {
		t.Fatalf("orchestrator exited %d after SIGTERM", code)
	}
	if code := worker.stop(t); code != 0 {
		t.Fatalf("toolworker exited %d after SIGTERM", code)
	}
}

// TestOrchestratorRefusesScriptsByDefault: the orchestrator binary started
// without --allow-scripts rejects a submission that names a script, saying
// how to turn scripts on, and keeps serving.
func TestOrchestratorRefusesScriptsByDefault(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and starts the binaries")
	}
	srv := testkit.Start(t)
	url := srv.ClientURL()
	root := repoRoot(t)
	_, js := srv.Connect(t)
	t.Cleanup(func() { testkit.CheckLogs(t, js) })
	orch := start(t, root, "orchestrator", "--nats", url, "--agents", "data/AGENTS.md")
	testkit.WaitFor(t, "the orchestrator to serve", func() bool { return strings.Contains(orch.out.String(), "serving") })

	for i, model := range []string{"script:scripts/demo.yaml", "script:/etc/passwd"} {
		out, code := run(t, root, "submit", "--nats", url, "--watch", "--turn", fmt.Sprintf("refused-%d", i),
			"--agent", "General", "--model", model, "hi")
		if code == 0 || !strings.Contains(out, "rejected") || !strings.Contains(out, "--allow-scripts") {
			t.Fatalf("a submission of %s without --allow-scripts exited %d:\n%s", model, code, out)
		}
	}
	if code := orch.stop(t); code != 0 {
		t.Fatalf("orchestrator exited %d after SIGTERM", code)
	}
}

// TestDemo runs jetloop demo as make demo does.
func TestDemo(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and starts the binaries")
	}
	out, code := run(t, repoRoot(t), "demo")
	if code != 0 {
		t.Fatalf("demo exited %d:\n%s", code, out)
	}
	for _, want := range []string{"new → step_start", "stream → tool_phase", "tool.completed", "finished: completed", "steps 4"} {
		if !strings.Contains(out, want) {
			t.Fatalf("the demo's trace lacks %q:\n%s", want, out)
		}
	}
}

// TestDemoSubagents runs what make demo-subagents runs: the Lead of
// examples/subagents hands work to a Researcher and a Coder, and each
// child's trace is printed indented under the call it answers, above that
// call's result.
func TestDemoSubagents(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and starts the binaries")
	}
	out, code := run(t, repoRoot(t), "demo", "--agents", "examples/subagents/AGENTS.md", "--agent", "Lead",
		"--input", "Document the hard step cap")
	if code != 0 {
		t.Fatalf("demo exited %d:\n%s", code, out)
	}
	last := 0
	for _, agent := range []string{"Researcher", "Coder"} {
		child := strings.Index(out[last:], "│     1 step 0")
		started := strings.Index(out[last:], "turn.started    agent "+agent)
		result := strings.Index(out[last:], "tool.completed  "+agent+" ok")
		if child < 0 || started < child || result < started {
			t.Fatalf("the trace does not nest %s's turn above its call's result:\n%s", agent, out)
		}
		last += result
	}
	if !strings.Contains(out, "finished: completed · steps 3") {
		t.Fatalf("the demo did not finish its three steps:\n%s", out)
	}
}

// TestAgentsCheck checks the exit statuses of jetloop agents check.
func TestAgentsCheck(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and starts the binaries")
	}
	root := repoRoot(t)
	if out, code := run(t, root, "agents", "check", "data/AGENTS.md"); code != 0 || !strings.Contains(out, "Refactorer") {
		t.Fatalf("shipped agents: exit %d\n%s", code, out)
	}
	dir := t.TempDir()
	// What the orchestrator cannot run as written fails the check.
	for name, agent := range map[string]string{
		"nomodel.md": "---\nname: A\n---\nprompt\n",
		"typo.md":    "---\nname: A\nmodel: script\ntols: [echo]\n---\nprompt\n",
		"type.md":    "---\nname: A\nmodel: script\nsteps: ten\n---\nprompt\n",
	} {
		path := filepath.Join(dir, name)
		os.WriteFile(path, []byte(agent), 0o644)
		if out, code := run(t, dir, "agents", "check", path); code != 1 || !strings.Contains(out, name+":") || !strings.Contains(out, "error:") {
			t.Errorf("%s: exit %d\n%s", name, code, out)
		}
	}
	warn := filepath.Join(dir, "warn.md")
	os.WriteFile(warn, []byte("---\nname: A\nmodel: script\ntools: [echo]\napproval: [write_file]\n---\nprompt\n"), 0o644)
	if out, code := run(t, dir, "agents", "check", warn); code != 0 || !strings.Contains(out, "warn.md:5") {
		t.Fatalf("warnings only: exit %d\n%s", code, out)
	}
	// --strict fails on a warning, standing before or after the path.
	for _, args := range [][]string{{"agents", "check", "--strict", warn}, {"agents", "check", warn, "--strict"}} {
		if out, code := run(t, dir, args...); code != 1 || !strings.Contains(out, "warn.md:5") {
			t.Fatalf("%v: exit %d\n%s", args, code, out)
		}
	}
	bad := filepath.Join(dir, "bad.md")
	os.WriteFile(bad, []byte("---\nname: A\n---\none\n---\nname: A\n---\ntwo\n"), 0o644)
	if out, code := run(t, dir, "agents", "check", bad); code != 1 || !strings.Contains(out, "bad.md:6") {
		t.Fatalf("duplicate name: exit %d\n%s", code, out)
	}
}

// checkReplay exports a finished turn, replays it from the file and from the
// server, and checks the export is the log byte for byte.
func checkReplay(t *testing.T, root, url string, js jetstream.JetStream, turn string) {
	t.Helper()
	exported, code := run(t, root, "export", "--nats", url, turn)
	if code != 0 {
		t.Fatalf("export exited %d:\n%s", code, exported)
	}
	ctx := context.Background()
	stream, err := js.Stream(ctx, events.StreamEvents)
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimSpace(exported), "\n")
	// A stored message holds one event or a decision's events (a JSON
	// array): the export is one line per event, each the stored bytes.
	var stored [][]byte
	for seq := uint64(1); len(stored) < len(lines); seq++ {
		m, err := stream.GetMsg(ctx, seq)
		if err != nil {
			t.Fatalf("stored message %d: %v (%d events read, %d exported)", seq, err, len(stored), len(lines))
		}
		parts, err := events.Split(m.Data)
		if err != nil {
			t.Fatalf("stored message %d: %v", seq, err)
		}
		stored = append(stored, parts...)
	}
	for i, line := range lines {
		if string(stored[i]) != line {
			t.Fatalf("exported line %d differs from the stored event:\n%s\n%s", i+1, line, stored[i])
		}
	}
	file := filepath.Join(t.TempDir(), "turn.jsonl")
	if err := os.WriteFile(file, []byte(exported), 0o644); err != nil {
		t.Fatal(err)
	}
	out, code := run(t, root, "replay", "--file", file)
	if code != 0 || !strings.Contains(out, "finished: completed") || !strings.Contains(out, "check_stop → done") {
		t.Fatalf("replay --file exited %d:\n%s", code, out)
	}
	out, code = run(t, root, "replay", "--nats", url, "--json", turn)
	rows := strings.Split(strings.TrimSpace(out), "\n")
	if code != 0 || len(rows) != len(lines) {
		t.Fatalf("replay --json exited %d with %d rows for %d events:\n%s", code, len(rows), len(lines), out)
	}
	var last struct {
		Type, Before, After string
		Seq                 int
	}
	if err := json.Unmarshal([]byte(rows[len(rows)-1]), &last); err != nil || last.Type != "turn.finished" ||
		last.After != "done" || last.Seq != len(lines) {
		t.Fatalf("last row %s (%v)", rows[len(rows)-1], err)
	}
	out, code = run(t, root, "replay", "--nats", url, "--at", "1", turn)
	var st struct{ Step, Seq int }
	if code != 0 || json.Unmarshal([]byte(out), &st) != nil || st.Step != 1 {
		t.Fatalf("replay --at 1 exited %d:\n%s", code, out)
	}
	out, code = run(t, root, "replay", "--nats", url, "--verify", turn)
	if code != 0 || !strings.Contains(out, "verified: ") {
		t.Fatalf("replay --verify exited %d:\n%s", code, out)
	}
	// A recorded decision edited: verify names the event.
	edited := strings.Replace(exported, `"decision":"continue"`, `"decision":"stop","stop_reason":"budget"`, 1)
	if err := os.WriteFile(file, []byte(edited), 0o644); err != nil {
		t.Fatal(err)
	}
	if out, code := run(t, root, "replay", "--verify", "--file", file); code != 1 || !strings.Contains(out, "step.checked differs") {
		t.Fatalf("an edited decision verified: exit %d\n%s", code, out)
	}
	// A log with an event taken out does not replay.
	broken := strings.Join(append(append([]string{}, lines[:3]...), lines[4:]...), "\n")
	if err := os.WriteFile(file, []byte(broken), 0o644); err != nil {
		t.Fatal(err)
	}
	if out, code := run(t, root, "replay", "--file", file); code != 1 || !strings.Contains(out, "does not replay") {
		t.Fatalf("a log with a gap replayed: exit %d\n%s", code, out)
	}
}

// turnLog reads a turn's events as they are now.
func turnLog(t *testing.T, js jetstream.JetStream, turn string) []events.Envelope {
	t.Helper()
	return testkit.Log(t, js, turn)
}
