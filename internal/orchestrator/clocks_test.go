package orchestrator_test

import (
	"encoding/json"
	"testing"
	"time"

	"github.com/jetloop/jetloop/internal/events"
	"github.com/jetloop/jetloop/internal/orchestrator"
)

// TestEveryLoopHasAClock: a turn whose agent sets no timeout, and a
// workflow submitted without one, get the orchestrator's default clocks,
// record them when they start, and end timeout when they pass: the turn
// while a call it waits on would take a minute, the workflow while it
// waits for an approval between its tasks.
func TestEveryLoopHasAClock(t *testing.T) {
	h := newHarness(t)
	h.worker()
	h.orchestrator(orchestrator.WithClocks(time.Second, 2*time.Second))
	sleep := `{"responses":[{"tool_calls":[{"name":"sleep","arguments":{"ms":60000}}]},{"text":"slept"}]}`

	h.submit(script("clocked", "General", sleep))
	log, fin := h.finished("clocked")
	st := of[events.TurnStartedData](t, log, events.TurnStarted)[0]
	if st.Limits.TimeoutMs != 1000 || fin.StopReason != events.StopTimeout {
		t.Fatalf("a turn of an agent without timeout: started with timeout_ms %d, ended %s\n%s", st.Limits.TimeoutMs, fin.StopReason, dump(log))
	}

	// The workflow waits at its gate for an approval nobody gives.
	text := json.RawMessage(`{"responses":[{"text":"done"}]}`)
	h.submitWorkflow(events.WorkflowSubmit{WorkflowID: "wf-clocked", Agent: "General", Policy: &events.Policy{ApproveBetween: true},
		Tasks: []events.Task{{Input: json.RawMessage(`"one"`), Model: "script", Script: text},
			{Input: json.RawMessage(`"two"`), Model: "script", Script: text}}})
	wlog, wfin := h.workflowFinished("wf-clocked")
	var ws events.WorkflowStartedData
	if err := json.Unmarshal(wlog[0].Data, &ws); err != nil {
		t.Fatal(err)
	}
	if ws.Limits.TimeoutMs != 2000 || wfin.StopReason != events.StopTimeout {
		t.Fatalf("a workflow without timeout: started with timeout_ms %d, ended %s\n%s", ws.Limits.TimeoutMs, wfin.StopReason, dump(wlog))
	}
}
