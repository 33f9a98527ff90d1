package workflow

import (
	"encoding/json"
	"fmt"
	"time"

	"github.com/jetloop/jetloop/internal/events"
	"github.com/jetloop/jetloop/internal/machine"
)

// State is a workflow folded from its log.
type State struct {
	ID        string
	SessionID string
	Phase     Phase
	Seq       int // seq of the last event
	Started   time.Time
	LastTime  time.Time

	Agent    string
	Tasks    []events.Task
	Limits   events.WorkflowLimits
	Policy   events.Policy
	Metadata map[string]string

	// Task is the task under way, or the last one that ran; TaskStarted is
	// when it started.
	Task        int
	TaskStarted time.Time
	Running     bool
	// Outcomes are the finished tasks, in order, and Output, TaskError and
	// TaskMetrics the last one's.
	Outcomes    []events.TaskOutcome
	Output      string
	TaskError   string
	TaskMetrics events.Metrics
	Metrics     events.WorkflowMetrics
	// Checkpointed is the task of the last checkpoint, and Checkpoint the
	// checkpoint itself, as the log and KV hold it.
	Checkpointed int
	Checkpoint   events.WorkflowCheckpointedData
	// Gated is the gate's last decision, for the task after Task.
	Gated *events.WorkflowGatedData
	// Hooked is how many hooks of Policy.Hooks answered (or timed out) at
	// this gate, and Waited whether it waited for a person already: one
	// wait per gate.
	Hooked int
	Waited bool

	Finished *events.WorkflowFinishedData
}

// New returns the state of a workflow that has no events yet.
func New(id string) *State { return &State{ID: id, Phase: PhaseInit} }

// Exists reports whether the workflow has a log.
func (s *State) Exists() bool { return s.Seq > 0 }

// Done reports whether the workflow has finished.
func (s *State) Done() bool { return s.Phase == PhaseDone }

// AwaitsGate reports whether the last task's checkpoint is in the log and
// the gate has not decided yet: the runtime puts the checkpoint in KV, then
// applies Gate.
func (s *State) AwaitsGate() bool { return s.Phase == PhaseGate }

// Deadline is when the workflow's wall clock runs out; zero for none.
func (s *State) Deadline() time.Time {
	if s.Limits.TimeoutMs <= 0 || s.Started.IsZero() {
		return time.Time{}
	}
	return s.Started.Add(time.Duration(s.Limits.TimeoutMs) * time.Millisecond)
}

// IsHook reports whether a gate decision's by names a hook rather than the
// gate's rules or a person's approval.
func IsHook(by string) bool {
	return by != "" && by != events.GateByRules && by != events.GateByApproval
}

// PendingHook is the hook the gate waits for, "" when none: the next hook
// of policy.hooks not yet answered, once the task's checkpoint is in.
func (s *State) PendingHook() string {
	if s.Phase != PhaseGate || s.Task == 0 || s.Checkpointed != s.Task || s.Hooked >= len(s.Policy.Hooks) {
		return ""
	}
	return s.Policy.Hooks[s.Hooked]
}

// Unasked are the hooks of Policy.Hooks that have not decided at the gate
// of the last checkpoint, when the workflow ended there: each is handed
// that checkpoint in a final job, so a hook that stores checkpoints sees
// the last one however the workflow ended. A hook that answered, or that
// the gate gave up on, has seen it.
func (s *State) Unasked() []string {
	if !s.Done() || s.Task == 0 || s.Running || s.Checkpointed != s.Task || s.Hooked >= len(s.Policy.Hooks) {
		return nil
	}
	return s.Policy.Hooks[s.Hooked:]
}

// HookDeadline is when the gate stops waiting for the pending hook: its
// timeout after the event before its question (the checkpoint, or the
// answer or approval before it), so it is the same after any restart.
func (s *State) HookDeadline() time.Time {
	ms := s.Policy.HookTimeoutMs
	if ms <= 0 {
		ms = events.DefaultHookTimeoutMs
	}
	return s.LastTime.Add(time.Duration(ms) * time.Millisecond)
}

