package fsm

import (
	"encoding/json"
	"fmt"
	"slices"
	"time"

	"github.com/jetloop/jetloop/internal/events"
)

// MaxSteps is the hard ceiling on a turn's steps, whatever its agent says.
const MaxSteps = 200

// Defaults of the limits an agent may leave unset.
const (
	DefaultBudget   = 50
	DefaultDoomLoop = 3
	// DefaultToolTimeout bounds a call whose tool advertises no timeout: the
	// orchestrator's backstop when no worker answers at all.
	DefaultToolTimeout = 5 * time.Minute
)

// AskUser is the tool the orchestrator serves itself: it pauses the turn until
// a reply control message answers the question.
const AskUser = "ask_user"

// AskUserSpec describes ask_user to models.
var AskUserSpec = events.ToolSpec{
	Name:        AskUser,
	Description: "Ask the user a question and wait for the answer. Use it when you cannot go on without the user's input.",
	Parameters:  json.RawMessage(`{"type":"object","properties":{"question":{"type":"string","minLength":1}},"required":["question"],"additionalProperties":false}`),
}

// CallStatus is where one tool call of a step stands.
type CallStatus int

// Call statuses.
const (
	CallRequested CallStatus = iota // sent to a worker, or waiting for its gate
	CallCompleted                   // has its tool.completed
)

// Gate says what a call waits for before it can run.
type Gate int

// Gates.
const (
	GateNone     Gate = iota
	GateInput         // ask_user: a reply
	GateApproval      // an approve control message
)

// Call is one tool call of the current step.
type Call struct {
	events.ToolCall
	Status    CallStatus
	Gate      Gate
	Resumed   bool // its gate was answered
	Approved  bool // approved (only for GateApproval)
	Requested time.Time
	Deadline  time.Time
	Result    *events.ToolCompletedData
	// Child is the turn a subagent call runs (tool.requested's
	// child_turn_id), and Agent that turn's agent; both empty for a
	// worker's tool.
	Child string
	Agent string
}

// Runnable reports whether a worker should be running the call now.
func (c *Call) Runnable() bool {
	if c.Status != CallRequested || c.Name == AskUser || c.Child != "" {
		return false
	}
	return c.Gate == GateNone || (c.Gate == GateApproval && c.Resumed && c.Approved)
}

// Limits are a turn's effective limits.
type Limits struct {
	Steps    int           // effective step cap: min(steps ?? MaxSteps, MaxSteps); 0 = text only
	Budget   int           // tool calls per turn
	Timeout  time.Duration // 0 = none
	DoomLoop int           // identical consecutive calls that stop the turn
}

// State is a turn folded from its log.
type State struct {
	TurnID    string
	SessionID string
	Phase     Phase
	Seq       int // seq of the last event
	Step      int
	Started   time.Time
	LastTime  time.Time

	// Setup is how the turn was set up, from its turn.started.
	Setup

	HistoryLen int
	// Summary is the last summarizing compaction, CompactFailed set once
	// one failed (the turn then goes on uncompacted).
	Summary       *events.TurnCompactedData
	CompactFailed bool
	// endedCompacting is the compaction child running when the turn
	// finished, which its end must abort.
	endedCompacting string
	// LastInput is the input tokens of the turn's last model call.
	LastInput int
	// StepAt holds, for each step n, the index in Messages of its first
	// message (StepAt[n-1]).
	StepAt []int
	// History is the conversation of the session's earlier turns. It is not
	// in this turn's log (turn.started names its turns), so whoever folds the
	// log sets it; Jobs needs it only to build model calls.
	History []events.Message
	// Messages is this turn's own conversation: its input, then each model
	// answer and tool result.
	Messages []events.Message

	// The current step.
	Calls      []Call
	Asked      int    // tool calls the model asked for in this step
	Doomed     string // the repeating call's name when the doom loop stopped dispatch
	ModelError string
	Answer     string // the model's text in this step
	Checked    *events.StepCheckedData
	// StepStarted is the time of the current step's step.started.
	StepStarted time.Time

	Used int // the turn's own calls that got a tool.completed
	// Descendants is what the turns of its finished subagent calls used,
	// at every depth: the budget counts their tool calls with Used.
	Descendants events.TreeMetrics
	// stepSpent is Spent() when the step's model answer was applied: what
	// the step's children reserve their budgets after.
	stepSpent int
	planned   []events.ToolCall // the calls the step's model answer runs
	runSig    string
	runLen    int

	ModelCalls   int
	InputTokens  int
	OutputTokens int

	Finished *events.TurnFinishedData
}

