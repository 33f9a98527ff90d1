package cli

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/jetloop/jetloop/internal/events"
)

// TestWorkflowExample runs the shipped example the way its README says:
// workflow run --watch prints each task with its turn's trace nested, and
// exits 0 once the workflow completes; show and workflows report it.
func TestWorkflowExample(t *testing.T) {
	e := newEnv(t)
	out := e.mustRun(ExitOK, "workflow", "--id", "example", "run", "--watch", "../../examples/workflow/refactor.yaml")
	for _, want := range []string{"workflow.started", "task 1: turn example-1", "    │ ", "task 3: completed",
		"after task 3: 3 tasks", "completed after 3 tasks"} {
		if !strings.Contains(out, want) {
			t.Errorf("trace lacks %q:\n%s", want, out)
		}
	}
	if strings.Contains(out, "before task 4") {
		t.Errorf("the trace names a fourth task of three:\n%s", out)
	}
	log := e.log("example")
	var fin events.WorkflowFinishedData
	_ = json.Unmarshal(log[len(log)-1].Data, &fin)
	if fin.StopReason != events.StopCompleted || fin.Metrics.ToolCalls != 3 {
		t.Fatalf("finished %+v", fin)
	}
	if out := e.mustRun(ExitOK, "workflow", "show", "example"); !strings.Contains(out, "finished: completed") || !strings.Contains(out, "3 of 3") {
		t.Errorf("show:\n%s", out)
	}
	// turns lists the tasks' turns and skips the workflow's own log.
	if out := e.mustRun(ExitOK, "turns"); !strings.Contains(out, "example-3") || strings.Contains(out, "\nexample ") {
		t.Errorf("turns:\n%s", out)
	}
	if out := e.mustRun(ExitOK, "workflows"); !strings.Contains(out, "example") || !strings.Contains(out, "finished: completed") {
		t.Errorf("workflows:\n%s", out)
	}
	// Replay and verify accept a workflow id; export writes its log.
	var row WorkflowSummary
	if err := json.Unmarshal([]byte(e.mustRun(ExitOK, "workflows", "--json")), &row); err != nil || row.WorkflowID != "example" ||
		row.Status != "finished" || row.StopReason != events.StopCompleted || row.Task != 3 {
		t.Errorf("workflows --json: %+v (%v)", row, err)
	}
	if out := e.mustRun(ExitOK, "replay", "--verify", "example"); !strings.Contains(out, "3 gate decisions") || !strings.Contains(out, "3 task turns verified") {
		t.Errorf("replay --verify:\n%s", out)
	}
	if out := e.mustRun(ExitOK, "replay", "example"); !strings.Contains(out, "gate         → next_task") {
		t.Errorf("replay:\n%s", out)
	}
	exported := e.mustRun(ExitOK, "export", "example")
	file := e.script("example.jsonl", exported)
	if out := e.mustRun(ExitOK, "replay", "--verify", "--file", file); !strings.Contains(out, "3 gate decisions") {
		t.Errorf("replay --verify --file:\n%s", out)
	}
	// Nothing to approve, and a finished workflow takes no abort.
	e.mustRun(ExitFailed, "workflow", "approve", "example")
	e.mustRun(ExitFailed, "workflow", "abort", "example")
}

// TestWorkflowApproveFromTheCLI: a workflow that waits between tasks is
// shown as waiting and goes on when approved.
func TestWorkflowApproveFromTheCLI(t *testing.T) {
	e := newEnv(t)
	path := e.script("gated.yaml", `workflow_id: gated
agent: Refactorer
tasks:
  - {input: one, model: script, script: {responses: [{text: first}]}}
  - {input: two, model: script, script: {responses: [{text: second}]}}
policy: {approve_between: true}
`)
	e.mustRun(ExitOK, "workflow", "run", path)
	e.waitFor("the gate to wait", func() bool {
		_, out, _ := e.jetloop("workflow", "show", "gated")
		return strings.Contains(out, "approve|deny gated")
	})
	e.mustRun(ExitOK, "workflow", "approve", "--note", "fine", "gated")
	if out := e.mustRun(ExitOK, "workflow", "watch", "gated"); !strings.Contains(out, "completed after 2 tasks") {
		t.Fatalf("watch:\n%s", out)
	}
}

// TestDemoWorkflow is make demo-workflow: the example on an embedded server.
func TestDemoWorkflow(t *testing.T) {
	var out, errOut strings.Builder
	code := Main(t.Context(), []string{"demo", "--agents", "../../examples/workflow/AGENTS.md",
		"--workflow", "../../examples/workflow/refactor.yaml"}, &out, &errOut)
	if code != ExitOK || !strings.Contains(out.String(), "completed after 3 tasks") {
		t.Fatalf("exit %d\n%s\n%s", code, out.String(), errOut.String())
	}
}

// TestWorkflowRunWarnsOfAnUnservedHook: a workflow whose policy names a
// hook no live worker advertises is submitted with a warning that says so.
func TestWorkflowRunWarnsOfAnUnservedHook(t *testing.T) {
	e := newEnv(t)
	path := e.script("hooked.yaml", `workflow_id: hooked
agent: Refactorer
policy: {hooks: [nobody_serves_this], hook_timeout_ms: 1000, on_hook_timeout: continue}
tasks:
  - {input: one, model: script, script: {responses: [{text: first}]}}
`)
	code, out, errOut := e.jetloop("workflow", "run", path)
	if code != ExitOK || !strings.Contains(errOut, `no live worker serves the hook "nobody_serves_this"`) {
		t.Fatalf("workflow run: exit %d\n%s%s", code, out, errOut)
	}
	e.mustRun(ExitOK, "workflow", "watch", "hooked")
}
