package timeline

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/jetloop/jetloop/internal/events"
	"github.com/jetloop/jetloop/internal/fsm"
)

// Text streamed for a step may arrive before the step's step.started; the
// trace prints it under that row, not above it.
func TestTraceHoldsTextOfAStepNotYetStarted(t *testing.T) {
	d, err := fsm.Decide(fsm.New("t1"), fsm.Start{TurnID: "t1", SessionID: "t1", Input: []events.Message{{Role: events.RoleUser, Content: "hi"}}, Setup: fsm.Setup{Agent: "A", Model: "script", Limits: fsm.Limits{Steps: 3, Budget: 5, DoomLoop: 3}}},
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

// A subagent call's child turn is printed indented under the call, just
// above the result it gave.
func TestTracePrintsChildUnderItsCall(t *testing.T) {
	env := fsm.Env{Now: time.Now(), NewID: func() string { return "id" }}
	run := func(st *fsm.State, ins ...fsm.Input) (*fsm.State, []events.Envelope) {
		var log []events.Envelope
		for _, in := range ins {
			d, err := fsm.Decide(st, in, env)
			if err != nil {
				t.Fatal(err)
			}
			st, log = d.State, append(log, d.Events...)
		}
		return st, log
	}
	spec := events.ToolSpec{Name: "Researcher", Parameters: fsm.SubagentParameters, Agent: "Researcher"}
	call := events.ToolCall{CallID: "c1", Name: "Researcher", Arguments: []byte(`{"task":"find"}`)}
	child := fsm.ChildTurnID("p", "c1")
	_, clog := run(fsm.New(child),
		fsm.Start{TurnID: child, SessionID: child, Input: []events.Message{{Role: events.RoleUser, Content: "find"}}, Setup: fsm.Setup{Agent: "Researcher", Model: "script", Limits: fsm.Limits{Steps: 3, Budget: 5, DoomLoop: 3}, Parent: &events.ParentRef{TurnID: "p", CallID: "c1", Depth: 1}}},
		fsm.ModelAnswer{TurnID: child, Step: 1, Text: "found it"})
	var fin events.TurnFinishedData
	_ = json.Unmarshal(clog[len(clog)-1].Data, &fin)
	_, plog := run(fsm.New("p"),
		fsm.Start{TurnID: "p", SessionID: "p", Input: []events.Message{{Role: events.RoleUser, Content: "go"}}, Setup: fsm.Setup{Agent: "Lead", Model: "script", Limits: fsm.Limits{Steps: 3, Budget: 5, DoomLoop: 3}, Tools: []events.ToolSpec{spec}}},
		fsm.ModelAnswer{TurnID: "p", Step: 1, ToolCalls: []events.ToolCall{call}},
		fsm.ChildAnswer{TurnID: "p", CallID: "c1", ChildTurnID: child, Finished: &fin},
		fsm.ModelAnswer{TurnID: "p", Step: 2, Text: "done"})
	var out bytes.Buffer
	tr := NewTrace(&out, false)
	tr.Children = func(turn string) ([]events.Envelope, error) {
		if turn != child {
			t.Fatalf("asked for turn %s", turn)
		}
		return clog, nil
	}
	for _, e := range plog {
		if err := tr.Event(e); err != nil {
			t.Fatal(err)
		}
	}
	got := out.String()
	nestedStart := strings.Index(got, "    │ turn "+child)
	nestedEnd := strings.Index(got, "    │ finished: completed")
	completed := strings.Index(got, "tool.completed")
	if nestedStart < 0 || nestedEnd < nestedStart || completed < nestedEnd || !strings.Contains(got, "→ subagent turn "+child) {
		t.Fatalf("trace:\n%s", got)
	}
}

// A step's text is printed once and whole, however much of it the deltas
// showed: what they missed (a viewer that subscribed during the step, a
// delta that comes after the step's event) comes from the step's model.completed, and a delta
// that arrives after it is not printed again.
func TestTraceShowsEveryWordOnce(t *testing.T) {
	env := fsm.Env{Now: time.Now(), NewID: func() string { return "id" }}
	st := fsm.New("t1")
	var log []events.Envelope
	for _, in := range []fsm.Input{
		fsm.Start{TurnID: "t1", SessionID: "t1", Input: []events.Message{{Role: events.RoleUser, Content: "hi"}}, Setup: fsm.Setup{Agent: "A", Model: "script", Limits: fsm.Limits{Steps: 3, Budget: 5, DoomLoop: 3}}},
		fsm.ModelAnswer{TurnID: "t1", Step: 1, Text: "Let me look around"},
	} {
		d, err := fsm.Decide(st, in, env)
		if err != nil {
			t.Fatal(err)
		}
		st, log = d.State, append(log, d.Events...)
	}
	completed := -1
	for i, e := range log {
		if e.Type == events.ModelCompleted {
			completed = i
		}
	}
	for _, tc := range []struct {
		name      string
		liveAfter int
		deltas    []string // sent after step.started
		late      string   // sent after model.completed
	}{
		{name: "all streamed", deltas: []string{"Let ", "me look around"}},
		{name: "none streamed", late: "Let me look around"},
		{name: "subscribed during the step", liveAfter: 2, deltas: []string{"look around"}},
		{name: "replay"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var out bytes.Buffer
			tr := NewTrace(&out, false)
			tr.liveAfter = tc.liveAfter
			for i, e := range log {
				if i == completed {
					for _, d := range tc.deltas {
						tr.Delta(events.Delta{TurnID: "t1", Step: 1, Delta: d})
					}
				}
				if err := tr.Event(e); err != nil {
					t.Fatal(err)
				}
				if i == completed && tc.late != "" {
					tr.Delta(events.Delta{TurnID: "t1", Step: 1, Delta: tc.late})
				}
			}
			got := out.String()
			if strings.Count(got, "look around") != 2 || !strings.Contains(got, "▸ Let me look around\n") {
				// Once as the step's text, once as the turn's output.
				t.Fatalf("trace:\n%s", got)
			}
		})
	}
}

func TestUnescapeHTML(t *testing.T) {
	for in, want := range map[string]string{
		`{"a":"x -\u003e y \u003cz\u003e \u0026"}`: `{"a":"x -> y <z> &"}`,
		`{"a":"\\u003e"}`:                          `{"a":"\\u003e"}`,
		`{"a":"\\\u003e"}`:                         `{"a":"\\>"}`,
		`plain`:                                    `plain`,
	} {
		if got := unescapeHTML(in); got != want {
			t.Errorf("unescapeHTML(%s) = %s, want %s", in, got, want)
		}
	}
}
