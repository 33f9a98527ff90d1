package workflow

import (
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/jetloop/jetloop/internal/events"
)

// Expected outcomes of Decide.
var (
	// ErrUnknownWorkflow: an input for a workflow that has no log.
	ErrUnknownWorkflow = errors.New("workflow: no such workflow")
	// ErrFinished: an input for a finished workflow; it changes nothing.
	ErrFinished = errors.New("workflow: already finished")
	// ErrExists: a start for a workflow (or turn) id that has a log.
	ErrExists = errors.New("workflow: already exists")
)

// InputError is an input the workflow cannot take (an approval while it
// waits for none, the result of a task it is not running): the sender's
// mistake, worth a dead letter.
type InputError struct{ Reason string }

func (e *InputError) Error() string { return "workflow: " + e.Reason }

// Env carries what a pure machine cannot make itself.
type Env struct {
	Now   time.Time
	NewID func() string
}

// Input is one thing that can happen to a workflow.
type Input interface{ input() }

// Start begins a workflow. The runtime has checked every task's agent and
// resolved the effective limits and policy.
type Start struct {
	WorkflowID string
	SessionID  string
	Agent      string
	Tasks      []events.Task
	Limits     events.WorkflowLimits
	Policy     events.Policy
	Metadata   map[string]string
	// Digest identifies the submission, so its redelivery is no reuse.
	Digest string
}

// Reject records a submission that cannot start a workflow.
type Reject struct {
	WorkflowID string
	SessionID  string
	Reason     string
}

// TaskDone is the end of one task's turn.
type TaskDone events.TaskDone

// Gate asks the gate to decide, once the checkpoint is in KV.
type Gate struct{}

// Command is a control message: abort, or approve between tasks.
type Command events.Control

// Tick reports that the workflow's deadline passed.
type Tick events.Timer

// Fail ends a live workflow with error when what it did cannot be stored.
type Fail struct{ Reason string }

func (Start) input()    {}
func (Reject) input()   {}
func (TaskDone) input() {}
func (Gate) input()     {}
func (Command) input()  {}
func (Tick) input()     {}
func (Fail) input()     {}

// Decision is what an input causes: the events to append, in order, and the
// state after them.
type Decision struct {
	State  *State
	Events []events.Envelope
}

// EffectiveLimits are a submission's limits with the contract's defaults:
// max_tasks 50 unless set, never over 1000.
func EffectiveLimits(l *events.WorkflowLimits) events.WorkflowLimits {
	var out events.WorkflowLimits
	if l != nil {
		out = *l
	}
	if out.MaxTasks <= 0 {
		out.MaxTasks = events.DefaultMaxTasks
	}
	out.MaxTasks = min(out.MaxTasks, events.MaxTasksCeiling)
	return out
}

// EffectivePolicy is a submission's policy with its defaults.
func EffectivePolicy(p *events.Policy) events.Policy {
	var out events.Policy
	if p != nil {
		out = *p
	}
	if out.OnTaskFailure == "" {
		out.OnTaskFailure = events.FailureStop
	}
	return out
}

// Decide returns the events an input causes in a workflow and the state
// after them. It never changes s. A repeated input causes nothing new.
func Decide(s *State, in Input, env Env) (Decision, error) {
	d := &decider{s: s.clone(), env: env}
	if err := d.apply(in); err != nil {
		return Decision{}, err
	}
	if d.err != nil {
		return Decision{}, d.err
	}
	return Decision{State: d.s, Events: d.out}, nil
}

type decider struct {
	s   *State
	env Env
	out []events.Envelope
	err error
}

