package events

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"time"
)

// Submit is a turn request on jetloop.inbox.submit.
type Submit struct {
	TurnID    string            `json:"turn_id"`
	SessionID string            `json:"session_id,omitempty"`
	Agent     string            `json:"agent,omitempty"`
	Input     []Message         `json:"input,omitempty"`
	Model     string            `json:"model,omitempty"`
	Script    json.RawMessage   `json:"script,omitempty"`
	Limits    *Limits           `json:"limits,omitempty"`
	Metadata  map[string]string `json:"metadata,omitempty"`
	// ForkedFrom asks for a turn whose history is another turn's
	// conversation up to a step (jetloop fork).
	ForkedFrom *ForkedFrom `json:"forked_from,omitempty"`
	// Workflow is set by a workflow on the turn of one of its tasks.
	Workflow *WorkflowRef `json:"workflow,omitempty"`
	// Parent is set on a subagent's turn: the call of the parent turn that
	// runs it. Only the orchestrator submits such a turn (docs/protocol.md,
	// Subagents).
	Parent *ParentRef `json:"parent,omitempty"`
}

// ParentRef ties a subagent's turn to the parent turn's call that runs it.
type ParentRef struct {
	TurnID string `json:"turn_id"`
	CallID string `json:"call_id"`
	// Depth is the child's: 1 for a child of a turn that is no subagent's.
	Depth int `json:"depth"`
	// RootTurnID is the turn at the top of the chain when it is not TurnID
	// (a child at depth 2 or 3): the chain shares that turn's trace.
	RootTurnID string `json:"root_turn_id,omitempty"`
}

// Action is a control message's verb.
type Action string

// Control actions.
const (
	ActionAbort   Action = "abort"
	ActionReply   Action = "reply"
	ActionApprove Action = "approve"
)

// Control is an operator's message on jetloop.inbox.control.<turn_id>.
type Control struct {
	Action   Action `json:"action"`
	Reason   string `json:"reason,omitempty"`
	CallID   string `json:"call_id,omitempty"`
	Answer   string `json:"answer,omitempty"`
	Approved *bool  `json:"approved,omitempty"`
	Note     string `json:"note,omitempty"`
}

// ToolJob asks a tool worker for one call, on jetloop.jobs.tool.<tool>.
type ToolJob struct {
	TurnID    string          `json:"turn_id"`
	SessionID string          `json:"session_id"`
	Step      int             `json:"step"`
	CallID    string          `json:"call_id"`
	Tool      string          `json:"tool"`
	Arguments json.RawMessage `json:"arguments"`
	Deadline  time.Time       `json:"deadline"`
}

// ToolResult answers a ToolJob, on jetloop.inbox.result@<tool>.<turn_id>
// (a subagent's end, from an orchestrator, on jetloop.inbox.result.<turn_id>).
type ToolResult struct {
	TurnID     string `json:"turn_id"`
	CallID     string `json:"call_id"`
	Tool       string `json:"tool"`
	Output     string `json:"output"`
	IsError    bool   `json:"is_error"`
	Final      bool   `json:"final"`
	DurationMs int64  `json:"duration_ms"`
	Worker     string `json:"worker"`
	Attempt    int    `json:"attempt"`
}

// Delta is one piece of streamed model text on jetloop.stream.<turn_id>
// (core NATS, not persisted).
type Delta struct {
	TurnID string `json:"turn_id"`
	Step   int    `json:"step"`
	Delta  string `json:"delta"`
}

// ToolInfo is a tool's entry in KV JETLOOP_TOOLS.
type ToolInfo struct {
	Name        string          `json:"name"`
	Description string          `json:"description"`
	Parameters  json.RawMessage `json:"parameters"`
	TimeoutMs   int64           `json:"timeout_ms"`
	Workers     int             `json:"workers"`
}

// ModelKind says what a model call is for.
type ModelKind string

// Model call kinds: a step's call, or the tool-less summary of a sentinel.
const (
	ModelStep    ModelKind = "step"
	ModelSummary ModelKind = "summary"
)

