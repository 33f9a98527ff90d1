package bench

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	goruntime "runtime"
	"runtime/debug"
	"slices"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/jetloop/jetloop/internal/metrics"
)

// Config says how big a run is and how to start an orchestrator process.
type Config struct {
	// Quick shrinks every workload so the whole run takes under two minutes.
	Quick bool
	// Child is the command that runs an orchestrator process: Child plus
	// "--orchestrator URL --agents FILE" (jetloop bench, re-executed).
	Child []string
	// ChildLog receives the orchestrator processes' logs.
	ChildLog io.Writer
	// ProfileDir, when set, receives CPU and allocation profiles of the
	// orchestrator process of each throughput run.
	ProfileDir string
	// Progress receives one line per phase as the run goes.
	Progress io.Writer
	// Log is the logger of the in-process components.
	Log *slog.Logger
	// Only, when not empty, names the phases to run (floor, overhead,
	// local, replay, throughput, memory, recovery, workflow, deployed,
	// tenants, cluster).
	Only []string
	// Metrics records metrics in every orchestrator and tool worker, as
	// --metrics-addr does (nothing scrapes them): the cost of metrics.
	Metrics bool
	// Deployed also measures the deployed shape (phase "deployed"): a
	// nats-server process, an orchestrator process and a toolworker
	// process, driven by this process, with the configuration of the
	// checkout it runs in (nats.conf, deploy/); with it the multi-tenant
	// deployment (phase "tenants") and the 3-node cluster ("cluster").
	Deployed bool
	// Bin is the directory of the deployed shape's binaries (nats-server,
	// orchestrator, toolworker, jetloop). Empty: beside the running
	// executable, then on $PATH. The bench builds nothing.
	Bin string
	// EventStreams is how many streams the deployed shapes' logs are in
	// (jetloop streams apply --event-streams); 0 is the default layout.
	EventStreams int
}

// Throughput is one run of N turns of K steps at concurrency C.
type Throughput struct {
	Turns       int     `json:"turns"`
	Steps       int     `json:"steps"`
	Concurrency int     `json:"concurrency"`
	Seconds     float64 `json:"seconds"`
	StepsPerS   float64 `json:"steps_per_s"`
	TurnsPerS   float64 `json:"turns_per_s"`
	CPUSPerStep float64 `json:"cpu_s_per_step"`
	// OtherCPUSPerStep is the benchmark process's CPU per step: the
	// server, the tool worker and the driver.
	OtherCPUSPerStep float64 `json:"other_cpu_s_per_step"`
	Unfinished       int     `json:"unfinished"`
}

// Result is every figure of a run. The headline figures come first: runs
// are compared across commits with them.
type Result struct {
	StepOverheadP50Ms  float64 `json:"step_overhead_p50_ms"`
	StepOverheadP99Ms  float64 `json:"step_overhead_p99_ms"`
	HopFloorP50Ms      float64 `json:"hop_floor_p50_ms"`
	PublishFloorP50Ms  float64 `json:"publish_floor_p50_ms"`
	InprocessStepP50Ms float64 `json:"inprocess_step_p50_ms"`
	StepsPerS          float64 `json:"steps_per_s"`
	CPUSPerStep        float64 `json:"cpu_s_per_step"`
	BytesPerPausedTurn float64 `json:"bytes_per_paused_turn"`
	ReplayEventsPerS   float64 `json:"replay_events_per_s"`
	RecoveryS          float64 `json:"recovery_s"`
	TurnsLost          int     `json:"turns_lost"`

	StepOverheadSamples int          `json:"step_overhead_samples"`
	StepTotalP50Ms      float64      `json:"step_total_p50_ms"`
	StepTotalP99Ms      float64      `json:"step_total_p99_ms"`
	OverheadPerHop      float64      `json:"step_overhead_per_hop_floor"`
	HopFloorP99Ms       float64      `json:"hop_floor_p99_ms"`
	PublishFloorP99Ms   float64      `json:"publish_floor_p99_ms"`
	InprocessStepP99Ms  float64      `json:"inprocess_step_p99_ms"`
	DurabilityRatio     float64      `json:"durability_ratio"`
	TurnsPerS           float64      `json:"turns_per_s"`
	Throughput          []Throughput `json:"throughput"`
	PausedTurns         int          `json:"paused_turns"`
	RSSBeforeBytes      int64        `json:"rss_before_bytes"`
	RSSPausedBytes      int64        `json:"rss_paused_bytes"`
	ReplayEvents        int          `json:"replay_log_events"`
	FoldEventsPerS      float64      `json:"fold_events_per_s"`
	RecoveryTurns       int          `json:"recovery_turns"`
	LogsBroken          int          `json:"logs_broken"`
	// Workflow is the outer loop's cost per task in one process.
	Workflow *WorkflowCost `json:"workflow"`
	// Deployed is the deployed shape, once per storage of the jobs stream.
	Deployed []Deployed `json:"deployed"`
	// Tenancy is the multi-tenant deployment.
	Tenancy *Tenancy `json:"tenancy"`
	// Cluster is the deployed shape on a 3-node cluster.
	Cluster *Cluster `json:"cluster"`

	Quick     bool      `json:"quick"`
	GoVersion string    `json:"go_version"`
	NATS      string    `json:"nats_server"`
	CPUs      int       `json:"cpus"`
	Started   time.Time `json:"started"`
	Seconds   float64   `json:"seconds"`
	// Phases names the phases that ran. The figures of the others are not
	// measured: the table says so and JSON gives them as null, never 0.
	Phases []string `json:"phases"`
}

