package client_test

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/jetloop/jetloop/client"
)

func TestRunWorkflow(t *testing.T) {
	c, _ := newClient(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	id, err := c.RunWorkflow(ctx, client.Workflow{Agent: "Greeter", Tasks: []client.Task{
		{Input: json.RawMessage(`"hello"`)}, {Input: json.RawMessage(`"again"`)}}})
	if err != nil {
		t.Fatal(err)
	}
	r, err := c.WaitWorkflow(ctx, id)
	if err != nil || r.StopReason != client.StopCompleted || r.Metrics.Tasks != 2 || r.Output != "Hello, world!" {
		t.Fatalf("result %+v, %v", r, err)
	}
	// Each task's own result, as the seed's TaskResults: its output, error,
	// stop reason and metrics.
	if len(r.TaskResults) != 2 || r.TaskResults[0].Task != 1 || r.TaskResults[1].TurnID != id+"-2" ||
		r.TaskResults[0].Output != "Hello, world!" || r.TaskResults[1].StopReason != client.StopCompleted ||
		r.TaskResults[0].Metrics.ModelCalls != 1 || r.Metrics.BusyMs != r.TaskResults[0].Metrics.DurationMs+r.TaskResults[1].Metrics.DurationMs {
		t.Fatalf("task results %+v of %+v", r.TaskResults, r.WorkflowFinishedData)
	}
	// Workflows lists it, finished, and no turn (its tasks' turns among
	// them).
	list, err := c.Workflows(ctx)
	if err != nil {
		t.Fatal(err)
	}
	var found *client.WorkflowSummary
	for i, w := range list {
		if w.WorkflowID == id {
			found = &list[i]
		}
		if w.WorkflowID == id+"-1" || w.Last == client.TypeTurnFinished {
			t.Errorf("Workflows lists a turn: %+v", w)
		}
	}
	if found == nil || found.Status != client.StatusFinished || found.StopReason != client.StopCompleted ||
		found.Task != 2 || found.Last != client.TypeWorkflowFinished || found.Updated.Before(found.Started) {
		t.Errorf("Workflows: %+v", found)
	}
	bad, err := c.RunWorkflow(ctx, client.Workflow{Agent: "Nobody", Tasks: []client.Task{{Input: json.RawMessage(`"x"`)}}})
	if err != nil {
		t.Fatal(err)
	}
	var rej *client.RejectedError
	if _, err := c.WaitWorkflow(ctx, bad); !errors.As(err, &rej) {
		t.Fatalf("unknown agent: %v, want a *RejectedError", err)
	}
}

// TestWatchWorkflow follows a workflow from its first event to its last,
// typed, with each task's turn reachable from its TaskStarted; and refuses a
// turn's id.
func TestWatchWorkflow(t *testing.T) {
	c, _ := newClient(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	id, err := c.RunWorkflow(ctx, client.Workflow{Agent: "Greeter", Tasks: []client.Task{
		{Input: json.RawMessage(`"one"`)}, {Input: json.RawMessage(`"two"`)}}})
	if err != nil {
		t.Fatal(err)
	}
	var types []client.EventType
	var turns []string
	for ev, err := range c.WatchWorkflow(ctx, id) {
		if err != nil {
			t.Fatal(err)
		}
		if ev.Info().TurnID != id || ev.Info().Seq != len(types)+1 {
			t.Fatalf("event %d: %+v", len(types)+1, ev.Info())
		}
		types = append(types, ev.Info().Type)
		switch e := ev.(type) {
		case client.TaskStarted:
			turns = append(turns, e.TurnID)
		case client.TaskFinished:
			if e.StopReason != client.StopCompleted || e.Metrics.Steps != 1 {
				t.Errorf("task %d finished %+v", e.Task, e.TaskFinishedData)
			}
		case client.WorkflowFinished:
			if !e.Succeeded() || e.Metrics.Tasks != 2 || len(e.Tasks) != 2 {
				t.Errorf("finished %+v", e.WorkflowFinishedData)
			}
		}
	}
	if types[0] != client.TypeWorkflowStarted || types[len(types)-1] != client.TypeWorkflowFinished {
		t.Fatalf("types %v", types)
	}
	if len(turns) != 2 || turns[0] != id+"-1" || turns[1] != id+"-2" {
		t.Fatalf("task turns %v", turns)
	}
	for _, turn := range turns {
		if r, err := c.Wait(ctx, turn); err != nil || !r.Succeeded() {
			t.Fatalf("task turn %s: %+v, %v", turn, r, err)
		}
	}
	// Watching from now after the end yields nothing until ctx ends.
	short, stop := context.WithTimeout(ctx, 200*time.Millisecond)
	defer stop()
	for ev, err := range c.WatchWorkflow(short, id, client.FromNow()) {
		if err == nil {
			t.Fatalf("from now after the end: %v", ev)
		}
	}
	// A turn is not a workflow.
	for _, err := range c.WatchWorkflow(ctx, turns[0]) {
		if err == nil || !strings.Contains(err.Error(), "is a turn, not a workflow") {
			t.Fatalf("watching a turn as a workflow: %v", err)
		}
		break
	}
}
