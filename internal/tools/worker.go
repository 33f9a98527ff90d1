package tools

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"runtime/debug"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jetloop/jetloop/internal/events"
	"github.com/jetloop/jetloop/internal/metrics"
	"github.com/jetloop/jetloop/internal/runtime"
	"github.com/jetloop/jetloop/schemas"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// Defaults of the contract's worker flags.
const (
	DefaultConcurrency = 4
	DefaultAckWait     = 30 * time.Second
	DefaultMaxDeliver  = 5
	defaultDrainGrace  = 10 * time.Second
	ioTimeout          = 5 * time.Second
)

// Worker serves tools from the jobs stream.
type Worker struct {
	nc    *nats.Conn
	js    jetstream.JetStream
	log   *slog.Logger
	tools map[string]Tool

	name        string
	concurrency int
	ackWait     time.Duration
	maxDeliver  int
	drainGrace  time.Duration

	cancels *runtime.Cancels
	obs     observer
}

// Option configures a Worker.
type Option func(*Worker) error

// WithConcurrency sets how many calls of each tool the worker runs at once
// (default 4). Slots are per tool, so a slow tool never starves a fast one.
func WithConcurrency(n int) Option {
	return func(w *Worker) error {
		if n < 1 {
			return fmt.Errorf("tools: concurrency must be ≥ 1, got %d", n)
		}
		w.concurrency = n
		return nil
	}
}

// WithAckWait sets how long a job stays with a worker without a heartbeat
// before it is handed to another (default 30 s).
func WithAckWait(d time.Duration) Option {
	return func(w *Worker) error {
		if d < 100*time.Millisecond {
			return fmt.Errorf("tools: ack wait must be ≥ 100ms, got %s", d)
		}
		w.ackWait = d
		return nil
	}
}

// WithMaxDeliver sets how many times a job is delivered before the worker
// side answers it with an error result (default 5).
func WithMaxDeliver(n int) Option {
	return func(w *Worker) error {
		if n < 1 {
			return fmt.Errorf("tools: max deliver must be ≥ 1, got %d", n)
		}
		w.maxDeliver = n
		return nil
	}
}

// WithName names the worker in results (default host-pid).
func WithName(name string) Option {
	return func(w *Worker) error {
		if !events.ValidID(name) {
			return fmt.Errorf("tools: worker name %q must match %s", name, "[A-Za-z0-9_-]{1,64}")
		}
		w.name = name
		return nil
	}
}

// WithDrainGrace sets how long running calls may go on after Run's context
// ends (default 10 s); a call still running then is handed back unanswered.
func WithDrainGrace(d time.Duration) Option {
	return func(w *Worker) error {
		w.drainGrace = d
		return nil
	}
}

// NewWorker returns a worker for tools. Run starts serving them.
func NewWorker(nc *nats.Conn, js jetstream.JetStream, log *slog.Logger, tools []Tool, opts ...Option) (*Worker, error) {
	host, _ := os.Hostname()
	w := &Worker{nc: nc, js: js, log: log, tools: map[string]Tool{},
		name:        sanitize(fmt.Sprintf("%s-%d", host, os.Getpid())),
		concurrency: DefaultConcurrency, ackWait: DefaultAckWait, maxDeliver: DefaultMaxDeliver,
		drainGrace: defaultDrainGrace, cancels: runtime.NewCancels()}
	for _, t := range tools {
		s := t.Spec()
		if !events.ValidID(s.Name) {
			return nil, fmt.Errorf("tools: tool name %q must match [A-Za-z0-9_-]{1,64}", s.Name)
		}
		if _, dup := w.tools[s.Name]; dup {
			return nil, fmt.Errorf("tools: tool %q given twice", s.Name)
		}
		if err := schemas.CheckParameters(s.Parameters); len(s.Parameters) > 0 && err != nil {
			return nil, fmt.Errorf("tools: tool %s: %w", s.Name, err)
		}
		w.tools[s.Name] = t
	}
	if len(w.tools) == 0 {
		return nil, errors.New("tools: a worker needs at least one tool")
	}
	for _, opt := range opts {
		if err := opt(w); err != nil {
			return nil, err
		}
	}
	w.obs.setup(w)
	return w, nil
}

// Name is the worker's name in results and the registry.
func (w *Worker) Name() string { return w.name }

// Run serves the tools until ctx ends, then stops taking jobs, lets running
// calls finish within the drain grace, withdraws its tools and returns.
func (w *Worker) Run(ctx context.Context) error {
	err := w.run(ctx)
	if err != nil && ctx.Err() != nil {
		// Stopped while still setting up: a graceful stop like any other.
		return nil
	}
	return err
}

