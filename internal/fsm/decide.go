package fsm

import (
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/jetloop/jetloop/internal/events"
	"github.com/jetloop/jetloop/internal/machine"
)

// Expected outcomes of Decide that are not decisions.
var (
	// ErrTurnExists: a submission (or its rejection) for a turn that has a
	// log, other than the very submission that started it.
	ErrTurnExists = errors.New("fsm: turn already exists")
	// ErrUnknownTurn: an input for a turn that has no log.
	ErrUnknownTurn = errors.New("fsm: no such turn")
	// ErrTurnFinished: an input for a finished turn; it changes nothing.
	ErrTurnFinished = errors.New("fsm: turn already finished")
)

// InputError is an input the turn cannot take, such as a reply for a call
// that asked nothing: the sender's mistake, worth a dead letter.
type InputError = machine.InputError

// inputError is an input the turn machine refuses, saying why.
func inputError(reason string) *InputError { return &InputError{Machine: "fsm", Reason: reason} }

// Env carries what a pure machine cannot make itself.
type Env = machine.Env

// Input is one thing that can happen to a turn.
type Input interface{ input() }

// Start begins a turn. The runtime resolves the agent, the tools offered and
// the session's history before it asks the machine.
type Start struct {
	TurnID    string
	SessionID string
	Input     []events.Message
	History   []events.Message
	// Setup is what turn.started records and State keeps.
	Setup
}

// Reject records a submission that cannot start a turn.
type Reject struct {
	TurnID    string
	SessionID string
	Reason    string
}

// ModelAnswer is a model runner's answer.
type ModelAnswer events.ModelResult

// ToolAnswer is a tool worker's result.
type ToolAnswer events.ToolResult

// Command is a control message.
type Command events.Control

// Tick reports a passed deadline.
type Tick events.Timer

func (Start) input()       {}
func (Reject) input()      {}
func (ModelAnswer) input() {}
func (ToolAnswer) input()  {}
func (Command) input()     {}
func (Tick) input()        {}

// Fail ends a live turn with error when what it did cannot be stored: an
// event bigger than the server's max payload, a stream that is full. Like an
// abort, it ends the turn at once, in whatever phase, so the turn is never
// left running with no way forward.
type Fail struct {
	TurnID string
	Reason string
}

func (Fail) input() {}

// Decision is what an input causes: the events to append, in order, and the
// state after them.
type Decision struct {
	State    *State
	Events   []events.Envelope
	Warnings []string
}

// EffectiveLimits combines an agent's limits with a submission's, which can
// only tighten them. steps nil means the agent sets no cap; timeout 0 none.
func EffectiveLimits(steps *int, budget int, timeout time.Duration, doomLoop int, submit *events.Limits) Limits {
	l := Limits{Steps: MaxSteps, Budget: budget, Timeout: timeout, DoomLoop: doomLoop}
	if steps != nil {
		l.Steps = min(max(*steps, 0), MaxSteps)
	}
	if l.Budget <= 0 {
		l.Budget = DefaultBudget
	}
	if l.DoomLoop <= 0 {
		l.DoomLoop = DefaultDoomLoop
	}
	if submit == nil {
		return l
	}
	if submit.Steps != nil {
		l.Steps = min(l.Steps, max(*submit.Steps, 0))
	}
	if submit.Budget > 0 {
		l.Budget = min(l.Budget, submit.Budget)
	}
	if t := time.Duration(submit.TimeoutMs) * time.Millisecond; t > 0 && (l.Timeout == 0 || t < l.Timeout) {
		l.Timeout = t
	}
	if submit.DoomLoop > 0 {
		l.DoomLoop = min(l.DoomLoop, submit.DoomLoop)
	}
	return l
}

