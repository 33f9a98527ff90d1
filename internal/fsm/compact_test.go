package fsm

import (
	"encoding/json"
	"errors"
	"fmt"
	"reflect"
	"slices"
	"strings"
	"testing"

	"github.com/jetloop/jetloop/internal/events"
)

// Messages as the machine builds them, for the tables below.
func u(text string) events.Message { return events.Message{Role: events.RoleUser, Content: text} }

func a(text string, calls ...events.ToolCall) events.Message {
	return events.Message{Role: events.RoleAssistant, Content: text, ToolCalls: calls}
}

func r(id, out string) events.Message {
	return events.Message{Role: events.RoleTool, CallID: id, Name: "echo", Content: out}
}

func note(n int) events.Message { return u(fmt.Sprintf(CompactionNote, n)) }

// render shows a conversation one message a line, so a failing table prints
// what was sent in a readable form.
func render(msgs []events.Message) string {
	var b strings.Builder
	for _, m := range msgs {
		fmt.Fprintf(&b, "\n  %s %q", m.Role, m.Content)
		for _, c := range m.ToolCalls {
			fmt.Fprintf(&b, " call %s", c.CallID)
		}
		if m.CallID != "" {
			fmt.Fprintf(&b, " for %s", m.CallID)
		}
	}
	return b.String()
}

// steps answers n steps of one echo call each: call "c<i>" with text "<i>".
func steps(n int) []Input {
	var in []Input
	for i := 1; i <= n; i++ {
		id, text := fmt.Sprintf("c%d", i), fmt.Sprint(i)
		in = append(in, answer(i, "step "+text, echo(id, text)), result(id, text))
	}
	return in
}

// fiveSteps is the conversation of a turn after five steps of one call each.
var fiveSteps = []events.Message{u("hi"),
	a("step 1", echo("c1", "1")), r("c1", "1"),
	a("step 2", echo("c2", "2")), r("c2", "2"),
	a("step 3", echo("c3", "3")), r("c3", "3"),
	a("step 4", echo("c4", "4")), r("c4", "4"),
	a("step 5", echo("c5", "5")), r("c5", "5")}

// earlier is the history of a session whose first turn took one step with a
// call and then answered.
var earlier = []events.Message{u("first question"), a("looking", echo("h1", "x")), r("h1", "x"), a("first answer")}

func keep(n int) func(*Start) { return func(s *Start) { s.KeepSteps = n } }

