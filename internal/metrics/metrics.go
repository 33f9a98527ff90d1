package metrics

import (
	"maps"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
)

// Other is the label value of an agent or tool the process does not know:
// a model can name any tool, and a label set must stay bounded.
const Other = "other"

// Outcomes of a tool call, an input and a model call: the values of the
// outcome labels.
const (
	OK         = "ok"          // done, and its answer is not an error
	Error      = "error"       // done, and its answer is an error
	Timeout    = "timeout"     // its deadline passed first
	Aborted    = "aborted"     // its turn was aborted while it ran
	HandedBack = "handed_back" // the process stopped: another one takes it
	Retry      = "retry"       // failed for now and will be tried again
	DeadLetter = "dead_letter" // can never be handled: kept as a dead letter
)

// Buckets suit what they measure: a step of a scripted model takes a
// millisecond or two, a real model's step seconds to minutes; a model call
// takes seconds; a tool call anything from a file read (well under a
// millisecond) to a shell command (minutes).
var (
	stepBuckets  = []float64{.001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10, 30, 60, 120, 300}
	modelBuckets = []float64{.05, .1, .25, .5, 1, 2, 4, 8, 15, 30, 60, 120, 300}
	toolBuckets  = []float64{.0005, .001, .005, .01, .05, .1, .25, .5, 1, 2.5, 5, 10, 30, 60, 300}
)

// workflowStopReasons are a workflow's stop reasons (docs/protocol.md, "Stop
// reasons").
var workflowStopReasons = []string{"completed", "max_tasks", "timeout", "budget", "tokens", "task_failed", "denied", "aborted", "error", "rejected"}

// Metrics holds one process's metrics in a registry of its own, so several
// processes can run in one test binary. A nil *Metrics records nothing: that
// is how metrics are off, at the cost of one comparison per call.
type Metrics struct {
	reg *prometheus.Registry

	turnsStarted      *prometheus.CounterVec
	turnsFinished     *prometheus.CounterVec
	turnsActive       prometheus.Gauge
	turnsPaused       prometheus.Gauge
	steps             *prometheus.CounterVec
	stepDuration      prometheus.Histogram
	modelCalls        *prometheus.CounterVec
	modelDuration     *prometheus.HistogramVec
	modelTokens       *prometheus.CounterVec
	toolCalls         *prometheus.CounterVec
	toolDuration      *prometheus.HistogramVec
	inputs            *prometheus.CounterVec
	deadLetters       *prometheus.CounterVec
	appendConflicts   prometheus.Counter
	workflowsFinished *prometheus.CounterVec
	slotsBusy         *prometheus.GaugeVec
	quotaRefusals     *prometheus.CounterVec

	// agents are the agent names the process knows; any other is counted
	// as Other. Written at setup, read on every turn: copy on write.
	agents atomic.Pointer[map[string]bool]

	mu      sync.Mutex
	checks  []check
	tenants map[string]*Metrics // of a root made by NewTenants, by name
}

// New returns the metrics of one process, every one of docs/operations.md
// registered, with the Go runtime's and the process's own.
func New() *Metrics {
	m := &Metrics{reg: prometheus.NewRegistry()}
	m.reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	m.register(m.reg)
	return m
}

// NewTenants returns the metrics of a process that serves several tenants:
// it serves the Go runtime's and the process's own, and each tenant's
// metrics, made by Tenant, carry the label tenant. The root itself records
// nothing (its recording methods do nothing): a series without the label
// would have other label names than its tenants' under the same name.
func NewTenants() *Metrics {
	m := &Metrics{reg: prometheus.NewRegistry()}
	m.reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	return m
}