// Decide returns the events an input causes in a turn, and the state after
// them. It never changes s. An input that was already applied (a redelivered
// message) causes nothing new, but Decide still completes whatever the state
// alone implies, so a crash between two appends is repaired by the retry.
func Decide(s *State, in Input, env Env) (Decision, error) {
	d := &decider{s: s.clone(), env: env}
	if err := d.apply(in); err != nil {
		return Decision{}, err
	}
	d.advance()
	if d.err != nil {
		return Decision{}, d.err
	}
	return Decision{State: d.s, Events: d.out, Warnings: d.warn}, nil
}

type decider struct {
	s    *State
	env  Env
	out  []events.Envelope
	warn []string
	err  error
}

func (d *decider) emit(t events.Type, data any) {
	if d.err != nil {
		return
	}
	raw, err := events.Marshal(data)
	if err != nil {
		d.err = fmt.Errorf("fsm: encode %s: %w", t, err)
		return
	}
	step := d.s.Step
	if t == events.StepStarted {
		step++
	}
	e := events.Envelope{ID: d.env.NewID(), Type: t, TurnID: d.s.TurnID, SessionID: d.s.SessionID,
		Seq: d.s.Seq + 1, Step: step, Time: d.env.Now, Data: raw}
	if err := Evolve(d.s, e); err != nil {
		d.err = err
		return
	}
	d.out = append(d.out, e)
}

func (d *decider) apply(in Input) error {
	s := d.s
	switch in := in.(type) {
	case Start:
		if s.Exists() {
			if s.Digest != "" && s.Digest == in.Digest {
				// The same submission again: it changes nothing, but
				// advancing may still finish a start cut short by a crash.
				return nil
			}
			return ErrTurnExists
		}
		s.TurnID, s.SessionID = in.TurnID, in.SessionID
		d.emit(events.TurnStarted, in.Setup.started(in.Input, len(in.History)))
		d.s.History = in.History

	case Reject:
		if s.Exists() {
			return ErrTurnExists
		}
		s.TurnID, s.SessionID = in.TurnID, in.SessionID
		d.emit(events.TurnFinished, events.TurnFinishedData{StopReason: events.StopRejected, Error: in.Reason})

	case ModelAnswer:
		if err := d.live(); err != nil {
			return err
		}
		if in.Kind == events.ModelSummary {
			if s.Phase == PhaseSummarizing {
				d.summarized(in)
			}
			return nil
		}
		if s.Phase != PhaseStream || in.Step != s.Step {
			return nil // a duplicate, or an answer for a step already past
		}
		d.answered(in)

	case ToolAnswer:
		if err := d.live(); err != nil {
			return err
		}
		c := s.call(in.CallID)
		if c == nil && !s.asked(in.CallID) {
			return inputError(fmt.Sprintf("a result for call %q, which turn %q never requested", in.CallID, s.TurnID))
		}
		if c != nil && c.Name != in.Tool {
			return inputError(fmt.Sprintf("a result of tool %q for call %q, a call of %q", in.Tool, in.CallID, c.Name))
		}
		if c == nil || !c.Runnable() {
			// Late, duplicate, or from an earlier step; a subagent call's
			// result is a ChildAnswer, never a worker's.
			return nil
		}
		d.emit(events.ToolCompleted, events.ToolCompletedData{
			CallID: c.CallID, Name: c.Name, Output: in.Output, IsError: in.IsError,
			Final: in.Final || slices.Contains(s.FinalTools, c.Name), DurationMs: in.DurationMs,
			Worker: in.Worker, Attempts: max(in.Attempt, 1),
		})

	case ChildAnswer:
		if err := d.live(); err != nil {
			return err
		}
		c := s.call(in.CallID)
		if c == nil || !c.Delegated() || c.Child != in.ChildTurnID {
			return nil // late, duplicate, or from an earlier step
		}
		out, isErr, took, used := in.Output, in.IsError, in.DurationMs, in.Metrics
		if f := in.Finished; f != nil {
			out, isErr = ChildResult(c.Agent, c.Child, *f)
			took = f.Metrics.DurationMs
			if f.StopReason != events.StopRejected {
				tree := f.Metrics.Tree()
				used = &tree
			}
		}
		d.emit(events.ToolCompleted, events.ToolCompletedData{
			CallID: c.CallID, Name: c.Name, Output: out, IsError: isErr,
			Final: slices.Contains(s.FinalTools, c.Name), DurationMs: took,
			Worker: SubagentWorker + c.Agent, Attempts: 1, ChildTurnID: c.Child, ChildMetrics: used,
		})

	case CompactAnswer:
		if err := d.live(); err != nil {
			return err
		}
		d.compacted(in)

	case Command:
		if err := d.live(); err != nil {
			return err
		}
		return d.command(in)

	case Tick:
		if err := d.live(); err != nil {
			return err
		}
		d.tick(in)

	case Fail:
		if err := d.live(); err != nil {
			return err
		}
		d.finish(events.StopError, "", in.Reason)

	default:
		return fmt.Errorf("fsm: unknown input %T", in)
	}
	return nil
}

