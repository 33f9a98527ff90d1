package worker

import (
	"errors"
	"fmt"
	"sync/atomic"
	"time"

	"github.com/jetloop/jetloop/internal/events"
	"github.com/jetloop/jetloop/internal/metrics"
	"github.com/jetloop/jetloop/internal/tracing"
	"github.com/jetloop/jetloop/internal/workerobs"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

func init() {
	workerobs.Set = func(w any, m *metrics.Metrics, t *tracing.Tracer) {
		wk := w.(*Worker)
		wk.obs.metrics, wk.obs.tracer = m, t
	}
}

// observer is what the worker reports to metrics and traces; its zero value
// reports nothing.
type observer struct {
	metrics *metrics.Metrics
	tracer  *tracing.Tracer
	ready   atomic.Bool
}

// setup makes the process's readiness depend on the worker: ready once it
// is connected, its consumers bound and its tools advertised.
func (o *observer) setup(w *Worker) {
	if o.metrics == nil {
		return
	}
	o.metrics.AddCheck("toolworker "+w.opts.Name, func() error {
		if !o.ready.Load() {
			return errors.New("not set up")
		}
		// Reconnecting: the server is unreachable.
		if s := w.nc.Status(); s != nats.CONNECTED {
			return fmt.Errorf("nats connection %s", s)
		}
		return nil
	})
	// Tools a worker serves come from its configuration: a bounded set.
	for name := range w.tools {
		o.metrics.SlotsBusy(name, 0)
	}
}

// run is one call in progress, as the observer sees it.
type run struct {
	o    *observer
	tool string
	span *tracing.Run
}

// begin marks a slot of tool busy and starts the call's span.
func (o *observer) begin(msg jetstream.Msg, job *events.ToolJob, worker string, attempt int) *run {
	if o.metrics == nil && o.tracer == nil {
		return nil
	}
	o.metrics.SlotsBusy(job.Tool, 1)
	var parent string
	if h := msg.Headers(); h != nil {
		parent = h.Get(tracing.Header)
	}
	return &run{o: o, tool: job.Tool, span: o.tracer.StartRun(parent, job.TurnID, job.CallID, job.Tool, worker, attempt)}
}

// end records how the call ended and frees its slot.
func (r *run) end(outcome string, took time.Duration) {
	if r == nil {
		return
	}
	r.o.metrics.SlotsBusy(r.tool, -1)
	r.o.metrics.ToolCall(r.tool, outcome, took)
	r.span.End(outcome, outcome == metrics.Error)
}

// callOutcome names how a call that produced a result ended.
func callOutcome(err error, isError bool, deadline time.Time) string {
	switch {
	case err != nil && deadlinePassed(deadline):
		return metrics.Timeout
	case isError:
		return metrics.Error
	}
	return metrics.OK
}
