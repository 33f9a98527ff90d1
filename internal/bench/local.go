package bench

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"time"

	"github.com/google/uuid"
	"github.com/jetloop/jetloop/internal/events"
	"github.com/jetloop/jetloop/internal/fsm"
	"github.com/jetloop/jetloop/internal/model"
	"github.com/jetloop/jetloop/internal/tools"
)

// local drives turns through the pure machine in memory, the way an
// in-process agent loop would: the same Decide, Jobs, scripted model and echo
// tool, no NATS, no log written anywhere.
type local struct {
	echo  tools.Tool
	specs []events.ToolSpec
}

func newLocal() (*local, error) {
	builtins, err := tools.Builtins(os.TempDir(), false)
	if err != nil {
		return nil, err
	}
	for _, t := range builtins {
		if t.Spec().Name == "echo" {
			return &local{echo: t, specs: []events.ToolSpec{fsm.AskUserSpec, t.Spec()}}, nil
		}
	}
	return nil, fmt.Errorf("bench: no echo tool")
}

func localEnv() fsm.Env {
	return fsm.Env{Now: time.Now().UTC(), NewID: func() string { return uuid.Must(uuid.NewV7()).String() }}
}

// turn runs one turn of k steps to its end and returns its log; stepped is
// called each time a step starts.
func (l *local) turn(turn string, k int, stepped func()) ([]events.Envelope, error) {
	raw, err := json.Marshal(script(turn, k, 0))
	if err != nil {
		return nil, err
	}
	limits := fsm.EffectiveLimits(nil, 1000, 0, 0, nil)
	st := fsm.New(turn)
	var log []events.Envelope
	var in fsm.Input = fsm.Start{TurnID: turn, SessionID: turn, Input: []events.Message{{Role: events.RoleUser, Content: "Echo a few things, then answer."}}, Setup: fsm.Setup{Agent: "Bench", Model: "script", System: "You are the benchmark agent.", Limits: limits, Tools: l.specs, Script: raw}}
	for {
		d, err := fsm.Decide(st, in, localEnv())
		if err != nil {
			return nil, err
		}
		st = d.State
		log = append(log, d.Events...)
		for _, e := range d.Events {
			if e.Type == events.StepStarted && stepped != nil {
				stepped()
			}
		}
		if st.Done() {
			return log, nil
		}
		jobs := fsm.Jobs(st)
		if len(jobs) != 1 {
			return nil, fmt.Errorf("bench: turn %s waits on %d jobs", turn, len(jobs))
		}
		if in, err = l.do(jobs[0]); err != nil {
			return nil, err
		}
	}
}

// do performs a job the way a model runner or a tool worker would, minus
// the wire.
func (l *local) do(j fsm.Job) (fsm.Input, error) {
	ctx := context.Background()
	if j.Model != nil {
		job := j.Model
		sc := new(model.Script)
		if err := json.Unmarshal(job.Script, sc); err != nil {
			return nil, err
		}
		began := time.Now()
		resp, err := model.Scripted{}.Call(ctx, model.Request{TurnID: job.TurnID, Step: job.Step, Kind: job.Kind,
			System: job.System, Messages: job.Messages, Tools: job.Tools, Script: sc, ScriptIndex: job.ScriptIndex, Attempt: 1},
			func(string) {})
		if err != nil {
			return nil, err
		}
		return fsm.ModelAnswer{TurnID: job.TurnID, Step: job.Step, Kind: job.Kind, Text: resp.Text,
			ToolCalls: resp.ToolCalls, FinishReason: resp.FinishReason, Usage: resp.Usage,
			DurationMs: time.Since(began).Milliseconds(), Attempts: 1}, nil
	}
	job := j.Tool
	began := time.Now()
	res, err := l.echo.Call(ctx, job.Arguments)
	if err != nil {
		return nil, err
	}
	return fsm.ToolAnswer{TurnID: job.TurnID, CallID: job.CallID, Tool: job.Tool, Output: res.Output,
		DurationMs: time.Since(began).Milliseconds(), Worker: "local", Attempt: 1}, nil
}

// local measures the in-process baseline: the time of a step, from one
// step.started to the next, with everything in memory.
func (b *run) local(ctx context.Context, sz sizes) error {
	l, err := newLocal()
	if err != nil {
		return err
	}
	var steps []time.Duration
	for i := range sz.localTurns {
		var last time.Time
		n := 0
		_, err := l.turn(fmt.Sprintf("local-%d", i), sz.steps+1, func() {
			now := time.Now()
			// Only steps that call the tool, as in the step overhead.
			if n > 0 && n < sz.steps {
				steps = append(steps, now.Sub(last))
			}
			last = now
			n++
		})
		if err != nil {
			return err
		}
		if ctx.Err() != nil {
			return ctx.Err()
		}
	}
	b.res.InprocessStepP50Ms, b.res.InprocessStepP99Ms = ms(percentile(steps, 0.5)), ms(percentile(steps, 0.99))
	return nil
}

// replay folds a long turn's log, as jetloop replay does: each event decoded
// from its stored JSON and applied to the state, the whole log again and
// again for a while.
func (b *run) replay(ctx context.Context, sz sizes) error {
	l, err := newLocal()
	if err != nil {
		return err
	}
	log, err := l.turn("replay", sz.replaySteps, nil)
	if err != nil {
		return err
	}
	lines := make([][]byte, len(log))
	for i, e := range log {
		if lines[i], err = json.Marshal(e); err != nil {
			return err
		}
	}
	b.res.ReplayEvents = len(log)

	folded := 0
	began := time.Now()
	for time.Since(began) < sz.replayFor {
		st := fsm.New("")
		for _, line := range lines {
			var e events.Envelope
			if err := events.DecodeEnvelope(line, &e); err != nil {
				return err
			}
			if err := fsm.Evolve(st, e); err != nil {
				return err
			}
		}
		folded += len(lines)
	}
	b.res.ReplayEventsPerS = float64(folded) / time.Since(began).Seconds()

	folded = 0
	began = time.Now()
	for time.Since(began) < sz.replayFor {
		if _, err := fsm.Fold(log); err != nil {
			return err
		}
		folded += len(log)
	}
	b.res.FoldEventsPerS = float64(folded) / time.Since(began).Seconds()
	return ctx.Err()
}
