package fsm

import (
	"strings"
	"testing"
	"time"

	"github.com/jetloop/jetloop/internal/events"
)

// The protocol fixes a child's id; this one was computed apart from the
// code (Python's hashlib and base64).
func TestChildTurnIDIsTheProtocols(t *testing.T) {
	if got := ChildTurnID("turn-1", "call_1"); got != "sub-brrwan7bpnoglswmsltpdq5l2h" {
		t.Fatalf("ChildTurnID = %s", got)
	}
	if !events.ValidID(ChildTurnID("turn-1", "call_1")) {
		t.Fatal("a child's id must be a valid turn id")
	}
}

// A subagent call names its child, asks for the child's submission as a
// job (never a worker's), takes its limits from the parent's remaining
// wall clock, and is completed by the child's end alone.
func TestSubagentCall(t *testing.T) {
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	env := func(d time.Duration) Env { return Env{Now: t0.Add(d), NewID: func() string { return "id" }} }
	spec := events.ToolSpec{Name: "Researcher", Parameters: SubagentParameters, Agent: "Researcher", SharedSession: true}
	d, err := Decide(New("p"), Start{TurnID: "p", SessionID: "s", Input: []events.Message{{Role: events.RoleUser, Content: "go"}}, Setup: Setup{Agent: "Lead", Model: "script", Tools: []events.ToolSpec{spec}, Limits: Limits{Steps: 3, Budget: 5, DoomLoop: 3, Timeout: time.Minute}}}, env(0))
	if err != nil {
		t.Fatal(err)
	}
	d, err = Decide(d.State, ModelAnswer{TurnID: "p", Step: 1, ToolCalls: []events.ToolCall{
		{CallID: "c1", Name: "Researcher", Arguments: []byte(`{"task":"find"}`)},
		{CallID: "c2", Name: "Researcher", Arguments: []byte(`{"topic":"x"}`)}}}, env(20*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	st := d.State
	child := ChildTurnID("p", "c1")
	if st.Calls[0].Child != child || st.Calls[1].Child != "" {
		t.Fatalf("children %q %q: only a call that can run names one", st.Calls[0].Child, st.Calls[1].Child)
	}
	jobs := Jobs(st)
	if len(jobs) != 1 || jobs[0].ID != "subagent:"+child || jobs[0].Subject != events.SubjectSubmit || jobs[0].Tool != nil {
		t.Fatalf("jobs %+v", jobs)
	}
	sub := jobs[0].Submit
	if sub.TurnID != child || sub.SessionID != "s" || sub.Agent != "Researcher" || sub.Input[0].Content != "find" ||
		sub.Parent == nil || *sub.Parent != (events.ParentRef{TurnID: "p", CallID: "c1", Depth: 1}) ||
		sub.Limits == nil || sub.Limits.TimeoutMs != 40000 {
		t.Fatalf("child submission %+v (parent %+v, limits %+v)", sub, sub.Parent, sub.Limits)
	}
	if len(Timers(st)) != 1 {
		t.Fatalf("a subagent call has no deadline of its own: %+v", Timers(st))
	}
	// A worker's result for the call changes nothing.
	d, err = Decide(st, ToolAnswer{TurnID: "p", CallID: "c1", Tool: "Researcher", Output: "forged", Worker: "agent:Researcher", Attempt: 1}, env(21*time.Second))
	if err != nil || len(d.Events) != 0 {
		t.Fatalf("a worker's result of a subagent call: %v %+v", err, d.Events)
	}
	d, err = Decide(st, ChildAnswer{TurnID: "p", CallID: "c1", ChildTurnID: child,
		Finished: &events.TurnFinishedData{StopReason: events.StopTimeout, Error: "turn timed out"}}, env(30*time.Second))
	if err != nil || len(d.Events) < 1 {
		t.Fatalf("child answer: %v", err)
	}
	if d.Events[0].Type != events.ToolCompleted {
		t.Fatalf("first event %s", d.Events[0].Type)
	}
	r, err := decode[events.ToolCompletedData](d.Events[0])
	if err != nil || !r.IsError || r.ChildTurnID != child || r.Worker != "agent:Researcher" ||
		!strings.Contains(r.Output, "ended timeout: turn timed out") {
		t.Fatalf("result %+v %v", r, err)
	}
}

// An agent never starts itself, and a turn at depth 3 starts no child.
func TestSubagentRefusals(t *testing.T) {
	for _, tc := range []struct {
		agent  string
		parent *events.ParentRef
		want   string
	}{
		{"Researcher", nil, "cannot start itself"},
		{"Lead", &events.ParentRef{TurnID: "x", CallID: "y", Depth: 3}, "depth 3"},
	} {
		s := &State{TurnID: "p", Setup: Setup{Agent: tc.agent, Parent: tc.parent, Tools: []events.ToolSpec{{Name: "Researcher", Parameters: SubagentParameters, Agent: "Researcher"}}}}
		if got := s.refuse(events.ToolCall{CallID: "c", Name: "Researcher", Arguments: []byte(`{"task":"t"}`)}); !strings.Contains(got, tc.want) {
			t.Errorf("%s at %+v: %q, want %q", tc.agent, tc.parent, got, tc.want)
		}
	}
}
