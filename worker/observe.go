package worker

import (
	"errors"
	"fmt"
	"sync/atomic"
	"time"

	"github.com/jetloop/jetloop/internal/events"
	"github.com/jetloop/jetloop/internal/tracectx"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"go.opentelemetry.io/otel/trace"
)

// Metrics receives what a worker measures, to export it anywhere (the
// toolworker command exports it to Prometheus). Its methods are called from
// many goroutines at once and must not block.
type Metrics interface {
	// SlotsBusy adds delta to the calls of tool running now: 1 when one
	// starts, -1 when it ends, and 0 for every tool when Run starts, so
	// each is known before its first call.
	SlotsBusy(tool string, delta int)
	// ToolCall records a call of tool that ended: how (one of the Outcome
	// constants) and how long it ran.
	ToolCall(tool, outcome string, took time.Duration)
	// DeadLetter records a dead letter the worker wrote; kind is "job".
	DeadLetter(kind string)
}

// How a call ended, as Metrics.ToolCall and the call's span say.
const (
	OutcomeOK         = "ok"          // the function returned a result that is not an error
	OutcomeError      = "error"       // the function returned an error result, an error or panicked
	OutcomeTimeout    = "timeout"     // the call's deadline passed first
	OutcomeAborted    = "aborted"     // its turn was aborted while it ran: no result is sent
	OutcomeHandedBack = "handed_back" // the worker stopped: the job goes to another
)

// observer is what the worker reports to metrics and traces; its zero value
// reports nothing.
type observer struct {
	metrics Metrics
	tracer  trace.Tracer
	ready   atomic.Bool
}

// use reports to m and spans of tp, either of which may be nil.
func (o *observer) use(m Metrics, tp trace.TracerProvider) {
	o.metrics = m
	if tp != nil {
		o.tracer = tp.Tracer(tracectx.Scope)
	}
}

// setup shows the worker's tools at zero busy slots: tools a worker serves
// come from its configuration, a bounded set.
func (o *observer) setup(w *Worker) {
	if o.metrics == nil {
		return
	}
	for name := range w.tools {
		o.metrics.SlotsBusy(name, 0)
	}
}

// deadLetter counts a dead letter of kind.
func (o *observer) deadLetter(kind string) {
	if o.metrics != nil {
		o.metrics.DeadLetter(kind)
	}
}

// Serving returns nil while Run serves the worker's tools and its
// connection is up, else why not: a readiness check.
func (w *Worker) Serving() error {
	if !w.obs.ready.Load() {
		return errors.New("not set up")
	}
	// Reconnecting: the server is unreachable.
	if s := w.nc.Status(); s != nats.CONNECTED {
		return fmt.Errorf("nats connection %s", s)
	}
	return nil
}

// run is one call in progress, as the observer sees it.
type run struct {
	o    *observer
	tool string
	span trace.Span
}

// begin marks a slot of tool busy and starts the call's span.
func (o *observer) begin(msg jetstream.Msg, job *events.ToolJob, worker string, attempt int) *run {
	if o.metrics == nil && o.tracer == nil {
		return nil
	}
	r := &run{o: o, tool: job.Tool}
	if o.metrics != nil {
		o.metrics.SlotsBusy(job.Tool, 1)
	}
	if o.tracer != nil {
		var parent string
		if h := msg.Headers(); h != nil {
			parent = h.Get(tracectx.Header)
		}
		r.span = tracectx.StartRun(o.tracer, parent, job.TurnID, job.CallID, job.Tool, worker, attempt)
	}
	return r
}

// end records how the call ended and frees its slot.
func (r *run) end(outcome string, took time.Duration) {
	if r == nil {
		return
	}
	if m := r.o.metrics; m != nil {
		m.SlotsBusy(r.tool, -1)
		m.ToolCall(r.tool, outcome, took)
	}
	if r.span != nil {
		tracectx.EndRun(r.span, outcome, outcome == OutcomeError)
	}
}

// callOutcome names how a call that produced a result ended.
func callOutcome(err error, isError bool, deadline time.Time) string {
	switch {
	case err != nil && deadlinePassed(deadline):
		return OutcomeTimeout
	case isError:
		return OutcomeError
	}
	return OutcomeOK
}