// asked reports whether the model asked for a call of this id in the turn:
// a result for any other call is not a late one but a wrong one.
func (s *State) asked(callID string) bool {
	for i := range s.Messages {
		for _, c := range s.Messages[i].ToolCalls {
			if c.CallID == callID {
				return true
			}
		}
	}
	return false
}

func (d *decider) live() error {
	if !d.s.Exists() {
		return ErrUnknownTurn
	}
	if d.s.Done() {
		return ErrTurnFinished
	}
	return nil
}

func (d *decider) answered(in ModelAnswer) {
	s := d.s
	calls := in.ToolCalls
	if calls == nil {
		calls = []events.ToolCall{}
	}
	data := events.ModelCompletedData{Text: in.Text, ToolCalls: calls, FinishReason: in.FinishReason,
		Usage: in.Usage, DurationMs: in.DurationMs, Attempts: in.Attempts, Error: in.Error}
	if data.Error != "" && data.FinishReason == "" {
		data.FinishReason = "error"
	}
	if s.KeepSteps > 0 {
		// The state is the one the model job was built from: nothing moves a
		// turn's conversation while its model call runs.
		sent, dropped := s.conversation()
		n, c := len(sent), dropped
		data.Messages, data.Compacted = &n, &c
	}
	p := s.plan(data)
	if s.Limits.Steps == 0 && len(calls) > 0 && data.Error == "" {
		d.warn = append(d.warn, fmt.Sprintf("text-only turn: ignored %d tool call(s) the model returned", len(calls)))
	}
	d.emit(events.ModelCompleted, data)
	for _, c := range p.run {
		d.requested(c)
	}
	d.refusals()
}

// requested writes a planned call's tool.requested; a subagent call that
// can run names the child turn it runs.
func (d *decider) requested(c events.ToolCall) {
	r := events.ToolRequestedData{CallID: c.CallID, Name: c.Name, Arguments: c.Arguments}
	if spec, ok := d.s.spec(c.Name); ok && spec.Agent != "" && d.s.refuse(c) == "" {
		r.ChildTurnID = ChildTurnID(d.s.TurnID, c.CallID)
	}
	d.emit(events.ToolRequested, r)
}

// refusals answers at once the planned calls that cannot run, so the model
// can correct itself in its next step.
func (d *decider) refusals() {
	for _, p := range d.s.planned {
		c := d.s.call(p.CallID)
		if c == nil || c.Status != CallRequested {
			continue
		}
		if reason := d.s.refuse(p); reason != "" {
			d.emit(events.ToolCompleted, events.ToolCompletedData{CallID: p.CallID, Name: p.Name,
				Output: reason, IsError: true, Worker: Orchestrator, Attempts: 1})
		}
	}
}

// repair writes the rest of a model answer's decision when a crash cut its
// appends short after model.completed: the requests of the planned calls
// not in the log yet, then the refusals. The answer, when it comes again,
// finds its step past the stream phase and decides nothing itself. It
// reports whether it wrote anything.
func (d *decider) repair() bool {
	s := d.s
	if len(s.Calls) >= len(s.planned) {
		return false
	}
	for _, c := range s.planned[len(s.Calls):] {
		d.requested(c)
	}
	d.refusals()
	return true
}

