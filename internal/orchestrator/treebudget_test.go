package orchestrator_test

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"

	"github.com/jetloop/jetloop/internal/events"
	"github.com/jetloop/jetloop/internal/fsm"
	"github.com/jetloop/jetloop/internal/testkit"
)

// treeAgents: Boss has a budget of 4 and delegates; Busy has a budget of
// 50 and tries ten echo calls, each different so the doom loop does not
// stop it first.
const treeAgents = `---
name: Boss
model: script:boss.yaml
budget: 4
tools: [agent:Busy]
---
Delegate.
---
name: Pair
model: script
budget: 6
tools: [agent:Busy]
---
Delegate twice at once.
---
name: Chief
model: script
tools: [agent:Boss]
---
Delegate to one who delegates.
---
name: Busy
model: script:busy.yaml
budget: 50
tools: [echo]
---
Echo.
`

func busyScript() string {
	var b strings.Builder
	b.WriteString("responses:\n")
	for i := range 10 {
		fmt.Fprintf(&b, "  - tool_calls: [{name: echo, arguments: {text: \"call %d\"}}]\n", i)
	}
	b.WriteString("  - text: busy done\n")
	return b.String()
}

// treeCalls counts the tool.completed events of a turn and every turn
// below it, following child_turn_id.
func treeCalls(h *harness, turn string) int {
	log, _ := h.finished(turn)
	n := 0
	for _, c := range of[events.ToolCompletedData](h.t, log, events.ToolCompleted) {
		n++
		if c.ChildTurnID != "" {
			n += treeCalls(h, c.ChildTurnID)
		}
	}
	return n
}

// TestSubagentsShareTheRootsBudget: a turn with a budget of 4 whose child
// (of an agent with a budget of 50) tries ten calls completes 4 tool calls
// in its tree, the child's included; two children of one step reserve in
// turn; a grandchild reserves from its parent's reservation; a workflow's
// budget bounds its tasks' trees and its metrics count every turn below
// them. Each parent's turn.finished says what its descendants used apart
// from its own figures.
func TestSubagentsShareTheRootsBudget(t *testing.T) {
	h := newHarnessServing(t, testkit.Start(t), nil, treeAgents, map[string]string{"busy.yaml": busyScript(),
		"boss.yaml": "responses:\n  - tool_calls: [{name: Busy, arguments: {task: echo ten times}}]\n  - text: boss done\n"})
	h.start()

	h.submit(script("boss", "Boss", `{"responses":[{"tool_calls":[{"name":"Busy","arguments":{"task":"echo ten times"}}]},{"text":"boss done"}]}`))
	log, fin := h.finished("boss")
	if got := treeCalls(h, "boss"); got != 4 {
		t.Fatalf("the tree of a turn with a budget of 4 completed %d tool calls\n%s", got, dump(log))
	}
	if fin.StopReason != events.StopBudget || fin.Metrics.ToolCalls != 1 || fin.Metrics.Descendants == nil ||
		fin.Metrics.Descendants.ToolCalls != 3 || fin.Metrics.Descendants.Turns != 1 {
		t.Fatalf("boss finished %+v (descendants %+v)", fin, fin.Metrics.Descendants)
	}
	child := fsm.ChildTurnID("boss", scriptCallID("boss", 1, 0, 0))
	clog, cfin := h.finished(child)
	if st := of[events.TurnStartedData](t, clog, events.TurnStarted)[0]; st.Limits.Budget != 3 {
		t.Fatalf("the child started with budget %d, want the 3 its parent had left", st.Limits.Budget)
	}
	if cfin.StopReason != events.StopBudget {
		t.Fatalf("the child ended %s, want budget", cfin.StopReason)
	}
	if n, err := fsm.Verify(log); err != nil {
		t.Fatalf("verify the parent (%d decisions): %v", n, err)
	}

	// Two children of one step: 6 - 2 calls leaves 4, all of it for the
	// first, none for the second, which may only answer.
	h.submit(script("pair", "Pair", `{"responses":[{"tool_calls":[{"name":"Busy","arguments":{"task":"a"}},{"name":"Busy","arguments":{"task":"b"}}]},{"text":"pair done"}]}`))
	if got := treeCalls(h, "pair"); got > 6 {
		t.Fatalf("the tree of a turn with a budget of 6 completed %d tool calls", got)
	}
	for i, want := range []int{4, 0} {
		clog, _ := h.finished(fsm.ChildTurnID("pair", scriptCallID("pair", 1, 0, i)))
		st := of[events.TurnStartedData](t, clog, events.TurnStarted)[0]
		if got := *st.Limits.Steps; (want == 0) != (got == 0) || want > 0 && st.Limits.Budget != want {
			t.Fatalf("child %d started with budget %d, steps %d; want budget %d", i, st.Limits.Budget, got, want)
		}
	}

	// Two levels: Chief (budget 50) → Boss (its own 4) → Busy (3).
	h.submit(script("chief", "Chief", `{"responses":[{"tool_calls":[{"name":"Boss","arguments":{"task":"delegate"}}]},{"text":"chief done"}]}`))
	_, cf := h.finished("chief")
	if got := treeCalls(h, "chief"); got != 5 || cf.Metrics.Descendants == nil || cf.Metrics.Descendants.ToolCalls != 4 ||
		cf.Metrics.Descendants.Turns != 2 {
		t.Fatalf("chief's tree completed %d tool calls; descendants %+v", got, cf.Metrics.Descendants)
	}

	// A workflow with a budget of 5 whose task delegates.
	h.submitWorkflow(events.WorkflowSubmit{WorkflowID: "wf-tree", Agent: "Pair", Limits: &events.WorkflowLimits{Budget: 5},
		Tasks: []events.Task{{Input: json.RawMessage(`"delegate"`), Model: "script",
			Script: json.RawMessage(`{"responses":[{"tool_calls":[{"name":"Busy","arguments":{"task":"echo"}}]},{"text":"task done"}]}`)},
			{Input: json.RawMessage(`"again"`), Model: "script", Script: json.RawMessage(`{"responses":[{"text":"never"}]}`)}}})
	_, wf := h.workflowFinished("wf-tree")
	task := treeCalls(h, "wf-tree-1")
	if task > 5 || wf.Metrics.ToolCalls != task || wf.StopReason != events.StopBudget {
		t.Fatalf("workflow with a budget of 5: its task's tree completed %d calls; finished %+v", task, wf)
	}
}
