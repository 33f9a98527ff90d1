package workflow

import (
	"github.com/jetloop/jetloop/internal/events"
	"github.com/jetloop/jetloop/internal/machine"
)

// Job is an effect the workflow's state waits on. ID is its deterministic
// Nats-Msg-Id, so publishing it twice does it once.
type Job struct {
	ID      string
	Subject string
	// Submit is the turn of the task under way.
	Submit *events.Submit
	// Abort stops the turn of a task the workflow no longer waits for.
	Abort *events.Control
	// Hook asks the hook the gate waits for about the task just done.
	Hook *events.HookJob
}

// Jobs derives what the state waits on: the running task's turn, or the
// abort of a task's turn the workflow stopped under it.
func Jobs(s *State) []Job {
	switch {
	case s.Phase == PhaseTaskExecute:
		sub := s.submission()
		// Not the turn id, which a client's own submission of that id would
		// use: the server would drop this one as its duplicate, and the
		// workflow would wait on a turn that is not its task's.
		return []Job{{ID: events.TaskStartID(sub.TurnID), Subject: events.SubjectSubmit, Submit: sub}}
	case s.PendingHook() != "":
		h := s.PendingHook()
		return []Job{{ID: events.HookJobID(s.ID, s.Task, h), Subject: events.HookSubject(h), Hook: s.hookJob()}}
	case s.Done() && s.Finished != nil && s.Task > 0 && len(s.Finished.Tasks) > len(s.Outcomes):
		turn := TurnID(s.ID, s.Task)
		return []Job{{ID: events.WorkflowAbortID(turn), Subject: events.ControlSubject(turn),
			Abort: &events.Control{Action: events.ActionAbort, Reason: "its workflow " + s.ID + " stopped: " + string(s.Finished.StopReason)}}}
	}
	return nil
}

// FinalJobs are the final hook jobs of a finished workflow: one for each
// hook that never decided about its last checkpoint (Unasked), saying how
// the workflow ended. The runtime publishes them before it appends
// workflow.finished, so a hook is never left without the last checkpoint
// by a crash after the end; no answer is waited for.
func FinalJobs(s *State) []Job {
	var out []Job
	for _, h := range s.Unasked() {
		j := s.hookJob()
		j.Ended = &events.HookEnded{StopReason: s.Finished.StopReason, Error: s.Finished.Error}
		out = append(out, Job{ID: events.HookFinalJobID(s.ID, s.Task, h), Subject: events.HookSubject(h), Hook: j})
	}
	return out
}

// hookJob asks about the last task and its checkpoint.
func (s *State) hookJob() *events.HookJob {
	last := s.Outcomes[len(s.Outcomes)-1]
	return &events.HookJob{
		WorkflowID: s.ID, SessionID: s.SessionID, Task: s.Task, TurnID: TurnID(s.ID, s.Task),
		Last:       s.Task >= len(s.Tasks),
		Checkpoint: s.Checkpoint,
		TaskResult: events.HookTaskResult{StopReason: last.StopReason, Output: s.Output, Error: s.TaskError, Metrics: s.TaskMetrics},
		Deadline:   s.HookDeadline().UTC()}
}

// submission is the turn of the task under way: in the workflow's session,
// with the workflow's metadata, its limits tightened so that the task
// cannot take the workflow past its budget or its wall clock.
func (s *State) submission() *events.Submit {
	t := s.Tasks[s.Task-1]
	msgs, _ := t.Messages() // the schema and the runtime's check admitted only valid inputs
	agent := t.Agent
	if agent == "" {
		agent = s.Agent
	}
	sub := &events.Submit{TurnID: TurnID(s.ID, s.Task), SessionID: s.SessionID, Agent: agent, Input: msgs,
		Model: t.Model, Script: t.Script, Metadata: s.Metadata,
		Workflow: &events.WorkflowRef{WorkflowID: s.ID, Task: s.Task, KeepTasks: s.Policy.KeepTasks}}
	var l events.Limits
	if t.Limits != nil {
		l = *t.Limits
	}
	if s.Limits.Budget > 0 {
		left := max(s.Limits.Budget-s.Metrics.ToolCalls, 1)
		if l.Budget == 0 || l.Budget > left {
			l.Budget = left
		}
	}
	if dl := s.Deadline(); !dl.IsZero() {
		left := max(dl.Sub(s.TaskStarted).Milliseconds(), 1)
		if l.TimeoutMs == 0 || l.TimeoutMs > left {
			l.TimeoutMs = left
		}
	}
	if l != (events.Limits{}) {
		sub.Limits = &l
	}
	return sub
}

// Timer is a deadline the state waits on.
type Timer = machine.Timer

// Timers derives the workflow's deadline, while it runs, and the pending
// hook's.
func Timers(s *State) []Timer {
	if s.Done() || !s.Exists() {
		return nil
	}
	var out []Timer
	if dl := s.Deadline(); !dl.IsZero() {
		out = append(out, Timer{At: dl, Timer: events.Timer{TurnID: s.ID, Kind: events.TimerTurn, At: dl}})
	}
	if h := s.PendingHook(); h != "" {
		dl := s.HookDeadline()
		out = append(out, Timer{At: dl, Timer: events.Timer{TurnID: s.ID, Kind: events.TimerHook, CallID: h, At: dl}})
	}
	return out
}

// TaskCompactionNote is the one user message that stands, under keep_tasks
// N, where the tasks between the first and the last N-1 were left out of a
// task's history, with their number (as internal/fsm's CompactionNote does
// for steps): the model sees that the conversation has a gap.
const TaskCompactionNote = "[%d earlier tasks of this workflow were compacted away]"

// DroppedTasks is how many earlier tasks keep_tasks leaves out of task's
// history: tasks 2 to task-keep, none when keep is 0.
func DroppedTasks(task, keep int) int {
	if keep <= 0 {
		return 0
	}
	return max(task-1-keep, 0)
}
