package blackbox

import (
	"bufio"
	"encoding/json"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/jetloop/jetloop/internal/events"
	"github.com/jetloop/jetloop/internal/testkit"
	"github.com/nats-io/nats.go/jetstream"
)

var (
	goHookOnce sync.Once
	goHookBin  string
	goHookErr  error
)

// goHook builds examples/go-hook once per test run: the hook process an
// operator would start.
func goHook(t *testing.T) string {
	t.Helper()
	goHookOnce.Do(func() {
		goHookBin = filepath.Join(binaries(t), "go-hook")
		out, err := exec.Command("go", "build", "-race", "-o", goHookBin, "github.com/jetloop/jetloop/examples/go-hook").CombinedOutput()
		if err != nil {
			goHookErr = errors.New(string(out))
		}
	})
	if goHookErr != nil {
		t.Fatalf("build go-hook: %v", goHookErr)
	}
	return goHookBin
}

// auditLine is a line examples/go-hook's audit hook stores.
type auditLine struct {
	WorkflowID string `json:"workflow_id"`
	Task       int    `json:"task"`
	Last       bool   `json:"last"`
	Metrics    struct {
		ToolCalls int `json:"tool_calls"`
	} `json:"metrics"`
	TaskMetrics struct {
		Steps     int `json:"steps"`
		ToolCalls int `json:"tool_calls"`
	} `json:"task_metrics"`
}

