// Package machine is the scaffolding the pure machines, internal/fsm (a
// turn) and internal/workflow (a workflow), share: what the runtime gives
// them (Env), how they refuse an input (InputError) or an event
// (TransitionError), and their looplab/fsm transition table, indexed once.
// It follows the machines' rules: no clock, randomness, environment or I/O.
package machine

import (
	"fmt"
	"time"

	"github.com/jetloop/jetloop/internal/events"
	lfsm "github.com/looplab/fsm"
)

// Env carries what a pure machine cannot make itself.
type Env struct {
	Now   time.Time
	NewID func() string
}

// InputError is an input the machine refuses: it cannot apply to the state
// (a result for a call never requested, an unknown action).
type InputError struct {
	// Machine names the machine that refused it: "fsm" or "workflow".
	Machine string
	Reason  string
}

func (e *InputError) Error() string { return e.Machine + ": " + e.Reason }

// TransitionError is an event that the machine cannot take in its phase: a
// corrupt or foreign log.
type TransitionError[P ~string] struct {
	Machine    string
	From       P
	Event      string
	Transition string
	Seq        int
}

func (e *TransitionError[P]) Error() string {
	return fmt.Sprintf("%s: illegal transition %s (event %s, seq %d) from %s", e.Machine, e.Transition, e.Event, e.Seq, string(e.From))
}

// Table is a looplab/fsm transition table with its moves indexed once:
// looplab's machine is built from the same table for the diagram and, in
// the tests, to prove the two agree on every phase and transition. A
// looplab machine per state would cost every fold and every cached state
// its maps.
type Table[P ~string] struct {
	machine string
	events  lfsm.Events
	moves   map[move[P]]P
}

type move[P ~string] struct {
	from P
	name string
}

// NewTable indexes events, the transition table of the machine named
// machine.
func NewTable[P ~string](machine string, events lfsm.Events) *Table[P] {
	t := &Table[P]{machine: machine, events: events, moves: map[move[P]]P{}}
	for _, e := range events {
		for _, src := range e.Src {
			t.moves[move[P]{P(src), e.Name}] = P(e.Dst)
		}
	}
	return t
}

// Events is the table as looplab/fsm reads it.
func (t *Table[P]) Events() lfsm.Events { return t.events }

// Next is the phase transition leads to from phase from; ok is false when
// the table has no such move.
func (t *Table[P]) Next(from P, transition string) (to P, ok bool) {
	to, ok = t.moves[move[P]{from, transition}]
	return to, ok
}

// Step moves *phase along transition, taken by event at sequence seq, or
// refuses it with a *TransitionError.
func (t *Table[P]) Step(phase *P, transition, event string, seq int) error {
	to, ok := t.Next(*phase, transition)
	if !ok {
		return &TransitionError[P]{Machine: t.machine, From: *phase, Event: event, Transition: transition, Seq: seq}
	}
	*phase = to
	return nil
}

// Looplab is a looplab/fsm machine of the table, in phase p.
func (t *Table[P]) Looplab(p P) *lfsm.FSM { return lfsm.NewFSM(string(p), t.events, nil) }

// Diagram renders the table as a Mermaid state diagram, from phase initial.
func (t *Table[P]) Diagram(initial P) (string, error) {
	return lfsm.VisualizeWithType(t.Looplab(initial), lfsm.MERMAID)
}

// Timer is a deadline a state waits on: the runtime arms it and, when it is
// due, sends Timer to the state's log as an input.
type Timer struct {
	At    time.Time
	Timer events.Timer
}

// Fold replays a whole log into s, a fresh state, one event at a time.
func Fold[S any](s S, log []events.Envelope, evolve func(S, events.Envelope) error) (S, error) {
	for _, e := range log {
		if err := evolve(s, e); err != nil {
			var zero S
			return zero, err
		}
	}
	return s, nil
}
