package bench

import (
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/jetloop/jetloop/internal/events"
	"github.com/jetloop/jetloop/internal/fsm"
	"github.com/jetloop/jetloop/internal/testkit"
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
		BytesPerPausedTurn: 4096, ReplayEventsPerS: 300_000, RecoveryS: 1,
		Tenancy: &Tenancy{IdleTurnP50Ms: 100, FloodTurnP50Ms: 190, RolesIdleP50Ms: []float64{100, 90, 110}, RolesTurnP50Ms: []float64{115, 200, 110}}}
	for _, tg := range r.targets() {
		if !tg.met {
			t.Errorf("%s: not met by %s", tg.what, tg.got)
		}
	}
	target := func(prefix string) target {
		for _, tg := range r.targets() {
			if strings.HasPrefix(tg.what, prefix) {
				return tg
			}
		}
		t.Fatalf("no target %q", prefix)
		return target{}
	}
	r.TurnsLost = 1
	if target("recovery").met {
		t.Errorf("recovery met with a turn lost")
	}
	r.Tenancy.FloodTurnP50Ms = 201
	if target("a tenant's turns under another's flood").met {
		t.Errorf("a tenant's turns met at %s", target("a tenant's turns under another's flood").got)
	}
	r.Tenancy.RolesTurnP50Ms[0] = 121 // ratios 1.21, 2.2, 1
	if tg := target("a tenant's turns under another's untrusted roles"); tg.met {
		t.Errorf("a tenant's turns under the roles met at %s", tg.got)
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
			strings.HasPrefix(line, "deployed shape"), strings.HasPrefix(line, "workflow cost per task"),
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
	for _, k := range []string{"step_overhead_p50_ms", "steps_per_s", "recovery_s", "turns_lost", "bytes_per_paused_turn", "hop_floor_p50_ms",
		"workflow", "deployed"} {
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

// TestWorkflowCostMeasuresEveryTask runs the in-process workflow phase: every
// task's turn is read and checked, and the figures are in order.
func TestWorkflowCostMeasuresEveryTask(t *testing.T) {
	b := &run{cfg: Config{}, log: discard()}
	if err := b.workflow(context.Background(), sizes{workflowTasks: 4}); err != nil {
		t.Fatal(err)
	}
	c := b.res.Workflow
	if c == nil || c.Tasks != 4 {
		t.Fatalf("workflow figures %+v, want 4 tasks", c)
	}
	if c.GapP50Ms <= 0 || c.GapP99Ms < c.GapP50Ms || c.TurnP50Ms <= 0 || c.OverheadMs <= 0 {
		t.Fatalf("figures out of order: %+v", c)
	}
}

// TestDeployedShape runs the deployed shape in its smallest form: the
// processes built from this module as make bench builds them, a
// nats-server with the repository's nats.conf, streams applied with each
// jobs storage, a few turns one at a time and a few in flight, a workflow
// of three tasks, and profiles of the three processes. It keeps jetloop
// bench --deployed from rotting.
func TestDeployedShape(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and starts the binaries")
	}
	profiles := t.TempDir()
	b := &run{cfg: Config{ProfileDir: profiles, Progress: testkit.Writer(t), Bin: buildDeployed(t)}, log: discard()}
	sz := sizes{overheadTurns: 2, overheadSteps: 4, throughputTurns: 6, steps: 3, concurrency: []int{3},
		workflowTasks: 3, profileFor: time.Second, floorSamples: 20}
	if err := b.deployed(context.Background(), sz); err != nil {
		t.Fatal(err)
	}
	if len(b.res.Deployed) != len(syncModes)*len(jobsStorages) {
		t.Fatalf("%d variants measured, want %d", len(b.res.Deployed), len(syncModes)*len(jobsStorages))
	}
	for i, d := range b.res.Deployed {
		if d.Sync != syncModes[i/len(jobsStorages)] || d.JobsStorage != jobsStorages[i%len(jobsStorages)] {
			t.Errorf("variant %d is %s", i, d.label())
		}
		if d.PublishFloorP50Ms <= 0 || d.PublishFloorP99Ms < d.PublishFloorP50Ms {
			t.Errorf("%s: publish floor p50 %.3f, p99 %.3f", d.JobsStorage, d.PublishFloorP50Ms, d.PublishFloorP99Ms)
		}
		if d.StepSamples != 2*3 || d.StepP50Ms <= 0 || d.StepP99Ms < d.StepP50Ms {
			t.Errorf("%s: sequential steps %d (want 6), p50 %.3f, p99 %.3f", d.JobsStorage, d.StepSamples, d.StepP50Ms, d.StepP99Ms)
		}
		if len(d.Wire) != 3 || d.Wire[0].Process != "orchestrator" || d.Wire[0].SentMsgs <= 0 || d.Wire[1].ReceivedBytes <= 0 {
			t.Errorf("%s: wire per step %+v", d.JobsStorage, d.Wire)
		}
		tp, ok := d.at(3)
		if !ok || tp.Unfinished != 0 || tp.Steps != 6*3 || tp.StepsPerS <= 0 {
			t.Errorf("%s: throughput %+v, want 18 steps, all finished", d.JobsStorage, tp)
		}
		cpu := tp.CPUSPerStep
		if cpu.Server < 0 || cpu.Orchestrator < 0 || cpu.Toolworker < 0 || cpu.Driver < 0 {
			t.Errorf("%s: negative CPU time: %+v", d.JobsStorage, cpu)
		}
		if d.Workflow == nil || d.Workflow.Tasks != 3 || d.Workflow.GapP50Ms <= 0 || d.Workflow.EndP50Ms <= 0 {
			t.Errorf("%s: workflow %+v", d.JobsStorage, d.Workflow)
		}
		for _, proc := range []string{"nats-server", "orchestrator", "toolworker"} {
			path := filepath.Join(profiles, "deployed-"+d.Sync+"-"+d.JobsStorage+"-c3-"+proc+".cpu.pprof")
			if fi, err := os.Stat(path); err != nil || fi.Size() == 0 {
				t.Errorf("no profile of the %s: %v", proc, err)
			}
		}
	}
	b.res.Phases = []string{"deployed"}
	var table strings.Builder
	b.res.Table(&table)
	for _, want := range []string{"deployed shape", "jobs file", "jobs memory", "sequential step p50 ≤ 1.5 ms"} {
		if !strings.Contains(table.String(), want) {
			t.Errorf("the table lacks %q:\n%s", want, table.String())
		}
	}
}

// buildDeployed builds the deployed shape's binaries as make bench does,
// into a directory of the test's, and returns it.
func buildDeployed(t *testing.T) string {
	t.Helper()
	dir := t.TempDir()
	cmd := exec.Command("go", "build", "-tags", "grpcnotrace", "-o", dir+string(filepath.Separator),
		"github.com/jetloop/jetloop/cmd/orchestrator", "github.com/jetloop/jetloop/cmd/toolworker",
		"github.com/jetloop/jetloop/cmd/jetloop", "github.com/nats-io/nats-server/v2")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	return dir
}

// TestFindPrograms: the deployed shape runs what it finds in --bin and
// builds nothing; a missing binary is an error that says how to build it.
func TestFindPrograms(t *testing.T) {
	dir := t.TempDir()
	for _, name := range deployedPrograms[:2] {
		if err := os.WriteFile(filepath.Join(dir, name), []byte("#!/bin/sh\n"), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	b := &run{cfg: Config{Bin: dir}, log: discard()}
	_, err := b.findPrograms()
	if err == nil || !strings.Contains(err.Error(), deployedPrograms[2]) || !strings.Contains(err.Error(), "make bench") {
		t.Fatalf("with %s missing: %v", deployedPrograms[2], err)
	}
	for _, name := range deployedPrograms[2:] {
		if err := os.WriteFile(filepath.Join(dir, name), []byte("#!/bin/sh\n"), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	found, err := b.findPrograms()
	if err != nil {
		t.Fatal(err)
	}
	for _, name := range deployedPrograms {
		if want := filepath.Join(dir, name); found[name] != want {
			t.Errorf("%s: %q, want %q", name, found[name], want)
		}
	}
}
