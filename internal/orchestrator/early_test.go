package orchestrator_test

import (
	"strings"
	"testing"
	"time"

	"github.com/jetloop/jetloop/internal/events"
	"github.com/jetloop/jetloop/internal/tools"
	"github.com/jetloop/jetloop/worker"
	"github.com/nats-io/nats.go"
)

// TestResultAppliedAsPublished: a tool result is applied as its worker
// publishes it, not only once the inbox has stored it (one fsync less in
// series on a step under sync always). The result here carries an
// expectation the inbox refuses (Nats-Expected-Stream names another
// stream), so it is never stored: the turn can only finish through the
// early copy. Its decision is made once, and nothing is dead-lettered.
func TestResultAppliedAsPublished(t *testing.T) {
	h := newHarness(t)
	g := &gate{called: make(chan struct{}, 1), open: make(chan struct{})}
	h.worker(func(w *worker.Worker) {
		if err := tools.Register(w, g); err != nil {
			t.Error(err)
		}
	})
	// Runs before the worker stops: its call returns instead of holding
	// the worker's drain.
	t.Cleanup(func() { close(g.open) })
	h.orchestrator()
	h.submit(script("t-early", "General", `{"responses": [
		{"tool_calls": [{"name": "gate", "arguments": {}}]},
		{"text": "through"}]}`))
	g.waitCalled(t)
	var call string
	for _, c := range of[events.ToolRequestedData](t, h.events("t-early"), events.ToolRequested) {
		call = c.CallID
	}
	msg := nats.NewMsg(events.ResultSubject("t-early"))
	msg.Header.Set("Nats-Expected-Stream", "NOT_THE_INBOX")
	msg.Data = mustJSON(events.ToolResult{TurnID: "t-early", CallID: call, Tool: "gate", Output: "early", Attempt: 1, Worker: "test"})
	ack, err := h.nc.RequestMsg(msg, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(ack.Data), "expected stream does not match") {
		t.Fatalf("the inbox answered %s, want a refusal: the test would prove nothing", ack.Data)
	}
	evs, fin := h.finished("t-early")
	if fin.StopReason != events.StopCompleted || fin.Output != "through" {
		t.Fatalf("t-early finished %+v", fin)
	}
	results := of[events.ToolCompletedData](t, evs, events.ToolCompleted)
	if len(results) != 1 || results[0].Output != "early" {
		t.Fatalf("tool results in the log: %+v, want the one published", results)
	}
	if dead := h.deadBySubject(); len(dead) != 0 {
		t.Fatalf("dead letters: %v", dead)
	}
}