// phaseKeys names, for each phase, the JSON keys of the figures it
// measures. A key listed under two phases needs both.
var phaseKeys = map[string][]string{
	"floor": {"hop_floor_p50_ms", "publish_floor_p50_ms", "hop_floor_p99_ms", "publish_floor_p99_ms",
		"step_overhead_per_hop_floor"},
	"overhead": {"step_overhead_p50_ms", "step_overhead_p99_ms", "step_overhead_samples", "step_total_p50_ms",
		"step_total_p99_ms", "step_overhead_per_hop_floor", "durability_ratio"},
	"local":      {"inprocess_step_p50_ms", "inprocess_step_p99_ms", "durability_ratio"},
	"throughput": {"steps_per_s", "cpu_s_per_step", "turns_per_s", "throughput"},
	"memory":     {"bytes_per_paused_turn", "paused_turns", "rss_before_bytes", "rss_paused_bytes"},
	"replay":     {"replay_events_per_s", "replay_log_events", "fold_events_per_s"},
	"recovery":   {"recovery_s", "turns_lost", "recovery_turns", "logs_broken"},
	"workflow":   {"workflow"},
	"deployed":   {"deployed"},
	"tenants":    {"tenancy"},
	"cluster":    {"cluster"},
}

// ran reports whether every phase named ran.
func (r *Result) ran(phases ...string) bool {
	for _, p := range phases {
		if !slices.Contains(r.Phases, p) {
			return false
		}
	}
	return true
}

// unmeasured lists the JSON keys whose figures no phase of the run measured.
func (r *Result) unmeasured() map[string]bool {
	out := map[string]bool{}
	for p, keys := range phaseKeys {
		if !r.ran(p) {
			for _, k := range keys {
				out[k] = true
			}
		}
	}
	return out
}

// phase is one part of a run.
type phase struct {
	name string
	do   func(context.Context, sizes) error
}

// run is one benchmark run in progress.
type run struct {
	cfg Config
	log *slog.Logger
	res Result
}

// metrics is where a site's components record metrics: nil unless the
// run measures with metrics on.
func (b *run) metrics() *metrics.Metrics {
	if !b.cfg.Metrics {
		return nil
	}
	return metrics.New()
}

// sizes of the workloads.
type sizes struct {
	overheadTurns, overheadSteps int
	floorSamples                 int
	throughputTurns, steps       int
	concurrency                  []int
	paused                       int
	recoveryTurns                int
	replaySteps                  int
	replayFor                    time.Duration
	localTurns                   int
	workflowTasks                int
	// profileFor is how long the deployed shape's processes are profiled
	// at the start of each throughput run, when profiles are asked for.
	profileFor time.Duration
	// floodSubmissions and floodSlow are tenant a's flood; tenancyRounds
	// the alternated single-tenant/tenant rounds of the tenants phase.
	floodSubmissions, floodSlow, tenancyRounds int
	// clusterTurns turns run with clusterConcurrency in flight on the
	// 3-node cluster.
	clusterTurns, clusterConcurrency int
}

