package timeline

import (
	"slices"
	"testing"

	"github.com/jetloop/jetloop/internal/events"
)

// TestChildTurns: the children are the turns the log's tool calls name, in
// order; a call that runs no subagent, or names an id no turn may have,
// adds none.
func TestChildTurns(t *testing.T) {
	requested := func(data string) events.Envelope {
		return events.Envelope{Type: events.ToolRequested, Data: []byte(data)}
	}
	log := []events.Envelope{
		{Type: events.TurnStarted, Data: []byte(`{"child_turn_id":"not-a-call"}`)},
		requested(`{"call_id":"c1","name":"echo","arguments":{}}`),
		requested(`{"call_id":"c2","name":"Researcher","arguments":{},"child_turn_id":"lead-c2"}`),
		requested(`{"call_id":"c3","name":"Coder","arguments":{},"child_turn_id":"no spaces"}`),
		requested(`{"call_id":"c4","name":"Coder","arguments":{},"child_turn_id":"lead-c4"}`),
	}
	if got, want := ChildTurns(log), []string{"lead-c2", "lead-c4"}; !slices.Equal(got, want) {
		t.Fatalf("ChildTurns = %q, want %q", got, want)
	}
}
