package events

import (
	"encoding/json"
	"time"
)

// Type names an event. The set is closed: Decode rejects any other.
type Type string

// The event types of docs/protocol.md.
const (
	TurnStarted    Type = "turn.started"
	StepStarted    Type = "step.started"
	ModelCompleted Type = "model.completed"
	ToolRequested  Type = "tool.requested"
	ToolCompleted  Type = "tool.completed"
	TurnPaused     Type = "turn.paused"
	TurnResumed    Type = "turn.resumed"
	StepChecked    Type = "step.checked"
	TurnSentinel   Type = "turn.sentinel"
	TurnFinished   Type = "turn.finished"
	// TurnCompacted records a summarizing compaction: the summary a child
	// turn of the agent's compaction agent wrote of the steps through
	// through_step, which later model calls send in their place.
	TurnCompacted Type = "turn.compacted"
)

// Types lists every event type in the order a turn usually writes them.
var Types = []Type{TurnStarted, StepStarted, ModelCompleted, ToolRequested, ToolCompleted,
	TurnPaused, TurnResumed, StepChecked, TurnSentinel, TurnCompacted, TurnFinished}

func (t Type) String() string { return string(t) }

// Known reports whether t is one of the protocol's event types, a turn's
// or a workflow's.
func (t Type) Known() bool {
	for _, k := range Types {
		if k == t {
			return true
		}
	}
	return t.Workflow()
}

// Workflow reports whether t is one of a workflow's event types.
func (t Type) Workflow() bool {
	for _, k := range WorkflowTypes {
		if k == t {
			return true
		}
	}
	return false
}

// StopReason says why a turn finished. The set is closed.
type StopReason string

// The stop reasons of docs/protocol.md.
const (
	StopCompleted     StopReason = "completed"
	StopStepCap       StopReason = "step_cap"
	StopBudget        StopReason = "budget"
	StopDoomLoop      StopReason = "doom_loop"
	StopTimeout       StopReason = "timeout"
	StopAborted       StopReason = "aborted"
	StopSynthesisDone StopReason = "synthesis_done"
	StopError         StopReason = "error"
	StopRejected      StopReason = "rejected"
)

// StopReasons lists every stop reason.
var StopReasons = []StopReason{StopCompleted, StopStepCap, StopBudget, StopDoomLoop, StopTimeout,
	StopAborted, StopSynthesisDone, StopError, StopRejected}

func (r StopReason) String() string { return string(r) }

// Envelope is one event in a turn's log, on jetloop.events.<session_id>.<turn_id>.
type Envelope struct {
	ID        string          `json:"id"`
	Type      Type            `json:"type"`
	TurnID    string          `json:"turn_id"`
	SessionID string          `json:"session_id"`
	Seq       int             `json:"seq"`
	Step      int             `json:"step"`
	Time      time.Time       `json:"time"`
	Data      json.RawMessage `json:"data"`
}

// Message is one entry of a conversation as jetloop hands it to a model
// provider: a user or assistant message, or the result of one tool call.
type Message struct {
	Role      Role       `json:"role"`
	Content   string     `json:"content"`
	ToolCalls []ToolCall `json:"tool_calls,omitempty"`
	CallID    string     `json:"call_id,omitempty"`
	Name      string     `json:"name,omitempty"`
	IsError   bool       `json:"is_error,omitempty"`
}

// Role is a conversation role.
type Role string

// Conversation roles. Submissions carry user (and, to seed a conversation,
// assistant) messages; tool messages are results of the assistant's calls.
const (
	RoleUser      Role = "user"
	RoleAssistant Role = "assistant"
	RoleTool      Role = "tool"
)

// ToolCall is one call a model asked for.
type ToolCall struct {
	CallID    string          `json:"call_id"`
	Name      string          `json:"name"`
	Arguments json.RawMessage `json:"arguments"`
}

// Usage counts a model call's tokens.
type Usage struct {
	InputTokens  int `json:"input_tokens"`
	OutputTokens int `json:"output_tokens"`
}

// Limits are a turn's effective limits. Steps is nil for "no cap but the
// hard ceiling" in a submission, and always set in turn.started.
type Limits struct {
	Steps     *int  `json:"steps,omitempty"`
	Budget    int   `json:"budget,omitempty"`
	TimeoutMs int64 `json:"timeout_ms,omitempty"`
	DoomLoop  int   `json:"doom_loop,omitempty"`
}

// Metrics sum up a finished turn.
type Metrics struct {
	Steps        int   `json:"steps"`
	ToolCalls    int   `json:"tool_calls"`
	ModelCalls   int   `json:"model_calls"`
	InputTokens  int   `json:"input_tokens"`
	OutputTokens int   `json:"output_tokens"`
	DurationMs   int64 `json:"duration_ms"`
	// Descendants is what the turns its subagent calls started used, at
	// every depth, apart from the turn's own figures above.
	Descendants *TreeMetrics `json:"descendants,omitempty"`
}