func (w *Worker) run(ctx context.Context) error {
	setup, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	if err := runtime.EnsureStreams(setup, w.js); err != nil {
		return err
	}
	reg, err := newRegistry(setup, w.js, w.name, w.specs())
	if err != nil {
		return err
	}
	consumers := map[string]jetstream.Consumer{}
	for name := range w.tools {
		c, err := w.js.CreateOrUpdateConsumer(setup, events.StreamJobs, jetstream.ConsumerConfig{
			Durable:       events.ToolConsumer(name),
			FilterSubject: events.ToolSubject(name),
			AckPolicy:     jetstream.AckExplicitPolicy,
			AckWait:       w.ackWait,
			MaxDeliver:    w.maxDeliver,
			MaxAckPending: 10_000,
		})
		if err != nil {
			return fmt.Errorf("tools: consumer %s: %w", events.ToolConsumer(name), err)
		}
		consumers[name] = c
	}
	cancelSub, err := w.nc.Subscribe(events.CancelSubject("*"), func(m *nats.Msg) {
		w.cancels.Cancel(runtime.TurnOf(m.Subject))
	})
	if err != nil {
		return fmt.Errorf("tools: subscribe cancels: %w", err)
	}
	defer func() { _ = cancelSub.Unsubscribe() }()
	advisories, err := w.nc.Subscribe(maxDeliveriesSubject("*"), w.gaveUp)
	if err != nil {
		return fmt.Errorf("tools: subscribe advisories: %w", err)
	}
	defer func() { _ = advisories.Unsubscribe() }()
	if err := reg.advertise(setup); err != nil {
		return err
	}

	var wg sync.WaitGroup
	wg.Go(func() { reg.keepAlive(ctx, w.log) })
	for name, c := range consumers {
		for range w.concurrency {
			wg.Go(func() { w.pull(ctx, name, c) })
		}
	}
	w.obs.ready.Store(true)
	w.log.Info("serving", "worker", w.name, "tools", len(w.tools), "concurrency", w.concurrency)
	wg.Wait()
	w.obs.ready.Store(false)
	wctx, wcancel := context.WithTimeout(context.Background(), ioTimeout)
	defer wcancel()
	if err := reg.withdraw(wctx); err != nil {
		w.log.Warn("could not withdraw tools; they expire on their own", "err", err)
	}
	return nil
}

func (w *Worker) specs() []events.ToolSpec {
	out := make([]events.ToolSpec, 0, len(w.tools))
	for _, t := range w.tools {
		out = append(out, t.Spec())
	}
	slices.SortFunc(out, func(a, b events.ToolSpec) int { return strings.Compare(a.Name, b.Name) })
	return out
}

// pull is one slot of a tool: it asks for a job only when it can run it at
// once, so no job waits in a buffer while its ack timer runs.
func (w *Worker) pull(ctx context.Context, tool string, c jetstream.Consumer) {
	runtime.PullEach(ctx, c, w.log.With("tool", tool), func(msg jetstream.Msg) { w.handle(ctx, tool, msg) })
}

// handle runs one job and answers it. Every path ends in exactly one of: a
// result published then the job acknowledged; a dead letter then Term; or a
// Nak that hands the job to the next delivery.
func (w *Worker) handle(stop context.Context, tool string, msg jetstream.Msg) {
	if stop.Err() != nil {
		// A job that arrived as the worker began to stop: no new call
		// starts during a drain, so it goes back for another worker now
		// rather than after the ack wait.
		_ = msg.Nak()
		return
	}
	attempt := 1
	if md, err := msg.Metadata(); err == nil {
		attempt = int(md.NumDelivered)
	}
	var job events.ToolJob
	if err := schemas.Validate("tool_job", msg.Data()); err != nil {
		w.reject(msg, err.Error())
		return
	}
	if err := json.Unmarshal(msg.Data(), &job); err != nil {
		w.reject(msg, err.Error())
		return
	}
	if job.Tool != tool {
		w.reject(msg, fmt.Sprintf("job for tool %q on the subject of %q", job.Tool, tool))
		return
	}
	log := w.log.With("turn", job.TurnID, "call", job.CallID, "tool", tool, "attempt", attempt)

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	if !job.Deadline.IsZero() {
		var dcancel context.CancelFunc
		ctx, dcancel = context.WithDeadline(ctx, job.Deadline)
		defer dcancel()
	}
	var aborted atomic.Bool
	forget := w.cancels.Add(job.TurnID, func() { aborted.Store(true); cancel() })
	defer forget()
	// On shutdown a call gets drainGrace to finish before it is cut short.
	grace := context.AfterFunc(stop, func() {
		t := time.AfterFunc(w.drainGrace, cancel)
		context.AfterFunc(ctx, func() { t.Stop() })
	})
	defer grace()
	beat := runtime.Heartbeat(ctx, msg, w.ackWait/3)
	defer beat()

	began := time.Now()
	run := w.obs.begin(msg, &job, w.name, attempt)
	var res Result
	var err error
	if deadlinePassed(job.Deadline) {
		// The turn has given up on this call already; running it now
		// would only do work nobody sees.
		err = context.DeadlineExceeded
	} else {
		res, err = w.call(ctx, tool, job.Arguments)
	}
	duration := time.Since(began)
	switch {
	case err == nil:
	case aborted.Load():
		// The turn has finished: nobody waits for this result.
		log.Info("call aborted with its turn")
		run.end(metrics.Aborted, duration)
		_ = msg.Ack()
		return
	case stop.Err() != nil && ctx.Err() != nil && !deadlinePassed(job.Deadline):
		log.Info("call cut short by shutdown; handed back")
		run.end(metrics.HandedBack, duration)
		_ = msg.Nak()
		return
	case deadlinePassed(job.Deadline):
		res = Result{Output: fmt.Sprintf("%s: the call's deadline passed after %s", tool, duration.Round(time.Millisecond)), IsError: true}
	default:
		res = Result{Output: err.Error(), IsError: true}
	}
	r := events.ToolResult{TurnID: job.TurnID, CallID: job.CallID, Tool: tool, Output: truncate(res.Output),
		IsError: res.IsError, Final: res.Final, DurationMs: duration.Milliseconds(), Worker: w.name, Attempt: attempt}
	run.end(callOutcome(err, r.IsError, job.Deadline), duration)
	if err := w.answer(msg, r, log); err != nil {
		log.Warn("cannot publish a result; the job will be redelivered", "err", err)
		_ = msg.NakWithDelay(time.Second)
		return
	}
	if err := msg.Ack(); err != nil {
		log.Debug("ack failed; a redelivery's result is deduplicated", "err", err)
	}
}

