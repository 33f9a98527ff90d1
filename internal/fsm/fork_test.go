package fsm

import (
	"errors"
	"testing"

	"github.com/jetloop/jetloop/internal/events"
)

func TestForkPoint(t *testing.T) {
	log := capped(t) // two steps, each an echo and its result, then the sentinel
	for _, tc := range []struct {
		step  int
		roles []events.Role
		last  string
	}{
		{0, []events.Role{events.RoleUser}, "hi"},
		{1, []events.Role{events.RoleUser, events.RoleAssistant, events.RoleTool}, "1"},
		// Step 2 ends at its check: the sentinel's summary is not part of it.
		{2, []events.Role{events.RoleUser, events.RoleAssistant, events.RoleTool, events.RoleAssistant, events.RoleTool}, "2"},
	} {
		st, err := ForkPoint(log, tc.step)
		if err != nil {
			t.Fatalf("step %d: %v", tc.step, err)
		}
		if len(st.Messages) != len(tc.roles) || st.Messages[len(st.Messages)-1].Content != tc.last {
			t.Fatalf("step %d: %+v", tc.step, st.Messages)
		}
		for i, m := range st.Messages {
			if m.Role != tc.roles[i] {
				t.Fatalf("step %d: message %d is %s", tc.step, i, m.Role)
			}
		}
	}

	// An aborted turn's unfinished step is not a fork point.
	_, aborted := feed(t, &clock{now: t0}, start(), answer(1, "", echo("a", "1")), result("a", "1"),
		answer(2, "", echo("b", "2")), Command{Action: events.ActionAbort})
	for _, tc := range []struct {
		name string
		log  []events.Envelope
		step int
	}{
		{"beyond the last step", log, 3},
		{"a negative step", log, -1},
		{"a step the turn ended inside", aborted, 2},
		{"a rejected turn", rejected(t), 0},
		{"no log", nil, 0},
	} {
		_, err := ForkPoint(tc.log, tc.step)
		var fe *ForkError
		if !errors.As(err, &fe) {
			t.Errorf("%s: err = %v, want a ForkError", tc.name, err)
		}
	}
	if _, err := ForkPoint(aborted, 1); err != nil {
		t.Errorf("step 1 of the aborted turn: %v", err)
	}
}

func rejected(t *testing.T) []events.Envelope {
	t.Helper()
	d, err := Decide(New("t1"), Reject{TurnID: "t1", SessionID: "t1", Reason: "no"}, (&clock{now: t0}).env())
	if err != nil {
		t.Fatal(err)
	}
	return d.Events
}