// TreeMetrics sum up a tree of turns: a subagent's turn and everything
// below it, or everything below a turn.
type TreeMetrics struct {
	Turns        int `json:"turns"`
	Steps        int `json:"steps"`
	ToolCalls    int `json:"tool_calls"`
	ModelCalls   int `json:"model_calls"`
	InputTokens  int `json:"input_tokens"`
	OutputTokens int `json:"output_tokens"`
}

// Add counts t in m.
func (m *TreeMetrics) Add(t TreeMetrics) {
	m.Turns += t.Turns
	m.Steps += t.Steps
	m.ToolCalls += t.ToolCalls
	m.ModelCalls += t.ModelCalls
	m.InputTokens += t.InputTokens
	m.OutputTokens += t.OutputTokens
}

// Tree is what a finished turn and its descendants used together.
func (m Metrics) Tree() TreeMetrics {
	t := TreeMetrics{Turns: 1, Steps: m.Steps, ToolCalls: m.ToolCalls, ModelCalls: m.ModelCalls,
		InputTokens: m.InputTokens, OutputTokens: m.OutputTokens}
	if m.Descendants != nil {
		t.Add(*m.Descendants)
	}
	return t
}

// ForkedFrom names the turn and step a forked turn starts from.
type ForkedFrom struct {
	TurnID string `json:"turn_id"`
	Step   int    `json:"step"`
}

// TurnStartedData is the data of turn.started.
type TurnStartedData struct {
	Agent    string            `json:"agent"`
	Model    string            `json:"model"`
	Input    []Message         `json:"input"`
	History  int               `json:"history"`
	Tools    []string          `json:"tools"`
	Limits   Limits            `json:"limits"`
	Metadata map[string]string `json:"metadata,omitempty"`
	// ForkedFrom is set on a forked turn.
	ForkedFrom *ForkedFrom `json:"forked_from,omitempty"`
	// Workflow is set on the turn of a workflow's task.
	Workflow *WorkflowRef `json:"workflow,omitempty"`
	// Parent is set on a subagent's turn: the parent's call that runs it.
	Parent *ParentRef `json:"parent,omitempty"`
	// HistoryTurns lists, oldest first, the finished turns of the session
	// whose conversation is this turn's history, so a fold of this log can
	// rebuild exactly the conversation the turn saw (an extension of the
	// protocol's count).
	HistoryTurns []string `json:"history_turns,omitempty"`
	// Script is the inline scripted model of a model=script turn, kept in the
	// log so the turn can be resumed, replayed and forked without its submit.
	Script json.RawMessage `json:"script,omitempty"`
	// System is the agent's system prompt as it was when the turn started.
	System string `json:"system,omitempty"`
	// Approval and FinalTools are the agent's gated and final tools.
	Approval   []string `json:"approval,omitempty"`
	FinalTools []string `json:"final_tools,omitempty"`
	// ToolSpecs carries the description and argument schema of every tool
	// offered, as the model saw them.
	ToolSpecs []ToolSpec `json:"tool_specs,omitempty"`
	// SubmitDigest identifies the submission that started the turn, so an
	// identical re-sent submission changes nothing.
	SubmitDigest string `json:"submit_digest,omitempty"`
	// Compaction is the agent's context compaction, absent when the turn
	// sends its whole conversation to the model.
	Compaction *Compaction `json:"compaction,omitempty"`
	// ScriptIndex is the number of scripted responses consumed before the
	// turn's first model call: a fork that keeps the original's script goes
	// on from where the original was at the fork's step.
	ScriptIndex int `json:"script_index,omitempty"`
}

// Compaction bounds the conversation a turn sends to its model: the first
// user message and the messages of the last KeepSteps steps (fsm.Compact).
type Compaction struct {
	KeepSteps int `json:"keep_steps"`
	// Agent and OverTokens are a summarizing compaction: once a model
	// call's input passes OverTokens tokens, a child turn of Agent
	// summarizes the steps before the last KeepSteps (turn.compacted).
	Agent      string `json:"agent,omitempty"`
	OverTokens int    `json:"over_tokens,omitempty"`
}

// TurnCompactedData is the data of turn.compacted: the steps through
// ThroughStep are replaced, in later model calls, by Summary, written by
// the child turn ChildTurnID. A compaction that failed (the child did not
// answer) has Error and no summary, and the turn goes on without one.
type TurnCompactedData struct {
	ThroughStep int    `json:"through_step"`
	ChildTurnID string `json:"child_turn_id"`
	Summary     string `json:"summary"`
	Error       string `json:"error,omitempty"`
}

