package inproc

import (
	"encoding/json"
	"testing"

	"github.com/jetloop/jetloop/internal/events"
	"github.com/jetloop/jetloop/internal/testkit"
)

// TestStackRunsATurn: a stack's worker and orchestrator, started apart,
// run a scripted turn that calls a built-in tool to its end; an
// orchestrator started after the first stopped takes the turns on.
func TestStackRunsATurn(t *testing.T) {
	s := NewStack(t, testkit.Start(t), testkit.Agents(t, "---\nname: A\nmodel: script\n---\nEcho.\n", nil), Config{})
	s.Worker("", nil)
	_, stop, _ := s.Orchestrator()
	submit := func(turn string) {
		t.Helper()
		testkit.Submit(t, s.JS, events.Submit{TurnID: turn, Agent: "A", Model: "script", Input: []events.Message{{Role: events.RoleUser, Content: "go"}},
			Script: json.RawMessage(`{"responses":[{"tool_calls":[{"name":"echo","arguments":{"text":"hi"}}]},{"text":"done"}]}`)})
	}
	submit("t1")
	if _, fin := testkit.Finished(t, s.JS, "t1"); fin.StopReason != events.StopCompleted {
		t.Fatalf("t1 finished %+v", fin)
	}
	stop()
	if got := s.claim(); got != "orchestrator-1" {
		t.Errorf("the name after the only orchestrator stopped: %s, want orchestrator-1", got)
	}
	s.release("orchestrator-1")
	s.Orchestrator()
	submit("t2")
	if _, fin := testkit.Finished(t, s.JS, "t2"); fin.StopReason != events.StopCompleted {
		t.Fatalf("t2 finished %+v", fin)
	}
}