// TestWorkflowHooksAsTheirDeployment runs workflows whose policy names two
// hooks in order, from `jetloop workflow run`, on a server with the
// repository's nats.conf, each process as its own user: the hooks
// (examples/go-hook: audit stores every checkpoint in a file, cost-guard
// stops at 2 tool calls) as exampleworker, with the grants the shipped
// accounts give that deployment. One workflow stays under the threshold
// and completes, its last task's checkpoint stored too; one reaches it and
// ends denied by the guard. Both logs verify.
func TestWorkflowHooksAsTheirDeployment(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and starts the binaries")
	}
	root := repoRoot(t)
	srv := testkit.StartConfig(t, filepath.Join(root, "nats.conf"))
	url := srv.ClientURL()
	password := func(role string) string { return filepath.Join(root, "deploy", "dev", role+".password") }
	as := func(role string) []string {
		return []string{"--nats", url, "--user", role, "--password-file", password(role)}
	}
	cli := func(role string, cmd ...string) (string, int) {
		t.Helper()
		return run(t, root, append(append([]string{cmd[0]}, as(role)...), cmd[1:]...)...)
	}
	if out, code := cli("admin", "streams", "apply"); code != 0 {
		t.Fatalf("streams apply as admin exited %d:\n%s", code, out)
	}
	admin := dialRole(t, root, url, "admin")
	ajs, err := jetstream.New(admin.nc)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { testkit.CheckLogs(t, ajs) })

	tools := start(t, root, "toolworker", append(as("toolworker"), "--root", root)...)
	orch := start(t, root, "orchestrator", append(as("orchestrator"), "--agents", "data/AGENTS.md", "--allow-scripts")...)
	secret, err := os.ReadFile(password("exampleworker"))
	if err != nil {
		t.Fatal(err)
	}
	audit := filepath.Join(t.TempDir(), "checkpoints.jsonl")
	hooks := exec.Command(goHook(t))
	hooksOut := &syncBuffer{}
	hooks.Stdout, hooks.Stderr = hooksOut, hooksOut
	hooks.Env = append(os.Environ(), "NATS_URL="+url, "NATS_USER=exampleworker",
		"NATS_PASSWORD="+strings.TrimSpace(string(secret)), "AUDIT_FILE="+audit, "MAX_TOOL_CALLS=2")
	if err := hooks.Start(); err != nil {
		t.Fatal(err)
	}
	hp := &process{cmd: hooks, out: hooksOut}
	t.Cleanup(func() {
		if hooks.ProcessState == nil {
			_ = hooks.Process.Kill()
			_ = hooks.Wait()
		}
		if t.Failed() {
			t.Logf("go-hook output:\n%s", hooksOut.String())
		}
	})
	for _, key := range []string{"echo", events.HookKey("audit"), events.HookKey("cost-guard")} {
		testkit.WaitTool(t, ajs, key)
	}
	testkit.WaitFor(t, "the orchestrator to serve", func() bool { return strings.Contains(orch.out.String(), "serving") })

	// Under the threshold: one tool call in three tasks.
	under := filepath.Join(t.TempDir(), "under.yaml")
	if err := os.WriteFile(under, []byte(`workflow_id: hooks-under
agent: General
tasks:
  - input: one
    model: script
    script: {responses: [{tool_calls: [{name: echo, arguments: {text: a}}]}, {text: first}]}
  - {input: two, model: script, script: {responses: [{text: second}]}}
  - {input: three, model: script, script: {responses: [{text: third}]}}
policy: {hooks: [audit, cost-guard]}
`), 0o644); err != nil {
		t.Fatal(err)
	}
	out, code := cli("client", "workflow", "run", "--watch", under)
	if code != 0 || !strings.Contains(out, "completed after 3 tasks") {
		t.Fatalf("workflow run --watch hooks-under as the client exited %d:\n%s", code, out)
	}
	// The example's workflow: its second task's second tool call reaches
	// the guard's limit, and the third task never runs.
	out, code = cli("client", "workflow", "run", "--watch", "--id", "hooks-over", filepath.Join(root, "examples", "go-hook", "workflow.yaml"))
	if code == 0 || !strings.Contains(out, "denied after 2 tasks") || !strings.Contains(out, "cost guard: 2 tool calls reached the limit of 2") {
		t.Fatalf("workflow run --watch hooks-over as the client exited %d:\n%s", code, out)
	}

	// kill -9 of the orchestrator between the two hooks of a gate: its
	// successor asks cost-guard (once: the job's id), applies its answer
	// once, and the workflow goes on. Task 2's one-second call keeps the
	// workflow running past the kill.
	killed := filepath.Join(t.TempDir(), "killed.yaml")
	if err := os.WriteFile(killed, []byte(`workflow_id: hooks-kill
agent: General
tasks:
  - {input: one, model: script, script: {responses: [{text: first}]}}
  - input: two
    model: script
    script: {responses: [{tool_calls: [{name: sleep, arguments: {ms: 1000}}]}, {text: second}]}
  - {input: three, model: script, script: {responses: [{text: third}]}}
policy: {hooks: [audit, cost-guard]}
`), 0o644); err != nil {
		t.Fatal(err)
	}
	if out, code := cli("client", "workflow", "run", killed); code != 0 {
		t.Fatalf("workflow run hooks-kill as the client exited %d:\n%s", code, out)
	}
	testkit.WaitFor(t, "audit's answer about hooks-kill's task 1", func() bool {
		return slices.ContainsFunc(turnLog(t, ajs, "hooks-kill"), func(e events.Envelope) bool {
			var g events.WorkflowGatedData
			return e.Type == events.WorkflowGated && json.Unmarshal(e.Data, &g) == nil && g.By == "audit"
		})
	})
	orch.kill9(t)
	orch = start(t, root, "orchestrator", append(as("orchestrator"), "--agents", "data/AGENTS.md", "--allow-scripts")...)
	out, code = cli("client", "workflow", "watch", "hooks-kill")
	if code != 0 || !strings.Contains(out, "completed after 3 tasks") {
		t.Fatalf("workflow watch hooks-kill exited %d:\n%s", code, out)
	}

	// Every task's checkpoint is in the file once, in order, the last
	// task's included; each gate heard audit, then cost-guard, once each.
	want := map[string][]int{"hooks-under": {1, 2, 3}, "hooks-over": {1, 2}, "hooks-kill": {1, 2, 3}}
	got := map[string][]int{}
	f, err := os.Open(audit)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	lines := bufio.NewScanner(f)
	var last auditLine
	for lines.Scan() {
		var l auditLine
		if err := json.Unmarshal(lines.Bytes(), &l); err != nil {
			t.Fatalf("audit line %q: %v", lines.Text(), err)
		}
		got[l.WorkflowID] = append(got[l.WorkflowID], l.Task)
		if l.WorkflowID == "hooks-under" && l.Task == 3 {
			last = l
		}
	}
	for id, tasks := range want {
		if !slices.Equal(got[id], tasks) {
			t.Errorf("%s: audit stored the checkpoints of tasks %v, want %v", id, got[id], tasks)
		}
	}
	// The workflow's one tool call was task 1's: task 3's own numbers say
	// none.
	if !last.Last || last.Metrics.ToolCalls != 1 || last.TaskMetrics.ToolCalls != 0 || last.TaskMetrics.Steps != 1 {
		t.Errorf("hooks-under's last checkpoint: %+v, want last with 1 tool call, none of them task 3's own", last)
	}
	for id, tasks := range want {
		var by []string
		for _, e := range turnLog(t, ajs, id) {
			if e.Type == events.WorkflowGated {
				var g events.WorkflowGatedData
				if err := json.Unmarshal(e.Data, &g); err != nil {
					t.Fatal(err)
				}
				if g.By != "rules" {
					by = append(by, g.By)
				}
			}
		}
		var wantBy []string
		for range tasks {
			wantBy = append(wantBy, "audit", "cost-guard")
		}
		if strings.Join(by, ",") != strings.Join(wantBy, ",") {
			t.Errorf("%s: gated by hooks %v, want %v", id, by, wantBy)
		}
		for _, role := range []string{"client", "viewer"} {
			if out, code := cli(role, "replay", "--verify", id); code != 0 {
				t.Errorf("replay --verify %s as %s exited %d:\n%s", id, role, code, out)
			}
		}
	}

	for name, p := range map[string]*process{"go-hook": hp, "orchestrator": orch, "toolworker": tools} {
		if code := p.stop(t); code != 0 {
			t.Errorf("%s exited %d after SIGTERM", name, code)
		}
		if strings.Contains(strings.ToLower(p.out.String()), "permissions violation") {
			t.Errorf("%s was denied something:\n%s", name, p.out.String())
		}
	}
	// The hooks' only worker withdrew them.
	for _, h := range []string{"audit", "cost-guard"} {
		if _, err := kvGet(t, ajs, events.BucketTools, events.HookKey(h)); !errors.Is(err, jetstream.ErrKeyNotFound) {
			t.Errorf("hook %s still advertised after its only worker stopped: %v", h, err)
		}
	}
}
