package bench

import (
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/jetloop/jetloop/internal/events"
	"github.com/jetloop/jetloop/internal/fsm"
)

// TestLocalTurnIsARealTurn: the in-process baseline drives the same machine
// to the same kind of log the orchestrator writes, one that verifies.
func TestLocalTurnIsARealTurn(t *testing.T) {
	l, err := newLocal()
	if err != nil {
		t.Fatal(err)
	}
	starts := 0
	log, err := l.turn("t-local", 5, func() { starts++ })
	if err != nil {
		t.Fatal(err)
	}
	if err := checkLog(log); err != nil {
		t.Fatal(err)
	}
	st, _ := fsm.Fold(log)
	if st.Step != 5 || st.Used != 4 || starts != 5 {
		t.Fatalf("steps %d, tool calls %d, starts seen %d; want 5, 4, 5", st.Step, st.Used, starts)
	}
}

// TestOverheadMeasuresEveryToolStep runs the step-overhead phase on a real
// server: every tool step of every turn is measured, and every log checks.
func TestOverheadMeasuresEveryToolStep(t *testing.T) {
	b := &run{cfg: Config{}, log: discard()}
	sz := sizes{overheadTurns: 2, overheadSteps: 4}
	if err := b.overhead(context.Background(), sz); err != nil {
		t.Fatal(err)
	}
	if got, want := b.res.StepOverheadSamples, 2*3; got != want {
		t.Fatalf("%d steps measured, want %d", got, want)
	}
	if b.res.StepOverheadP50Ms <= 0 || b.res.StepOverheadP99Ms < b.res.StepOverheadP50Ms || b.res.StepTotalP50Ms < b.res.StepOverheadP50Ms {
		t.Fatalf("figures out of order: %+v", b.res)
	}
}

func TestPercentile(t *testing.T) {
	var ds []time.Duration
	for i := 100; i >= 1; i-- {
		ds = append(ds, time.Duration(i))
	}
	if p50, p99, p100 := percentile(ds, 0.5), percentile(ds, 0.99), percentile(ds, 1); p50 != 50 || p99 != 99 || p100 != 100 {
		t.Fatalf("p50 %d p99 %d p100 %d", p50, p99, p100)
	}
	if percentile(nil, 0.5) != 0 {
		t.Fatal("percentile of nothing")
	}
}

func TestTargetsJudgeTheFigures(t *testing.T) {
	r := &Result{StepOverheadP50Ms: 0.9, OverheadPerHop: 2, StepOverheadP99Ms: 4, StepsPerS: 2500,
		BytesPerPausedTurn: 4096, ReplayEventsPerS: 300_000, RecoveryS: 1}
	for _, tg := range r.targets() {
		if !tg.met {
			t.Errorf("%s: not met by %s", tg.what, tg.got)
		}
	}
	r.TurnsLost = 1
	if tg := r.targets()[6]; tg.met {
		t.Errorf("recovery met with a turn lost")
	}
}

// BenchmarkReplay decodes and folds a 200-step turn's log, as the replay
// figure does; go test -bench Replay -cpuprofile shows where a fold goes.
func BenchmarkReplay(b *testing.B) {
	l, err := newLocal()
	if err != nil {
		b.Fatal(err)
	}
	log, err := l.turn("replay", 200, nil)
	if err != nil {
		b.Fatal(err)
	}
	lines := make([][]byte, len(log))
	for i, e := range log {
		lines[i], _ = json.Marshal(e)
	}
	b.ResetTimer()
	for b.Loop() {
		st := fsm.New("")
		for _, line := range lines {
			var e events.Envelope
			if err := events.DecodeEnvelope(line, &e); err != nil {
				b.Fatal(err)
			}
			if err := fsm.Evolve(st, e); err != nil {
				b.Fatal(err)
			}
		}
	}
	b.ReportMetric(float64(len(lines)*b.N)/b.Elapsed().Seconds(), "events/s")
}

// TestOnlyLeavesOtherFiguresUnmeasured: a run of some phases prints the
// figures of the others as "not measured" and gives them as null in JSON,
// never as a 0 that would pass or fail a target.
func TestOnlyLeavesOtherFiguresUnmeasured(t *testing.T) {
	r := &Result{Phases: []string{"replay"}, ReplayEventsPerS: 250_000, ReplayEvents: 1000}
	var table strings.Builder
	r.Table(&table)
	for _, line := range strings.Split(table.String(), "\n") {
		switch {
		case strings.HasPrefix(line, "replay ≥"):
			if !strings.Contains(line, "yes") {
				t.Errorf("replay target not judged: %q", line)
			}
		case strings.HasPrefix(line, "step overhead p50 ≤ 1 ms"), strings.HasPrefix(line, "≥ 2,000 steps/s"),
			strings.HasPrefix(line, "recovery ≤"), strings.HasPrefix(line, "step overhead p50  "),
			strings.HasPrefix(line, "memory per paused turn"):
			if !strings.Contains(line, notMeasured) || strings.Contains(line, "yes") {
				t.Errorf("a figure of a phase not run reads as measured: %q", line)
			}
		}
	}
	var out strings.Builder
	if err := r.JSON(&out); err != nil {
		t.Fatal(err)
	}
	var got map[string]any
	if err := json.Unmarshal([]byte(out.String()), &got); err != nil {
		t.Fatalf("%v: %s", err, out.String())
	}
	for _, k := range []string{"step_overhead_p50_ms", "steps_per_s", "recovery_s", "turns_lost", "bytes_per_paused_turn", "hop_floor_p50_ms"} {
		if v, ok := got[k]; !ok || v != nil {
			t.Errorf("%s = %v (present %v), want null", k, v, ok)
		}
	}
	if got["replay_events_per_s"] != 250_000.0 || got["cpus"] == nil {
		t.Errorf("measured figures lost: replay %v, cpus %v", got["replay_events_per_s"], got["cpus"])
	}
	if !strings.HasPrefix(out.String(), `{"step_overhead_p50_ms":null,`) {
		t.Errorf("keys out of order: %.60s", out.String())
	}
}
