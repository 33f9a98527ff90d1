package client

import (
	"encoding/json"
	"fmt"
	"time"

	"github.com/jetloop/jetloop/internal/events"
)

// EventType names an event of a turn's log ("turn.started"). The set is
// closed: a log holds no other type.
type EventType = events.Type

// The event types of a turn's log, in the order a turn usually writes them.
const (
	TypeTurnStarted    = events.TurnStarted
	TypeStepStarted    = events.StepStarted
	TypeModelCompleted = events.ModelCompleted
	TypeToolRequested  = events.ToolRequested
	TypeToolCompleted  = events.ToolCompleted
	TypeTurnPaused     = events.TurnPaused
	TypeTurnResumed    = events.TurnResumed
	TypeStepChecked    = events.StepChecked
	TypeTurnSentinel   = events.TurnSentinel
	TypeTurnCompacted  = events.TurnCompacted
	TypeTurnFinished   = events.TurnFinished
)

// StopReason says why a turn finished. The set is closed; String returns the
// wire value ("completed").
type StopReason = events.StopReason

// The stop reasons of a turn.
const (
	StopCompleted     = events.StopCompleted     // the model answered without tool calls
	StopStepCap       = events.StopStepCap       // the step cap was reached
	StopBudget        = events.StopBudget        // the tool budget was spent
	StopDoomLoop      = events.StopDoomLoop      // the same tool call repeated
	StopTimeout       = events.StopTimeout       // the turn's wall clock ran out
	StopAborted       = events.StopAborted       // an abort control message stopped it
	StopSynthesisDone = events.StopSynthesisDone // a final tool's result is the answer
	StopError         = events.StopError         // a model call failed for good, or a result could not be stored
	StopRejected      = events.StopRejected      // the submission was refused; the turn never ran
)

// The data of each event type, as the log holds it (docs/protocol.md, "Events").
// Their fields are promoted into the events that embed them: e.Output of a
// ToolCompleted e.

// TurnStartedData is turn.started's: Agent, Model, Input (this turn's new
// messages), History (messages carried from the session's earlier turns),
// Tools (the names offered), Limits (the effective ones), Metadata (the
// submission's), ForkedFrom when forked, and the extensions of
// docs/protocol.md.
type TurnStartedData = events.TurnStartedData

// ModelCompletedData is model.completed's: Text, ToolCalls, FinishReason,
// Usage, DurationMs, Attempts, and Error when the call failed for good.
type ModelCompletedData = events.ModelCompletedData

// ToolRequestedData is tool.requested's: CallID, Name, Arguments.
type ToolRequestedData = events.ToolRequestedData

// ToolCompletedData is tool.completed's: CallID, Name, Output, IsError,
// Final, DurationMs, Worker, Attempts.
type ToolCompletedData = events.ToolCompletedData

// TurnPausedData is turn.paused's: CallID, Kind, and the Question of an
// ask_user call or the Tool and Arguments of a call that waits for approval.
type TurnPausedData = events.TurnPausedData

// TurnResumedData is turn.resumed's: CallID, and the Answer to a question
// or Approved (a *bool) and Note.
type TurnResumedData = events.TurnResumedData

// StepCheckedData is step.checked's: Decision ("continue" or "stop") and the
// StopReason of a stop.
type StepCheckedData = events.StepCheckedData

// TurnSentinelData is turn.sentinel's: Kind ("cap_hit" or "doom_loop"),
// Reason (a StopReason) and Text (the cause line and a summary).
type TurnSentinelData = events.TurnSentinelData

// TurnCompactedData is turn.compacted's: the Summary that replaces the
// turn's steps through ThroughStep in its later model calls, written by the
// child turn ChildTurnID; Error when that turn gave no summary.
type TurnCompactedData = events.TurnCompactedData

// TurnFinishedData is turn.finished's: StopReason, Output, Error, Metrics.
type TurnFinishedData = events.TurnFinishedData

// Message is one entry of a conversation: Role, Content, and for an
// assistant message its ToolCalls, or for a tool result CallID, Name and
// IsError.
type Message = events.Message

// Role is a message's role.
type Role = events.Role

// ToolCall is one call a model asked for: CallID, Name, Arguments (JSON).
type ToolCall = events.ToolCall

// Limits tighten a turn's limits in a submission (Steps, a *int; Budget;
// TimeoutMs; DoomLoop); turn.started holds the effective ones.
type Limits = events.Limits