// TurnID is the turn id of task i: <workflow_id>-<i>.
func TurnID(workflow string, task int) string { return fmt.Sprintf("%s-%d", workflow, task) }

func (s *State) clone() *State {
	c := *s
	c.Outcomes = append([]events.TaskOutcome(nil), s.Outcomes...)
	c.Policy.Hooks = append([]string(nil), s.Policy.Hooks...)
	if s.Gated != nil {
		g := *s.Gated
		c.Gated = &g
	}
	return &c
}

// Fold replays a whole log into a fresh state.
func Fold(log []events.Envelope) (*State, error) { return machine.Fold(New(""), log, Evolve) }

// Evolve applies one event of the workflow's log to s.
func Evolve(s *State, e events.Envelope) error {
	if e.Seq != s.Seq+1 {
		return fmt.Errorf("workflow: event seq %d after %d", e.Seq, s.Seq)
	}
	data, ok := events.NewData(e.Type)
	if !ok || !e.Type.Workflow() {
		return &TransitionError{From: s.Phase, Event: string(e.Type), Transition: "?", Seq: e.Seq}
	}
	if err := json.Unmarshal(e.Data, data); err != nil {
		return fmt.Errorf("workflow: %s data: %w", e.Type, err)
	}
	var err error
	switch d := data.(type) {
	case *events.WorkflowStartedData:
		if err = s.step(tStart, string(e.Type)); err == nil {
			s.ID, s.SessionID, s.Started = e.TurnID, e.SessionID, e.Time
			s.Agent, s.Tasks, s.Limits, s.Policy, s.Metadata = d.Agent, d.TaskList, d.Limits, d.Policy, d.Metadata
		}
	case *events.TaskStartedData:
		if err = s.step(tRun, string(e.Type)); err == nil {
			s.Task, s.TaskStarted, s.Running, s.Gated = d.Task, e.Time, true, nil
			s.Hooked, s.Waited = 0, false
		}
	case *events.TaskFinishedData:
		if err = s.step(tTaskDone, string(e.Type)); err == nil {
			s.Running = false
			s.Outcomes = append(s.Outcomes, events.TaskOutcome{Task: d.Task, TurnID: d.TurnID, StopReason: d.StopReason})
			s.Output, s.TaskError, s.TaskMetrics = d.Output, d.Error, d.Metrics
			s.Metrics.Add(d.Metrics)
		}
	case *events.WorkflowCheckpointedData:
		if err = s.step(tCheckpoint, string(e.Type)); err == nil {
			s.Checkpointed, s.Checkpoint = d.Task, *d
			s.Metrics.DurationMs = d.Metrics.DurationMs
		}
	case *events.WorkflowGatedData:
		name := map[events.GateDecision]string{events.GateContinue: tPass, events.GateStop: tHold, events.GateWait: tWait}[d.Decision]
		hook := IsHook(d.By)
		if hook && d.Decision == events.GateContinue {
			name = tHook
		}
		if err = s.step(name, string(e.Type)); err == nil {
			s.Gated = d
			if hook {
				s.Hooked++
			}
		}
	case *events.WorkflowResumedData:
		if d.Approved {
			// After a hook's wait the gate goes on with the next hook and
			// the rules; after approve_between the next task runs.
			if s.Gated != nil && IsHook(s.Gated.By) {
				if err = s.step(tReturn, string(e.Type)); err == nil {
					s.Waited = true
				}
			} else {
				err = s.step(tResume, string(e.Type))
			}
		} else if s.Phase != PhasePaused {
			err = &TransitionError{From: s.Phase, Event: string(e.Type), Transition: tResume, Seq: e.Seq}
		}
	case *events.WorkflowFinishedData:
		if err = s.step(tFinish, string(e.Type)); err == nil {
			if s.ID == "" {
				s.ID, s.SessionID = e.TurnID, e.SessionID // a rejection
			}
			s.Running, s.Finished = false, d
			s.Metrics.DurationMs = d.Metrics.DurationMs
		}
	}
	if err != nil {
		return err
	}
	s.Seq, s.LastTime = e.Seq, e.Time
	return nil
}