// New returns the state of a turn that has no events yet.
func New(turnID string) *State {
	return &State{TurnID: turnID, Phase: PhaseNew}
}

// Spent is the budget's count: the tool calls the turn and its finished
// subagents' turns completed, at every depth.
func (s *State) Spent() int { return s.Used + s.Descendants.ToolCalls }

// Exists reports whether the turn has a log.
func (s *State) Exists() bool { return s.Seq > 0 }

// Done reports whether the turn finished.
func (s *State) Done() bool { return s.Phase == PhaseDone }

// Deadline is when the turn times out (zero without a timeout).
func (s *State) Deadline() time.Time {
	if s.Limits.Timeout <= 0 || s.Started.IsZero() {
		return time.Time{}
	}
	return s.Started.Add(s.Limits.Timeout)
}

// Pending returns the call the paused turn waits on.
func (s *State) Pending() *Call {
	if s.Phase != PhasePaused {
		return nil
	}
	for i := range s.Calls {
		c := &s.Calls[i]
		if c.Gate != GateNone && !c.Resumed && c.Status == CallRequested {
			return c
		}
	}
	return nil
}

func (s *State) call(id string) *Call {
	for i := range s.Calls {
		if s.Calls[i].CallID == id {
			return &s.Calls[i]
		}
	}
	return nil
}

func (s *State) spec(name string) (events.ToolSpec, bool) {
	for _, t := range s.Tools {
		if t.Name == name {
			return t, true
		}
	}
	return events.ToolSpec{}, false
}

// clone copies the state so Decide can evolve it without touching the
// caller's. Slices that Evolve appends to are clipped, so an append copies.
func (s *State) clone() *State {
	c := *s
	c.Messages = slices.Clip(s.Messages)
	c.StepAt = slices.Clip(s.StepAt)
	c.Calls = slices.Clone(s.Calls)
	return &c
}

// Evolve applies one event of the turn's log to the state. It rejects an event
// out of sequence, of another turn, of an unknown type, or that the transition
// table does not allow in the turn's phase.
func Evolve(s *State, e events.Envelope) error {
	if e.Seq != s.Seq+1 {
		return fmt.Errorf("fsm: event %s has seq %d, want %d", e.Type, e.Seq, s.Seq+1)
	}
	if s.TurnID != "" && e.TurnID != s.TurnID {
		return fmt.Errorf("fsm: event of turn %q folded into turn %q", e.TurnID, s.TurnID)
	}
	if err := evolve(s, e); err != nil {
		return err
	}
	s.Seq = e.Seq
	s.LastTime = e.Time
	return nil
}

func decode[T any](e events.Envelope) (T, error) {
	var v T
	if err := json.Unmarshal(e.Data, &v); err != nil {
		return v, fmt.Errorf("fsm: decode %s (seq %d): %w", e.Type, e.Seq, err)
	}
	return v, nil
}

func evolve(s *State, e events.Envelope) error {
	f, ok := evolvers[e.Type]
	if !ok {
		return fmt.Errorf("fsm: unknown event type %q (seq %d)", e.Type, e.Seq)
	}
	return f(s, e)
}

// evolvers apply each type of event: one small handler per type, looked up
// by type, the way package events maps types to their data.
var evolvers = map[events.Type]func(*State, events.Envelope) error{
	events.TurnStarted:    on(evolveStarted),
	events.StepStarted:    evolveStepStarted,
	events.ModelCompleted: on(evolveModelCompleted),
	events.ToolRequested:  on(evolveToolRequested),
	events.TurnPaused:     on(evolvePaused),
	events.TurnResumed:    on(evolveResumed),
	events.ToolCompleted:  on(evolveToolCompleted),
	events.StepChecked:    on(evolveStepChecked),
	events.TurnSentinel:   on(evolveSentinel),
	events.TurnCompacted:  on(evolveCompacted),
	events.TurnFinished:   on(evolveFinished),
}

