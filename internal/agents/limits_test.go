package agents

import (
	"encoding/json"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"github.com/jetloop/jetloop/internal/events"
	"github.com/jetloop/jetloop/internal/fsm"
)

// TestStepCapOnTheRuntimePath follows an agent's steps from its AGENTS.md to
// the turn the orchestrator starts: Load, then fsm.EffectiveLimits called
// exactly as runtime's resolve calls it, then the limits turn.started
// records. The parser keeps what the file says; the ceiling MAX_STEPS = 200
// is applied on this path, so it is tested here and not only by StepCap.
func TestStepCapOnTheRuntimePath(t *testing.T) {
	tests := []struct {
		name   string
		steps  string         // the steps line; "" leaves steps unset
		submit *events.Limits // the submission's limits
		want   int            // the effective step cap
		warns  int            // diagnostics Load reports
	}{
		{name: "steps: 250 is capped at 200", steps: "steps: 250", want: fsm.MaxSteps},
		{name: "steps: 250 stays 200 when the submission asks for more", steps: "steps: 250",
			submit: &events.Limits{Steps: intp(300)}, want: fsm.MaxSteps},
		{name: "steps: 250 with a submission that tightens it", steps: "steps: 250",
			submit: &events.Limits{Steps: intp(10)}, want: 10},
		{name: "steps: 200 is the ceiling itself", steps: "steps: 200", want: 200},
		{name: "unset steps leave only the ceiling", steps: "", want: fsm.MaxSteps},
		{name: "a negative steps is a warning and text only", steps: "steps: -1", want: 0, warns: 1},
		{name: "a non-integer steps is a warning and text only", steps: "steps: 2.5", want: 0, warns: 1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			// given an AGENTS.md file with the steps line
			dir := write(t, map[string]string{"AGENTS.md": "---\nname: A\nmodel: script\n" + tt.steps + "\n---\nYou are A.\n"})
			set, diags, err := Load(filepath.Join(dir, "AGENTS.md"))
			if err != nil {
				t.Fatalf("Load: %v", err)
			}
			if len(diags) != tt.warns {
				t.Fatalf("diagnostics %q, want %d", strs(diags), tt.warns)
			}
			a, ok := set.Get("A")
			if !ok {
				t.Fatal("agent A not loaded")
			}

			// when the orchestrator resolves a submission of it (runtime's
			// resolve: fsm.EffectiveLimits(a.Steps, a.Budget, a.Timeout,
			// a.DoomLoop, sub.Limits)) and the machine starts the turn
			limits := fsm.EffectiveLimits(a.Steps, a.Budget, a.Timeout, a.DoomLoop, tt.submit)
			n := 0
			env := fsm.Env{Now: time.Date(2026, 11, 22, 10, 0, 0, 0, time.UTC), NewID: func() string { n++; return "ev-" + strconv.Itoa(n) }}
			d, err := fsm.Decide(fsm.New("t1"), fsm.Start{TurnID: "t1", SessionID: "t1", Input: []events.Message{{Role: events.RoleUser, Content: "hi"}}, Setup: fsm.Setup{Agent: a.Name, Model: a.Model, System: a.Prompt, Limits: limits}}, env)
			if err != nil {
				t.Fatalf("Decide: %v", err)
			}

			// then the effective cap, the state's and turn.started's all say want
			if limits.Steps != tt.want {
				t.Errorf("EffectiveLimits(...).Steps = %d, want %d", limits.Steps, tt.want)
			}
			if d.State.Limits.Steps != tt.want {
				t.Errorf("the turn's state has step cap %d, want %d", d.State.Limits.Steps, tt.want)
			}
			if len(d.Events) == 0 || d.Events[0].Type != events.TurnStarted {
				t.Fatalf("first event is not turn.started: %v", d.Events)
			}
			var started events.TurnStartedData
			if err := json.Unmarshal(d.Events[0].Data, &started); err != nil {
				t.Fatal(err)
			}
			if started.Limits.Steps == nil || *started.Limits.Steps != tt.want {
				t.Errorf("turn.started limits.steps = %v, want %d", deref2(started.Limits.Steps), tt.want)
			}
			// Budget and doom loop come out as the defaults: the file sets neither.
			if limits.Budget != fsm.DefaultBudget || limits.DoomLoop != fsm.DefaultDoomLoop {
				t.Errorf("limits %+v, want the default budget and doom loop", limits)
			}
		})
	}
}
