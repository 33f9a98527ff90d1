// Package stack runs jetloop's two processes inside one: an orchestrator and
// a tool worker, each on a NATS connection it is given. It is the one place
// that starts them in-process — jetloop demo and dev, the in-process
// benchmark, the public test kit jetlooptest and the tests (through
// internal/testkit/inproc) build on it and add only what is theirs: a
// server, test tools, names, crashes. Servers are started elsewhere:
// internal/embedded at run time, internal/testkit in tests.
package stack

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/jetloop/jetloop/internal/agents"
	"github.com/jetloop/jetloop/internal/bus"
	"github.com/jetloop/jetloop/internal/events"
	"github.com/jetloop/jetloop/internal/metrics"
	"github.com/jetloop/jetloop/internal/orchestrator"
	"github.com/jetloop/jetloop/internal/tools"
	"github.com/jetloop/jetloop/internal/tracing"
	"github.com/jetloop/jetloop/worker"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"golang.org/x/sync/errgroup"
)

// patience bounds each wait of this package: a worker's start, a tool's
// advertisement, an orchestrator's first pull. It is long because tests
// under -race on a loaded machine wait here too.
const patience = time.Minute

// Observers are what the processes report to; nil ones are off.
type Observers struct {
	Metrics *metrics.Metrics
	Tracer  *tracing.Tracer
}

// Proc is a process of the stack: its Run in a goroutine of its own.
type Proc struct {
	cancel context.CancelFunc
	done   chan struct{}
	err    error
}

func start(ctx context.Context, run func(context.Context) error) *Proc {
	ctx, cancel := context.WithCancel(ctx)
	p := &Proc{cancel: cancel, done: make(chan struct{})}
	go func() {
		defer close(p.done)
		defer cancel()
		p.err = run(ctx)
	}()
	return p
}

// Done is closed once the process ended.
func (p *Proc) Done() <-chan struct{} { return p.done }

// Wait waits for the process to end and returns what its Run returned.
func (p *Proc) Wait() error {
	<-p.done
	return p.err
}

// Stop ends the process as the end of its context does, and returns Wait's
// error. The connection stays open: it is its owner's to close.
func (p *Proc) Stop() error {
	p.cancel()
	return p.Wait()
}

// Orchestrator starts an orchestrator of set on nc, reporting to obs, that
// runs until ctx ends or it is stopped. opts come after obs's, so they may
// override them.
func Orchestrator(ctx context.Context, nc *nats.Conn, log *slog.Logger, set *agents.Set, obs Observers, opts ...orchestrator.Option) (*orchestrator.Orchestrator, *Proc, error) {
	js, err := jetstream.New(nc)
	if err != nil {
		return nil, nil, err
	}
	opts = append([]orchestrator.Option{orchestrator.WithMetrics(obs.Metrics), orchestrator.WithTracer(obs.Tracer)}, opts...)
	o, err := orchestrator.New(nc, js, log, set, opts...)
	if err != nil {
		return nil, nil, err
	}
	return o, start(ctx, o.Run), nil
}

// Tools registers ts with a worker: the register of Worker for a worker
// that serves tools and no hooks.
func Tools(ts ...tools.Tool) func(*worker.Worker) error {
	return func(w *worker.Worker) error { return tools.Register(w, ts...) }
}