// on decodes an event's data for a handler that takes it.
func on[T any](f func(*State, events.Envelope, T) error) func(*State, events.Envelope) error {
	return func(s *State, e events.Envelope) error {
		d, err := decode[T](e)
		if err != nil {
			return err
		}
		return f(s, e, d)
	}
}

func evolveStarted(s *State, e events.Envelope, d events.TurnStartedData) error {
	if err := s.step(tStart, string(e.Type)); err != nil {
		return err
	}
	s.TurnID, s.SessionID, s.Started = e.TurnID, e.SessionID, e.Time
	s.Setup = setupOf(d)
	s.HistoryLen = d.History
	s.Messages = append(s.Messages, d.Input...)
	return nil
}

func evolveStepStarted(s *State, e events.Envelope) error {
	if err := s.step(tBegin, string(e.Type)); err != nil {
		return err
	}
	s.Step, s.StepStarted = e.Step, e.Time
	s.StepAt = append(s.StepAt, len(s.Messages))
	s.Calls, s.Asked, s.Doomed, s.ModelError, s.Answer, s.Checked = nil, 0, "", "", "", nil
	s.planned = nil
	return nil
}

func evolveModelCompleted(s *State, e events.Envelope, d events.ModelCompletedData) error {
	s.stepSpent = s.Spent()
	p := s.plan(d)
	name := tAnswer
	if len(p.run) > 0 {
		name = tCall
	}
	if err := s.step(name, string(e.Type)); err != nil {
		return err
	}
	s.ModelCalls++
	s.LastInput = d.Usage.InputTokens
	s.ScriptIndex += max(d.Attempts, 1)
	s.InputTokens += d.Usage.InputTokens
	s.OutputTokens += d.Usage.OutputTokens
	s.Answer, s.ModelError = d.Text, d.Error
	if d.Error != "" {
		return nil
	}
	s.Asked = len(d.ToolCalls)
	if s.Limits.Steps == 0 {
		s.Asked = 0 // a text-only turn ignores the calls it gets back
	}
	s.Doomed = p.doomed
	s.planned = p.run
	s.runSig, s.runLen = p.runSig, p.runLen
	s.Messages = append(s.Messages, events.Message{Role: events.RoleAssistant, Content: d.Text, ToolCalls: p.run})
	return nil
}

func evolveToolRequested(s *State, e events.Envelope, d events.ToolRequestedData) error {
	if err := s.step(tRequest, string(e.Type)); err != nil {
		return err
	}
	c := Call{ToolCall: events.ToolCall{CallID: d.CallID, Name: d.Name, Arguments: d.Arguments}, Requested: e.Time}
	if d.Name == AskUser {
		c.Gate = GateInput
	} else if slices.Contains(s.Approval, d.Name) {
		c.Gate = GateApproval
	}
	timeout := DefaultToolTimeout
	if spec, ok := s.spec(d.Name); ok && spec.TimeoutMs > 0 {
		timeout = time.Duration(spec.TimeoutMs) * time.Millisecond
	}
	c.Deadline = e.Time.Add(timeout)
	if d.ChildTurnID != "" {
		spec, _ := s.spec(d.Name)
		c.Child, c.Agent = d.ChildTurnID, spec.Agent
	}
	s.Calls = append(s.Calls, c)
	return nil
}

func evolvePaused(s *State, e events.Envelope, d events.TurnPausedData) error {
	c := s.call(d.CallID)
	if c == nil || c.Gate == GateNone || c.Resumed {
		return &TransitionError{From: s.Phase, Event: string(e.Type), Transition: tPause, Seq: e.Seq}
	}
	if err := s.step(tPause, string(e.Type)); err != nil {
		return err
	}
	return nil
}