func (d *decider) emit(t events.Type, data any) {
	if d.err != nil {
		return
	}
	raw, err := json.Marshal(data)
	if err != nil {
		d.err = err
		return
	}
	step := d.s.Task
	switch data := data.(type) {
	case events.TaskStartedData:
		step = data.Task
	case events.WorkflowGatedData:
		step = data.Task
	}
	e := events.Envelope{ID: d.env.NewID(), Type: t, TurnID: d.s.ID, SessionID: d.s.SessionID,
		Seq: d.s.Seq + 1, Step: step, Time: d.env.Now.UTC(), Data: raw}
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
			return ErrExists
		}
		s.ID, s.SessionID = in.WorkflowID, in.SessionID
		d.emit(events.WorkflowStarted, events.WorkflowStartedData{Tasks: len(in.Tasks), Agent: in.Agent,
			Limits: in.Limits, Policy: in.Policy, Metadata: in.Metadata, TaskList: in.Tasks})
		d.run(1)
		return nil
	case Reject:
		if s.Exists() {
			return ErrExists
		}
		s.ID, s.SessionID = in.WorkflowID, in.SessionID
		d.emit(events.WorkflowFinished, events.WorkflowFinishedData{StopReason: events.StopRejected,
			Error: in.Reason, Tasks: []events.TaskOutcome{}})
		return nil
	}
	if !s.Exists() {
		return ErrUnknownWorkflow
	}
	if s.Done() {
		return ErrFinished
	}
	switch in := in.(type) {
	case TaskDone:
		return d.taskDone(in)
	case Gate:
		if s.Phase == PhaseCheckpoint {
			d.checkpoint()
		}
		if s.Phase == PhaseGate {
			d.gate()
		}
	case Command:
		return d.command(in)
	case Tick:
		if dl := s.Deadline(); !dl.IsZero() && in.Kind == events.TimerTurn && !d.env.Now.Before(dl) {
			d.finish(events.StopTimeout, fmt.Sprintf("the workflow's timeout of %s passed", time.Duration(s.Limits.TimeoutMs)*time.Millisecond))
		}
	case Fail:
		d.finish(events.StopError, in.Reason)
	default:
		return fmt.Errorf("workflow: no input %T", in)
	}
	return nil
}

func (d *decider) taskDone(in TaskDone) error {
	s := d.s
	if in.Task < s.Task || (in.Task == s.Task && !s.Running) {
		return nil // a repeat: that task has finished already
	}
	if in.Task != s.Task || in.TurnID != TurnID(s.ID, s.Task) {
		return &InputError{fmt.Sprintf("task %d (turn %s) finished, but the workflow runs task %d (turn %s)",
			in.Task, in.TurnID, s.Task, TurnID(s.ID, s.Task))}
	}
	f := in.Finished
	d.emit(events.TaskFinished, events.TaskFinishedData{Task: in.Task, TurnID: in.TurnID, StopReason: f.StopReason,
		Output: f.Output, Error: f.Error, Metrics: f.Metrics})
	// The checkpoint's log half; the runtime writes its KV half, then asks
	// for the gate.
	d.checkpoint()
	return nil
}

func (d *decider) checkpoint() {
	d.emit(events.WorkflowCheckpointed, events.WorkflowCheckpointedData{Task: d.s.Task, Metrics: d.s.Metrics})
}

