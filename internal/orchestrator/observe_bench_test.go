package orchestrator

import (
	"context"
	"encoding/json"
	"fmt"
	"testing"
	"time"

	"github.com/jetloop/jetloop/internal/events"
	"github.com/jetloop/jetloop/internal/fsm"
	"github.com/jetloop/jetloop/internal/metrics"
	"github.com/jetloop/jetloop/internal/model"
)

// decided is one decision of a turn and the state it was decided on.
type decided struct {
	before *fsm.State
	d      fsm.Decision
}

// benchTurn decides a turn of steps steps, each an echo call, through the
// pure machine, and returns every decision with the state before it.
func benchTurn(b *testing.B, steps int) ([]decided, int) {
	b.Helper()
	echo := events.ToolSpec{Name: "echo", Parameters: json.RawMessage(`{"type":"object"}`)}
	var in fsm.Input = fsm.Start{TurnID: "bench", SessionID: "bench", Input: []events.Message{{Role: events.RoleUser, Content: "go"}}, Setup: fsm.Setup{Agent: "Bench", Model: "script", Limits: fsm.EffectiveLimits(nil, 1000, 0, 0, nil), Tools: []events.ToolSpec{echo}}}
	st := fsm.New("bench")
	var out []decided
	for !st.Done() {
		d, err := fsm.Decide(st, in, env())
		if err != nil {
			b.Fatal(err)
		}
		out = append(out, decided{st, d})
		st = d.State
		if st.Done() {
			break
		}
		j := fsm.Jobs(st)[0]
		switch {
		case j.Model != nil && j.Model.Step < steps:
			in = fsm.ModelAnswer{TurnID: "bench", Step: j.Model.Step, Kind: j.Model.Kind, FinishReason: "tool_calls",
				ToolCalls: []events.ToolCall{{CallID: fmt.Sprintf("c%d", j.Model.Step), Name: "echo", Arguments: json.RawMessage(`{"text":"hi"}`)}},
				Usage:     events.Usage{InputTokens: 100, OutputTokens: 10}, Attempts: 1}
		case j.Model != nil:
			in = fsm.ModelAnswer{TurnID: "bench", Step: j.Model.Step, Kind: j.Model.Kind, Text: "done", FinishReason: "stop",
				Usage: events.Usage{InputTokens: 100, OutputTokens: 10}, Attempts: 1}
		default:
			in = fsm.ToolAnswer{TurnID: "bench", CallID: j.Tool.CallID, Tool: "echo", Output: "hi", Worker: "w", Attempt: 1}
		}
	}
	return out, steps
}

// BenchmarkObserveStep is what metrics add to one step of a turn in the
// orchestrator: every decision observed, one model call and the inputs
// counted. With metrics off it is the nil checks alone.
func BenchmarkObserveStep(b *testing.B) {
	turn, steps := benchTurn(b, 10)
	job := &events.ModelJob{TurnID: "bench", Model: "script"}
	resp := model.Response{FinishReason: "stop", Usage: events.Usage{InputTokens: 100, OutputTokens: 10}}
	for _, on := range []bool{false, true} {
		b.Run(fmt.Sprintf("metrics=%v", on), func(b *testing.B) {
			o := &observer{providers: map[string]model.Provider{"script": model.Scripted{}}}
			if on {
				o.metrics = metrics.New()
				o.metrics.KnowAgents("Bench")
			}
			ctx := context.Background()
			began := time.Now()
			b.ReportAllocs()
			for b.Loop() {
				for _, x := range turn {
					o.observe(x.before, x.d)
				}
				for range steps {
					o.observeModelCall(ctx, ctx, job, 1, began, resp, nil)
					o.countInput("model", nil, 1)
					o.countInput("result", nil, 1)
				}
			}
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*steps), "ns/step")
		})
	}
}