// TestCompactionMessages checks the exact messages of the model job a state
// waits on, and the counts the model's answer then records.
func TestCompactionMessages(t *testing.T) {
	tests := []struct {
		name   string
		inputs []Input
		kind   events.ModelKind
		want   []events.Message
		// dropped is the compacted count; -1 for a turn without compaction,
		// whose model.completed has no counts.
		dropped int
	}{
		{
			name:    "no compaction sends everything",
			inputs:  append([]Input{start()}, steps(5)...),
			want:    fiveSteps,
			dropped: -1,
		},
		{
			name:    "keep_steps 2 over a 5-step turn",
			inputs:  append([]Input{start(keep(2))}, steps(5)...),
			want:    []events.Message{u("hi"), note(6), a("step 4", echo("c4", "4")), r("c4", "4"), a("step 5", echo("c5", "5")), r("c5", "5")},
			dropped: 6,
		},
		{
			name:    "keep_steps 1 over a 5-step turn",
			inputs:  append([]Input{start(keep(1))}, steps(5)...),
			want:    []events.Message{u("hi"), note(8), a("step 5", echo("c5", "5")), r("c5", "5")},
			dropped: 8,
		},
		{
			name:    "as many steps as kept: nothing left out, the counts still recorded",
			inputs:  append([]Input{start(keep(5))}, steps(5)...),
			want:    fiveSteps,
			dropped: 0,
		},
		{
			name:    "the first step's call sends the input alone",
			inputs:  []Input{start(keep(1))},
			want:    []events.Message{u("hi")},
			dropped: 0,
		},
		{
			name: "parallel calls of one step are kept together, and dropped together",
			inputs: []Input{start(keep(1)),
				answer(1, "two at once", echo("p1", "1"), echo("p2", "2")), result("p2", "2"), result("p1", "1"),
				answer(2, "two more", echo("q1", "3"), echo("q2", "4")), result("q1", "3"), result("q2", "4")},
			// Results follow in the order they completed.
			want:    []events.Message{u("hi"), note(3), a("two more", echo("q1", "3"), echo("q2", "4")), r("q1", "3"), r("q2", "4")},
			dropped: 3,
		},
		{
			name:   "history: a later turn's question travels with the step it prompted",
			inputs: append([]Input{start(keep(2), func(s *Start) { s.History = earlier })}, steps(2)...),
			// Steps: [looking, h1] [first answer] [hi, step 1, c1] [step 2, c2].
			want: []events.Message{u("first question"), note(3), u("hi"),
				a("step 1", echo("c1", "1")), r("c1", "1"), a("step 2", echo("c2", "2")), r("c2", "2")},
			dropped: 3,
		},
		{
			name:   "history: the history's first question and the turn's own are kept",
			inputs: append([]Input{start(keep(1), func(s *Start) { s.History = earlier })}, steps(2)...),
			// The turn's question opened the dropped step 1 and follows the note.
			want:    []events.Message{u("first question"), note(5), u("hi"), a("step 2", echo("c2", "2")), r("c2", "2")},
			dropped: 5,
		},
		{
			name:    "history: a new question is pending input, always sent",
			inputs:  []Input{start(keep(1), func(s *Start) { s.History = earlier })},
			want:    []events.Message{u("first question"), note(2), a("first answer"), u("hi")},
			dropped: 2,
		},
		{
			name:   "the summary call after a step cap is compacted the same way",
			inputs: append([]Input{start(keep(1), func(s *Start) { s.Limits.Steps = 3 })}, steps(3)...),
			kind:   events.ModelSummary,
			want:   []events.Message{u("hi"), note(4), a("step 3", echo("c3", "3")), r("c3", "3")},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := &clock{now: t0}
			s, log := feed(t, c, tt.inputs...)
			jobs := Jobs(s)
			if len(jobs) != 1 || jobs[0].Model == nil {
				t.Fatalf("jobs: %+v, want one model job", jobs)
			}
			job := jobs[0].Model
			kind := tt.kind
			if kind == "" {
				kind = events.ModelStep
			}
			if job.Kind != kind || job.System != s.System {
				t.Fatalf("job kind %s, system %q", job.Kind, job.System)
			}
			if !reflect.DeepEqual(job.Messages, tt.want) {
				t.Fatalf("messages sent:%s\nwant:%s", render(job.Messages), render(tt.want))
			}
			if kind == events.ModelSummary {
				if job.Instruction == "" || len(job.Tools) != 0 {
					t.Fatalf("summary job: instruction %q, tools %v", job.Instruction, job.Tools)
				}
				return
			}
			d, err := Decide(s, answer(s.Step, "done"), c.env())
			if err != nil {
				t.Fatal(err)
			}
			var mc events.ModelCompletedData
			if err := json.Unmarshal(d.Events[0].Data, &mc); err != nil || d.Events[0].Type != events.ModelCompleted {
				t.Fatalf("first event %s: %v", d.Events[0].Type, err)
			}
			if tt.dropped < 0 {
				if mc.Messages != nil || mc.Compacted != nil || strings.Contains(string(d.Events[0].Data), "compacted") {
					t.Fatalf("a turn without compaction records counts: %s", d.Events[0].Data)
				}
			} else if mc.Messages == nil || mc.Compacted == nil || *mc.Messages != len(tt.want) || *mc.Compacted != tt.dropped {
				t.Fatalf("model.completed %s, want messages %d, compacted %d", d.Events[0].Data, len(tt.want), tt.dropped)
			}
			if err := events.ValidateEvent(mustMarshal(t, d.Events[0])); err != nil {
				t.Fatalf("model.completed fails its schema: %v", err)
			}
			checkFold(t, append(log, d.Events...), d.State)
			if _, err := Verify(append(log, d.Events...), WithHistory(s.History)); err != nil {
				t.Fatalf("verify with the history: %v", err)
			}
		})
	}
}

