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
	turn, session := log[0].TurnID, log[0].SessionID
	requested := map[string]bool{}
	completed := map[string]bool{}
	open := 0 // the started step not yet checked, 0 when none
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
				CallID string `json:"call_id"`
			}
			if err := json.Unmarshal(e.Data, &c); err != nil || c.CallID == "" {
				return fmt.Errorf("%s: no call_id", at)
			}
			if e.Type == ToolRequested {
				if requested[c.CallID] {
					return fmt.Errorf("%s: call %s requested twice", at, c.CallID)
				}
				requested[c.CallID] = true
				continue
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