func evolveResumed(s *State, e events.Envelope, d events.TurnResumedData) error {
	c := s.call(d.CallID)
	if c == nil || c != s.Pending() {
		return &TransitionError{From: s.Phase, Event: string(e.Type), Transition: tResume, Seq: e.Seq}
	}
	if err := s.step(tResume, string(e.Type)); err != nil {
		return err
	}
	c.Resumed = true
	c.Approved = d.Approved != nil && *d.Approved
	if c.Gate == GateApproval && c.Approved {
		// An approved call runs from now: its deadline starts here, not
		// while it waited for a person.
		c.Deadline = e.Time.Add(c.Deadline.Sub(c.Requested))
	}
	return nil
}

func evolveToolCompleted(s *State, e events.Envelope, d events.ToolCompletedData) error {
	c := s.call(d.CallID)
	if c == nil || c.Status == CallCompleted {
		return &TransitionError{From: s.Phase, Event: string(e.Type), Transition: tComplete, Seq: e.Seq}
	}
	name := tComplete
	if s.outstanding() == 1 {
		name = tSettle
	}
	if err := s.step(name, string(e.Type)); err != nil {
		return err
	}
	c.Status = CallCompleted
	c.Result = &d
	s.Used++
	if d.ChildMetrics != nil {
		s.Descendants.Add(*d.ChildMetrics)
	}
	s.Messages = append(s.Messages, events.Message{Role: events.RoleTool, CallID: d.CallID, Name: d.Name, Content: d.Output, IsError: d.IsError})
	return nil
}

func evolveStepChecked(s *State, e events.Envelope, d events.StepCheckedData) error {
	name := tContinue
	if d.Decision == events.DecisionStop {
		name = tStop
		if sentinelKind(d.StopReason) != "" {
			name = tSummarize
		}
	}
	if err := s.step(name, string(e.Type)); err != nil {
		return err
	}
	s.Checked = &d
	return nil
}

func evolveSentinel(s *State, e events.Envelope, d events.TurnSentinelData) error {
	if err := s.step(tSentinel, string(e.Type)); err != nil {
		return err
	}
	s.ModelCalls++
	if d.Usage != nil {
		s.InputTokens += d.Usage.InputTokens
		s.OutputTokens += d.Usage.OutputTokens
	}
	s.Messages = append(s.Messages, events.Message{Role: events.RoleAssistant, Content: d.Text})
	return nil
}

func evolveCompacted(s *State, e events.Envelope, d events.TurnCompactedData) error {
	if err := s.step(tCompact, string(e.Type)); err != nil {
		return err
	}
	if d.Error != "" {
		s.CompactFailed = true
		return nil
	}
	s.Summary = &d
	return nil
}

func evolveFinished(s *State, e events.Envelope, d events.TurnFinishedData) error {
	if s.Phase == PhaseNew {
		// A rejected submission's log is this one event.
		s.TurnID, s.SessionID, s.Started = e.TurnID, e.SessionID, e.Time
	}
	if through := s.CompactionDue(); through > 0 {
		s.endedCompacting = CompactChildID(s.TurnID, through)
	}
	if err := s.step(tFinish, string(e.Type)); err != nil {
		return err
	}
	s.Finished = &d
	return nil
}

// outstanding counts the step's calls still without a result.
func (s *State) outstanding() int {
	n := 0
	for i := range s.Calls {
		if s.Calls[i].Status != CallCompleted {
			n++
		}
	}
	return n
}

func toolSpecs(d events.TurnStartedData) []events.ToolSpec {
	if len(d.ToolSpecs) > 0 {
		return d.ToolSpecs
	}
	// A log written without specs still names the tools offered.
	specs := make([]events.ToolSpec, 0, len(d.Tools))
	for _, n := range d.Tools {
		if n == AskUser {
			specs = append(specs, AskUserSpec)
			continue
		}
		specs = append(specs, events.ToolSpec{Name: n})
	}
	return specs
}

func sentinelKind(r events.StopReason) events.SentinelKind {
	switch r {
	case events.StopStepCap, events.StopBudget:
		return events.SentinelCapHit
	case events.StopDoomLoop:
		return events.SentinelDoomLoop
	}
	return ""
}
