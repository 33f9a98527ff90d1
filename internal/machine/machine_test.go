package machine_test

import (
	"context"
	"errors"
	"testing"

	"github.com/jetloop/jetloop/internal/machine"
	lfsm "github.com/looplab/fsm"
)

type phase string

// TestTableIsLooplabs: Step allows exactly the moves looplab/fsm's machine
// of the same table allows, to the same phases, and refuses the others
// with a TransitionError that names them.
func TestTableIsLooplabs(t *testing.T) {
	events := lfsm.Events{
		{Name: "go", Src: []string{"a", "b"}, Dst: "c"},
		{Name: "back", Src: []string{"c"}, Dst: "a"},
		{Name: "stay", Src: []string{"b"}, Dst: "b"},
	}
	table := machine.NewTable[phase]("test", events)
	for _, from := range []phase{"a", "b", "c", "d"} {
		for _, name := range []string{"go", "back", "stay", "none"} {
			m := table.Looplab(from)
			lerr := m.Event(context.Background(), name)
			if errors.As(lerr, new(lfsm.NoTransitionError)) {
				lerr = nil // a transition to the phase it leaves
			}
			p := from
			err := table.Step(&p, name, "ev", 7)
			switch {
			case (lerr == nil) != (err == nil):
				t.Errorf("%s from %s: looplab %v, Step %v", name, from, lerr, err)
			case err == nil && string(p) != m.Current():
				t.Errorf("%s from %s: looplab goes to %s, Step to %s", name, from, m.Current(), p)
			case err != nil:
				var te *machine.TransitionError[phase]
				if !errors.As(err, &te) || te.From != from || te.Transition != name || te.Seq != 7 || p != from {
					t.Errorf("%s from %s: %v (phase now %s)", name, from, err, p)
				}
				if got, want := err.Error(), "test: illegal transition "+name+" (event ev, seq 7) from "+string(from); got != want {
					t.Errorf("%q, want %q", got, want)
				}
			}
		}
	}
}