// Orchestrator is the worker name of results the orchestrator writes itself.
const Orchestrator = "orchestrator"

func (d *decider) command(in Command) error {
	s := d.s
	switch in.Action {
	case events.ActionAbort:
		reason := in.Reason
		if reason == "" {
			reason = "aborted"
		}
		d.finish(events.StopAborted, s.Answer, reason)
	case events.ActionReply, events.ActionApprove:
		gate := GateInput
		if in.Action == events.ActionApprove {
			gate = GateApproval
		}
		c := s.call(in.CallID)
		if c != nil && c.Gate == gate && c.Resumed {
			return nil // answered already: a re-sent message
		}
		if p := s.Pending(); p == nil || p.CallID != in.CallID || p.Gate != gate {
			what := "question"
			if gate == GateApproval {
				what = "approval"
			}
			return inputError(fmt.Sprintf("no %s waits for call %q", what, in.CallID))
		}
		if gate == GateInput {
			d.emit(events.TurnResumed, events.TurnResumedData{CallID: in.CallID, Answer: in.Answer})
			d.emit(events.ToolCompleted, events.ToolCompletedData{CallID: c.CallID, Name: c.Name,
				Output: in.Answer, Worker: Orchestrator, Attempts: 1})
			return nil
		}
		if in.Approved == nil {
			return inputError("approve needs approved: true or false")
		}
		d.emit(events.TurnResumed, events.TurnResumedData{CallID: in.CallID, Approved: in.Approved, Note: in.Note})
		if !*in.Approved {
			out := "denied by the operator"
			if in.Note != "" {
				out += ": " + in.Note
			}
			d.emit(events.ToolCompleted, events.ToolCompletedData{CallID: c.CallID, Name: c.Name,
				Output: out, IsError: true, Worker: Orchestrator, Attempts: 1})
		}
	default:
		return inputError(fmt.Sprintf("unknown action %q", in.Action))
	}
	return nil
}

func (d *decider) tick(in Tick) {
	s := d.s
	switch in.Kind {
	case events.TimerTurn:
		if dl := s.Deadline(); !dl.IsZero() && !d.env.Now.Before(dl) {
			d.finish(events.StopTimeout, s.Answer, fmt.Sprintf("turn timed out after %s", s.Limits.Timeout))
		}
	case events.TimerCall:
		c := s.call(in.CallID)
		if c == nil || !c.Runnable() || d.env.Now.Before(c.Deadline) {
			return
		}
		d.emit(events.ToolCompleted, events.ToolCompletedData{CallID: c.CallID, Name: c.Name,
			Output:  fmt.Sprintf("no worker answered before the call's deadline (%s)", c.Deadline.Sub(c.Requested).Round(time.Millisecond)),
			IsError: true, Worker: Orchestrator, Attempts: 1})
	case events.TimerWake:
		// Nothing is due: the decision writes only what the state implies.
	}
}

// advance writes what the state implies without any new input: the next
// step's start, a pause for a gated call, the step's check and the finish.
func (d *decider) advance() {
	for d.err == nil {
		s := d.s
		switch s.Phase {
		case PhaseStepStart:
			if s.CompactionDue() > 0 {
				return // the summary first: its child's end is an input
			}
			d.emit(events.StepStarted, struct{}{})
		case PhaseToolPhase:
			if d.repair() {
				continue
			}
			c := s.gated()
			if c == nil {
				return
			}
			p := events.TurnPausedData{CallID: c.CallID, Kind: events.PauseApproval, Tool: c.Name, Arguments: c.Arguments}
			if c.Gate == GateInput {
				p = events.TurnPausedData{CallID: c.CallID, Kind: events.PauseInput, Question: question(c.Arguments)}
			}
			d.emit(events.TurnPaused, p)
		case PhaseCheckStop:
			if s.Checked == nil {
				d.emit(events.StepChecked, check(s))
				continue
			}
			reason := s.Checked.StopReason
			switch reason {
			case events.StopCompleted:
				d.finish(reason, s.Answer, "")
			case events.StopSynthesisDone:
				d.finish(reason, s.finalOutput(), "")
			case events.StopError:
				d.finish(reason, "", s.ModelError)
			}
			return
		default:
			return
		}
	}
}