func mustMarshal(t *testing.T, v any) []byte {
	t.Helper()
	data, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return data
}

// TestCompactNeverSeparatesACallFromItsResults checks every keep_steps over
// conversations of every shape: each tool result sent follows the assistant
// message that asked for it, each call sent has its results, the first user
// message is always sent, and the counts add up.
func TestCompactNeverSeparatesACallFromItsResults(t *testing.T) {
	parallel := []events.Message{u("go"), u("and more"),
		a("", echo("a", "1"), echo("b", "2")), r("b", "2"), r("a", "1"),
		a("thinking"),
		u("follow-up"), a("", echo("c", "3")), r("c", "3"),
		a("", echo("d", "4"), echo("e", "5"), echo("f", "6")), r("d", "4"), r("e", "5"), r("f", "6"),
		u("pending")}
	conversations := map[string][]events.Message{
		"five steps": fiveSteps,
		"history":    append(append([]events.Message(nil), earlier...), fiveSteps...),
		"parallel":   parallel,
		"no user":    {a("", echo("a", "1"), echo("b", "2")), r("b", "2"), r("a", "1"), a("thinking"), a("", echo("c", "3")), r("c", "3")},
	}
	// Where each conversation's own turn begins; the rest is history.
	turns := map[string]int{"history": len(earlier)}
	for name, conv := range conversations {
		for k := 0; k <= 8; k++ {
			t.Run(fmt.Sprintf("%s/keep %d", name, k), func(t *testing.T) {
				turn := turns[name]
				out, dropped := Compact(conv, k, turn)
				if conv[turn].Role == events.RoleUser && !slices.ContainsFunc(out, func(m events.Message) bool { return reflect.DeepEqual(m, conv[turn]) }) {
					t.Fatalf("the turn's input %q was left out:%s", conv[turn].Content, render(out))
				}
				notes := 0
				for _, m := range out {
					if strings.HasSuffix(m.Content, "earlier messages were compacted away]") {
						notes++
					}
				}
				if len(out)-notes+dropped != len(conv) || notes > 1 || (notes == 1) != (dropped > 0) {
					t.Fatalf("%d sent (%d notes), %d dropped, of %d:%s", len(out), notes, dropped, len(conv), render(out))
				}
				if out[0].Role != events.RoleUser && conv[0].Role == events.RoleUser {
					t.Fatalf("the first message is no longer a user message:%s", render(out))
				}
				asked := map[string]bool{}
				for i, m := range out {
					switch m.Role {
					case events.RoleAssistant:
						asked = map[string]bool{}
						for _, c := range m.ToolCalls {
							asked[c.CallID] = true
						}
					case events.RoleTool:
						if !asked[m.CallID] {
							t.Fatalf("result %s at %d sent without its call:%s", m.CallID, i, render(out))
						}
						delete(asked, m.CallID)
					default:
						if len(asked) > 0 {
							t.Fatalf("calls %v sent without their results:%s", asked, render(out))
						}
					}
				}
				if len(asked) > 0 {
					t.Fatalf("calls %v sent without their results:%s", asked, render(out))
				}
				if k == 0 && dropped != 0 {
					t.Fatalf("keep 0 dropped %d", dropped)
				}
			})
		}
	}
}

