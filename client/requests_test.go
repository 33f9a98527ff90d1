package client_test

import (
	"encoding/json"
	"testing"

	"github.com/jetloop/jetloop/client"
)

// A request marshals as the submission published for it: a program that
// digests its own request (jetloop submit tells a re-send from a new
// submission by it) gets the orchestrator's digest.
func TestRequestIsItsSubmission(t *testing.T) {
	steps := 3
	r := client.TurnRequest{TurnID: "t1", SessionID: "s1", Agent: "A", Input: client.Text("hi"), Model: "script",
		Script: json.RawMessage(`{"responses":[{"text":"x"}]}`), Limits: &client.Limits{Steps: &steps, Budget: 2, TimeoutMs: 5, DoomLoop: 4},
		Metadata: map[string]string{"k": "v"}, ForkedFrom: &client.ForkedFrom{TurnID: "t0", Step: 2}}
	for _, r := range []client.TurnRequest{{}, {Input: client.Text("hi")}, r} {
		want, err := json.Marshal(client.ExportSubmission(r))
		if err != nil {
			t.Fatal(err)
		}
		got, err := json.Marshal(r)
		if err != nil {
			t.Fatal(err)
		}
		if string(got) != string(want) {
			t.Errorf("request  %s\nsubmits  %s", got, want)
		}
	}
}

func TestWorkflowIsItsSubmission(t *testing.T) {
	w := client.Workflow{WorkflowID: "w1", SessionID: "s1", Agent: "A",
		Tasks:    []client.Task{{Input: json.RawMessage(`"one"`), Agent: "B", Model: "script", Script: json.RawMessage(`{}`), Limits: &client.Limits{Budget: 1}}},
		Limits:   &client.WorkflowLimits{MaxTasks: 2, TimeoutMs: 3, Budget: 4, Tokens: 5},
		Policy:   &client.WorkflowPolicy{ApproveBetween: true, OnTaskFailure: "continue", KeepTasks: 2, Hooks: []string{"h"}, HookTimeoutMs: 7, OnHookTimeout: "stop"},
		Metadata: map[string]string{"k": "v"}}
	for _, w := range []client.Workflow{{}, {Tasks: []client.Task{}}, w} {
		want, err := json.Marshal(client.ExportWorkflowSubmission(w))
		if err != nil {
			t.Fatal(err)
		}
		got, err := json.Marshal(w)
		if err != nil {
			t.Fatal(err)
		}
		if string(got) != string(want) {
			t.Errorf("workflow %s\nsubmits  %s", got, want)
		}
	}
}
