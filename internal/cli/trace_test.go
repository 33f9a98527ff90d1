package cli

import (
	"bytes"
	"strings"
	"testing"
	"time"

	"github.com/jetloop/jetloop/internal/events"
	"github.com/jetloop/jetloop/internal/fsm"
)

// Text streamed for a step may arrive before the step's step.started; the
// trace prints it under that row, not above it.
func TestTraceHoldsTextOfAStepNotYetStarted(t *testing.T) {
	d, err := fsm.Decide(fsm.New("t1"), fsm.Start{TurnID: "t1", SessionID: "t1", Agent: "A", Model: "script",
		Input:  []events.Message{{Role: events.RoleUser, Content: "hi"}},
		Limits: fsm.Limits{Steps: 3, Budget: 5, DoomLoop: 3}},
		fsm.Env{Now: time.Now(), NewID: func() string { return "id" }})
	if err != nil || len(d.Events) != 2 {
		t.Fatalf("start: %v %d", err, len(d.Events))
	}
	var out bytes.Buffer
	tr := NewTrace(&out, false)
	if err := tr.Event(d.Events[0]); err != nil {
		t.Fatal(err)
	}
	tr.Delta(events.Delta{TurnID: "t1", Step: 1, Delta: "early "})
	if strings.Contains(out.String(), "early") {
		t.Fatalf("text of step 1 printed before it started:\n%s", out.String())
	}
	if err := tr.Event(d.Events[1]); err != nil {
		t.Fatal(err)
	}
	tr.Delta(events.Delta{TurnID: "t1", Step: 1, Delta: "words"})
	got := out.String()
	if i, j := strings.Index(got, "step.started"), strings.Index(got, "▸ early words"); i < 0 || j < i {
		t.Fatalf("trace:\n%s", got)
	}
}