func TestCompactShapes(t *testing.T) {
	tests := []struct {
		name    string
		msgs    []events.Message
		keep    int
		want    []events.Message
		dropped int
	}{
		{
			name:    "the user messages before a step belong to it",
			msgs:    []events.Message{u("go"), u("also this"), a("s1"), u("then"), a("s2")},
			keep:    1,
			want:    []events.Message{u("go"), note(2), u("then"), a("s2")},
			dropped: 2,
		},
		{
			name: "the second input message opens the first step",
			msgs: []events.Message{u("go"), u("also this"), a("s1"), u("then"), a("s2")},
			keep: 2,
			want: []events.Message{u("go"), u("also this"), a("s1"), u("then"), a("s2")},
		},
		{
			name:    "without a user message the note opens the conversation",
			msgs:    []events.Message{a("seed"), a("", echo("x", "1")), r("x", "1")},
			keep:    1,
			want:    []events.Message{note(1), a("", echo("x", "1")), r("x", "1")},
			dropped: 1,
		},
		{
			name:    "assistant messages before the first user message stay with it",
			msgs:    []events.Message{a("hello, how can I help?"), u("go"), a("s1"), a("s2")},
			keep:    1,
			want:    []events.Message{a("hello, how can I help?"), u("go"), note(1), a("s2")},
			dropped: 1,
		},
		{
			name: "an empty conversation",
			keep: 3,
			want: []events.Message{},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, dropped := Compact(tt.msgs, tt.keep, 0)
			if !reflect.DeepEqual(got, tt.want) || dropped != tt.dropped {
				t.Fatalf("got %d dropped:%s\nwant %d dropped:%s", dropped, render(got), tt.dropped, render(tt.want))
			}
		})
	}
	msgs := []events.Message{u("go")}
	got, _ := Compact(msgs, 0, 0)
	got[0].Content = "changed"
	if msgs[0].Content != "go" {
		t.Fatalf("Compact shares its result with its argument")
	}
}

// TestCompactionTravelsInTurnStarted checks that the setting is in the log,
// so a fold (replay, a second orchestrator) compacts the same way.
func TestCompactionTravelsInTurnStarted(t *testing.T) {
	_, log := feed(t, &clock{now: t0}, start(keep(3)))
	var d events.TurnStartedData
	if err := json.Unmarshal(log[0].Data, &d); err != nil {
		t.Fatal(err)
	}
	if d.Compaction == nil || d.Compaction.KeepSteps != 3 {
		t.Fatalf("turn.started compaction = %+v, want keep_steps 3", d.Compaction)
	}
	if err := events.ValidateEvent(mustMarshal(t, log[0])); err != nil {
		t.Fatalf("turn.started fails its schema: %v", err)
	}
	s, err := Fold(log)
	if err != nil || s.KeepSteps != 3 {
		t.Fatalf("folded KeepSteps = %d (%v), want 3", s.KeepSteps, err)
	}
	_, log = feed(t, &clock{now: t0}, start())
	if strings.Contains(string(log[0].Data), "compaction") {
		t.Fatalf("a turn without compaction records it: %s", log[0].Data)
	}
}

// TestVerifyCompactionCounts checks that Verify re-derives the counts: an
// edited count is a divergence, and so is a history that is not the one the
// turn saw. Without the history it takes the recorded counts.
func TestVerifyCompactionCounts(t *testing.T) {
	c := &clock{now: t0}
	_, log := feed(t, c, append(append([]Input{start(keep(1), func(s *Start) { s.History = earlier })}, steps(2)...), answer(3, "done"))...)
	if _, err := Verify(log, WithHistory(earlier)); err != nil {
		t.Fatalf("verify with the history: %v", err)
	}
	if _, err := Verify(log); err != nil {
		t.Fatalf("verify without the history: %v", err)
	}
	// The same number of messages, another shape: one step fewer.
	other := []events.Message{u("first question"), u("more"), a("first answer"), u("thanks")}
	var div *Divergence
	if _, err := Verify(log, WithHistory(other)); !errors.As(err, &div) || div.Recorded.Type != events.ModelCompleted {
		t.Fatalf("verify with another history: %v, want a divergence at model.completed", err)
	}
	if _, err := Verify(log, WithHistory(earlier[:2])); !errors.As(err, &div) || div.Recorded.Type != events.TurnStarted {
		t.Fatalf("verify with a short history: %v, want a divergence at turn.started", err)
	}

	_, log = feed(t, c, append(append([]Input{start(keep(1))}, steps(2)...), answer(3, "done"))...)
	for i, e := range log {
		if e.Type == events.ModelCompleted && e.Step == 3 {
			edited := strings.Replace(string(e.Data), `"compacted":2`, `"compacted":1`, 1)
			if edited == string(e.Data) {
				t.Fatalf("no compacted count to edit in %s", e.Data)
			}
			log[i].Data = json.RawMessage(edited)
		}
	}
	if _, err := Verify(log); !errors.As(err, &div) || div.Recorded.Type != events.ModelCompleted {
		t.Fatalf("verify of an edited count: %v, want a divergence at model.completed", err)
	}
}