// ToolSpec describes a tool to a model.
type ToolSpec struct {
	Name        string          `json:"name"`
	Description string          `json:"description,omitempty"`
	Parameters  json.RawMessage `json:"parameters,omitempty"`
	TimeoutMs   int64           `json:"timeout_ms,omitempty"`
	// Agent is set on a subagent tool: a call of it runs a child turn of
	// that agent instead of a worker's job.
	Agent string `json:"agent,omitempty"`
	// SharedSession runs a subagent tool's children in the parent's
	// session (the parent agent's subagent_session: shared).
	SharedSession bool `json:"shared_session,omitempty"`
	// Budget is, on a subagent tool, the tool budget of its agent: a child
	// reserves the smaller of it and what its parent has left.
	Budget int `json:"budget,omitempty"`
}

// ModelCompletedData is the data of model.completed.
type ModelCompletedData struct {
	Text         string     `json:"text"`
	ToolCalls    []ToolCall `json:"tool_calls"`
	FinishReason string     `json:"finish_reason"`
	Usage        Usage      `json:"usage"`
	DurationMs   int64      `json:"duration_ms"`
	// Attempts counts the provider calls this answer took (retries included).
	Attempts int `json:"attempts,omitempty"`
	// Error is set when the model call failed for good.
	Error string `json:"error,omitempty"`
	// Messages and Compacted are set, both, on the turns that compact their
	// context: how many messages the call sent (a compaction note included)
	// and how many of the conversation's messages it left out.
	Messages  *int `json:"messages,omitempty"`
	Compacted *int `json:"compacted,omitempty"`
}

// ToolRequestedData is the data of tool.requested.
type ToolRequestedData struct {
	CallID    string          `json:"call_id"`
	Name      string          `json:"name"`
	Arguments json.RawMessage `json:"arguments"`
	// ChildTurnID is the turn a subagent call runs.
	ChildTurnID string `json:"child_turn_id,omitempty"`
}

// ToolCompletedData is the data of tool.completed.
type ToolCompletedData struct {
	CallID     string `json:"call_id"`
	Name       string `json:"name"`
	Output     string `json:"output"`
	IsError    bool   `json:"is_error"`
	Final      bool   `json:"final"`
	DurationMs int64  `json:"duration_ms"`
	Worker     string `json:"worker"`
	Attempts   int    `json:"attempts"`
	// ChildTurnID is the turn whose end is a subagent call's result, and
	// ChildMetrics what that turn and its descendants used: the parent's
	// budget counts them.
	ChildTurnID  string       `json:"child_turn_id,omitempty"`
	ChildMetrics *TreeMetrics `json:"child_metrics,omitempty"`
}

// PauseKind says what a paused turn waits for.
type PauseKind string

// Pause kinds.
const (
	PauseInput    PauseKind = "input"
	PauseApproval PauseKind = "approval"
)

// TurnPausedData is the data of turn.paused.
type TurnPausedData struct {
	CallID    string          `json:"call_id"`
	Kind      PauseKind       `json:"kind"`
	Question  string          `json:"question,omitempty"`
	Tool      string          `json:"tool,omitempty"`
	Arguments json.RawMessage `json:"arguments,omitempty"`
}

// TurnResumedData is the data of turn.resumed.
type TurnResumedData struct {
	CallID   string `json:"call_id"`
	Answer   string `json:"answer,omitempty"`
	Approved *bool  `json:"approved,omitempty"`
	Note     string `json:"note,omitempty"`
}

// Decision is a step.checked outcome.
type Decision string

// Decisions.
const (
	DecisionContinue Decision = "continue"
	DecisionStop     Decision = "stop"
)

// StepCheckedData is the data of step.checked.
type StepCheckedData struct {
	Decision   Decision   `json:"decision"`
	StopReason StopReason `json:"stop_reason,omitempty"`
}

// SentinelKind says which limit a sentinel reports.
type SentinelKind string

// Sentinel kinds.
const (
	SentinelCapHit   SentinelKind = "cap_hit"
	SentinelDoomLoop SentinelKind = "doom_loop"
)

// TurnSentinelData is the data of turn.sentinel.
type TurnSentinelData struct {
	Kind   SentinelKind `json:"kind"`
	Reason StopReason   `json:"reason"`
	Text   string       `json:"text"`
	// Usage counts the summary call's tokens (an extension: the summary call
	// has no model.completed of its own).
	Usage *Usage `json:"usage,omitempty"`
}

// TurnFinishedData is the data of turn.finished.
type TurnFinishedData struct {
	StopReason StopReason `json:"stop_reason"`
	Output     string     `json:"output"`
	Error      string     `json:"error,omitempty"`
	Metrics    Metrics    `json:"metrics"`
}
