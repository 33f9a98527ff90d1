package worker

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

	"github.com/jetloop/jetloop/internal/backoff"
	"github.com/jetloop/jetloop/internal/bus"

	"github.com/jetloop/jetloop/internal/events"
	"github.com/jetloop/jetloop/internal/output"
	"github.com/jetloop/jetloop/schemas"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"go.opentelemetry.io/otel/trace"
)

// Defaults of the options, the same as the toolworker's flags.
const (
	DefaultConcurrency = 4
	DefaultAckWait     = 30 * time.Second
	DefaultMaxDeliver  = 5
	DefaultDrainGrace  = 10 * time.Second
	ioTimeout          = 5 * time.Second
)

// Errors of the worker's configuration, for errors.Is.
var (
	// ErrInvalidName: a worker, tool or hook name that does not match
	// [A-Za-z0-9_-]{1,64}, the names that fit in a subject.
	ErrInvalidName = errors.New("invalid name")
	// ErrDuplicate: a tool or hook of this name is registered already.
	ErrDuplicate = errors.New("registered twice")
	// ErrRunning: Run was called twice, or a tool or hook registered once
	// Run had started.
	ErrRunning = errors.New("the worker runs already")
	// ErrNoTools: Run was called with neither a tool nor a hook registered.
	ErrNoTools = errors.New("worker: no tools: register them with Handle (or hooks with HandleHook) before Run")
)

// MaxOutput bounds a result's output (256 KiB): a longer one is cut to fit,
// with a note that says how much was dropped. A model cannot use more, and a
// result must fit in one NATS message.
const MaxOutput = output.Max

// options are a worker's settings; New fills in the defaults.
type options struct {
	name           string
	concurrency    int
	ackWait        time.Duration
	maxDeliver     int
	drainGrace     time.Duration
	logger         *slog.Logger
	apiPrefix      string
	metrics        Metrics
	tracerProvider trace.TracerProvider
}

// Option configures a Worker.
type Option func(*Worker) error

// WithName names the worker in results and the registry (default
// host-pid); it must match [A-Za-z0-9_-]{1,64}.
func WithName(name string) Option {
	return func(w *Worker) error {
		if !events.ValidID(name) {
			return fmt.Errorf("worker: name %q must match [A-Za-z0-9_-]{1,64}: %w", name, ErrInvalidName)
		}
		w.opts.name = name
		return nil
	}
}

// WithConcurrency sets how many calls of each tool the worker runs at once
// (default 4). Slots are per tool, so a slow tool never starves a fast
// one, and a slot asks for a job only when it is free.
func WithConcurrency(n int) Option {
	return func(w *Worker) error {
		if n < 1 {
			return fmt.Errorf("worker: concurrency must be ≥ 1, got %d", n)
		}
		w.opts.concurrency = n
		return nil
	}
}

// WithAckWait sets how long a job stays with this worker without a
// heartbeat before it goes to another (default 30 s, at least 100 ms).
// Running calls are heartbeated every third of it, so it bounds how long a
// dead worker holds a job, not how long a call may run. All workers of a
// tool share one consumer: the last one to start sets it.
func WithAckWait(d time.Duration) Option {
	return func(w *Worker) error {
		if d < 100*time.Millisecond {
			return fmt.Errorf("worker: ack wait must be ≥ 100ms, got %s", d)
		}
		w.opts.ackWait = d
		return nil
	}
}

// WithMaxDeliver sets how many times a job is delivered before the worker
// side answers it with an error result (default 5).
func WithMaxDeliver(n int) Option {
	return func(w *Worker) error {
		if n < 1 {
			return fmt.Errorf("worker: max deliver must be ≥ 1, got %d", n)
		}
		w.opts.maxDeliver = n
		return nil
	}
}

// WithDrainGrace sets how long running calls may go on once Run's context
// ends (default 10 s); a call still running then is cut short and its job
// handed back for another worker.
func WithDrainGrace(d time.Duration) Option {
	return func(w *Worker) error {
		if d <= 0 {
			return fmt.Errorf("worker: drain grace must be > 0, got %s", d)
		}
		w.opts.drainGrace = d
		return nil
	}
}

