package orchestrator_test

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jetloop/jetloop/internal/events"
	"github.com/jetloop/jetloop/internal/tools"
	"github.com/jetloop/jetloop/worker"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// TestResultsGoStraightToTheirOwner: a worker hands each result to the
// orchestrator that owns the turn, which stores it in the turn's log alone;
// none goes through the inbox (two synced writes less a tool step).
func TestResultsGoStraightToTheirOwner(t *testing.T) {
	h := newHarness(t)
	var direct, inbox atomic.Int32
	count := func(n *atomic.Int32) nats.MsgHandler { return func(*nats.Msg) { n.Add(1) } }
	for subject, n := range map[string]*atomic.Int32{
		events.DirectResultSubject("count", "*"): &direct,
		events.ToolResultSubject("count", "*"):   &inbox,
	} {
		sub, err := h.nc.Subscribe(subject, count(n))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = sub.Unsubscribe() })
	}
	h.worker()
	h.orchestrator()
	h.submit(script("t-direct", "General", threeSteps))
	if _, fin := h.finished("t-direct"); fin.StopReason != events.StopCompleted || fin.Metrics.ToolCalls != 3 {
		t.Fatalf("finished %+v", fin)
	}
	if err := h.nc.Flush(); err != nil {
		t.Fatal(err)
	}
	if d, i := direct.Load(), inbox.Load(); d != 3 || i != 0 {
		t.Fatalf("%d results handed over, %d published to the inbox: want 3 and 0", d, i)
	}
}

// TestDirectResultsAreBoundAndAnswerOnlyInboxes: a result handed over on
// another tool's subject is refused, with a reason, and not applied; and a
// valid one whose reply subject is no inbox (here the API subject that
// deletes a stream, which a worker may not publish on) is applied without an
// answer: the orchestrator's reply would otherwise act with its
// permissions.
func TestDirectResultsAreBoundAndAnswerOnlyInboxes(t *testing.T) {
	h := newHarness(t)
	g := &gate{called: make(chan struct{}, 1), open: make(chan struct{})}
	h.worker(func(w *worker.Worker) {
		if err := tools.Register(w, g); err != nil {
			t.Error(err)
		}
	})
	t.Cleanup(func() { close(g.open) })
	h.orchestrator()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if _, err := h.js.CreateStream(ctx, jetstream.StreamConfig{Name: "VICTIM", Subjects: []string{"victim.>"}}); err != nil {
		t.Fatal(err)
	}
	h.submit(script("t-bound", "General", `{"responses": [
		{"tool_calls": [{"name": "gate", "arguments": {}}]},
		{"text": "through"}]}`))
	g.waitCalled(t)
	var call string
	for _, c := range of[events.ToolRequestedData](t, h.events("t-bound"), events.ToolRequested) {
		call = c.CallID
	}
	result := mustJSON(events.ToolResult{TurnID: "t-bound", CallID: call, Tool: "gate", Output: "handed over", Attempt: 1, Worker: "test"})

	reply, err := h.nc.Request(events.DirectResultSubject("echo", "t-bound"), result, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if reply.Header.Get(events.HeaderError) == "" {
		t.Fatal("a result of tool gate handed over on tool echo's subject was taken")
	}
	if h.last("t-bound") != events.ToolRequested {
		t.Fatalf("the turn moved on to %s", h.last("t-bound"))
	}

	if err := h.nc.PublishMsg(&nats.Msg{Subject: events.DirectResultSubject("gate", "t-bound"), Reply: "$JS.API.STREAM.DELETE.VICTIM", Data: result}); err != nil {
		t.Fatal(err)
	}
	evs, fin := h.finished("t-bound")
	if fin.StopReason != events.StopCompleted || fin.Output != "through" {
		t.Fatalf("t-bound finished %+v", fin)
	}
	if got := of[events.ToolCompletedData](t, evs, events.ToolCompleted); len(got) != 1 || got[0].Output != "handed over" {
		t.Fatalf("tool results in the log: %+v, want the one handed over", got)
	}
	if err := h.nc.Flush(); err != nil {
		t.Fatal(err)
	}
	if _, err := h.js.Stream(ctx, "VICTIM"); err != nil {
		t.Fatalf("the reply went to the reply subject a worker chose: stream VICTIM: %v", err)
	}
}