// gate applies the contract's rules in order; the first that holds wins.
func (d *decider) gate() {
	s := d.s
	next := s.Task + 1
	last := s.Outcomes[len(s.Outcomes)-1]
	stop := func(r events.StopReason, why string, errText string) {
		d.emit(events.WorkflowGated, events.WorkflowGatedData{Task: next, Decision: events.GateStop, Reason: why})
		d.finish(r, errText)
	}
	dl := s.Deadline()
	switch {
	case !dl.IsZero() && !d.env.Now.Before(dl):
		stop(events.StopTimeout, "timeout: the workflow's wall clock passed", "")
	case last.StopReason == events.StopRejected:
		// A task whose turn was rejected did not run: a turn submitted
		// under its id before the workflow ran it, say. Whatever the
		// policy, and last task or not, the workflow does not report it
		// done, and says which turn it was.
		why := fmt.Sprintf("task %d did not run: its turn %s was rejected", last.Task, last.TurnID)
		if s.TaskError != "" {
			why += ": " + s.TaskError
		}
		stop(events.StopError, "error: "+why, why)
	case next > len(s.Tasks):
		stop(events.StopCompleted, "completed: every task ran", "")
	case s.Metrics.Tasks >= s.Limits.MaxTasks:
		stop(events.StopMaxTasks, fmt.Sprintf("max_tasks: %d tasks ran", s.Metrics.Tasks), "")
	case s.Limits.Budget > 0 && s.Metrics.ToolCalls >= s.Limits.Budget:
		stop(events.StopBudget, fmt.Sprintf("budget: %d tool calls of %d", s.Metrics.ToolCalls, s.Limits.Budget), "")
	case s.Limits.Tokens > 0 && s.Metrics.InputTokens+s.Metrics.OutputTokens >= s.Limits.Tokens:
		stop(events.StopTokens, fmt.Sprintf("tokens: %d of %d", s.Metrics.InputTokens+s.Metrics.OutputTokens, s.Limits.Tokens), "")
	case !succeeded(last.StopReason) && s.Policy.OnTaskFailure != events.FailureContinue:
		why := fmt.Sprintf("task %d stopped with %s", last.Task, last.StopReason)
		if s.TaskError != "" {
			why += ": " + s.TaskError
		}
		stop(events.StopTaskFailed, fmt.Sprintf("task_failed: task %d stopped with %s", last.Task, last.StopReason), why)
	case s.Policy.ApproveBetween:
		d.emit(events.WorkflowGated, events.WorkflowGatedData{Task: next, Decision: events.GateWait,
			Reason: "approve_between: waiting for a person to approve the next task"})
	default:
		d.emit(events.WorkflowGated, events.WorkflowGatedData{Task: next, Decision: events.GateContinue, Reason: "continue"})
		d.run(next)
	}
}

// succeeded: a task that completed or answered through a final tool.
func succeeded(r events.StopReason) bool {
	return r == events.StopCompleted || r == events.StopSynthesisDone
}

func (d *decider) run(task int) {
	t := d.s.Tasks[task-1]
	agent := t.Agent
	if agent == "" {
		agent = d.s.Agent
	}
	d.emit(events.TaskStarted, events.TaskStartedData{Task: task, TurnID: TurnID(d.s.ID, task), Agent: agent})
}

func (d *decider) command(in Command) error {
	s := d.s
	switch in.Action {
	case events.ActionAbort:
		reason := "aborted"
		if in.Reason != "" {
			reason = "aborted: " + in.Reason
		}
		d.finish(events.StopAborted, reason)
	case events.ActionApprove:
		if s.Phase != PhasePaused || in.Approved == nil {
			return &InputError{fmt.Sprintf("workflow %s waits for no approval", s.ID)}
		}
		d.emit(events.WorkflowResumed, events.WorkflowResumedData{Approved: *in.Approved, Note: in.Note})
		if *in.Approved {
			d.run(s.Task + 1)
			return nil
		}
		why := "a person denied the next task"
		if in.Note != "" {
			why += ": " + in.Note
		}
		d.finish(events.StopDenied, why)
	default:
		return &InputError{fmt.Sprintf("a workflow takes abort and approve, not %s", in.Action)}
	}
	return nil
}

// finish ends the workflow. A task under way ends as aborted in the
// outcomes (Jobs aborts its turn).
func (d *decider) finish(reason events.StopReason, errText string) {
	s := d.s
	tasks := append([]events.TaskOutcome{}, s.Outcomes...)
	if s.Running {
		tasks = append(tasks, events.TaskOutcome{Task: s.Task, TurnID: TurnID(s.ID, s.Task), StopReason: events.StopAborted})
	}
	if reason == events.StopCompleted || reason == events.StopMaxTasks || reason == events.StopBudget || reason == events.StopTokens {
		errText = ""
	}
	d.emit(events.WorkflowFinished, events.WorkflowFinishedData{StopReason: reason, Output: s.Output, Error: errText,
		Metrics: s.Metrics, Tasks: tasks})
}