func (c Config) sizes() sizes {
	if c.Quick {
		return sizes{overheadTurns: 15, overheadSteps: 11, floorSamples: 500,
			throughputTurns: 200, steps: 10, concurrency: []int{50, 200},
			paused: 2_000, recoveryTurns: 200, replaySteps: 200, replayFor: 300 * time.Millisecond, localTurns: 100,
			workflowTasks: 100, profileFor: 2 * time.Second, floodSubmissions: 5_000, floodSlow: 100, tenancyRounds: 1,
			clusterTurns: 50, clusterConcurrency: 25}
	}
	return sizes{overheadTurns: 50, overheadSteps: 11, floorSamples: 2_000,
		throughputTurns: 1_000, steps: 10, concurrency: []int{50, 200},
		paused: 10_000, recoveryTurns: 200, replaySteps: 200, replayFor: 2 * time.Second, localTurns: 500,
		workflowTasks: 100, profileFor: 5 * time.Second, floodSubmissions: 20_000, floodSlow: 300, tenancyRounds: 3,
		clusterTurns: 200, clusterConcurrency: 50}
}

// runs reports whether the run measures phase: the deployed shape when
// asked for (Deployed, or named in Only), every other phase unless Only
// names others.
func (c Config) runs(phase string) bool {
	if phase == "deployed" {
		return c.Deployed || slices.Contains(c.Only, phase)
	}
	if phase == "tenants" || phase == "cluster" {
		// With --deployed, unless Only names other phases.
		return c.Deployed && len(c.Only) == 0 || slices.Contains(c.Only, phase)
	}
	return len(c.Only) == 0 || slices.Contains(c.Only, phase)
}

// Run measures everything and returns the figures.
func Run(ctx context.Context, cfg Config) (*Result, error) {
	if cfg.Log == nil {
		cfg.Log = discard()
	}
	if cfg.Progress == nil {
		cfg.Progress = io.Discard
	}
	if cfg.ChildLog == nil {
		cfg.ChildLog = io.Discard
	}
	if len(cfg.Child) == 0 {
		return nil, fmt.Errorf("bench: no command to start an orchestrator process")
	}
	if cfg.ProfileDir != "" {
		if err := os.MkdirAll(cfg.ProfileDir, 0o755); err != nil {
			return nil, err
		}
	}
	b := &run{cfg: cfg, log: cfg.Log}
	b.res.Quick, b.res.GoVersion, b.res.CPUs, b.res.Started = cfg.Quick, goruntime.Version(), goruntime.NumCPU(), time.Now().UTC()
	b.res.NATS = natsVersion()
	sz := cfg.sizes()
	phases := []phase{
		{"floor", b.floor},
		{"overhead", b.overhead},
		{"local", b.local},
		{"replay", b.replay},
		{"throughput", b.throughput},
		{"memory", b.memory},
		{"recovery", b.recovery},
		{"workflow", b.workflow},
		{"deployed", b.deployed},
		{"tenants", b.tenancy},
		{"cluster", b.cluster},
	}
	for _, name := range cfg.Only {
		if !slices.ContainsFunc(phases, func(p phase) bool { return p.name == name }) {
			return nil, fmt.Errorf("bench: no phase %q", name)
		}
	}
	for _, p := range phases {
		if !cfg.runs(p.name) {
			continue
		}
		began := time.Now()
		fmt.Fprintf(cfg.Progress, "bench: %s…\n", p.name)
		if err := p.do(ctx, sz); err != nil {
			return &b.res, fmt.Errorf("bench: %s: %w", p.name, err)
		}
		fmt.Fprintf(cfg.Progress, "bench: %s done in %.1fs\n", p.name, time.Since(began).Seconds())
		b.res.Phases = append(b.res.Phases, p.name)
	}
	r := &b.res
	if r.HopFloorP50Ms > 0 {
		r.OverheadPerHop = r.StepOverheadP50Ms / r.HopFloorP50Ms
	}
	if r.InprocessStepP50Ms > 0 {
		r.DurabilityRatio = r.StepOverheadP50Ms / r.InprocessStepP50Ms
	}
	r.Seconds = time.Since(r.Started).Seconds()
	return r, nil
}

func natsVersion() string {
	info, ok := debug.ReadBuildInfo()
	if !ok {
		return ""
	}
	for _, d := range info.Deps {
		if d.Path == "github.com/nats-io/nats-server/v2" {
			return d.Version
		}
	}
	return ""
}

// percentile returns the p-th percentile (0..1) of ds, nearest rank.
func percentile(ds []time.Duration, p float64) time.Duration {
	if len(ds) == 0 {
		return 0
	}
	s := slices.Clone(ds)
	slices.Sort(s)
	i := int(float64(len(s))*p+0.5) - 1
	return s[min(max(i, 0), len(s)-1)]
}

