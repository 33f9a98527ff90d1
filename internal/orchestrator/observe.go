package orchestrator

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/jetloop/jetloop/internal/bus"
	"github.com/jetloop/jetloop/internal/events"
	"github.com/jetloop/jetloop/internal/fsm"
	"github.com/jetloop/jetloop/internal/metrics"
	"github.com/jetloop/jetloop/internal/model"
	"github.com/jetloop/jetloop/internal/tracing"
	"github.com/nats-io/nats.go"
)

// WithMetrics records the orchestrator's metrics in m, and makes m's
// /readyz depend on it: ready once it is connected, its streams checked
// and its consumers bound.
func WithMetrics(m *metrics.Metrics) Option {
	return func(o *Orchestrator) error {
		o.obs.metrics = m
		return nil
	}
}

// WithTracer emits the spans of the turns this orchestrator advances and of
// the model calls it makes through t, and puts a traceparent on each tool
// job so the worker's span joins the turn's trace.
func WithTracer(t *tracing.Tracer) Option {
	return func(o *Orchestrator) error {
		o.obs.tracer = t
		return nil
	}
}

// observer records what the orchestrator does as metrics and spans; a nil
// Metrics or Tracer is off.
type observer struct {
	metrics *metrics.Metrics
	tracer  *tracing.Tracer
	// providers are the registered ones: a model call's label names one of
	// them or metrics.Other.
	providers map[string]model.Provider
}

// observeSetup registers what the metrics need to know of the orchestrator.
func (o *Orchestrator) observeSetup() {
	if o.obs.metrics == nil {
		return
	}
	o.obs.metrics.KnowAgents(o.starter.agents.Names()...)
	o.obs.metrics.AddCheck("orchestrator", o.readiness)
}

// readiness is nil once the orchestrator serves (connected, streams
// checked, consumers bound) while its connection is up: one that is
// reconnecting says the server is unreachable.
func (o *Orchestrator) readiness() error {
	if !o.ready.Load() {
		return errors.New("not set up")
	}
	if s := o.nc.Status(); s != nats.CONNECTED {
		return fmt.Errorf("nats connection %s", s)
	}
	return nil
}

// inputOutcome names how an input's handling ended, for the metrics; ""
// when a crash hook stopped it (the input is as good as not handled).
func inputOutcome(err error, delivered uint64) string {
	var d *deadLetter
	switch {
	case err == nil:
		return metrics.OK
	case errors.Is(err, errCrashed):
		return ""
	case errors.As(err, &d), delivered >= bus.InboxMaxDeliver:
		return metrics.DeadLetter
	}
	return metrics.Retry
}

// countInput counts an input's handling.
func (ob *observer) countInput(kind events.Input, err error, delivered uint64) {
	if ob.metrics == nil {
		return
	}
	if outcome := inputOutcome(err, delivered); outcome != "" {
		ob.metrics.Input(string(kind), outcome)
	}
}

// observe records what a decision, just appended, did: turns started and
// finished, steps, calls the orchestrator answered itself, and the turn's
// spans. It reads only the decision and the state before it, so whichever
// process appends an event counts it, once.
func (ob *observer) observe(before *fsm.State, d fsm.Decision) {
	if ob.metrics == nil && ob.tracer == nil {
		return
	}
	m, st := ob.metrics, d.State
	stepStarted := before.StepStarted
	var requested map[string]time.Time // calls requested by this decision
	for _, e := range d.Events {
		switch e.Type {
		case events.TurnStarted:
			m.TurnStarted(st.Agent)
		case events.StepStarted:
			m.StepStarted(st.Agent)
			stepStarted = e.Time
		case events.StepChecked:
			if !stepStarted.IsZero() {
				m.StepChecked(e.Time.Sub(stepStarted))
			}
		case events.ToolRequested:
			var r struct {
				CallID string `json:"call_id"`
			}
			if json.Unmarshal(e.Data, &r) == nil {
				if requested == nil {
					requested = map[string]time.Time{}
				}
				requested[r.CallID] = e.Time
			}
		case events.ToolCompleted:
			ob.observeAnswer(before, st, e, requested)
		case events.TurnFinished:
			if f := st.Finished; f != nil {
				m.TurnFinished(st.Agent, string(f.StopReason))
				x := tracing.Turn{TurnID: st.TurnID, SessionID: st.SessionID, Agent: st.Agent, Model: st.Model,
					Start: st.Started, End: e.Time, StopReason: string(f.StopReason), Error: f.Error,
					Steps: f.Metrics.Steps, ToolCalls: f.Metrics.ToolCalls, ModelCalls: f.Metrics.ModelCalls,
					InputTokens: f.Metrics.InputTokens, OutputTokens: f.Metrics.OutputTokens}
				if p := st.Parent; p != nil {
					x.Root, x.ParentTurn, x.ParentCall = st.Root(), p.TurnID, p.CallID
					if _, ok := fsm.CompactThrough(p.CallID); ok {
						x.ParentCall = "" // a summary's turn: no call runs it
					}
				}
				ob.tracer.Turn(x)
			}
		}
	}
	m.TurnsActive(b2i(live(st)) - b2i(live(before)))
	m.TurnsPaused(b2i(st.Phase == fsm.PhasePaused) - b2i(before.Phase == fsm.PhasePaused))
}