// Worker starts a tool worker on nc serving what register registers,
// reporting to obs, that runs until ctx ends or it is stopped. It returns
// once the worker serves: the registry lists its tools, so a turn started
// next is offered them. opts come after obs's and the logger, so they may
// override them.
func Worker(ctx context.Context, nc *nats.Conn, log *slog.Logger, obs Observers, register func(*worker.Worker) error, opts ...worker.Option) (*worker.Worker, *Proc, error) {
	// A nil *metrics.Metrics in the interface would not be a nil Metrics.
	var wm worker.Metrics
	if obs.Metrics != nil {
		wm = obs.Metrics
	}
	opts = append([]worker.Option{worker.WithLogger(log), worker.WithMetrics(wm), worker.WithTracerProvider(obs.Tracer.Provider())}, opts...)
	w, err := worker.New(nc, opts...)
	if err != nil {
		return nil, nil, err
	}
	if err := register(w); err != nil {
		return nil, nil, err
	}
	obs.Metrics.AddCheck("toolworker "+w.Name(), w.Serving)
	p := start(ctx, w.Run)
	timer := time.NewTimer(patience)
	defer timer.Stop()
	select {
	case <-w.Ready():
		return w, p, nil
	case <-p.Done():
		if p.err != nil {
			return nil, nil, p.err
		}
		return nil, nil, errors.New("stack: the tool worker stopped before it served")
	case <-timer.C:
		_ = p.Stop()
		return nil, nil, fmt.Errorf("stack: the tool worker did not serve within %s", patience)
	}
}

// Stack is an orchestrator and a tool worker running in this process.
type Stack struct {
	g *errgroup.Group
}

// Start runs an orchestrator of set and a tool worker serving ts, both on nc
// and reporting to obs, until ctx ends or either fails; it returns once the
// worker serves. log is scoped to each process.
func Start(ctx context.Context, nc *nats.Conn, log *slog.Logger, set *agents.Set, ts []tools.Tool, obs Observers, opts ...orchestrator.Option) (*Stack, error) {
	g, gctx := errgroup.WithContext(ctx)
	_, orch, err := Orchestrator(gctx, nc, log.With("process", "orchestrator"), set, obs, opts...)
	if err != nil {
		return nil, err
	}
	g.Go(orch.Wait)
	_, work, err := Worker(gctx, nc, log.With("process", "toolworker"), obs, Tools(ts...))
	if err != nil {
		// The orchestrator's failure, when it ended first, says more than
		// the worker's stop it caused.
		if gerr := orch.Stop(); gerr != nil {
			return nil, gerr
		}
		return nil, err
	}
	g.Go(work.Wait)
	return &Stack{g: g}, nil
}

// Wait waits for both processes to end and returns the first error either
// returned.
func (s *Stack) Wait() error { return s.g.Wait() }

// WaitTool returns once a worker advertises tool (or a hook, as
// events.HookKey), so a turn started next is offered it.
func WaitTool(ctx context.Context, js jetstream.JetStream, tool string) error {
	return poll(ctx, "a tool worker to advertise "+tool, func(ctx context.Context) bool {
		kv, err := js.KeyValue(ctx, events.BucketTools)
		if err != nil {
			return false
		}
		e, err := kv.Get(ctx, tool)
		if err != nil {
			return false
		}
		// The orchestrator offers a tool with a worker (its catalog).
		var info events.ToolInfo
		return json.Unmarshal(e.Value(), &info) == nil && info.Workers > 0
	})
}

// WaitServing returns once an orchestrator pulls from the inbox of the
// server js is connected to.
func WaitServing(ctx context.Context, js jetstream.JetStream) error {
	return poll(ctx, "an orchestrator to serve", func(ctx context.Context) bool {
		c, err := js.Consumer(ctx, events.StreamInbox, bus.InboxConsumer)
		if err != nil {
			return false
		}
		info, err := c.Info(ctx)
		return err == nil && info.NumWaiting > 0
	})
}

// poll asks cond until it holds, for at most patience. Each ask has a
// second: a request to a server that just went away is asked again, not
// waited on.
func poll(ctx context.Context, what string, cond func(context.Context) bool) error {
	ctx, cancel := context.WithTimeout(ctx, patience)
	defer cancel()
	ask := func() bool {
		ctx, cancel := context.WithTimeout(ctx, time.Second)
		defer cancel()
		return cond(ctx)
	}
	for !ask() {
		select {
		case <-ctx.Done():
			return fmt.Errorf("stack: waiting for %s: %w", what, ctx.Err())
		case <-time.After(5 * time.Millisecond):
		}
	}
	return nil
}
