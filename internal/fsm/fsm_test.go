package fsm

import (
	"encoding/json"
	"errors"
	"fmt"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/jetloop/jetloop/internal/events"
	"github.com/jetloop/jetloop/schemas"
)

var t0 = time.Date(2026, 11, 22, 10, 0, 0, 0, time.UTC)

// clock hands out ids and times the way the runtime does, deterministically.
type clock struct {
	now time.Time
	n   int
}

func (c *clock) env() Env {
	c.now = c.now.Add(time.Millisecond)
	return Env{Now: c.now, NewID: func() string { c.n++; return fmt.Sprintf("ev-%d", c.n) }}
}

func intp(n int) *int { return &n }

func echoSpec() events.ToolSpec {
	return events.ToolSpec{Name: "echo", Description: "echo", Parameters: json.RawMessage(
		`{"type":"object","properties":{"text":{"type":"string"}},"required":["text"],"additionalProperties":false}`)}
}

func start(mut ...func(*Start)) Start {
	s := Start{TurnID: "t1", SessionID: "s1", Input: []events.Message{{Role: events.RoleUser, Content: "hi"}}, Setup: Setup{Agent: "General", Model: "script", Limits: Limits{Steps: MaxSteps, Budget: DefaultBudget, DoomLoop: DefaultDoomLoop}, Tools: []events.ToolSpec{echoSpec(), {Name: "write_file"}, {Name: "submit"}, AskUserSpec}}}
	for _, m := range mut {
		m(&s)
	}
	return s
}

func call(id, name, args string) events.ToolCall {
	return events.ToolCall{CallID: id, Name: name, Arguments: json.RawMessage(args)}
}

func answer(step int, text string, calls ...events.ToolCall) ModelAnswer {
	return ModelAnswer{Step: step, Kind: events.ModelStep, Text: text, ToolCalls: calls, Attempts: 1,
		Usage: events.Usage{InputTokens: 10, OutputTokens: 2}}
}

// result answers an echo call; toolResult any other.
func result(id, out string) ToolAnswer { return toolResult("echo", id, out) }

func toolResult(tool, id, out string) ToolAnswer {
	return ToolAnswer{CallID: id, Tool: tool, Output: out, Worker: "w1", Attempt: 1}
}

func summary(text string) ModelAnswer {
	return ModelAnswer{Kind: events.ModelSummary, Text: text, Attempts: 1}
}

func echo(id, text string) events.ToolCall { return call(id, "echo", `{"text":"`+text+`"}`) }

// feed applies inputs in order, failing on any error, and returns the final
// state and the whole log.
func feed(t *testing.T, c *clock, inputs ...Input) (*State, []events.Envelope) {
	t.Helper()
	s := New("t1")
	var log []events.Envelope
	for i, in := range inputs {
		d, err := Decide(s, in, c.env())
		if err != nil {
			t.Fatalf("input %d (%T): %v", i, in, err)
		}
		s = d.State
		log = append(log, d.Events...)
	}
	return s, log
}

// show renders an event as a short line: enough to read a table at a glance.
func show(e events.Envelope) string {
	var m map[string]any
	_ = json.Unmarshal(e.Data, &m)
	str := func(k string) string { v, _ := m[k].(string); return v }
	switch e.Type {
	case events.ToolRequested:
		return fmt.Sprintf("%s:%s", e.Type, str("name"))
	case events.ToolCompleted:
		s := fmt.Sprintf("%s:%s", e.Type, str("name"))
		if m["is_error"] == true {
			s += "!"
		}
		if m["final"] == true {
			s += "*"
		}
		return s
	case events.TurnPaused:
		return fmt.Sprintf("%s:%s", e.Type, str("kind"))
	case events.StepChecked:
		if str("decision") == "stop" {
			return fmt.Sprintf("%s:stop/%s", e.Type, str("stop_reason"))
		}
		return fmt.Sprintf("%s:continue", e.Type)
	case events.TurnSentinel:
		return fmt.Sprintf("%s:%s/%s", e.Type, str("kind"), str("reason"))
	case events.TurnFinished:
		return fmt.Sprintf("%s:%s", e.Type, str("stop_reason"))
	}
	return string(e.Type)
}

func shows(evs []events.Envelope) []string {
	out := make([]string, len(evs))
	for i, e := range evs {
		out[i] = show(e)
	}
	return out
}

