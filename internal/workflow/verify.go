package workflow

import (
	"bytes"
	"encoding/json"
	"fmt"

	"github.com/jetloop/jetloop/internal/events"
)

// Verify replays a workflow's log through today's machine: every event must
// fold, and every decision the orchestrator made on its own — each
// workflow.gated and what followed it, each checkpoint — must be what
// Decide makes from the state before it, at the event's time. It returns
// the number of decisions checked.
func Verify(log []events.Envelope) (int, error) {
	s := New("")
	checked := 0
	for i := 0; i < len(log); i++ {
		e := log[i]
		if e.Type == events.WorkflowGated {
			if err := verifyGate(s, log[i:]); err != nil {
				return checked, err
			}
			checked++
		}
		if err := Evolve(s, e); err != nil {
			return checked, err
		}
	}
	return checked, nil
}

// verifyGate checks the decision that begins with log[0], a workflow.gated:
// the gate's own (by rules or approval) must be what Gate decides; a hook's
// is an input recorded, so what it caused must be what the hook's answer
// (continue, stop, wait or error; or, for a hook that never answered, its
// timeout) causes.
func verifyGate(s *State, log []events.Envelope) error {
	e := log[0]
	var g events.WorkflowGatedData
	if err := json.Unmarshal(e.Data, &g); err != nil {
		return fmt.Errorf("workflow: seq %d: %w", e.Seq, err)
	}
	ins := []Input{Gate{}}
	if IsHook(g.By) {
		ins = []Input{HookAnswer{WorkflowID: s.ID, Task: s.Task, Hook: g.By, Decision: g.Decision, Reason: g.Reason},
			Tick{TurnID: s.ID, Kind: events.TimerHook, CallID: g.By, At: e.Time}}
		if g.Decision == events.GateStop {
			// A hook's error answer is recorded as its stop.
			ins = append(ins, HookAnswer{WorkflowID: s.ID, Task: s.Task, Hook: g.By, Decision: events.GateError, Reason: g.Reason})
		}
	}
	var mismatch error
	for _, in := range ins {
		// Ids are the orchestrator's to choose; types and data are what
		// the gate decided.
		d, err := Decide(s, in, Env{Now: e.Time, NewID: func() string { return "" }})
		if err != nil {
			mismatch = fmt.Errorf("workflow: seq %d: the gate cannot decide: %w", e.Seq, err)
			continue
		}
		if mismatch = same(log, d.Events); mismatch == nil {
			return nil
		}
	}
	return mismatch
}

// same compares the events a decision makes with the log from its first.
func same(log, want []events.Envelope) error {
	if len(want) == 0 {
		return fmt.Errorf("workflow: seq %d: the log has %s %s, today's gate decides nothing", log[0].Seq, log[0].Type, log[0].Data)
	}
	for j, w := range want {
		if j >= len(log) {
			break // the log ends inside the decision: a crash the retry completes
		}
		got := log[j]
		if got.Type != w.Type || !bytes.Equal(got.Data, w.Data) {
			return fmt.Errorf("workflow: seq %d: the log has %s %s, today's gate decides %s %s",
				got.Seq, got.Type, got.Data, w.Type, w.Data)
		}
	}
	return nil
}