func ms(d time.Duration) float64 { return float64(d.Nanoseconds()) / 1e6 }

// target is one of the in-process targets (BENCHMARKS.md, "Targets"),
// judged on the figures.
type target struct {
	what   string
	met    bool
	got    string
	phases []string // the phases whose figures judge it
}

func (r *Result) targets() []target {
	return []target{
		{"step overhead p50 ≤ 1 ms", r.StepOverheadP50Ms <= 1, fmt.Sprintf("%.3f ms", r.StepOverheadP50Ms), []string{"overhead"}},
		{"step overhead p50 ≤ 3× hop floor", r.OverheadPerHop <= 3, fmt.Sprintf("%.1f×", r.OverheadPerHop), []string{"overhead", "floor"}},
		{"step overhead p99 ≤ 5 ms", r.StepOverheadP99Ms <= 5, fmt.Sprintf("%.3f ms", r.StepOverheadP99Ms), []string{"overhead"}},
		{"≥ 2,000 steps/s at concurrency 200", r.StepsPerS >= 2000, fmt.Sprintf("%.0f steps/s", r.StepsPerS), []string{"throughput"}},
		{"≤ 10 KB per paused turn", r.BytesPerPausedTurn <= 10*1024, fmt.Sprintf("%.0f B", r.BytesPerPausedTurn), []string{"memory"}},
		{"replay ≥ 200,000 events/s", r.ReplayEventsPerS >= 200_000, fmt.Sprintf("%.0f events/s", r.ReplayEventsPerS), []string{"replay"}},
		{"a tenant's turns under another's flood p50 ≤ 2× idle", r.Tenancy != nil && r.Tenancy.FloodTurnP50Ms <= 2*r.Tenancy.IdleTurnP50Ms,
			r.tenancyRatio(), []string{"tenants"}},
		{"a tenant's turns under another's untrusted roles p50 ≤ 1.2× idle", r.Tenancy != nil && len(r.Tenancy.RolesTurnP50Ms) > 0 && r.Tenancy.rolesRatio() <= 1.2,
			r.rolesRatio(), []string{"tenants"}},
		{"recovery ≤ 2 s, nothing lost", r.RecoveryS <= 2 && r.TurnsLost == 0 && r.LogsBroken == 0,
			fmt.Sprintf("%.2f s, %d lost, %d broken logs", r.RecoveryS, r.TurnsLost, r.LogsBroken), []string{"recovery"}},
	}
}

// notMeasured stands for the figures of a phase that did not run.
const notMeasured = "not measured"

