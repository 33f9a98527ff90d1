package stack_test

import (
	"context"
	"encoding/json"
	"errors"
	"testing"
	"time"

	"github.com/jetloop/jetloop/internal/agents"
	"github.com/jetloop/jetloop/internal/events"
	"github.com/jetloop/jetloop/internal/orchestrator"
	"github.com/jetloop/jetloop/internal/stack"
	"github.com/jetloop/jetloop/internal/testkit"
	"github.com/jetloop/jetloop/internal/testkit/inproc"
	"github.com/jetloop/jetloop/internal/tools"
	"github.com/jetloop/jetloop/worker"
	"github.com/nats-io/nats.go/jetstream"
)

const agentsMD = `---
name: General
model: script
---
You can use every tool.
`

func setup(t *testing.T) (*testkit.Server, *agents.Set, []tools.Tool) {
	t.Helper()
	srv := testkit.Start(t)
	_, js := srv.Connect(t)
	testkit.EnsureStreams(t, js)
	set := testkit.Agents(t, agentsMD, nil)
	ts, err := tools.Builtins(t.TempDir(), false)
	if err != nil {
		t.Fatal(err)
	}
	return srv, set, ts
}

// A stack on one connection runs a turn that calls a built-in tool to its
// end as soon as Start returns, and stops with its context.
func TestStartRunsATurn(t *testing.T) {
	srv, set, ts := setup(t)
	nc, js := srv.Connect(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	s, err := stack.Start(ctx, nc, testkit.Logger(t), set, ts, stack.Observers{}, orchestrator.WithAllowScripts(true))
	if err != nil {
		t.Fatal(err)
	}
	// Start returned: the worker serves, so the turn is offered echo.
	if info := testkit.ToolInfo(t, js, "echo"); info == nil || info.Workers != 1 {
		t.Fatalf("echo in the registry once Start returned: %+v", info)
	}
	sub := events.Submit{TurnID: "t1", Agent: "General", Model: "script",
		Script: json.RawMessage(`{"responses": [{"tool_calls": [{"name": "echo", "arguments": {"text": "hi"}}]}, {"text": "done"}]}`),
		Input:  []events.Message{{Role: events.RoleUser, Content: "go"}}}
	data, err := json.Marshal(sub)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := js.Publish(ctx, events.SubjectSubmit, data, jetstream.WithMsgID(sub.TurnID)); err != nil {
		t.Fatal(err)
	}
	log, fin := testkit.Finished(t, js, "t1")
	if results := testkit.Of[events.ToolCompletedData](t, log, events.ToolCompleted); len(results) != 1 || results[0].IsError || results[0].Output != "hi" {
		t.Fatalf("echo's results: %+v\n%s", results, testkit.Dump(log))
	}
	if fin.Output != "done" {
		t.Errorf("turn finished with %+v", fin)
	}
	cancel()
	if err := s.Wait(); err != nil {
		t.Errorf("a stack stopped by its context: %v", err)
	}
}

// A worker that cannot serve is an error of Worker, not a hang.
func TestWorkerThatCannotServe(t *testing.T) {
	srv, _, _ := setup(t)
	nc, _ := srv.Connect(t)
	refused := errors.New("refused")
	_, _, err := stack.Worker(context.Background(), nc, testkit.Logger(t), stack.Observers{}, func(*worker.Worker) error { return refused })
	if !errors.Is(err, refused) {
		t.Errorf("a register that fails: %v", err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	_, _, err = stack.Worker(ctx, nc, testkit.Logger(t), stack.Observers{}, stack.Tools())
	if err == nil {
		t.Error("a worker whose context ended before it served started")
	}
}

// Start reports the orchestrator's own error.
func TestStartFailsWithTheOrchestrator(t *testing.T) {
	srv, set, ts := setup(t)
	nc, _ := srv.Connect(t)
	if _, err := stack.Start(context.Background(), nc, testkit.Logger(t), set, ts, stack.Observers{}, orchestrator.WithAckWait(time.Millisecond)); err == nil {
		t.Error("an orchestrator with a bad option started")
	}
}

// WaitTool waits for a worker of the tool, within its context.
func TestWaitTool(t *testing.T) {
	srv, _, ts := setup(t)
	nc, js := srv.Connect(t)
	ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancel()
	if err := stack.WaitTool(ctx, js, "echo"); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("no worker: %v", err)
	}
	inproc.Worker(t, nc, testkit.Logger(t), stack.Tools(ts...))
	if err := stack.WaitTool(context.Background(), js, "echo"); err != nil {
		t.Fatal(err)
	}
}