// call runs a tool, turning invalid arguments and panics into error results
// rather than a dead worker.
func (w *Worker) call(ctx context.Context, tool string, args json.RawMessage) (res Result, err error) {
	if err := schemas.ValidateArgs(w.tools[tool].Spec().Parameters, args); err != nil {
		return Result{Output: fmt.Sprintf("error: invalid arguments for %s: %v", tool, err), IsError: true}, nil
	}
	defer func() {
		if p := recover(); p != nil {
			w.log.Error("tool panicked", "tool", tool, "panic", p, "stack", string(debug.Stack()))
			res, err = Result{Output: fmt.Sprintf("%s: internal error: %v", tool, p), IsError: true}, nil
		}
	}()
	return w.tools[tool].Call(ctx, args)
}

// How often, and how far apart, answer tries to publish a result.
const (
	publishTries = 5
	publishPause = time.Second
)

// answer publishes a call's result, trying again when a publish fails. A
// publish whose acknowledgement was lost may well have stored the result,
// and a job handed back would run its call a second time (a shell command,
// a write); the same result published again under its message id is
// dropped as a duplicate. The job is heartbeated meanwhile, so it stays
// with this worker.
func (w *Worker) answer(msg jetstream.Msg, r events.ToolResult, log *slog.Logger) error {
	beat := runtime.Heartbeat(context.Background(), msg, w.ackWait/3)
	defer beat()
	for try := 1; ; try++ {
		err := w.publish(r)
		if err == nil || try == publishTries {
			return err
		}
		log.Warn("cannot publish a result; trying again", "err", err, "try", try)
		time.Sleep(publishPause)
	}
}

func deadlinePassed(d time.Time) bool { return !d.IsZero() && !time.Now().Before(d) }

func (w *Worker) publish(r events.ToolResult) error {
	// Without HTML escaping an output of '<' and '&' keeps its size: a
	// capped output must still fit in one message.
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(r); err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(context.Background(), ioTimeout)
	defer cancel()
	_, err := w.js.Publish(ctx, events.ResultSubject(r.TurnID), bytes.TrimSuffix(buf.Bytes(), []byte("\n")), jetstream.WithMsgID("result:"+r.CallID))
	return err
}

// reject keeps a job no worker can run in the dead-letter stream. When the
// job names its call, the turn also gets an error result, so it does not
// wait for its deadline.
func (w *Worker) reject(msg jetstream.Msg, reason string) {
	w.log.Warn("dead letter", "subject", msg.Subject(), "reason", reason)
	var ids struct {
		TurnID string `json:"turn_id"`
		CallID string `json:"call_id"`
	}
	if json.Unmarshal(msg.Data(), &ids) == nil && events.ValidID(ids.TurnID) && events.ValidID(ids.CallID) {
		tool := runtime.TurnOf(msg.Subject())
		if err := w.publish(events.ToolResult{TurnID: ids.TurnID, CallID: ids.CallID, Tool: tool,
			Output: "invalid job: " + reason, IsError: true, Worker: w.name, Attempt: 1}); err != nil {
			_ = msg.NakWithDelay(time.Second)
			return
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), ioTimeout)
	defer cancel()
	if err := runtime.DeadLetter(ctx, w.js, msg, "job", reason); err != nil {
		w.log.Warn("cannot dead-letter a job", "err", err)
		_ = msg.NakWithDelay(time.Second)
		return
	}
	w.obs.metrics.DeadLetter("job")
	_ = msg.TermWithReason(reason)
}

func sanitize(s string) string {
	b := []byte(s)
	for i, c := range b {
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '-' || c == '_') {
			b[i] = '-'
		}
	}
	if len(b) > 64 {
		b = b[:64]
	}
	return string(b)
}
