package fsm

import (
	"context"
	"errors"
	"flag"
	"os"
	"strings"
	"testing"

	lfsm "github.com/looplab/fsm"
)

var update = flag.Bool("update", false, "rewrite golden files")

// The diagram in docs/fsm.md is generated from the transition table; this
// test fails when the table changed and the doc did not.
func TestDiagram(t *testing.T) {
	d, err := Diagram()
	if err != nil {
		t.Fatal(err)
	}
	doc := "# The turn machine\n\n" +
		"Generated from `internal/fsm`'s transition table by\n" +
		"`go test ./internal/fsm -run Diagram -update`; do not edit by hand.\n\n" +
		"Every transition is named after what happens; `finish` (turn.finished) leaves every live state\n" +
		"for `done` on completion, abort, timeout or rejection.\n\n" +
		"```mermaid\n" + strings.TrimSpace(d) + "\n```\n"
	const path = "../../docs/fsm.md"
	if *update {
		if err := os.WriteFile(path, []byte(doc), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	got, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("%v (run with -update to create it)", err)
	}
	if string(got) != doc {
		t.Fatalf("docs/fsm.md is out of date: go test ./internal/fsm -run Diagram -update")
	}
}

// TestMovesAreLooplabsTable: the index Evolve uses allows exactly the
// transitions looplab/fsm's machine allows, to the same phases.
func TestMovesAreLooplabsTable(t *testing.T) {
	names := map[string]bool{}
	for _, e := range table {
		names[e.Name] = true
	}
	phases := append([]string{string(PhaseDone)}, live...)
	for _, p := range phases {
		for name := range names {
			m := newMachine(Phase(p))
			err := m.Event(context.Background(), name)
			var same lfsm.NoTransitionError
			if errors.As(err, &same) {
				err = nil // a transition to the phase it leaves
			}
			dst, ok := index.Next(Phase(p), name)
			switch {
			case err != nil && ok:
				t.Errorf("%s from %s: looplab refuses (%v), the index goes to %s", name, p, err, dst)
			case err == nil && !ok:
				t.Errorf("%s from %s: looplab goes to %s, the index refuses", name, p, m.Current())
			case err == nil && string(dst) != m.Current():
				t.Errorf("%s from %s: looplab goes to %s, the index to %s", name, p, m.Current(), dst)
			}
		}
	}
}