// WithLogger gives the worker's warnings and errors to log (default
// slog.Default()).
func WithLogger(log *slog.Logger) Option {
	return func(w *Worker) error {
		if log == nil {
			return errors.New("worker: nil logger")
		}
		w.opts.logger = log
		return nil
	}
}

// WithAPIPrefix sets the JetStream API prefix of the worker's account:
// "JETLOOP.API" for a worker deployment's account of the shipped nats.conf,
// which imports its tools' consumers and keys under it. Without it New
// finds it: the prefix when the account imports it, else $JS.API.
func WithAPIPrefix(prefix string) Option {
	return func(w *Worker) error {
		w.opts.apiPrefix = prefix
		return nil
	}
}

// WithMetrics gives the worker's measurements to m (default none).
func WithMetrics(m Metrics) Option {
	return func(w *Worker) error {
		w.opts.metrics = m
		return nil
	}
}

// WithTracerProvider makes the spans of the calls the worker runs with tp,
// each a child of the orchestrator's span of the call (default none). Pass
// the OpenTelemetry SDK's provider, or any other.
func WithTracerProvider(tp trace.TracerProvider) Option {
	return func(w *Worker) error {
		w.opts.tracerProvider = tp
		return nil
	}
}

// Call is one call of a tool, as its job asks for it.
type Call struct {
	TurnID    string
	SessionID string
	Step      int
	CallID    string
	Tool      string
	// Arguments are the model's, valid against the tool's schema.
	Arguments json.RawMessage
	// Deadline is when the turn stops waiting for the result; the call's
	// context ends then.
	Deadline time.Time
	// Attempt counts the deliveries of the job: more than 1 when a worker
	// died or timed out with it before.
	Attempt int
}

// Result is what a call returns to the model.
type Result struct {
	Output string
	// IsError tells the model the call failed; Output says why.
	IsError bool
	// Final makes Output the turn's answer: the turn stops with
	// synthesis_done.
	Final bool
}

// Func runs a call. A returned error becomes an error result with the
// error's text, which the model sees; so does a panic. When the call's
// context ends because the turn was aborted or the worker is stopping, the
// result is not sent.
type Func func(ctx context.Context, call Call) (Result, error)

// tool is one served tool: what the registry says of it, and its function.
type tool struct {
	spec events.ToolSpec
	fn   Func
}

// Worker serves tools to jetloop turns. Register them with Handle or
// HandleFunc, then Run. Run as many workers of a tool as you like: they share
// its durable consumer tool_<name>.
type Worker struct {
	nc *nats.Conn
	js jetstream.JetStream
	// confined is a worker whose account imports the streams' API under a
	// prefix: one deployment's account, which reaches only its tools.
	confined bool
	log      *slog.Logger
	opts     options
	cancels  *bus.Cancels
	// jobsStream is JETLOOP_JOBS as found at start.
	jobsStream jetstream.StreamConfig
	calls      *bus.Ran[events.ToolResult]

	obs observer
	// directOff is when handing results to their owners directly may be
	// tried again (unix nanoseconds), after one went unanswered.
	directOff atomic.Int64

	mu      sync.Mutex
	tools   map[string]tool
	hooks   map[string]Hook
	running bool
	ready   chan struct{}
}