// observeAnswer emits a call's span, and counts a call the orchestrator
// answered itself (ask_user, a refused or denied call, a deadline no worker
// met); the tool workers count the calls they run.
func (ob *observer) observeAnswer(before, st *fsm.State, e events.Envelope, requested map[string]time.Time) {
	// Only what is needed: an output is never copied.
	var c struct {
		CallID   string `json:"call_id"`
		Name     string `json:"name"`
		IsError  bool   `json:"is_error"`
		Worker   string `json:"worker"`
		Attempts int    `json:"attempts"`
	}
	if json.Unmarshal(e.Data, &c) != nil {
		return
	}
	start, ok := requested[c.CallID]
	outcome := metrics.OK
	if c.IsError {
		outcome = metrics.Error
	}
	for _, call := range before.Calls {
		if call.CallID != c.CallID {
			continue
		}
		if !ok {
			start = call.Requested
		}
		if c.IsError && !call.Deadline.IsZero() && !e.Time.Before(call.Deadline) {
			outcome = metrics.Timeout
		}
	}
	if start.IsZero() {
		start = e.Time
	}
	label := offered(st, c.Name)
	ob.tracer.Tool(tracing.Tool{TurnID: st.TurnID, Root: st.Root(), CallID: c.CallID, Name: c.Name, Label: label,
		Start: start, End: e.Time, IsError: c.IsError, Worker: c.Worker, Attempts: c.Attempts})
	switch {
	case c.Worker == fsm.Orchestrator:
		ob.metrics.ToolCall(label, outcome, e.Time.Sub(start))
	case fsm.FromSubagent(c.Worker) && label != metrics.Other:
		// A subagent call, counted by its agent: agent:<Name>, a name
		// the turn was offered, so the label stays bounded.
		ob.metrics.ToolCall(c.Worker, outcome, e.Time.Sub(start))
	}
}

// observeModelCall records one model call attempt: its metrics and its
// chat span. ctx is the call's, stop the process's.
func (ob *observer) observeModelCall(ctx, stop context.Context, job *events.ModelJob, attempt int, began time.Time, resp model.Response, err error) {
	if ob.metrics == nil && ob.tracer == nil {
		return
	}
	took := time.Since(began)
	provider, name, _ := model.Spec(job.Model)
	if _, ok := ob.providers[provider]; !ok {
		provider = metrics.Other
	}
	var me *model.Error
	outcome, errType := metrics.OK, ""
	switch {
	case err == nil:
	case ctx.Err() != nil && stop.Err() != nil:
		outcome = metrics.HandedBack
	case ctx.Err() != nil:
		outcome = metrics.Aborted
	case errors.As(err, &me) && me.Retryable() && attempt < model.MaxAttempts:
		outcome, errType = metrics.Retry, string(me.Kind)
	default:
		outcome, errType = metrics.Error, "error"
		if me != nil {
			errType = string(me.Kind)
		}
	}
	if err == nil {
		ob.metrics.ModelCall(provider, outcome, took, resp.Usage.InputTokens, resp.Usage.OutputTokens)
	} else {
		ob.metrics.ModelCall(provider, outcome, took, 0, 0)
	}
	if ob.tracer == nil {
		return
	}
	if provider == "script" {
		name = "script" // a script's path says nothing of a model
	}
	c := tracing.Chat{TurnID: job.TurnID, Root: job.Root, SessionID: job.SessionID, Step: job.Step, Attempt: attempt,
		Provider: provider, Model: name, Start: began, End: began.Add(took), FinishReason: resp.FinishReason,
		InputTokens: resp.Usage.InputTokens, OutputTokens: resp.Usage.OutputTokens, Outcome: outcome,
		TurnKind: string(job.Kind)}
	if err != nil {
		c.Error, c.ErrorType = err.Error(), errType
	}
	ob.tracer.Chat(c)
}

// jobHeader is the header of a job: a tool job carries the traceparent of
// its call's span when this process traces.
func (ob *observer) jobHeader(j fsm.Job) nats.Header {
	if ob.tracer == nil || j.Tool == nil {
		return nil
	}
	return nats.Header{tracing.Header: []string{tracing.Traceparent(j.Root, j.Tool.TurnID, j.Tool.CallID)}}
}

// offered bounds a tool's name for a label: a name the turn was offered
// (from configuration and the live workers), else metrics.Other, since a
// model may name any tool.
func offered(st *fsm.State, name string) string {
	for _, t := range st.Tools {
		if t.Name == name {
			return name
		}
	}
	return metrics.Other
}

// live reports whether a turn has started and not finished.
func live(st *fsm.State) bool { return st.Exists() && !st.Done() }

func b2i(b bool) int {
	if b {
		return 1
	}
	return 0
}

// seedTurns counts the unfinished and paused turns found in the log at
// start, when no other orchestrator serves: then every unfinished turn is
// this process's to see. With others serving, each counts only the changes
// it makes, and the sum over them stays right.
func (ob *observer) seedTurns(alone bool, unfinished, paused int) {
	if !alone {
		return
	}
	ob.metrics.TurnsActive(unfinished)
	ob.metrics.TurnsPaused(paused)
}

// countDeadLetter counts a dead letter written.
func (ob *observer) countDeadLetter(kind events.Input) { ob.metrics.DeadLetter(string(kind)) }
