package workflow

import (
	"bytes"
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
			// Ids are the orchestrator's to choose; types and data are
			// what the gate decided.
			d, err := Decide(s, Gate{}, Env{Now: e.Time, NewID: func() string { return "" }})
			if err != nil {
				return checked, fmt.Errorf("workflow: seq %d: the gate cannot decide: %w", e.Seq, err)
			}
			for j, want := range d.Events {
				if i+j >= len(log) {
					break // the log ends inside the decision: a crash the retry completes
				}
				got := log[i+j]
				if got.Type != want.Type || !bytes.Equal(got.Data, want.Data) {
					return checked, fmt.Errorf("workflow: seq %d: the log has %s %s, today's gate decides %s %s",
						got.Seq, got.Type, got.Data, want.Type, want.Data)
				}
			}
			checked++
		}
		if err := Evolve(s, e); err != nil {
			return checked, err
		}
	}
	return checked, nil
}