// ModelJobRef asks a model runner for one model call, on jetloop.jobs.model
// (internal to jetloop). It names the call, not its content: the runner
// lives in an orchestrator, next to the turn's state and log, and derives the
// call (ModelJob) from them, so no conversation, however long, is ever sent
// as one message.
type ModelJobRef struct {
	TurnID    string    `json:"turn_id"`
	SessionID string    `json:"session_id"`
	Step      int       `json:"step"`
	Kind      ModelKind `json:"kind"`
	// Attempt counts the tries of this call (1 when absent). A retry is a
	// new job with the next attempt, so a redelivery after a crash repeats
	// its attempt rather than counting as another.
	Attempt int `json:"attempt,omitempty"`
	// NotBefore delays a retry: a runner that gets the job earlier hands it
	// back until then.
	NotBefore time.Time `json:"not_before,omitzero"`
}

// ModelJob is one model call as the turn's state defines it: what a model
// runner sends to the provider. It is derived from the state (fsm.Jobs) and
// never sent on the wire; a ModelJobRef names it.
type ModelJob struct {
	TurnID    string          `json:"turn_id"`
	SessionID string          `json:"session_id"`
	Step      int             `json:"step"`
	Kind      ModelKind       `json:"kind"`
	Model     string          `json:"model"`
	System    string          `json:"system,omitempty"`
	Messages  []Message       `json:"messages"`
	Tools     []ToolSpec      `json:"tools,omitempty"`
	Script    json.RawMessage `json:"script,omitempty"`
	// ScriptIndex is the number of scripted responses the turn consumed
	// before this call: a scripted model answers attempt n of this call with
	// response ScriptIndex+n-1.
	ScriptIndex int `json:"script_index"`
	// Instruction is appended for summary calls: models ignore a missing
	// tool list alone.
	Instruction string `json:"instruction,omitempty"`
	// Attempt counts the tries of this call (1 when absent). A retry is a
	// new job with the next attempt, so a redelivery after a crash repeats
	// its attempt rather than counting as another.
	Attempt int `json:"attempt,omitempty"`
	// NotBefore delays a retry: a runner that gets the job earlier hands it
	// back until then.
	NotBefore time.Time `json:"not_before,omitzero"`
	// Root is the turn at the top of the turn's chain of subagent calls,
	// whose trace the call's span joins.
	Root string `json:"-"`
}

// ModelResult answers a ModelJob, on jetloop.inbox.model.<turn_id>
// (internal to jetloop).
type ModelResult struct {
	TurnID       string     `json:"turn_id"`
	Step         int        `json:"step"`
	Kind         ModelKind  `json:"kind"`
	Text         string     `json:"text"`
	ToolCalls    []ToolCall `json:"tool_calls,omitempty"`
	FinishReason string     `json:"finish_reason,omitempty"`
	Usage        Usage      `json:"usage"`
	DurationMs   int64      `json:"duration_ms"`
	Attempts     int        `json:"attempts"`
	// Error is set when the call failed for good, after its retries.
	Error string `json:"error,omitempty"`
}

// TimerKind says which deadline a timer message reports.
type TimerKind string

// Timer kinds.
const (
	TimerTurn TimerKind = "turn_timeout"
	TimerCall TimerKind = "call_deadline"
	// TimerHook is a workflow's wait for a hook's answer; CallID names the
	// hook.
	TimerHook TimerKind = "hook_timeout"
	// TimerWake is no deadline: it asks the owner of a turn to decide it
	// again, which completes a decision a dead process left half-appended
	// and publishes the jobs the turn waits on.
	TimerWake TimerKind = "wake"
)

// Timer tells the orchestrator that a deadline of a turn has passed, on
// jetloop.inbox.timer.<turn_id> (internal to jetloop).
type Timer struct {
	TurnID string    `json:"turn_id"`
	Kind   TimerKind `json:"kind"`
	CallID string    `json:"call_id,omitempty"`
	At     time.Time `json:"at"`
}

// SubmitDigest identifies a submission (or a workflow's) by its content,
// whatever its key order: turn.started's submit_digest. A client that
// finds a turn under its id compares it to tell a re-send of the
// submission that started the turn (harmless) from a reuse of the id.
func SubmitDigest(data []byte) string {
	var v any
	if err := json.Unmarshal(data, &v); err == nil {
		if canon, err := json.Marshal(v); err == nil {
			data = canon
		}
	}
	sum := sha256.Sum256(data)
	return hex.EncodeToString(sum[:16])
}