// Metrics sum up a finished turn: Steps, ToolCalls, ModelCalls,
// InputTokens, OutputTokens, DurationMs.
type Metrics = events.Metrics

// Usage counts a model call's tokens: InputTokens, OutputTokens.
type Usage = events.Usage

// ForkedFrom names the TurnID and Step a forked turn starts from.
type ForkedFrom = events.ForkedFrom

// PauseKind says what a paused turn waits for: PauseInput or PauseApproval.
type PauseKind = events.PauseKind

// Delta is a piece of model text (Delta) streamed while the model call of
// step Step of turn TurnID runs.
type Delta = events.Delta

// Conversation roles.
const (
	RoleUser      = events.RoleUser
	RoleAssistant = events.RoleAssistant
)

// Pause kinds.
const (
	PauseInput    = events.PauseInput    // ask_user: answer with Reply
	PauseApproval = events.PauseApproval // a gated call: answer with Approve or Deny
)

// Event is one event of a turn's log: a TurnStarted, StepStarted,
// ModelCompleted, ToolRequested, ToolCompleted, TurnPaused, TurnResumed,
// StepChecked, TurnSentinel, TurnCompacted or TurnFinished; or of a
// workflow's log: a WorkflowStarted, TaskStarted, TaskFinished,
// WorkflowCheckpointed, WorkflowGated, WorkflowResumed or WorkflowFinished. Switch on its type:
//
//	switch e := ev.(type) {
//	case client.ToolCompleted:
//		fmt.Println(e.Name, e.Output)
//	case client.TurnFinished:
//		fmt.Println(e.StopReason)
//	}
type Event interface {
	// Info returns what every event carries.
	Info() EventInfo
}

// EventInfo is what every event carries: the envelope of the log.
type EventInfo struct {
	ID        string    // a UUIDv7, the event's Nats-Msg-Id
	Type      EventType // repeats the event's Go type
	TurnID    string    // the turn's id, or in a workflow's log the workflow's
	SessionID string
	Seq       int       // 1, 2, 3 … within the log, without gaps
	Step      int       // from 1; 0 before the first step (a workflow's: its task)
	Time      time.Time // the orchestrator's clock when it decided the event
	// ParentCall names the call of another turn that runs this event's
	// turn: set on the events of subagents' turns that Watch yields
	// WithSubagents (a child's TurnStarted says it too, as Parent).
	ParentCall *ParentRef
}

// ParentRef names the call that runs a subagent's turn: the parent's TurnID,
// the CallID, the child's Depth (1 for a child of a turn no call runs), and
// from depth 2 the RootTurnID at the top of the chain.
type ParentRef = events.ParentRef

// Info returns i; every event has it through EventInfo.
func (i EventInfo) Info() EventInfo { return i }

// TurnStarted opens a turn's log: agent, model, input, effective limits, tools
// offered.
type TurnStarted struct {
	EventInfo
	TurnStartedData
}

// StepStarted opens a step: one model call and the tool calls it asks for.
type StepStarted struct {
	EventInfo
}

// ModelCompleted is a model's answer: text, tool calls, usage.
type ModelCompleted struct {
	EventInfo
	ModelCompletedData
}

// ToolRequested is a tool call sent to a worker (or held for approval).
type ToolRequested struct {
	EventInfo
	ToolRequestedData
}

// ToolCompleted is a tool call's result.
type ToolCompleted struct {
	EventInfo
	ToolCompletedData
}

// TurnPaused says the turn waits: for a Reply to an ask_user question (Kind
// PauseInput) or for Approve or Deny of a call (Kind PauseApproval).
type TurnPaused struct {
	EventInfo
	TurnPausedData
}

// TurnResumed says a paused turn got its answer.
type TurnResumed struct {
	EventInfo
	TurnResumedData
}

// StepChecked ends a step: continue, or stop with a stop reason.
type StepChecked struct {
	EventInfo
	StepCheckedData
}

// TurnSentinel reports a step cap, budget or doom-loop stop, with a summary
// of the progress so far.
type TurnSentinel struct {
	EventInfo
	TurnSentinelData
}

// TurnCompacted says a summary of the turn's older steps, written by a
// child turn of the agent's compaction agent, replaces them from now on.
type TurnCompacted struct {
	EventInfo
	TurnCompactedData
}