// New returns a worker on nc with no tools yet. The connection stays the
// caller's; close it after Run returns. Unless WithAPIPrefix says, it asks
// the server once which JetStream API prefix the connection's account uses.
func New(nc *nats.Conn, opts ...Option) (*Worker, error) {
	if nc == nil {
		return nil, errors.New("worker: nil connection")
	}
	w := &Worker{nc: nc, opts: options{concurrency: DefaultConcurrency, ackWait: DefaultAckWait, maxDeliver: DefaultMaxDeliver,
		drainGrace: DefaultDrainGrace, logger: slog.Default()}}
	for _, o := range opts {
		if err := o(w); err != nil {
			return nil, err
		}
	}
	if w.opts.name == "" {
		host, _ := os.Hostname()
		w.opts.name = sanitize(fmt.Sprintf("%s-%d", host, os.Getpid()))
	}
	prefix := w.opts.apiPrefix
	if prefix == "" || prefix == "auto" {
		prefix = bus.DetectAPIPrefix(context.Background(), nc)
	}
	js, err := bus.JetStreamFor(context.Background(), nc, prefix)
	if err != nil {
		return nil, fmt.Errorf("worker: %w", err)
	}
	w.js, w.log = js, w.opts.logger
	w.confined = strings.TrimSuffix(prefix, ".") != bus.DefaultAPIPrefix
	w.cancels, w.calls = bus.NewCancels(), bus.NewRan[events.ToolResult]()
	w.tools, w.hooks, w.ready = map[string]tool{}, map[string]Hook{}, make(chan struct{})
	w.obs.use(w.opts.metrics, w.opts.tracerProvider)
	return w, nil
}

// Name is the worker's name in results and the registry.
func (w *Worker) Name() string { return w.opts.name }

// Ready is closed once Run serves the tools: the registry lists them, so a
// turn that starts now is offered them, and their consumers are bound (a
// confined worker's are bound once an orchestrator has made them; their
// jobs wait in the stream until then). It is never closed when Run fails
// to start.
func (w *Worker) Ready() <-chan struct{} { return w.ready }

// ToolOption sets more of what the registry says of a tool.
type ToolOption func(*tool) error

// WithTimeout advertises how long a call of the tool may take: the
// orchestrator gives each call that deadline (from its own default when
// unset).
func WithTimeout(d time.Duration) ToolOption {
	return func(t *tool) error {
		if d < time.Millisecond {
			return fmt.Errorf("timeout must be ≥ 1ms, got %s", d)
		}
		t.spec.TimeoutMs = d.Milliseconds()
		return nil
	}
}

// Handle registers a tool: its name (as models call it, [A-Za-z0-9_-]{1,64}),
// a description models read to decide when to call it, the JSON Schema of
// its arguments and the function that runs a call. params is a schema given
// as json.RawMessage, []byte, string or map[string]any, or a Go struct (or a
// pointer to one) whose schema Schema derives; nil accepts any object. The
// worker checks every call's arguments against the schema before fn sees
// them, and answers a call that fails it with an error result. Register
// every tool before Run.
func (w *Worker) Handle(name, description string, params any, fn Func, opts ...ToolOption) error {
	if fn == nil {
		return fmt.Errorf("worker: tool %s: nil function", name)
	}
	schema, err := schemaOf(params)
	if err != nil {
		return fmt.Errorf("worker: tool %s: %w", name, err)
	}
	t := tool{spec: events.ToolSpec{Name: name, Description: description, Parameters: schema}, fn: fn}
	for _, opt := range opts {
		if err := opt(&t); err != nil {
			return fmt.Errorf("worker: tool %s: %w", name, err)
		}
	}
	return w.add(t)
}

