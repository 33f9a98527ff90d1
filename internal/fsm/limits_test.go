package fsm

import (
	"encoding/json"
	"reflect"
	"slices"
	"testing"

	"github.com/jetloop/jetloop/internal/events"
)

// TestTextOnlyTurnWarnsAndRunsNoCalls: a steps: 0 turn is one model call
// and one step. Tool calls the model returns anyway are ignored: the
// decision warns about them, none is requested, completed or dispatched, and
// the turn finishes completed with the model's text.
func TestTextOnlyTurnWarnsAndRunsNoCalls(t *testing.T) {
	// The limits of an agent with steps: 0, as the orchestrator resolves them.
	textOnly := func(s *Start) { s.Limits = EffectiveLimits(intp(0), 0, 0, 0, nil) }
	tests := []struct {
		name     string
		when     ModelAnswer
		then     []string
		warnings []string
		asked    int // tool calls model.completed records
	}{
		{
			name:     "tool calls the model returns are ignored with a warning",
			when:     answer(1, "just text", echo("a", "1"), call("b", "write_file", `{"path":"x"}`)),
			then:     []string{"model.completed", "step.checked:stop/completed", "turn.finished:completed"},
			warnings: []string{"text-only turn: ignored 2 tool call(s) the model returned"},
			asked:    2,
		},
		{
			name: "an answer without tool calls warns nothing",
			when: answer(1, "just text"),
			then: []string{"model.completed", "step.checked:stop/completed", "turn.finished:completed"},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			// given a started steps: 0 turn
			c := &clock{now: t0}
			s, log := feed(t, c, start(textOnly))
			if s.Limits.Steps != 0 || len(s.Tools) != 0 {
				t.Fatalf("given: limits %+v, tools %v: not a text-only turn", s.Limits, names(s.Tools))
			}

			// when the model answers
			d, err := Decide(s, tt.when, c.env())
			if err != nil {
				t.Fatal(err)
			}
			log = append(log, d.Events...)

			// then the warning, and the turn finishes after one step
			if !slices.Equal(d.Warnings, tt.warnings) {
				t.Errorf("warnings %q, want %q", d.Warnings, tt.warnings)
			}
			if got := shows(d.Events); !reflect.DeepEqual(got, tt.then) {
				t.Fatalf("then\n got  %q\n want %q", got, tt.then)
			}
			for _, e := range log {
				if e.Type == events.ToolRequested || e.Type == events.ToolCompleted {
					t.Fatalf("a text-only turn wrote %s: %s", e.Type, e.Data)
				}
			}
			// model.completed shows what was asked; nothing else runs it.
			var mc events.ModelCompletedData
			if err := json.Unmarshal(d.Events[0].Data, &mc); err != nil {
				t.Fatal(err)
			}
			if len(mc.ToolCalls) != tt.asked {
				t.Errorf("model.completed records %d tool calls, want %d", len(mc.ToolCalls), tt.asked)
			}
			if jobs := Jobs(d.State); len(jobs) != 0 {
				t.Errorf("a finished text-only turn has jobs: %+v", jobs)
			}
			f := finished(t, log)
			want := events.Metrics{Steps: 1, ToolCalls: 0, ModelCalls: 1}
			if f.StopReason != events.StopCompleted || f.Output != "just text" ||
				f.Metrics.Steps != want.Steps || f.Metrics.ToolCalls != want.ToolCalls || f.Metrics.ModelCalls != want.ModelCalls {
				t.Fatalf("finished %s with %q, metrics %+v; want completed with %q after 1 step, 0 tool calls, 1 model call",
					f.StopReason, f.Output, f.Metrics, "just text")
			}
			checkFold(t, log, d.State)
		})
	}
}
