package workflow

import (
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/jetloop/jetloop/internal/events"
	"github.com/jetloop/jetloop/internal/machine"
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
type InputError = machine.InputError

// inputError is an input the workflow machine refuses, saying why.
func inputError(reason string) *InputError { return &InputError{Machine: "workflow", Reason: reason} }

// Env carries what a pure machine cannot make itself.
type Env = machine.Env

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

// HookAnswer is a hook's decision at the gate after a task.
type HookAnswer events.HookAnswer

func (Start) input()      {}
func (Reject) input()     {}
func (TaskDone) input()   {}
func (Gate) input()       {}
func (Command) input()    {}
func (Tick) input()       {}
func (Fail) input()       {}
func (HookAnswer) input() {}

// Decision is what an input causes: the events to append, in order, and the
// state after them.
type Decision struct {
	State  *State
	Events []events.Envelope
}

// DefaultTimeout is the clock of a workflow whose submission sets none, so
// that no workflow runs or waits for ever: a week, for tasks that each
// take up to a day and gates that wait on people. The orchestrator's
// --default-workflow-timeout changes it; a submission may set up to 30 days.
const DefaultTimeout = 7 * 24 * time.Hour

// EffectiveLimits are a submission's limits with the protocol's defaults:
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
	case HookAnswer:
		return d.hookAnswer(in)
	case Tick:
		if dl := s.Deadline(); !dl.IsZero() && in.Kind == events.TimerTurn && !d.env.Now.Before(dl) {
			d.finish(events.StopTimeout, fmt.Sprintf("the workflow's timeout of %s passed", time.Duration(s.Limits.TimeoutMs)*time.Millisecond))
		}
		if h := s.PendingHook(); in.Kind == events.TimerHook && in.CallID == h && !d.env.Now.Before(s.HookDeadline()) {
			d.hookTimeout(h)
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
		return inputError(fmt.Sprintf("task %d (turn %s) finished, but the workflow runs task %d (turn %s)",
			in.Task, in.TurnID, s.Task, TurnID(s.ID, s.Task)))
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
	d.emit(events.WorkflowCheckpointed, events.WorkflowCheckpointedData{Task: d.s.Task, Metrics: d.metrics()})
}

// metrics are the sums so far with the workflow's wall clock now: the
// seed's TotalRuntime, approval waits included.
func (d *decider) metrics() events.WorkflowMetrics {
	m := d.s.Metrics
	if !d.s.Started.IsZero() {
		m.DurationMs = max(d.env.Now.Sub(d.s.Started).Milliseconds(), 0)
	}
	return m
}

// gate applies the protocol's rules in order; the first that holds wins.
// An abort (rule 1) is a Command and never reaches the gate.
func (d *decider) gate() {
	s := d.s
	next := s.Task + 1
	last := s.Outcomes[len(s.Outcomes)-1]
	stop := func(r events.StopReason, why string) {
		d.emit(events.WorkflowGated, events.WorkflowGatedData{Task: next, Decision: events.GateStop, Reason: why, By: events.GateByRules})
		d.finish(r, why)
	}
	dl := s.Deadline()
	switch {
	case !dl.IsZero() && !d.env.Now.Before(dl):
		stop(events.StopTimeout, fmt.Sprintf("timeout: the workflow's wall clock of %s passed", time.Duration(s.Limits.TimeoutMs)*time.Millisecond))
	case last.StopReason == events.StopRejected:
		// A task whose turn was rejected did not run: a turn submitted
		// under its id before the workflow ran it, say. Whatever the
		// policy and the hooks, last task or not, the workflow does not
		// report it done, and says which turn it was.
		why := fmt.Sprintf("error: task %d did not run: its turn %s was rejected", last.Task, last.TurnID)
		if s.TaskError != "" {
			why += ": " + s.TaskError
		}
		stop(events.StopError, why)
	case s.PendingHook() != "":
		// Rule 4: the hook's job is out (Jobs); its answer or its timeout
		// goes on from here.
	case last.StopReason == events.StopBudget && s.spent():
		// The task's budget was what the workflow had left (Jobs tightens
		// it): the workflow's budget stopped it, not a failure of its own.
		stop(events.StopBudget, fmt.Sprintf("budget: %d tool calls of %d", s.Metrics.ToolCalls, s.Limits.Budget))
	case !succeeded(last.StopReason) && s.Policy.OnTaskFailure != events.FailureContinue:
		why := fmt.Sprintf("task_failed: task %d stopped with %s", last.Task, last.StopReason)
		if s.TaskError != "" {
			why += ": " + s.TaskError
		}
		stop(events.StopTaskFailed, why)
	case next > len(s.Tasks):
		stop(events.StopCompleted, "completed: every task ran")
	case s.Metrics.Tasks >= s.Limits.MaxTasks:
		stop(events.StopMaxTasks, fmt.Sprintf("max_tasks: %d tasks ran, the limit is %d", s.Metrics.Tasks, s.Limits.MaxTasks))
	case s.spent():
		stop(events.StopBudget, fmt.Sprintf("budget: %d tool calls of %d", s.Metrics.ToolCalls, s.Limits.Budget))
	case s.Limits.Tokens > 0 && s.Metrics.InputTokens+s.Metrics.OutputTokens >= s.Limits.Tokens:
		stop(events.StopTokens, fmt.Sprintf("tokens: %d of %d", s.Metrics.InputTokens+s.Metrics.OutputTokens, s.Limits.Tokens))
	case s.Policy.ApproveBetween && !s.Waited:
		d.emit(events.WorkflowGated, events.WorkflowGatedData{Task: next, Decision: events.GateWait,
			Reason: "approve_between: waiting for a person to approve the next task", By: events.GateByApproval})
	default:
		d.emit(events.WorkflowGated, events.WorkflowGatedData{Task: next, Decision: events.GateContinue, Reason: "continue", By: events.GateByRules})
		d.run(next)
	}
}

// hookAnswer records the pending hook's decision and acts on it: continue
// asks the next hook (or applies the rules), stop ends the workflow denied
// with the hook's reason, wait pauses for a person (once per gate: a later
// wait at the same gate goes on as continue), and error, the hook's own
// failure, ends it error with the hook's message.
func (d *decider) hookAnswer(in HookAnswer) error {
	s := d.s
	if in.Task < s.Task || (in.Task == s.Task && s.answered(in.Hook)) {
		return nil // a repeat: this hook's answer about this task is in
	}
	h := s.PendingHook()
	if h == "" || in.Task != s.Task || in.Hook != h {
		waits := "no hook"
		if h != "" {
			waits = fmt.Sprintf("hook %s about task %d", h, s.Task)
		}
		return inputError(fmt.Sprintf("hook %s answered about task %d, but workflow %s waits for %s", in.Hook, in.Task, s.ID, waits))
	}
	reason := in.Reason
	if reason == "" {
		reason = fmt.Sprintf("hook %s answered %s", h, in.Decision)
	}
	g := events.WorkflowGatedData{Task: s.Task + 1, Decision: in.Decision, Reason: reason, By: h}
	if g.Decision == events.GateWait && s.Waited {
		g.Decision, g.Reason = events.GateContinue, reason+" (a wait, but this gate waited for a person once already)"
	}
	switch g.Decision {
	case events.GateContinue:
		d.emit(events.WorkflowGated, g)
		d.gate()
	case events.GateStop:
		d.emit(events.WorkflowGated, g)
		d.finish(events.StopDenied, reason)
	case events.GateWait:
		d.emit(events.WorkflowGated, g)
	case events.GateError:
		// Recorded as the hook's stop, its message as the reason: the gate
		// stopped, and the finish says it was the hook's failure.
		g.Decision = events.GateStop
		d.emit(events.WorkflowGated, g)
		d.finish(events.StopError, fmt.Sprintf("hook %s failed: %s", h, reason))
	default:
		return inputError(fmt.Sprintf("hook %s answered %q: a hook answers continue, stop, wait or error", h, in.Decision))
	}
	return nil
}

// hookTimeout gives up on a hook that did not answer in time: the workflow
// stops with error naming it, unless on_hook_timeout is continue.
func (d *decider) hookTimeout(h string) {
	s := d.s
	ms := s.Policy.HookTimeoutMs
	if ms <= 0 {
		ms = events.DefaultHookTimeoutMs
	}
	why := fmt.Sprintf("hook %s did not answer about task %d within %s", h, s.Task, time.Duration(ms)*time.Millisecond)
	if s.Policy.OnHookTimeout == events.HookTimeoutContinue {
		d.emit(events.WorkflowGated, events.WorkflowGatedData{Task: s.Task + 1, Decision: events.GateContinue,
			Reason: why + "; on_hook_timeout: continue", By: h})
		d.gate()
		return
	}
	d.emit(events.WorkflowGated, events.WorkflowGatedData{Task: s.Task + 1, Decision: events.GateStop, Reason: why, By: h})
	d.finish(events.StopError, why)
}

// answered reports whether hook has decided at this gate already.
func (s *State) answered(hook string) bool {
	if s.Phase != PhaseGate && s.Phase != PhasePaused && s.Phase != PhaseCheckpoint {
		return true // the gate has moved on: the next task runs
	}
	for _, h := range s.Policy.Hooks[:min(s.Hooked, len(s.Policy.Hooks))] {
		if h == hook {
			return true
		}
	}
	return false
}

// spent reports whether the tool calls of every task reached the
// workflow's budget.
func (s *State) spent() bool { return s.Limits.Budget > 0 && s.Metrics.ToolCalls >= s.Limits.Budget }

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
			return inputError(fmt.Sprintf("workflow %s waits for no approval", s.ID))
		}
		d.emit(events.WorkflowResumed, events.WorkflowResumedData{Approved: *in.Approved, Note: in.Note})
		if *in.Approved {
			if s.Phase == PhaseGate {
				d.gate() // a hook's wait: the next hook and the rules decide
			} else {
				d.run(s.Task + 1)
			}
			return nil
		}
		why := "a person denied the next task"
		if in.Note != "" {
			why += ": " + in.Note
		}
		d.finish(events.StopDenied, why)
	default:
		return inputError(fmt.Sprintf("a workflow takes abort and approve, not %s", in.Action))
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
	if reason == events.StopCompleted {
		errText = ""
	}
	d.emit(events.WorkflowFinished, events.WorkflowFinishedData{StopReason: reason, Output: s.Output, Error: errText,
		Metrics: d.metrics(), Tasks: tasks})
}
