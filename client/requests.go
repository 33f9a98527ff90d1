package client

import (
	"encoding/json"

	"github.com/jetloop/jetloop/internal/events"
)

// TurnRequest is what Submit sends (docs/protocol.md, "Submit"). Only Input
// is needed when the orchestrator defines exactly one agent.
type TurnRequest struct {
	// TurnID names the turn; Submit chooses a new UUIDv7 when it is empty.
	TurnID string `json:"turn_id"`
	// SessionID groups turns: the earlier finished turns of the session are
	// the new turn's history. It defaults to the turn id.
	SessionID string `json:"session_id,omitempty"`
	// Agent names the agent that runs the turn; it may be empty when the
	// orchestrator defines exactly one.
	Agent string `json:"agent,omitempty"`
	// Input is what the user says (Text makes it from a string).
	Input []Message `json:"input,omitempty"`
	// Model overrides the agent's model, e.g. "openai/gpt-4.1-mini", or
	// "script" for the scripted model of Script.
	Model string `json:"model,omitempty"`
	// Script is an inline scripted model (JSON), for tests and demos where
	// the orchestrator allows scripts.
	Script json.RawMessage `json:"script,omitempty"`
	// Limits tighten the agent's limits; they never loosen them.
	Limits *Limits `json:"limits,omitempty"`
	// Metadata is copied to the turn's TurnStarted.
	Metadata map[string]string `json:"metadata,omitempty"`
	// ForkedFrom starts the turn from another turn's conversation up to a
	// step, instead of from the session's history.
	ForkedFrom *ForkedFrom `json:"forked_from,omitempty"`
}

// submit is r as the inbox takes it.
func (r TurnRequest) submit() events.Submit {
	return events.Submit{TurnID: r.TurnID, SessionID: r.SessionID, Agent: r.Agent, Input: r.Input, Model: r.Model,
		Script: r.Script, Limits: r.Limits, Metadata: r.Metadata, ForkedFrom: r.ForkedFrom}
}

// Workflow is a workflow request: its tasks run one after another, each as a
// turn <WorkflowID>-<i> in one session (docs/protocol.md, "Workflows").
type Workflow struct {
	// WorkflowID names the workflow; RunWorkflow chooses a new UUIDv7 when
	// it is empty.
	WorkflowID string `json:"workflow_id"`
	// SessionID is the session of the tasks' turns (default: the workflow
	// id): each task sees the ones before it as history.
	SessionID string `json:"session_id,omitempty"`
	// Agent runs every task that names none.
	Agent string `json:"agent,omitempty"`
	// Tasks run in order.
	Tasks []Task `json:"tasks"`
	// Limits bound the whole workflow.
	Limits *WorkflowLimits `json:"limits,omitempty"`
	// Policy says what happens between tasks.
	Policy *WorkflowPolicy `json:"policy,omitempty"`
	// Metadata is copied to WorkflowStarted.
	Metadata map[string]string `json:"metadata,omitempty"`
}

// Task is one task of a Workflow: what its turn is submitted with.
type Task struct {
	// Input is a JSON text or a JSON list of messages.
	Input json.RawMessage `json:"input"`
	// Agent runs the task instead of the workflow's.
	Agent string `json:"agent,omitempty"`
	// Model overrides the agent's model, as TurnRequest.Model.
	Model string `json:"model,omitempty"`
	// Script is an inline scripted model, as TurnRequest.Script.
	Script json.RawMessage `json:"script,omitempty"`
	// Limits tighten the task's turn's limits.
	Limits *Limits `json:"limits,omitempty"`
}

// WorkflowLimits bound a workflow. Zero is no bound, but for MaxTasks and
// TimeoutMs, which then take the orchestrator's defaults (7 days for the
// wall clock).
type WorkflowLimits struct {
	MaxTasks  int   `json:"max_tasks,omitempty"`  // tasks run at most
	TimeoutMs int64 `json:"timeout_ms,omitempty"` // the wall clock of the whole workflow
	Budget    int   `json:"budget,omitempty"`     // tool calls of all tasks together
	Tokens    int   `json:"tokens,omitempty"`     // model tokens of all tasks together
}

// WorkflowPolicy is what the gate does between tasks.
type WorkflowPolicy struct {
	// ApproveBetween pauses the workflow after every task until
	// ApproveWorkflow.
	ApproveBetween bool `json:"approve_between"`
	// OnTaskFailure is "stop" (the default) or "continue": what a task that
	// did not complete does to its workflow.
	OnTaskFailure string `json:"on_task_failure,omitempty"`
	// KeepTasks, when N > 0, makes a task's history the conversations of
	// task 1 and of the last N-1 tasks only; 0 keeps all.
	KeepTasks int `json:"keep_tasks"`
	// Hooks are asked in order after every task's checkpoint: the tool
	// workers that serve them may stop the workflow.
	Hooks []string `json:"hooks,omitempty"`
	// HookTimeoutMs bounds each hook's answer (the orchestrator's default
	// when 0).
	HookTimeoutMs int64 `json:"hook_timeout_ms,omitempty"`
	// OnHookTimeout is "stop" (the default) or "continue": what a hook that
	// does not answer in time does.
	OnHookTimeout string `json:"on_hook_timeout,omitempty"`
}

// submit is w as the inbox takes it.
func (w Workflow) submit() events.WorkflowSubmit {
	s := events.WorkflowSubmit{WorkflowID: w.WorkflowID, SessionID: w.SessionID, Agent: w.Agent, Metadata: w.Metadata}
	if w.Tasks != nil {
		s.Tasks = make([]events.Task, len(w.Tasks))
		for i, t := range w.Tasks {
			s.Tasks[i] = events.Task(t)
		}
	}
	if w.Limits != nil {
		l := events.WorkflowLimits(*w.Limits)
		s.Limits = &l
	}
	if p := w.Policy; p != nil {
		s.Policy = &events.Policy{ApproveBetween: p.ApproveBetween, OnTaskFailure: events.FailurePolicy(p.OnTaskFailure),
			KeepTasks: p.KeepTasks, Hooks: p.Hooks, HookTimeoutMs: p.HookTimeoutMs, OnHookTimeout: p.OnHookTimeout}
	}
	return s
}