// TurnFinished is a turn's last event: its stop reason, output and metrics.
type TurnFinished struct {
	EventInfo
	TurnFinishedData
}

// Succeeded reports whether the turn answered: it stopped with
// StopCompleted or StopSynthesisDone.
func (f TurnFinished) Succeeded() bool {
	return f.StopReason == StopCompleted || f.StopReason == StopSynthesisDone
}

// typed makes the Go event of each type from its envelope and decoded data,
// one small constructor per type.
var typed = map[EventType]func(EventInfo, any) Event{
	TypeTurnStarted:    func(i EventInfo, d any) Event { return TurnStarted{i, *d.(*TurnStartedData)} },
	TypeStepStarted:    func(i EventInfo, _ any) Event { return StepStarted{i} },
	TypeModelCompleted: func(i EventInfo, d any) Event { return ModelCompleted{i, *d.(*ModelCompletedData)} },
	TypeToolRequested:  func(i EventInfo, d any) Event { return ToolRequested{i, *d.(*ToolRequestedData)} },
	TypeToolCompleted:  func(i EventInfo, d any) Event { return ToolCompleted{i, *d.(*ToolCompletedData)} },
	TypeTurnPaused:     func(i EventInfo, d any) Event { return TurnPaused{i, *d.(*TurnPausedData)} },
	TypeTurnResumed:    func(i EventInfo, d any) Event { return TurnResumed{i, *d.(*TurnResumedData)} },
	TypeStepChecked:    func(i EventInfo, d any) Event { return StepChecked{i, *d.(*StepCheckedData)} },
	TypeTurnSentinel:   func(i EventInfo, d any) Event { return TurnSentinel{i, *d.(*TurnSentinelData)} },
	TypeTurnCompacted:  func(i EventInfo, d any) Event { return TurnCompacted{i, *d.(*TurnCompactedData)} },
	TypeTurnFinished:   func(i EventInfo, d any) Event { return TurnFinished{i, *d.(*TurnFinishedData)} },

	TypeWorkflowStarted: func(i EventInfo, d any) Event { return WorkflowStarted{i, *d.(*WorkflowStartedData)} },
	TypeTaskStarted: func(i EventInfo, d any) Event {
		data := *d.(*TaskStartedData)
		return TaskStarted{i, data, data.TurnID}
	},
	TypeTaskFinished: func(i EventInfo, d any) Event {
		data := *d.(*TaskFinishedData)
		return TaskFinished{i, data, data.TurnID}
	},
	TypeWorkflowCheckpointed: func(i EventInfo, d any) Event { return WorkflowCheckpointed{i, *d.(*WorkflowCheckpointedData)} },
	TypeWorkflowGated:        func(i EventInfo, d any) Event { return WorkflowGated{i, *d.(*WorkflowGatedData)} },
	TypeWorkflowResumed:      func(i EventInfo, d any) Event { return WorkflowResumed{i, *d.(*WorkflowResumedData)} },
	TypeWorkflowFinished:     func(i EventInfo, d any) Event { return WorkflowFinished{i, *d.(*WorkflowFinishedData)} },
}

// decodeEvent reads one encoded event, checked against its schemas.
func decodeEvent(data []byte) (Event, error) {
	env, d, err := events.Decode(data)
	if err != nil {
		return nil, err
	}
	return fromEnvelope(env, d)
}

// fromEnvelope types an envelope whose data is decoded (d from events.Decode)
// or still raw (d nil).
func fromEnvelope(env events.Envelope, d any) (Event, error) {
	return fromEnvelopeOf(env, d, nil)
}

// fromEnvelopeOf is fromEnvelope for an event of a turn parent runs.
func fromEnvelopeOf(env events.Envelope, d any, parent *ParentRef) (Event, error) {
	mk, ok := typed[env.Type]
	if !ok {
		return nil, fmt.Errorf("client: %w %q", events.ErrUnknownType, string(env.Type))
	}
	if d == nil {
		d, _ = events.NewData(env.Type)
		if err := json.Unmarshal(env.Data, d); err != nil {
			return nil, fmt.Errorf("client: decode %s data: %w", env.Type, err)
		}
	}
	info := EventInfo{ID: env.ID, Type: env.Type, TurnID: env.TurnID, SessionID: env.SessionID, Seq: env.Seq,
		Step: env.Step, Time: env.Time, ParentCall: parent}
	return mk(info, d), nil
}