func finished(t *testing.T, log []events.Envelope) events.TurnFinishedData {
	t.Helper()
	last := log[len(log)-1]
	if last.Type != events.TurnFinished {
		t.Fatalf("last event is %s, want turn.finished", last.Type)
	}
	var f events.TurnFinishedData
	if err := json.Unmarshal(last.Data, &f); err != nil {
		t.Fatal(err)
	}
	return f
}

func TestGivenWhenThen(t *testing.T) {
	yes, no := true, false
	tests := []struct {
		name  string
		given []Input
		when  Input
		then  []string
		err   error
	}{
		{
			name: "a submission starts the turn and its first step",
			when: start(),
			then: []string{"turn.started", "step.started"},
		},
		{
			name:  "an answer without tool calls completes the turn",
			given: []Input{start()},
			when:  answer(1, "done"),
			then:  []string{"model.completed", "step.checked:stop/completed", "turn.finished:completed"},
		},
		{
			name:  "tool calls of one step are requested together",
			given: []Input{start()},
			when:  answer(1, "", echo("a", "1"), echo("b", "2")),
			then:  []string{"model.completed", "tool.requested:echo", "tool.requested:echo"},
		},
		{
			name:  "the first of two results leaves the step open",
			given: []Input{start(), answer(1, "", echo("a", "1"), echo("b", "2"))},
			when:  result("b", "2"),
			then:  []string{"tool.completed:echo"},
		},
		{
			name:  "the step's last result checks it and starts the next",
			given: []Input{start(), answer(1, "", echo("a", "1"), echo("b", "2")), result("b", "2")},
			when:  result("a", "1"),
			then:  []string{"tool.completed:echo", "step.checked:continue", "step.started"},
		},
		{
			name:  "a result delivered twice changes nothing",
			given: []Input{start(), answer(1, "", echo("a", "1"), echo("b", "2")), result("a", "1")},
			when:  result("a", "1"),
			then:  []string{},
		},
		{
			name:  "an unknown tool gets an error result at once and the loop goes on",
			given: []Input{start()},
			when:  answer(1, "", call("a", "rm_rf", `{}`)),
			then:  []string{"model.completed", "tool.requested:rm_rf", "tool.completed:rm_rf!", "step.checked:continue", "step.started"},
		},
		{
			name:  "invalid arguments get an error result at once",
			given: []Input{start()},
			when:  answer(1, "", call("a", "echo", `{"txt":"x"}`), echo("b", "ok")),
			then:  []string{"model.completed", "tool.requested:echo", "tool.requested:echo", "tool.completed:echo!"},
		},
		{
			name:  "the step cap stops the turn with a sentinel",
			given: []Input{start(func(s *Start) { s.Limits.Steps = 1 }), answer(1, "", echo("a", "1"))},
			when:  result("a", "1"),
			then:  []string{"tool.completed:echo", "step.checked:stop/step_cap"},
		},
		{
			name: "the summary answer writes the sentinel and finishes",
			given: []Input{start(func(s *Start) { s.Limits.Steps = 1 }), answer(1, "", echo("a", "1")),
				result("a", "1")},
			when: summary("did one echo"),
			then: []string{"turn.sentinel:cap_hit/step_cap", "turn.finished:step_cap"},
		},
		{
			name:  "a step that exhausts the budget on the cap step reports budget",
			given: []Input{start(func(s *Start) { s.Limits.Steps = 1; s.Limits.Budget = 1 }), answer(1, "", echo("a", "1"))},
			when:  result("a", "1"),
			then:  []string{"tool.completed:echo", "step.checked:stop/budget"},
		},
		{
			name:  "calls beyond the budget are not requested; the first ones in order run",
			given: []Input{start(func(s *Start) { s.Limits.Budget = 2 })},
			when:  answer(1, "", echo("a", "1"), echo("b", "2"), echo("c", "3")),
			then:  []string{"model.completed", "tool.requested:echo", "tool.requested:echo"},
		},
		{
			name: "the doom loop stops before the repeating call runs",
			given: []Input{start(), answer(1, "", echo("a", "same")), result("a", "same"),
				answer(2, "", echo("b", "same")), result("b", "same")},
			when: answer(3, "", echo("c", "same")),
			then: []string{"model.completed", "step.checked:stop/doom_loop"},
		},
		{
			name:  "the doom loop counts identical calls within one step, key order aside",
			given: []Input{start()},
			when: answer(1, "", call("a", "echo", `{"text":"x"}`), call("b", "echo", `{ "text" : "x" }`),
				call("c", "echo", `{"text":"x"}`)),
			then: []string{"model.completed", "tool.requested:echo", "tool.requested:echo"},
		},
		{
			name: "the doom loop outranks the budget",
			given: []Input{start(func(s *Start) { s.Limits.Budget = 2; s.Limits.DoomLoop = 2 }),
				answer(1, "", echo("a", "x")), result("a", "x")},
			when: answer(2, "", echo("b", "x")),
			then: []string{"model.completed", "step.checked:stop/doom_loop"},
		},
		{
			name:  "a text-only turn ignores returned tool calls and is one step",
			given: []Input{start(func(s *Start) { s.Limits.Steps = 0 })},
			when:  answer(1, "just text", echo("a", "1")),
			then:  []string{"model.completed", "step.checked:stop/completed", "turn.finished:completed"},
		},
		{
			name:  "a model failing for good stops the turn with error",
			given: []Input{start()},
			when:  ModelAnswer{Step: 1, Kind: events.ModelStep, Error: "bad_request: nope", Attempts: 1},
			then:  []string{"model.completed", "step.checked:stop/error", "turn.finished:error"},
		},
		{
			name:  "a final_tools result ends the turn with synthesis_done",
			given: []Input{start(func(s *Start) { s.FinalTools = []string{"submit"} }), answer(1, "", call("a", "submit", `{}`))},
			when:  toolResult("submit", "a", "the answer"),
			then:  []string{"tool.completed:submit*", "step.checked:stop/synthesis_done", "turn.finished:synthesis_done"},
		},
		{
			name:  "a worker's final result ends the turn too",
			given: []Input{start(), answer(1, "", echo("a", "x"))},
			when:  ToolAnswer{CallID: "a", Tool: "echo", Output: "x", Final: true, Attempt: 1},
			then:  []string{"tool.completed:echo*", "step.checked:stop/synthesis_done", "turn.finished:synthesis_done"},
		},
		{
			name:  "synthesis outranks the budget and the cap",
			given: []Input{start(func(s *Start) { s.FinalTools = []string{"submit"}; s.Limits.Budget = 1; s.Limits.Steps = 1 }), answer(1, "", call("a", "submit", `{}`))},
			when:  toolResult("submit", "a", "the answer"),
			then:  []string{"tool.completed:submit*", "step.checked:stop/synthesis_done", "turn.finished:synthesis_done"},
		},
		{
			name:  "ask_user pauses the turn",
			given: []Input{start()},
			when:  answer(1, "", call("q", AskUser, `{"question":"which API?"}`)),
			then:  []string{"model.completed", "tool.requested:ask_user", "turn.paused:input"},
		},
		{
			name:  "a reply resumes the turn and answers the call",
			given: []Input{start(), answer(1, "", call("q", AskUser, `{"question":"which API?"}`))},
			when:  Command{Action: events.ActionReply, CallID: "q", Answer: "v2"},
			then:  []string{"turn.resumed", "tool.completed:ask_user", "step.checked:continue", "step.started"},
		},
		{
			name:  "a reply for a call that asked nothing is an input error",
			given: []Input{start(), answer(1, "", call("q", AskUser, `{"question":"which API?"}`))},
			when:  Command{Action: events.ActionReply, CallID: "nope", Answer: "v2"},
			err:   &InputError{},
		},
		{
			name:  "a gated call is requested, then the turn pauses for approval; other calls run meanwhile",
			given: []Input{start(func(s *Start) { s.Approval = []string{"write_file"} })},
			when:  answer(1, "", call("w", "write_file", `{"path":"a"}`), echo("e", "x")),
			then:  []string{"model.completed", "tool.requested:write_file", "tool.requested:echo", "turn.paused:approval"},
		},
		{
			name: "a result of another call arrives while paused",
			given: []Input{start(func(s *Start) { s.Approval = []string{"write_file"} }),
				answer(1, "", call("w", "write_file", `{"path":"a"}`), echo("e", "x"))},
			when: result("e", "x"),
			then: []string{"tool.completed:echo"},
		},
		{
			name: "approval resumes the turn; the call then runs",
			given: []Input{start(func(s *Start) { s.Approval = []string{"write_file"} }),
				answer(1, "", call("w", "write_file", `{"path":"a"}`))},
			when: Command{Action: events.ActionApprove, CallID: "w", Approved: &yes},
			then: []string{"turn.resumed"},
		},
		{
			name: "a denied call becomes an error result the model sees",
			given: []Input{start(func(s *Start) { s.Approval = []string{"write_file"} }),
				answer(1, "", call("w", "write_file", `{"path":"a"}`))},
			when: Command{Action: events.ActionApprove, CallID: "w", Approved: &no, Note: "not today"},
			then: []string{"turn.resumed", "tool.completed:write_file!", "step.checked:continue", "step.started"},
		},
		{
			name: "two gated calls pause one after the other",
			given: []Input{start(func(s *Start) { s.Approval = []string{"write_file"} }),
				answer(1, "", call("w1", "write_file", `{"path":"a"}`), call("w2", "write_file", `{"path":"b"}`))},
			when: Command{Action: events.ActionApprove, CallID: "w1", Approved: &no},
			then: []string{"turn.resumed", "tool.completed:write_file!", "turn.paused:approval"},
		},
		{
			name:  "an abort ends the turn at once, without a step check",
			given: []Input{start(), answer(1, "", echo("a", "1"))},
			when:  Command{Action: events.ActionAbort, Reason: "user pressed stop"},
			then:  []string{"turn.finished:aborted"},
		},
		{
			name:  "a failure to store what the turn did ends it at once with error",
			given: []Input{start(), answer(1, "", echo("a", "1"))},
			when:  Fail{Reason: "event tool.completed of 1300000 bytes exceeds the server's max payload"},
			then:  []string{"turn.finished:error"},
		},
		{
			name:  "a failure after the turn finished changes nothing",
			given: []Input{start(), answer(1, "done")},
			when:  Fail{Reason: "too big"},
			err:   ErrTurnFinished,
		},
		{
			name:  "a result for a call the turn never requested is refused",
			given: []Input{start(), answer(1, "", echo("a", "1"))},
			when:  result("zz", "forged"),
			err:   &InputError{},
		},
		{
			name:  "a result naming another tool than its call's is refused",
			given: []Input{start(), answer(1, "", echo("a", "1"))},
			when:  toolResult("write_file", "a", "forged"),
			err:   &InputError{},
		},
		{
			name:  "a late result of an earlier step is ignored, not refused",
			given: []Input{start(), answer(1, "", echo("a", "1")), result("a", "1"), answer(2, "", echo("b", "2"))},
			when:  result("a", "1 again"),
			then:  []string{},
		},
		{
			name:  "an abort of a paused turn ends it",
			given: []Input{start(), answer(1, "", call("q", AskUser, `{"question":"?"}`))},
			when:  Command{Action: events.ActionAbort},
			then:  []string{"turn.finished:aborted"},
		},
		{
			name:  "input for a finished turn is refused",
			given: []Input{start(), answer(1, "done")},
			when:  Command{Action: events.ActionAbort},
			err:   ErrTurnFinished,
		},
		{
			name:  "a second submission of a turn is refused",
			given: []Input{start(func(s *Start) { s.Digest = "first" })},
			when:  start(func(s *Start) { s.Digest = "second" }),
			err:   ErrTurnExists,
		},
		{
			name:  "the same submission again changes nothing",
			given: []Input{start(func(s *Start) { s.Digest = "first" })},
			when:  start(func(s *Start) { s.Digest = "first" }),
			then:  []string{},
		},
		{
			name: "a result for a turn without a log is refused",
			when: result("a", "x"),
			err:  ErrUnknownTurn,
		},
		{
			name: "a rejected submission is one turn.finished",
			when: Reject{TurnID: "t1", SessionID: "t1", Reason: "unknown agent"},
			then: []string{"turn.finished:rejected"},
		},
		{
			name:  "a model answer for a step already past changes nothing",
			given: []Input{start(), answer(1, "", echo("a", "1")), result("a", "1")},
			when:  answer(1, "", echo("a", "1")),
			then:  []string{},
		},
		{
			name:  "a model answer re-sent while the turn is paused changes nothing",
			given: []Input{start(), answer(1, "", call("q", AskUser, `{"question":"?"}`))},
			when:  answer(1, "again"),
			then:  []string{},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := &clock{now: t0}
			s, log := feed(t, c, tt.given...)
			d, err := Decide(s, tt.when, c.env())
			if tt.err != nil {
				var ie *InputError
				if errors.As(tt.err, &ie) {
					if !errors.As(err, &ie) {
						t.Fatalf("err = %v, want an *InputError", err)
					}
					return
				}
				if !errors.Is(err, tt.err) {
					t.Fatalf("err = %v, want %v", err, tt.err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if got := shows(d.Events); !reflect.DeepEqual(got, tt.then) {
				t.Fatalf("then\n got  %q\n want %q", got, tt.then)
			}
			checkFold(t, append(log, d.Events...), d.State)
		})
	}
}

// checkFold folds a log from scratch and compares with the state Decide
// returned: the orchestrator's cache and a replay must agree.
func checkFold(t *testing.T, log []events.Envelope, want *State) {
	t.Helper()
	got, err := Fold(log)
	if err != nil {
		t.Fatalf("fold: %v", err)
	}
	got.History = want.History
	w := *want
	if !reflect.DeepEqual(*got, w) {
		t.Fatalf("folded state differs from decided state\n fold   %+v\n decide %+v", *got, w)
	}
	if _, err := Verify(log); err != nil {
		t.Fatalf("the log does not verify: %v", err)
	}
}

func TestSentinelTextAndOutput(t *testing.T) {
	tests := []struct {
		name    string
		inputs  []Input
		reason  events.StopReason
		cause   string
		summary string
	}{
		{
			name:   "step cap",
			inputs: []Input{start(func(s *Start) { s.Limits.Steps = 1 }), answer(1, "", echo("a", "1")), result("a", "1"), summary("Echoed once; nothing remains.")},
			reason: events.StopStepCap, cause: "Step limit reached (1 steps)", summary: "Echoed once; nothing remains.",
		},
		{
			name:   "budget",
			inputs: []Input{start(func(s *Start) { s.Limits.Budget = 2 }), answer(1, "", echo("a", "1"), echo("b", "2"), echo("c", "3")), result("a", "1"), result("b", "2"), summary("Two of three.")},
			reason: events.StopBudget, cause: "Tool budget exhausted (2 calls)", summary: "Two of three.",
		},
		{
			name: "doom loop",
			inputs: []Input{start(), answer(1, "", echo("a", "x")), result("a", "x"), answer(2, "", echo("b", "x")), result("b", "x"),
				answer(3, "", echo("c", "x")), summary("Kept echoing.")},
			reason: events.StopDoomLoop, cause: "Stopped: the same tool call repeated 3 times (echo)", summary: "Kept echoing.",
		},
		{
			name:   "a failed summary leaves the cause line alone",
			inputs: []Input{start(func(s *Start) { s.Limits.Steps = 1 }), answer(1, "", echo("a", "1")), result("a", "1"), ModelAnswer{Kind: events.ModelSummary, Error: "server_error", Attempts: 3}},
			reason: events.StopStepCap, cause: "Step limit reached (1 steps)",
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, log := feed(t, &clock{now: t0}, tt.inputs...)
			f := finished(t, log)
			want := tt.cause
			if tt.summary != "" {
				want += "\n\n" + tt.summary
			}
			if f.StopReason != tt.reason || f.Output != want {
				t.Fatalf("finished %s with %q, want %s with %q", f.StopReason, f.Output, tt.reason, want)
			}
			var sentinel events.TurnSentinelData
			_ = json.Unmarshal(log[len(log)-2].Data, &sentinel)
			if log[len(log)-2].Type != events.TurnSentinel || sentinel.Text != want {
				t.Fatalf("event before turn.finished is %s %q, want the sentinel", log[len(log)-2].Type, sentinel.Text)
			}
			if log[len(log)-3].Type != events.StepChecked {
				t.Fatalf("sentinel follows %s, want step.checked", log[len(log)-3].Type)
			}
			// The summary call counts as a model call but is no step.
			steps := 0
			for _, e := range log {
				if e.Type == events.StepStarted {
					steps++
				}
			}
			if f.Metrics.Steps != steps || f.Metrics.ModelCalls != steps+1 {
				t.Fatalf("metrics %+v with %d steps", f.Metrics, steps)
			}
		})
	}
}

func TestBudgetCountsEveryCompletedCallAndIsNeverExceeded(t *testing.T) {
	c := &clock{now: t0}
	_, log := feed(t, c, start(func(s *Start) { s.Limits.Budget = 3 }),
		answer(1, "", echo("a", "1"), call("b", "nope", `{}`)), result("a", "1"),
		answer(2, "", echo("c", "3"), echo("d", "4")), result("c", "3"), summary(""))
	f := finished(t, log)
	if f.StopReason != events.StopBudget || f.Metrics.ToolCalls != 3 {
		t.Fatalf("finished %s after %d calls, want budget after 3", f.StopReason, f.Metrics.ToolCalls)
	}
	for _, e := range log {
		if e.Type == events.ToolRequested && strings.Contains(string(e.Data), `"d"`) {
			t.Fatalf("call d beyond the budget was requested")
		}
	}
}

// A wake-up is no deadline: past the turn's and the call's deadlines it
// still decides nothing, where either deadline's own message would.
func TestWakeIsNoDeadline(t *testing.T) {
	c := &clock{now: t0}
	s, _ := feed(t, c, start(func(s *Start) { s.Limits.Timeout = time.Minute }), answer(1, "", echo("a", "1")))
	late := Env{Now: t0.Add(time.Hour), NewID: func() string { return "x" }}
	wake := Tick(events.Timer{TurnID: "t1", Kind: events.TimerWake, At: late.Now})
	if d, err := Decide(s, wake, late); err != nil || len(d.Events) != 0 {
		t.Fatalf("a wake-up decided %q %v", shows(d.Events), err)
	}
	turn := Tick(events.Timer{TurnID: "t1", Kind: events.TimerTurn, At: late.Now})
	if d, err := Decide(s, turn, late); err != nil || len(d.Events) == 0 {
		t.Fatalf("the turn's deadline, passed, decided %q %v", shows(d.Events), err)
	}
}

func TestTimers(t *testing.T) {
	c := &clock{now: t0}
	s, _ := feed(t, c, start(func(s *Start) { s.Limits.Timeout = time.Minute }), answer(1, "", echo("a", "1")))
	ts := Timers(s)
	if len(ts) != 2 || ts[0].Timer.Kind != events.TimerTurn || ts[1].Timer.Kind != events.TimerCall {
		t.Fatalf("timers %+v, want the turn's and the call's", ts)
	}
	early := Env{Now: ts[0].At.Add(-time.Second), NewID: func() string { return "x" }}
	if d, err := Decide(s, Tick(ts[0].Timer), early); err != nil || len(d.Events) != 0 {
		t.Fatalf("an early tick decided %v %v", d.Events, err)
	}
	d, err := Decide(s, Tick(ts[1].Timer), Env{Now: ts[1].At, NewID: func() string { return "y" }})
	if err != nil || len(d.Events) == 0 || show(d.Events[0]) != "tool.completed:echo!" {
		t.Fatalf("call deadline decided %q %v", shows(d.Events), err)
	}
	d, err = Decide(s, Tick(ts[0].Timer), Env{Now: ts[0].At, NewID: func() string { return "z" }})
	if err != nil || !reflect.DeepEqual(shows(d.Events), []string{"turn.finished:timeout"}) {
		t.Fatalf("turn deadline decided %q %v", shows(d.Events), err)
	}
	if len(Timers(d.State)) != 0 {
		t.Fatalf("a finished turn has timers")
	}
}

func TestJobs(t *testing.T) {
	c := &clock{now: t0}
	s, _ := feed(t, c, start(func(s *Start) {
		s.Approval = []string{"write_file"}
		s.History = []events.Message{{Role: events.RoleUser, Content: "earlier"}}
	}))
	jobs := Jobs(s)
	if len(jobs) != 1 || jobs[0].ID != "model:t1:1" || len(jobs[0].Model.Messages) != 2 || len(jobs[0].Model.Tools) != 4 {
		t.Fatalf("jobs at step 1: %+v", jobs)
	}
	d, _ := Decide(s, answer(1, "", call("w", "write_file", `{}`), echo("e", "x"), call("q", AskUser, `{"question":"?"}`)), c.env())
	jobs = Jobs(d.State)
	if len(jobs) != 1 || jobs[0].ID != "tool:t1:e" || jobs[0].Subject != "jetloop.jobs.tool.echo" {
		t.Fatalf("while paused for approval only echo runs: %+v", jobs)
	}
	yes := true
	d, _ = Decide(d.State, Command{Action: events.ActionApprove, CallID: "w", Approved: &yes}, c.env())
	if got := shows(d.Events); !reflect.DeepEqual(got, []string{"turn.resumed", "turn.paused:input"}) {
		t.Fatalf("after approval: %q", got)
	}
	if jobs = Jobs(d.State); len(jobs) != 2 || jobs[0].ID != "tool:t1:w" || jobs[1].ID != "tool:t1:e" {
		t.Fatalf("an approved call runs: %+v", jobs)
	}
}

// TestJobsMatchTheirSchemas: model runners trust the jobs orchestrators
// write without validating them again, so every kind of job Jobs makes must
// be valid.
func TestJobsMatchTheirSchemas(t *testing.T) {
	c := &clock{now: t0}
	s, _ := feed(t, c, start(func(s *Start) {
		s.Script = json.RawMessage(`{"responses":[{"text":"hi"}]}`)
		s.History = []events.Message{{Role: events.RoleUser, Content: "earlier"}}
	}), answer(1, "", echo("e", "x")), result("e", "x"), answer(2, "", echo("f", "y")))
	states := []*State{s}
	d, _ := Decide(s, result("f", "y"), c.env())
	states = append(states, d.State)
	capped, _ := feed(t, c, start(func(s *Start) { s.Limits.Steps = 1 }), answer(1, "", echo("e", "x")), result("e", "x"))
	states = append(states, capped)
	kinds := map[string]bool{}
	for _, st := range states {
		for _, j := range Jobs(st) {
			var v any = j.Tool
			name := "tool_job"
			if m := j.Model; m != nil {
				// On the wire a model job names its call (runtime.encodeJob).
				v, name = events.ModelJobRef{TurnID: m.TurnID, SessionID: m.SessionID, Step: m.Step, Kind: m.Kind, Attempt: m.Attempt, NotBefore: m.NotBefore}, "model_job"
				kinds[string(j.Model.Kind)] = true
			}
			data, _ := json.Marshal(v)
			if err := schemas.Validate(name, data); err != nil {
				t.Errorf("%s %s: %v\n%s", name, j.ID, err, data)
			}
			kinds[name] = true
		}
	}
	if len(kinds) != 4 {
		t.Fatalf("checked %v, want tool and model jobs of both kinds", kinds)
	}
}

func TestTextOnlyTurnOffersNoTools(t *testing.T) {
	s, log := feed(t, &clock{now: t0}, start(func(s *Start) { s.Limits.Steps = 0 }))
	var d events.TurnStartedData
	_ = json.Unmarshal(log[0].Data, &d)
	if len(d.Tools) != 0 || *d.Limits.Steps != 0 || len(Jobs(s)[0].Model.Tools) != 0 {
		t.Fatalf("text-only turn offered %v", d.Tools)
	}
}

func TestEffectiveLimitsOnlyTighten(t *testing.T) {
	submit := &events.Limits{Steps: intp(50), Budget: 100, TimeoutMs: 1000, DoomLoop: 5}
	got := EffectiveLimits(intp(5), 50, time.Hour, 3, submit)
	want := Limits{Steps: 5, Budget: 50, Timeout: time.Second, DoomLoop: 3}
	if got != want {
		t.Fatalf("got %+v, want %+v", got, want)
	}
	if got := EffectiveLimits(nil, 0, 0, 0, nil); got != (Limits{Steps: MaxSteps, Budget: DefaultBudget, DoomLoop: DefaultDoomLoop}) {
		t.Fatalf("defaults: %+v", got)
	}
	if got := EffectiveLimits(intp(500), 50, 0, 3, &events.Limits{Steps: intp(0)}); got.Steps != 0 {
		t.Fatalf("steps: 0 in a submission makes a text-only turn: %+v", got)
	}
}

// A crash between two appends leaves a prefix of a decision in the log; the
// redelivered input causes nothing itself, but Decide completes the rest.
func TestDecideRepairsAPartialAppend(t *testing.T) {
	c := &clock{now: t0}
	s, log := feed(t, c, start(), answer(1, "", echo("a", "1")))
	d, err := Decide(s, result("a", "1"), c.env())
	if err != nil || len(d.Events) != 3 {
		t.Fatalf("decided %q %v", shows(d.Events), err)
	}
	// Only tool.completed made it to the log before the crash.
	partial, err := Fold(append(log, d.Events[0]))
	if err != nil {
		t.Fatal(err)
	}
	again, err := Decide(partial, result("a", "1"), c.env())
	if err != nil {
		t.Fatal(err)
	}
	if got := shows(again.Events); !reflect.DeepEqual(got, []string{"step.checked:continue", "step.started"}) {
		t.Fatalf("repair wrote %q", got)
	}
}

// TestDecideRepairsAModelAnswerCutShort: a crash after model.completed, or
// after some of its tool.requested, leaves a step in tool_phase without all
// its calls; the answer, redelivered, gets the rest written.
func TestDecideRepairsAModelAnswerCutShort(t *testing.T) {
	for kept := 1; kept <= 3; kept++ {
		c := &clock{now: t0}
		s, log := feed(t, c, start())
		in := answer(1, "", echo("a", "1"), call("b", "nope", `{}`), echo("c", "2"))
		d, err := Decide(s, in, c.env())
		if err != nil {
			t.Fatal(err)
		}
		want := shows(d.Events[kept:])
		partial, err := Fold(append(log, d.Events[:kept]...))
		if err != nil {
			t.Fatal(err)
		}
		again, err := Decide(partial, in, c.env())
		if err != nil {
			t.Fatal(err)
		}
		if got := shows(again.Events); !reflect.DeepEqual(got, want) {
			t.Fatalf("kept %d: repair wrote %q, want %q", kept, got, want)
		}
		if jobs := Jobs(again.State); len(jobs) != 2 {
			t.Fatalf("kept %d: %d jobs after the repair, want 2", kept, len(jobs))
		}
		full := append(append(log, d.Events[:kept]...), again.Events...)
		if _, err := Verify(full); err != nil {
			t.Fatalf("kept %d: %v", kept, err)
		}
	}
}

func TestEvolveRejectsIllegalTransitions(t *testing.T) {
	c := &clock{now: t0}
	_, log := feed(t, c, start(), answer(1, "done"))
	bad := log[:2:2]
	e := log[len(log)-1] // turn.finished right after step.started is legal...
	e.Seq = 3
	e.Type = events.ToolCompleted // ...but a tool.completed is not
	e.Data = json.RawMessage(`{"call_id":"zz","name":"echo","output":"","is_error":false,"final":false,"duration_ms":0,"worker":"w","attempts":1}`)
	_, err := Fold(append(bad, e))
	var te *TransitionError
	if !errors.As(err, &te) || te.From != PhaseStream {
		t.Fatalf("err = %v, want a TransitionError from stream", err)
	}
	gap := log[len(log)-1]
	if _, err := Fold(append(log[:1:1], gap)); err == nil {
		t.Fatalf("a gap in seq folded")
	}
	unknown := log[1]
	unknown.Type = "step.exploded"
	if _, err := Fold(append(log[:1:1], unknown)); err == nil {
		t.Fatalf("an unknown event type folded")
	}
}

// A crash between appending turn.started and step.started leaves a log that
// only the re-sent submission can move on: it starts the first step.
func TestTheSameSubmissionRepairsAStartCutShort(t *testing.T) {
	c := &clock{now: t0}
	in := start(func(s *Start) { s.Digest = "d" })
	_, log := feed(t, c, in)
	partial, err := Fold(log[:1])
	if err != nil {
		t.Fatal(err)
	}
	d, err := Decide(partial, in, c.env())
	if err != nil {
		t.Fatal(err)
	}
	if got := shows(d.Events); !slices.Equal(got, []string{"step.started"}) {
		t.Fatalf("repair wrote %v", got)
	}
	if jobs := Jobs(d.State); len(jobs) != 1 || jobs[0].Model == nil {
		t.Fatalf("jobs after the repair: %+v", jobs)
	}
}

func TestTranscriptAnswersDanglingCalls(t *testing.T) {
	c := &clock{now: t0}
	s, _ := feed(t, c, start(), answer(1, "", echo("a", "1"), echo("b", "2")), result("a", "1"),
		Command{Action: events.ActionAbort})
	tr := s.Transcript()
	results := map[string]bool{}
	for _, m := range tr {
		if m.Role == events.RoleTool {
			results[m.CallID] = m.IsError
		}
	}
	if len(results) != 2 || !results["b"] || results["a"] {
		t.Fatalf("transcript results %v", results)
	}
}
