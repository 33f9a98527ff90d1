package events

import (
	"encoding/json"
	"fmt"
)

// CheckLog verifies the invariants every turn log must satisfy, finished or
// not: one turn, seq gap-free from 1, at most one turn.finished and it is
// last, each started step checked once (an abort, the timeout or an error may end the last
// one unchecked), at most one tool.completed per call_id and each after its
// tool.requested. Every test that produces a log checks it here.
func CheckLog(log []Envelope) error {
	if len(log) == 0 {
		return nil
	}
	if log[0].Type.Workflow() {
		return checkWorkflowLog(log)
	}
	turn, session := log[0].TurnID, log[0].SessionID
	requested := map[string]bool{}
	completed := map[string]bool{}
	children := map[string]string{} // call → the child turn its request named
	open := 0                       // the started step not yet checked, 0 when none
	for i, e := range log {
		at := fmt.Sprintf("event %d (%s)", i+1, e.Type)
		if e.Seq != i+1 {
			return fmt.Errorf("%s: seq %d, want %d", at, e.Seq, i+1)
		}
		if e.TurnID != turn || e.SessionID != session {
			return fmt.Errorf("%s: belongs to turn %s/%s in the log of %s/%s", at, e.SessionID, e.TurnID, session, turn)
		}
		if !e.Type.Known() {
			return fmt.Errorf("%s: unknown event type", at)
		}
		if len(e.Data) == 0 || e.Data[0] != '{' {
			return fmt.Errorf("%s: data is not an object", at)
		}
		if e.Type == TurnStarted && i != 0 {
			return fmt.Errorf("%s: turn.started is not first", at)
		}
		if i == 0 && e.Type != TurnStarted && e.Type != TurnFinished {
			return fmt.Errorf("%s: a log starts with turn.started (or a rejection)", at)
		}
		if e.Type == TurnFinished && i != len(log)-1 {
			return fmt.Errorf("%s: turn.finished is not the last event", at)
		}
		switch e.Type {
		case StepStarted:
			if open != 0 {
				return fmt.Errorf("%s: step %d started before step %d was checked", at, e.Step, open)
			}
			open = e.Step
		case StepChecked:
			if open == 0 || open != e.Step {
				return fmt.Errorf("%s: step %d checked but not started", at, e.Step)
			}
			open = 0
		case ToolRequested, ToolCompleted:
			var c struct {
				CallID      string `json:"call_id"`
				ChildTurnID string `json:"child_turn_id"`
			}
			if err := json.Unmarshal(e.Data, &c); err != nil || c.CallID == "" {
				return fmt.Errorf("%s: no call_id", at)
			}
			if e.Type == ToolRequested {
				if requested[c.CallID] {
					return fmt.Errorf("%s: call %s requested twice", at, c.CallID)
				}
				requested[c.CallID] = true
				children[c.CallID] = c.ChildTurnID
				continue
			}
			// A subagent call's result is its child's end, and only its.
			if c.ChildTurnID != children[c.CallID] {
				return fmt.Errorf("%s: call %s requested with child turn %q, completed with %q", at, c.CallID, children[c.CallID], c.ChildTurnID)
			}
			if !requested[c.CallID] {
				return fmt.Errorf("%s: call %s completed but never requested", at, c.CallID)
			}
			if completed[c.CallID] {
				return fmt.Errorf("%s: call %s completed twice", at, c.CallID)
			}
			completed[c.CallID] = true
		case TurnFinished:
			var f TurnFinishedData
			if err := json.Unmarshal(e.Data, &f); err != nil {
				return fmt.Errorf("%s: %v", at, err)
			}
			// An abort, the timeout, or a failure to store what the turn
			// did (error) may end a step before its check.
			if open != 0 && f.StopReason != StopAborted && f.StopReason != StopTimeout && f.StopReason != StopError {
				return fmt.Errorf("%s: step %d never checked, yet the turn stopped with %s", at, open, f.StopReason)
			}
		}
	}
	return nil
}

// checkWorkflowLog verifies a workflow's log: one workflow, seq gap-free
// from 1, only workflow events, workflow.started first (or a lone
// rejection), at most one workflow.finished and it is last; tasks run one at
// a time, numbered 1, 2, 3 …, each task.finished is followed by its
// checkpoint, and a checkpoint counts the tasks so far.
func checkWorkflowLog(log []Envelope) error {
	id, session := log[0].TurnID, log[0].SessionID
	running, done := 0, 0 // the task under way (0: none), tasks finished
	for i, e := range log {
		at := fmt.Sprintf("event %d (%s)", i+1, e.Type)
		switch {
		case e.Seq != i+1:
			return fmt.Errorf("%s: seq %d, want %d", at, e.Seq, i+1)
		case e.TurnID != id || e.SessionID != session:
			return fmt.Errorf("%s: belongs to %s/%s in the log of workflow %s/%s", at, e.SessionID, e.TurnID, session, id)
		case !e.Type.Workflow():
			return fmt.Errorf("%s: not a workflow event", at)
		case len(e.Data) == 0 || e.Data[0] != '{':
			return fmt.Errorf("%s: data is not an object", at)
		case i == 0 && e.Type != WorkflowStarted && e.Type != WorkflowFinished:
			return fmt.Errorf("%s: a workflow's log starts with workflow.started (or a rejection)", at)
		case i != 0 && e.Type == WorkflowStarted:
			return fmt.Errorf("%s: workflow.started is not first", at)
		case e.Type == WorkflowFinished && i != len(log)-1:
			return fmt.Errorf("%s: workflow.finished is not the last event", at)
		}
		if i > 0 && log[i-1].Type == TaskFinished && e.Type != WorkflowCheckpointed {
			return fmt.Errorf("%s: task %d finished without a checkpoint", at, done)
		}
		switch e.Type {
		case TaskStarted:
			var d TaskStartedData
			_ = json.Unmarshal(e.Data, &d)
			if running != 0 || d.Task != done+1 || e.Step != d.Task {
				return fmt.Errorf("%s: task %d started while task %d runs after %d finished", at, d.Task, running, done)
			}
			running = d.Task
		case TaskFinished:
			var d TaskFinishedData
			_ = json.Unmarshal(e.Data, &d)
			if running == 0 || d.Task != running {
				return fmt.Errorf("%s: task %d finished, but the task under way is %d", at, d.Task, running)
			}
			running, done = 0, d.Task
		case WorkflowCheckpointed:
			var d WorkflowCheckpointedData
			_ = json.Unmarshal(e.Data, &d)
			if d.Task != done || d.Metrics.Tasks != done {
				return fmt.Errorf("%s: checkpoint of task %d counting %d tasks after %d finished", at, d.Task, d.Metrics.Tasks, done)
			}
		case WorkflowFinished:
			var d WorkflowFinishedData
			if err := json.Unmarshal(e.Data, &d); err != nil {
				return fmt.Errorf("%s: %v", at, err)
			}
			if len(d.Tasks) != done && !(running != 0 && len(d.Tasks) == done+1) {
				return fmt.Errorf("%s: %d task outcomes after %d tasks", at, len(d.Tasks), done)
			}
		}
	}
	return nil
}