// Table prints the figures for a reader, the deployed shape's first; those
// of phases that did not run read "not measured".
func (r *Result) Table(w io.Writer) {
	r.deployedTable(w)
	fmt.Fprintln(w)
	r.tenancyTable(w)
	r.clusterTable(w)
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	row := func(cells ...string) { fmt.Fprintln(tw, strings.Join(cells, "\t")) }
	// fig formats a figure when its phases ran.
	fig := func(phases []string, format string, args ...any) string {
		if !r.ran(phases...) {
			return notMeasured
		}
		return fmt.Sprintf(format, args...)
	}
	overhead, floor, local := []string{"overhead"}, []string{"floor"}, []string{"local"}
	row("measure", "value", "how")
	row("-------", "-----", "---")
	row("step overhead p50", fig(overhead, "%.3f ms", r.StepOverheadP50Ms), fmt.Sprintf("%d tool steps run alone, step time minus model and tool time", r.StepOverheadSamples))
	row("step overhead p99", fig(overhead, "%.3f ms", r.StepOverheadP99Ms), "")
	row("step time p50", fig(overhead, "%.3f ms", r.StepTotalP50Ms), "step.started to step.started, model and tool included")
	row("publish floor p50 / p99", fig(floor, "%.3f / %.3f ms", r.PublishFloorP50Ms, r.PublishFloorP99Ms), "one JetStream publish + ack, file storage")
	row("hop floor p50 / p99", fig(floor, "%.3f / %.3f ms", r.HopFloorP50Ms, r.HopFloorP99Ms), "work queue → worker → inbox → consumer")
	row("step overhead / hop floor", fig([]string{"overhead", "floor"}, "%.1f×", r.OverheadPerHop), "a step is two hops (model, tool) and five appends")
	row("in-process step p50 / p99", fig(local, "%.4f / %.4f ms", r.InprocessStepP50Ms, r.InprocessStepP99Ms), "same turns through internal/fsm, no NATS")
	row("price of durability", fig([]string{"overhead", "local"}, "%.0f×", r.DurabilityRatio), "step overhead p50 / in-process step p50")
	if !r.ran("throughput") {
		row("throughput", notMeasured, "")
	}
	for _, t := range r.Throughput {
		row(fmt.Sprintf("throughput %d×%d at %d", t.Turns, t.Steps/max(t.Turns, 1), t.Concurrency),
			fmt.Sprintf("%.0f steps/s, %.1f turns/s", t.StepsPerS, t.TurnsPerS),
			fmt.Sprintf("CPU per step: orchestrator %.2f ms, server+worker+driver %.2f ms; %.1f s, %d unfinished",
				t.CPUSPerStep*1000, t.OtherCPUSPerStep*1000, t.Seconds, t.Unfinished))
	}
	row("memory per paused turn", fig([]string{"memory"}, "%.0f B", r.BytesPerPausedTurn),
		fmt.Sprintf("orchestrator process RSS %.1f → %.1f MiB with %d turns paused on ask_user", mib(r.RSSBeforeBytes), mib(r.RSSPausedBytes), r.PausedTurns))
	row("replay", fig([]string{"replay"}, "%.0f events/s", r.ReplayEventsPerS), fmt.Sprintf("decode + fold of a %d-event turn (fold alone: %.0f events/s)", r.ReplayEvents, r.FoldEventsPerS))
	row("recovery", fig([]string{"recovery"}, "%.2f s", r.RecoveryS), fmt.Sprintf("%d turns in flight, orchestrator killed (SIGKILL) and restarted", r.RecoveryTurns))
	row("turns lost / broken logs", fig([]string{"recovery"}, "%d / %d", r.TurnsLost, r.LogsBroken), "every turn must finish completed with a log that verifies")
	if wf := r.Workflow; r.ran("workflow") && wf != nil {
		row("workflow cost per task p50 / p99", fmt.Sprintf("%.3f / %.3f ms", wf.GapP50Ms, wf.GapP99Ms),
			fmt.Sprintf("%d one-step tasks: a task's turn.finished to the next one's turn.started (mean beyond the turns %.3f ms)", wf.Tasks, wf.OverheadMs))
	} else {
		row("workflow cost per task p50 / p99", notMeasured, "")
	}
	_ = tw.Flush()
	fmt.Fprintln(w)
	tw = tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	row("target", "met", "measured")
	for _, t := range r.targets() {
		met, got := "no", t.got
		switch {
		case !r.ran(t.phases...):
			met, got = notMeasured, ""
		case t.met:
			met = "yes"
		}
		row(t.what, met, got)
	}
	_ = tw.Flush()
	fmt.Fprintf(w, "\n%s, nats-server %s, %d CPUs, quick=%v, %.0f s\n", r.GoVersion, r.NATS, r.CPUs, r.Quick, r.Seconds)
}

func mib(b int64) float64 { return float64(b) / (1 << 20) }

// JSON prints the figures as one JSON object, keys in the order of Result.
// The figures of phases that did not run are null: a 0 would read as
// measured.
func (r *Result) JSON(w io.Writer) error {
	data, err := json.Marshal(r)
	if err != nil {
		return err
	}
	skip := r.unmeasured()
	dec := json.NewDecoder(bytes.NewReader(data))
	if _, err := dec.Token(); err != nil { // {
		return err
	}
	out := []byte{'{'}
	for dec.More() {
		k, err := dec.Token()
		if err != nil {
			return err
		}
		var v json.RawMessage
		if err := dec.Decode(&v); err != nil {
			return err
		}
		key, _ := k.(string)
		if skip[key] {
			v = json.RawMessage("null")
		}
		if len(out) > 1 {
			out = append(out, ',')
		}
		out = strconv.AppendQuote(out, key) // keys are plain ASCII
		out = append(append(out, ':'), v...)
	}
	out = append(out, "}\n"...)
	_, err = w.Write(out)
	return err
}

// profilePath names a profile file of the throughput run at concurrency c.
func (b *run) profilePath(kind string, c int) string {
	return filepath.Join(b.cfg.ProfileDir, fmt.Sprintf("orchestrator-c%d.%s.pprof", c, kind))
}