func (w *Worker) add(t tool) error {
	name := t.spec.Name
	if !events.ValidID(name) {
		return fmt.Errorf("worker: tool name %q must match [A-Za-z0-9_-]{1,64}: %w", name, ErrInvalidName)
	}
	if len(t.spec.Parameters) > 0 {
		if err := schemas.CheckParameters(t.spec.Parameters); err != nil {
			return fmt.Errorf("worker: tool %s: %w", name, err)
		}
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.running {
		return fmt.Errorf("worker: tool %s registered after Run: %w", name, ErrRunning)
	}
	if _, dup := w.tools[name]; dup {
		return fmt.Errorf("worker: tool %s %w", name, ErrDuplicate)
	}
	w.tools[name] = t
	return nil
}

// HandleFunc registers a tool whose arguments are decoded into an Args: its
// schema is Schema of an Args (a struct), so models are told its fields, and
// fn gets the arguments typed. Use Handle for a hand-written schema or to
// see the whole Call.
func HandleFunc[Args any](w *Worker, name, description string, fn func(ctx context.Context, args Args) (Result, error), opts ...ToolOption) error {
	var zero Args
	schema, err := Schema(zero)
	if err != nil {
		return fmt.Errorf("worker: tool %s: %w", name, err)
	}
	if fn == nil {
		return fmt.Errorf("worker: tool %s: nil function", name)
	}
	return w.Handle(name, description, schema, func(ctx context.Context, c Call) (Result, error) {
		var args Args
		if len(c.Arguments) > 0 {
			if err := json.Unmarshal(c.Arguments, &args); err != nil {
				return Result{}, fmt.Errorf("arguments: %w", err)
			}
		}
		return fn(ctx, args)
	}, opts...)
}

// Run serves the tools until ctx ends: it creates (or, confined, binds) each
// tool's durable consumer, advertises the tools in the registry while it
// runs, pulls a job whenever a slot is free, heartbeats running calls and
// answers each with a result. When ctx ends it stops taking jobs, lets
// running calls finish within the drain grace, withdraws its tools and
// returns nil. It returns an error when it cannot start (no tools, the
// streams missing, permissions). Run once.
func (w *Worker) Run(ctx context.Context) error {
	w.mu.Lock()
	if w.running {
		w.mu.Unlock()
		return fmt.Errorf("worker: Run called twice: %w", ErrRunning)
	}
	w.running = true
	n := len(w.tools) + len(w.hooks)
	w.mu.Unlock()
	if n == 0 {
		return ErrNoTools
	}
	err := w.run(ctx)
	if err != nil && ctx.Err() != nil {
		// Stopped while still setting up: a graceful stop like any other.
		return nil
	}
	return err
}

func (w *Worker) run(ctx context.Context) error {
	w.obs.setup(w)
	setup, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	// A worker deployment in an account of its own reaches no stream but
	// its tools' (deploy/accounts.conf): the streams are admin's, and the
	// jobs stream is checked below.
	if !w.confined {
		if err := bus.EnsureStreams(setup, w.js); err != nil {
			return err
		}
	}
	reg, err := newRegistry(setup, w.js, w.opts.name, w.specs())
	if err != nil {
		return err
	}
	jobs, err := w.js.Stream(setup, events.StreamJobs)
	// Jobs kept in memory on one server are gone after its restart (a
	// machine's reboot restarts everything at once) until an orchestrator
	// makes their stream again: wait for it rather than exit.
	for errors.Is(err, jetstream.ErrStreamNotFound) && backoff.Sleep(setup, 250*time.Millisecond) {
		jobs, err = w.js.Stream(setup, events.StreamJobs)
	}
	if err != nil {
		return fmt.Errorf("worker: stream %s: %w", events.StreamJobs, err)
	}
	// What the worker makes again if the server loses it: jobs kept in
	// memory on one server do not survive its restart, stream and all.
	w.jobsStream = jobs.CachedInfo().Config
	// A worker that may make its consumers makes them now; a confined
	// one binds each once the trusted side has made it (see bound).
	consumers := map[string]jetstream.Consumer{}
	hooks := map[string]jetstream.Consumer{}
	if !w.confined {
		for name := range w.tools {
			c, err := w.js.CreateOrUpdateConsumer(setup, events.StreamJobs, w.consumerConfig(name))
			if err != nil {
				return fmt.Errorf("worker: consumer %s: %w", events.ToolConsumer(name), err)
			}
			consumers[name] = c
		}
		for name := range w.hooks {
			c, err := w.js.CreateOrUpdateConsumer(setup, events.StreamJobs, w.hookConsumerConfig(name))
			if err != nil {
				return fmt.Errorf("worker: consumer %s: %w", events.HookConsumer(name), err)
			}
			hooks[name] = c
		}
	}
	cancelSub, err := w.nc.Subscribe(events.CancelSubject("*"), func(m *nats.Msg) {
		// Only the orchestrators' broadcast cancels; a delivery some
		// reader's push consumer aims here does not (bus.IsCancel).
		if !bus.IsCancel(m) {
			return
		}
		w.cancels.Cancel(bus.TurnOf(m.Subject))
	})
	if err != nil {
		return fmt.Errorf("worker: subscribe cancels: %w", err)
	}
	defer func() { _ = cancelSub.Unsubscribe() }()
	// Answering an exhausted job reads and deletes it by sequence, which
	// would reach every deployment's jobs: a confined worker leaves it to
	// the turn's deadline.
	if !w.confined {
		advisories, err := w.nc.Subscribe(maxDeliveriesSubject("*"), w.gaveUp)
		if err != nil {
			return fmt.Errorf("worker: subscribe advisories: %w", err)
		}
		defer func() { _ = advisories.Unsubscribe() }()
	}
	if err := reg.advertise(setup); err != nil {
		return err
	}

	var wg sync.WaitGroup
	wg.Go(func() { reg.keepAlive(ctx, w.log) })
	for name := range w.tools {
		wg.Go(func() {
			c, err := w.bound(ctx, consumers[name], w.consumerConfig(name))
			if err != nil {
				return // stopped while waiting
			}
			for range w.opts.concurrency {
				wg.Go(func() { w.pull(ctx, name, c) })
			}
		})
	}
	for name := range w.hooks {
		wg.Go(func() {
			c, err := w.bound(ctx, hooks[name], w.hookConsumerConfig(name))
			if err != nil {
				return
			}
			for range w.opts.concurrency {
				wg.Go(func() { w.pullHook(ctx, name, c) })
			}
		})
	}
	w.obs.ready.Store(true)
	w.log.Info("serving", "worker", w.opts.name, "tools", len(w.tools), "hooks", len(w.hooks), "concurrency", w.opts.concurrency)
	close(w.ready)
	wg.Wait()
	w.obs.ready.Store(false)
	wctx, wcancel := context.WithTimeout(context.WithoutCancel(ctx), ioTimeout)
	defer wcancel()
	if err := reg.withdraw(wctx); err != nil {
		w.log.Warn("could not withdraw tools; they expire on their own", "err", err)
	}
	return nil
}

// specs are what the registry advertises: each tool under its name, each
// hook under hook.<name> (a key no tool can have, so no orchestrator offers
// a hook to a model).
func (w *Worker) specs() []events.ToolSpec {
	out := make([]events.ToolSpec, 0, len(w.tools)+len(w.hooks))
	for _, t := range w.tools {
		out = append(out, t.spec)
	}
	for name := range w.hooks {
		out = append(out, events.ToolSpec{Name: events.HookKey(name), Description: "a workflow hook (policy.hooks)"})
	}
	slices.SortFunc(out, func(a, b events.ToolSpec) int { return strings.Compare(a.Name, b.Name) })
	return out
}

// pull is one slot of a tool: it asks for a job only when it can run it at
// once, so no job waits in a buffer while its ack timer runs.
func (w *Worker) pull(ctx context.Context, tool string, c jetstream.Consumer) {
	repair := func(ctx context.Context) (jetstream.Consumer, error) { return w.remake(ctx, w.consumerConfig(tool)) }
	bus.PullRepairing(ctx, c, w.log.With("tool", tool), repair, func(msg jetstream.Msg) { w.handle(ctx, tool, msg) })
}

// remake makes a lost consumer again, with its stream; a confined worker
// waits for the trusted side to.
func (w *Worker) remake(ctx context.Context, cfg jetstream.ConsumerConfig) (jetstream.Consumer, error) {
	if w.confined {
		return w.bound(ctx, nil, cfg)
	}
	if err := bus.EnsureStream(ctx, w.js, w.jobsStream); err != nil {
		return nil, err
	}
	return w.js.CreateOrUpdateConsumer(ctx, events.StreamJobs, cfg)
}

// bound returns c, or for a confined worker the consumer cfg names once it
// exists. A worker deployment in an account of its own may not create,
// update or delete consumers (docs/accounts.md): an orchestrator makes a
// tool's or hook's consumer when it sees it advertised, which only the
// deployment granted it can do. It waits until ctx ends.
func (w *Worker) bound(ctx context.Context, c jetstream.Consumer, cfg jetstream.ConsumerConfig) (jetstream.Consumer, error) {
	if c != nil {
		return c, nil
	}
	for wait, logged := 50*time.Millisecond, false; ; wait = min(2*wait, 2*time.Second) {
		ictx, cancel := context.WithTimeout(ctx, ioTimeout)
		c, err := w.js.Consumer(ictx, events.StreamJobs, cfg.Durable)
		cancel()
		if err == nil {
			if got := c.CachedInfo().Config.AckWait; got < w.opts.ackWait {
				w.log.Warn("the consumer's ack wait is shorter than this worker's: heartbeats may come too late",
					"consumer", cfg.Durable, "ack_wait", got, "worker_ack_wait", w.opts.ackWait)
			}
			return c, nil
		}
		if !logged && errors.Is(err, jetstream.ErrConsumerNotFound) {
			w.log.Info("waiting for an orchestrator to make the consumer", "consumer", cfg.Durable)
			logged = true
		} else if !errors.Is(err, jetstream.ErrConsumerNotFound) && ctx.Err() == nil {
			w.log.Warn("cannot bind the consumer", "consumer", cfg.Durable, "err", err)
		}
		if !backoff.Sleep(ctx, wait) {
			return nil, ctx.Err()
		}
	}
}

// consumerConfig is the durable consumer every worker of a tool shares.
func (w *Worker) consumerConfig(tool string) jetstream.ConsumerConfig {
	return bus.JobConsumerConfig(events.ToolConsumer(tool), events.ToolSubject(tool), w.opts.ackWait, w.opts.maxDeliver)
}

// readJob reads a delivered job: how often it was delivered, and its body,
// checked against its schema and decoded. A job that is not one goes to bad
// with the reason, and ok is false.
func readJob[T any](msg jetstream.Msg, schema string, bad func(jetstream.Msg, string)) (job T, attempt int, ok bool) {
	attempt = 1
	if md, err := msg.Metadata(); err == nil {
		attempt = int(md.NumDelivered)
	}
	if err := schemas.Validate(schema, msg.Data()); err != nil {
		bad(msg, err.Error())
		return job, attempt, false
	}
	if err := json.Unmarshal(msg.Data(), &job); err != nil {
		bad(msg, err.Error())
		return job, attempt, false
	}
	return job, attempt, true
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
	job, attempt, ok := readJob[events.ToolJob](msg, "tool_job", w.reject)
	if !ok {
		return
	}
	if job.Tool != tool {
		w.reject(msg, fmt.Sprintf("job for tool %q on the subject of %q", job.Tool, tool))
		return
	}
	log := w.log.With("turn", job.TurnID, "call", job.CallID, "tool", tool, "attempt", attempt)
	// A job for a call this worker ran or runs (its acknowledgement was
	// lost, or the jobs were re-derived after a server restart) is answered
	// with that call's result, not run a second time.
	// Keyed by turn and call: a provider that numbers calls per turn
	// (call_1, call_2, …) gives two turns the same call id.
	key := job.TurnID + ":" + job.CallID
	if r, ok := w.calls.Result(stop, key); ok {
		log.Info("a job for a call this worker ran: its result is sent again")
		if err := w.answer(stop, msg, r, job.Deadline, log); err != nil {
			_ = msg.NakWithDelay(time.Second)
			return
		}
		actx, acancel := context.WithTimeout(context.Background(), w.opts.ackWait)
		defer acancel()
		_ = bus.AckSure(actx, msg)
		return
	}
	done := w.calls.Begin(key)
	var kept *events.ToolResult
	defer func() { done(kept) }()

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
	// On shutdown a call gets the drain grace to finish before it is cut
	// short.
	grace := context.AfterFunc(stop, func() {
		t := time.AfterFunc(w.opts.drainGrace, cancel)
		context.AfterFunc(ctx, func() { t.Stop() })
	})
	defer grace()
	beat := bus.Heartbeat(ctx, msg, w.opts.ackWait/3)
	defer beat()

	began := time.Now()
	run := w.obs.begin(msg, &job, w.opts.name, attempt)
	var res Result
	var err error
	if deadlinePassed(job.Deadline) {
		// The turn has given up on this call already; running it now
		// would only do work nobody sees.
		err = context.DeadlineExceeded
	} else {
		res, err = w.call(ctx, Call{TurnID: job.TurnID, SessionID: job.SessionID, Step: job.Step, CallID: job.CallID,
			Tool: tool, Arguments: job.Arguments, Deadline: job.Deadline, Attempt: attempt})
	}
	duration := time.Since(began)
	switch {
	case err == nil:
	case aborted.Load():
		// The turn has finished: nobody waits for this result.
		log.Info("call aborted with its turn")
		run.end(OutcomeAborted, duration)
		_ = msg.Ack()
		return
	case stop.Err() != nil && ctx.Err() != nil && !deadlinePassed(job.Deadline):
		log.Info("call cut short by shutdown; handed back")
		run.end(OutcomeHandedBack, duration)
		_ = msg.Nak()
		return
	case deadlinePassed(job.Deadline):
		res = Result{Output: fmt.Sprintf("%s: the call's deadline passed after %s", tool, duration.Round(time.Millisecond)), IsError: true}
	default:
		res = Result{Output: err.Error(), IsError: true}
	}
	r := events.ToolResult{TurnID: job.TurnID, CallID: job.CallID, Tool: tool, Output: output.Cap(res.Output),
		IsError: res.IsError, Final: res.Final, DurationMs: duration.Milliseconds(), Worker: w.opts.name, Attempt: attempt}
	run.end(callOutcome(err, r.IsError, job.Deadline), duration)
	kept = &r
	if err := w.answer(stop, msg, r, job.Deadline, log); err != nil {
		log.Warn("cannot publish a result; the job will be redelivered", "err", err)
		_ = msg.NakWithDelay(time.Second)
		return
	}
	// Confirmed, and heartbeated until it is: a lost ack would run the
	// call again after the ack wait.
	actx, acancel := context.WithTimeout(context.Background(), w.opts.ackWait)
	defer acancel()
	keep := bus.Heartbeat(actx, msg, w.opts.ackWait/3)
	defer keep()
	if err := bus.AckSure(actx, msg); err != nil {
		log.Warn("ack not confirmed; a redelivery's result is deduplicated, but the call may run again", "err", err)
	}
}

// call runs a tool, turning invalid arguments and panics into error results
// rather than a dead worker.
func (w *Worker) call(ctx context.Context, c Call) (res Result, err error) {
	t := w.tools[c.Tool]
	if err := schemas.ValidateArgs(t.spec.Parameters, c.Arguments); err != nil {
		return Result{Output: fmt.Sprintf("error: invalid arguments for %s: %v", c.Tool, err), IsError: true}, nil
	}
	defer func() {
		if p := recover(); p != nil {
			w.log.Error("tool panicked", "tool", c.Tool, "panic", p, "stack", string(debug.Stack()))
			res, err = Result{Output: fmt.Sprintf("%s: internal error: %v", c.Tool, p), IsError: true}, nil
		}
	}()
	return t.fn(ctx, c)
}

// How far apart answer tries to publish a result: from the first pause to
// the longest.
const (
	publishPause    = 250 * time.Millisecond
	publishPauseMax = 5 * time.Second
)

// directWait bounds how long a worker waits for the owner of a call's turn
// to answer a result handed to it directly before it publishes the result
// to the inbox: far above an append's time, far below a call's.
const directWait = 2 * time.Second

// directPause is how long a worker hands no result directly after one went
// unanswered: an owner failing over, or a deployment whose permissions
// predate direct results, costs one wait, not one for every call.
const directPause = 10 * time.Second

// answer hands a call's result to the orchestrator that owns its turn,
// which answers once the result is in the turn's log (handOver); failing
// that, it publishes the result to the inbox, trying again when a publish
// fails, until it is stored, the call's deadline passes (the turn has answered the
// call itself then), a stop's drain grace runs out or the connection
// closes. A job handed back would run its call a second time (a shell
// command, a write) on whichever worker takes it; a publish whose
// acknowledgement was lost may well have stored the result, and the same
// result published again under its message id is dropped as a duplicate.
// The job is heartbeated meanwhile, so it stays with this worker.
func (w *Worker) answer(stop context.Context, msg jetstream.Msg, r events.ToolResult, deadline time.Time, log *slog.Logger) error {
	beat := bus.Heartbeat(context.Background(), msg, w.opts.ackWait/3)
	defer beat()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	if !deadline.IsZero() {
		var dcancel context.CancelFunc
		ctx, dcancel = context.WithDeadline(ctx, deadline)
		defer dcancel()
	}
	// The tries go on through a drain (the call's work is done; only its
	// answer is left), for its grace.
	defer context.AfterFunc(stop, func() { time.AfterFunc(w.opts.drainGrace, cancel) })()
	data, err := encodeResult(r)
	if err != nil {
		return err
	}
	if w.handOver(r, data) {
		return nil
	}
	return backoff.Policy{First: publishPause, Max: publishPauseMax}.Do(ctx, func(try int) error {
		err := w.publishData(r, data)
		if err != nil && w.nc.IsClosed() {
			return backoff.Permanent(err)
		}
		if err != nil {
			log.Warn("cannot publish a result; trying again", "err", err, "try", try)
		}
		return err
	})
}

func deadlinePassed(d time.Time) bool { return !d.IsZero() && !time.Now().Before(d) }

// handOver hands a result to the orchestrator that owns its turn, as a
// request on jetloop.direct.result@<tool>.<turn_id>, and reports whether it
// answered that the result is in the turn's log. Nothing stores the request:
// an answer that never comes (no owner, an owner that died before or after
// its append) is met by publishing the result to the inbox, where a result
// already applied is a repeat that changes nothing.
func (w *Worker) handOver(r events.ToolResult, data []byte) bool {
	if until := w.directOff.Load(); until != 0 && time.Now().UnixNano() < until {
		return false
	}
	reply, err := w.nc.RequestMsg(&nats.Msg{Subject: events.DirectResultSubject(r.Tool, r.TurnID), Data: data}, directWait)
	switch {
	case errors.Is(err, nats.ErrTimeout):
		w.directOff.Store(time.Now().Add(directPause).UnixNano())
		return false
	case err != nil:
		// No responders, a result too big for one message, a
		// connection closing: the inbox takes it, or says why not.
		return false
	}
	return reply.Header.Get(events.HeaderError) == ""
}

// encodeResult is a result as it goes on the wire. Without HTML escaping
// an output of '<' and '&' keeps its size: a capped output must still fit
// in one message.
func encodeResult(r events.ToolResult) ([]byte, error) {
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(r); err != nil {
		return nil, err
	}
	return bytes.TrimSuffix(buf.Bytes(), []byte("\n")), nil
}

// publish publishes a result to the inbox.
func (w *Worker) publish(r events.ToolResult) error {
	data, err := encodeResult(r)
	if err != nil {
		return err
	}
	return w.publishData(r, data)
}

func (w *Worker) publishData(r events.ToolResult, data []byte) error {
	ctx, cancel := context.WithTimeout(context.Background(), ioTimeout)
	defer cancel()
	_, err := w.js.Publish(ctx, events.ToolResultSubject(r.Tool, r.TurnID), data, jetstream.WithMsgID(events.ResultID(r.TurnID, r.CallID)))
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
		tool := bus.TurnOf(msg.Subject())
		if err := w.publish(events.ToolResult{TurnID: ids.TurnID, CallID: ids.CallID, Tool: tool,
			Output: "invalid job: " + reason, IsError: true, Worker: w.opts.name, Attempt: 1}); err != nil {
			_ = msg.NakWithDelay(time.Second)
			return
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), ioTimeout)
	defer cancel()
	if err := bus.DeadLetter(ctx, w.js, msg, "job", reason); err != nil {
		w.log.Warn("cannot dead-letter a job", "err", err)
		_ = msg.NakWithDelay(time.Second)
		return
	}
	w.obs.deadLetter("job")
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