// gated returns the first call that waits for a person and has not yet paused
// the turn for it.
func (s *State) gated() *Call {
	for i := range s.Calls {
		c := &s.Calls[i]
		if c.Gate != GateNone && !c.Resumed && c.Status == CallRequested {
			return c
		}
	}
	return nil
}

// check evaluates a finished step, the first rule that holds winning:
// (aborted and timeout end a turn before any check) → model failed for good →
// no tool calls → a final_tools result → doom loop → budget → step cap.
func check(s *State) events.StepCheckedData {
	stop := func(r events.StopReason) events.StepCheckedData {
		return events.StepCheckedData{Decision: events.DecisionStop, StopReason: r}
	}
	switch {
	case s.ModelError != "":
		return stop(events.StopError)
	case s.Asked == 0:
		return stop(events.StopCompleted)
	case s.hasFinal():
		return stop(events.StopSynthesisDone)
	case s.Doomed != "":
		return stop(events.StopDoomLoop)
	case s.Spent() >= s.Limits.Budget:
		return stop(events.StopBudget)
	case s.Step >= s.Limits.Steps:
		return stop(events.StopStepCap)
	}
	return events.StepCheckedData{Decision: events.DecisionContinue}
}

func (s *State) hasFinal() bool {
	for i := range s.Calls {
		if r := s.Calls[i].Result; r != nil && r.Final {
			return true
		}
	}
	return false
}

// finalOutput is the output of the step's first final result, in the model's
// order.
func (s *State) finalOutput() string {
	for i := range s.Calls {
		if r := s.Calls[i].Result; r != nil && r.Final {
			return r.Output
		}
	}
	return ""
}

func (d *decider) summarized(in ModelAnswer) {
	s := d.s
	text := s.causeLine()
	if in.Error == "" && in.Text != "" {
		text += "\n\n" + in.Text
	}
	usage := in.Usage
	d.emit(events.TurnSentinel, events.TurnSentinelData{Kind: sentinelKind(s.Checked.StopReason),
		Reason: s.Checked.StopReason, Text: text, Usage: &usage})
	d.finish(s.Checked.StopReason, text, "")
}

// causeLine is the sentinel's first line.
func (s *State) causeLine() string {
	switch s.Checked.StopReason {
	case events.StopStepCap:
		return fmt.Sprintf("Step limit reached (%d steps)", s.Limits.Steps)
	case events.StopBudget:
		return fmt.Sprintf("Tool budget exhausted (%d calls)", s.Limits.Budget)
	case events.StopDoomLoop:
		return fmt.Sprintf("Stopped: the same tool call repeated %d times (%s)", s.Limits.DoomLoop, s.Doomed)
	}
	return ""
}

func (d *decider) finish(reason events.StopReason, output, errText string) {
	s := d.s
	m := events.Metrics{Steps: s.Step, ToolCalls: s.Used, ModelCalls: s.ModelCalls,
		InputTokens: s.InputTokens, OutputTokens: s.OutputTokens,
		DurationMs: d.env.Now.Sub(s.Started).Milliseconds()}
	if s.Descendants.Turns > 0 {
		desc := s.Descendants
		m.Descendants = &desc
	}
	d.emit(events.TurnFinished, events.TurnFinishedData{StopReason: reason, Output: output, Error: errText, Metrics: m})
}

func names(specs []events.ToolSpec) []string {
	out := make([]string, 0, len(specs))
	for _, t := range specs {
		out = append(out, t.Name)
	}
	return out
}

func question(args json.RawMessage) string {
	var a struct {
		Question string `json:"question"`
	}
	_ = json.Unmarshal(args, &a) // refuse() has checked the arguments
	return a.Question
}