// Tenant returns the metrics of one tenant of a process made by
// NewTenants: every series it records is labelled tenant=name. Names come
// from the process's tenants file, so the label stays bounded. The
// process is ready when each tenant's checks pass (DropTenant forgets
// them).
func (m *Metrics) Tenant(name string) *Metrics {
	if m == nil {
		return nil
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	// A tenant removed and added again while the process runs keeps its
	// series: a registry takes each of them once.
	if t, ok := m.tenants[name]; ok {
		return t
	}
	t := &Metrics{reg: m.reg}
	t.register(prometheus.WrapRegistererWith(prometheus.Labels{"tenant": name}, m.reg))
	if m.tenants == nil {
		m.tenants = map[string]*Metrics{}
	}
	m.tenants[name] = t
	return t
}

// register makes the metrics of docs/operations.md in reg.
func (m *Metrics) register(reg prometheus.Registerer) {
	f := factory{reg}
	m.turnsStarted = f.counterVec("jetloop_turns_started_total", "Turns this process started (appended their turn.started).", "agent")
	m.turnsFinished = f.counterVec("jetloop_turns_finished_total", "Turns this process finished (appended their turn.finished), by stop reason.", "agent", "stop_reason")
	m.turnsActive = f.gauge("jetloop_turns_active",
		"Unfinished turns as this orchestrator sees them: those unfinished in the log when it started "+
			"(counted only when no other orchestrator was serving), plus those it started, minus those it finished. "+
			"With several orchestrators, sum over them.")
	m.turnsPaused = f.gauge("jetloop_turns_paused",
		"Turns paused on ask_user or an approval, as this orchestrator sees them (counted like jetloop_turns_active).")
	m.steps = f.counterVec("jetloop_steps_total", "Steps this process started.", "agent")
	m.stepDuration = f.histogram("jetloop_step_duration_seconds", "Time from step.started to step.checked: the model call, the tool calls and jetloop's own work.", stepBuckets)
	m.modelCalls = f.counterVec("jetloop_model_calls_total", "Model call attempts this process made, by outcome (ok, error: failed for good, retry: failed and tried again, aborted, handed_back).", "provider", "outcome")
	m.modelDuration = f.histogramVec("jetloop_model_call_duration_seconds", "Duration of one model call attempt.", modelBuckets, "provider")
	m.modelTokens = f.counterVec("jetloop_model_tokens_total", "Tokens of the model calls this process made, by direction (input, output).", "provider", "direction")
	m.toolCalls = f.counterVec("jetloop_tool_calls_total",
		"Tool calls by outcome: counted by the tool worker that ran them (ok, error, timeout, aborted, handed_back, dead_letter), "+
			"and by the orchestrator for the calls it answers itself (ask_user, refused or denied calls, deadlines no worker met).", "tool", "outcome")
	m.toolDuration = f.histogramVec("jetloop_tool_call_duration_seconds", "Duration of one tool call, where it was answered.", toolBuckets, "tool")
	m.inputs = f.counterVec("jetloop_inputs_total", "Inbox inputs this orchestrator handled, by kind (submit, workflow, control, result, model, timer, task, unknown) and outcome (ok, retry, dead_letter).", "kind", "outcome")
	m.deadLetters = f.counterVec("jetloop_dead_letters_total", "Dead letters this process wrote, by kind (the subject's last token under jetloop.dead).", "kind")
	m.appendConflicts = f.counter("jetloop_append_conflicts_total", "Appends to a turn's log that lost the race to another writer (decided again on the fresh log).")
	m.workflowsFinished = f.counterVec("jetloop_workflows_finished_total", "Workflows this process finished, by stop reason.", "stop_reason")
	m.slotsBusy = f.gaugeVec("jetloop_worker_slots_busy", "Slots of this tool worker running a call, by tool.", "tool")
	m.quotaRefusals = f.counterVec("jetloop_quota_refusals_total", "Submissions a tenant's quota refused, by quota (storage, in_flight, rate).", "quota")
	// A workflow's stop reasons are a closed set: showing
	// each at zero lets a rate or an alert see its first one.
	for _, r := range workflowStopReasons {
		m.workflowsFinished.WithLabelValues(r)
	}
	none := map[string]bool{}
	m.agents.Store(&none)
}

// Registry is where the metrics are registered, for a test or another
// handler to gather.
func (m *Metrics) Registry() *prometheus.Registry { return m.reg }

// KnowAgents adds names to the agents whose names are labels; others are
// counted as Other.
func (m *Metrics) KnowAgents(names ...string) {
	if m.off() {
		return
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	next := maps.Clone(*m.agents.Load())
	for _, n := range names {
		next[n] = true
	}
	m.agents.Store(&next)
}

func (m *Metrics) agent(name string) string {
	if (*m.agents.Load())[name] {
		return name
	}
	return Other
}

// TurnStarted counts a turn this process started.
func (m *Metrics) TurnStarted(agent string) {
	if m.off() {
		return
	}
	m.turnsStarted.WithLabelValues(m.agent(agent)).Inc()
}

// TurnFinished counts a turn this process finished. A rejected submission
// has no agent yet; it is counted under "".
func (m *Metrics) TurnFinished(agent, stopReason string) {
	if m.off() {
		return
	}
	if agent != "" {
		agent = m.agent(agent)
	}
	m.turnsFinished.WithLabelValues(agent, stopReason).Inc()
}

// TurnsActive moves the count of unfinished turns by delta.
func (m *Metrics) TurnsActive(delta int) {
	if m.off() || delta == 0 {
		return
	}
	m.turnsActive.Add(float64(delta))
}

// TurnsPaused moves the count of paused turns by delta.
func (m *Metrics) TurnsPaused(delta int) {
	if m.off() || delta == 0 {
		return
	}
	m.turnsPaused.Add(float64(delta))
}

// StepStarted counts a step this process started.
func (m *Metrics) StepStarted(agent string) {
	if m.off() {
		return
	}
	m.steps.WithLabelValues(m.agent(agent)).Inc()
}

// StepChecked records how long a step took, from its start to its check.
func (m *Metrics) StepChecked(d time.Duration) {
	if m.off() || d < 0 {
		return
	}
	m.stepDuration.Observe(d.Seconds())
}

// ModelCall records one model call attempt and the tokens it used.
// provider must come from the process's configuration (a bounded set).
func (m *Metrics) ModelCall(provider, outcome string, d time.Duration, inputTokens, outputTokens int) {
	if m.off() {
		return
	}
	m.modelCalls.WithLabelValues(provider, outcome).Inc()
	m.modelDuration.WithLabelValues(provider).Observe(d.Seconds())
	if inputTokens > 0 {
		m.modelTokens.WithLabelValues(provider, "input").Add(float64(inputTokens))
	}
	if outputTokens > 0 {
		m.modelTokens.WithLabelValues(provider, "output").Add(float64(outputTokens))
	}
}

// ToolCall records one tool call. tool must be bounded by the caller: a
// tool the process serves or offers, else Other.
func (m *Metrics) ToolCall(tool, outcome string, d time.Duration) {
	if m.off() {
		return
	}
	m.toolCalls.WithLabelValues(tool, outcome).Inc()
	m.toolDuration.WithLabelValues(tool).Observe(max(d, 0).Seconds())
}

// SlotsBusy moves the count of a tool's busy slots by delta.
func (m *Metrics) SlotsBusy(tool string, delta int) {
	if m.off() {
		return
	}
	m.slotsBusy.WithLabelValues(tool).Add(float64(delta))
}

// Input counts an inbox input handled, by its kind and outcome.
func (m *Metrics) Input(kind, outcome string) {
	if m.off() {
		return
	}
	m.inputs.WithLabelValues(kind, outcome).Inc()
}

// DeadLetter counts a dead letter written, by its kind.
func (m *Metrics) DeadLetter(kind string) {
	if m.off() {
		return
	}
	m.deadLetters.WithLabelValues(kind).Inc()
}

// AppendConflict counts an append that lost the race for a turn's log.
func (m *Metrics) AppendConflict() {
	if m.off() {
		return
	}
	m.appendConflicts.Inc()
}

// WorkflowFinished counts a workflow this process finished.
func (m *Metrics) WorkflowFinished(stopReason string) {
	if m.off() {
		return
	}
	m.workflowsFinished.WithLabelValues(stopReason).Inc()
}

// factory registers what it makes in one registry.
type factory struct{ reg prometheus.Registerer }

func (f factory) counter(name, help string) prometheus.Counter {
	c := prometheus.NewCounter(prometheus.CounterOpts{Name: name, Help: help})
	f.reg.MustRegister(c)
	return c
}

func (f factory) counterVec(name, help string, labels ...string) *prometheus.CounterVec {
	c := prometheus.NewCounterVec(prometheus.CounterOpts{Name: name, Help: help}, labels)
	f.reg.MustRegister(c)
	return c
}

func (f factory) gauge(name, help string) prometheus.Gauge {
	g := prometheus.NewGauge(prometheus.GaugeOpts{Name: name, Help: help})
	f.reg.MustRegister(g)
	return g
}

func (f factory) gaugeVec(name, help string, labels ...string) *prometheus.GaugeVec {
	g := prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: name, Help: help}, labels)
	f.reg.MustRegister(g)
	return g
}

func (f factory) histogram(name, help string, buckets []float64) prometheus.Histogram {
	h := prometheus.NewHistogram(prometheus.HistogramOpts{Name: name, Help: help, Buckets: buckets})
	f.reg.MustRegister(h)
	return h
}

func (f factory) histogramVec(name, help string, buckets []float64, labels ...string) *prometheus.HistogramVec {
	h := prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: name, Help: help, Buckets: buckets}, labels)
	f.reg.MustRegister(h)
	return h
}

// QuotaRefusal counts a submission refused by a tenant's quota.
func (m *Metrics) QuotaRefusal(quota string) {
	if m.off() {
		return
	}
	m.quotaRefusals.WithLabelValues(quota).Inc()
}

// off tells whether m records nothing: metrics are off, or m is the root of
// a process's tenants.
func (m *Metrics) off() bool { return m == nil || m.steps == nil }
