package fsm

import (
	"fmt"

	"github.com/jetloop/jetloop/internal/events"
)

// ForkError says why a turn cannot be forked from a step: the sender's
// mistake, worth a dead letter.
type ForkError struct {
	Turn   string
	Step   int
	Reason string
}

func (e *ForkError) Error() string {
	return fmt.Sprintf("fsm: cannot fork turn %q from step %d: %s", e.Turn, e.Step, e.Reason)
}

// ForkPoint folds a turn's log up to the point a fork from step starts at
// and returns the state there: after turn.started for step 0, after step
// N's step.checked otherwise. Its Messages are then the turn's input and
// steps 1..N complete (each model answer with the results of the calls it
// ran), and its HistoryTurns and ForkedFrom say what came before the turn.
// A step that was never checked (the turn ended inside it, or has not got
// that far) cannot be forked from, and neither can a rejected turn.
func ForkPoint(log []events.Envelope, step int) (*State, error) {
	turn := ""
	if len(log) > 0 {
		turn = log[0].TurnID
	}
	if len(log) == 0 || log[0].Type != events.TurnStarted {
		return nil, &ForkError{Turn: turn, Step: step, Reason: "the turn never started (it was rejected)"}
	}
	if step < 0 {
		return nil, &ForkError{Turn: turn, Step: step, Reason: "steps count from 0"}
	}
	s := New("")
	checked := 0
	for _, e := range log {
		if err := Evolve(s, e); err != nil {
			return nil, &ForkError{Turn: turn, Step: step, Reason: "its log does not fold: " + err.Error()}
		}
		if step == 0 && e.Type == events.TurnStarted {
			return s, nil
		}
		if e.Type == events.StepChecked {
			checked = e.Step
			if e.Step == step {
				return s, nil
			}
		}
	}
	return nil, &ForkError{Turn: turn, Step: step,
		Reason: fmt.Sprintf("the turn has %d complete step(s): fork from 0 to %d", checked, checked)}
}
