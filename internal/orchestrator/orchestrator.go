package orchestrator

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"hash/fnv"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/google/uuid"
	"github.com/jetloop/jetloop/internal/agents"
	"github.com/jetloop/jetloop/internal/bus"
	"github.com/jetloop/jetloop/internal/events"
	"github.com/jetloop/jetloop/internal/fsm"
	"github.com/jetloop/jetloop/internal/metrics"
	"github.com/jetloop/jetloop/internal/model"
	"github.com/jetloop/jetloop/internal/tracing"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"golang.org/x/sync/errgroup"
)

// defaultIOTimeout bounds every JetStream call that has no deadline of its
// own.
const defaultIOTimeout = 5 * time.Second

// Orchestrator consumes the inbox and advances turns: for each input it loads
// the turn's state, asks the pure machine what happens, appends the events,
// publishes the jobs the new state waits on, arms its timers, and only then
// acknowledges the input.
type Orchestrator struct {
	nc     *nats.Conn
	js     jetstream.JetStream
	log    *slog.Logger
	agents *agents.Set

	shards     int
	cacheSize  int
	ackWait    time.Duration
	runners    int
	providers  map[string]model.Provider
	scripts    scriptPolicy
	beforeAck  func(stage string) error
	drainGrace time.Duration

	store   *bus.Store
	tools   *toolCatalog
	timers  *timers
	history *historyCache
	cancels *bus.Cancels
	calls   *calls
	// stranded are inputs whose deliveries ran out while no dead letter
	// could be written.
	stranded *stranded
	// checkpoints is KV JETLOOP_CHECKPOINTS, the workflows' last checkpoints.
	checkpoints jetstream.KeyValue

	metrics *metrics.Metrics // nil: metrics off
	tracer  *tracing.Tracer  // nil: tracing off
	ready   atomic.Bool      // set up and serving, for /readyz
}

// Option configures an Orchestrator.
type Option func(*Orchestrator) error

// WithShards sets how many turns are advanced in parallel (default 16). One
// turn is only ever advanced by one shard of a process.
func WithShards(n int) Option {
	return func(o *Orchestrator) error {
		if n < 1 {
			return fmt.Errorf("orchestrator: shards must be ≥ 1, got %d", n)
		}
		o.shards = n
		return nil
	}
}

// WithCacheSize bounds the turn states kept in memory (default 100,000).
func WithCacheSize(n int) Option {
	return func(o *Orchestrator) error {
		if n < 1 {
			return fmt.Errorf("orchestrator: cache size must be ≥ 1, got %d", n)
		}
		o.cacheSize = n
		return nil
	}
}

// WithAckWait sets how long an input or model job stays with a process that
// took it before JetStream hands it to another (default 30s): the time a
// crashed orchestrator delays its turns.
func WithAckWait(d time.Duration) Option {
	return func(o *Orchestrator) error {
		if d < 100*time.Millisecond {
			return fmt.Errorf("orchestrator: ack wait must be ≥ 100ms, got %s", d)
		}
		o.ackWait = d
		return nil
	}
}

// WithModelRunners sets how many model calls run at once (default 32); 0 runs
// no model runners in this process.
func WithModelRunners(n int) Option {
	return func(o *Orchestrator) error {
		if n < 0 {
			return fmt.Errorf("orchestrator: model runners must be ≥ 0, got %d", n)
		}
		o.runners = n
		return nil
	}
}

// WithProvider registers a model provider under its prefix ("openai",
// "anthropic"); the scripted model is always there.
func WithProvider(name string, p model.Provider) Option {
	return func(o *Orchestrator) error {
		o.providers[name] = p
		return nil
	}
}

// WithDrainGrace bounds how long a graceful stop waits for in-flight work.
func WithDrainGrace(d time.Duration) Option {
	return func(o *Orchestrator) error {
		o.drainGrace = d
		return nil
	}
}

// Crash stages, where a test can stop the orchestrator abruptly.
const (
	StageAppended  = "appended"  // events appended, no job published
	StagePublished = "published" // jobs published, input not acknowledged
)

// WithCrashHook calls hook after each stage of an input; when it returns an
// error the input is left as it is (not acknowledged, nothing more done), as
// if the process had died there. Crash tests use it.
func WithCrashHook(hook func(stage string) error) Option {
	return func(o *Orchestrator) error {
		o.beforeAck = hook
		return nil
	}
}

// New makes an orchestrator for the agents in set.
func New(nc *nats.Conn, js jetstream.JetStream, log *slog.Logger, set *agents.Set, opts ...Option) (*Orchestrator, error) {
	o := &Orchestrator{
		nc: nc, js: js, log: log, agents: set,
		shards: 16, cacheSize: 100_000, ackWait: bus.DefaultAckWait, runners: 32,
		providers:  map[string]model.Provider{"script": model.Scripted{}},
		drainGrace: 10 * time.Second,
		cancels:    bus.NewCancels(),
		calls:      newCalls(),
		stranded:   newStranded(),
	}
	for _, opt := range opts {
		if err := opt(o); err != nil {
			return nil, err
		}
	}
	o.observeSetup()
	return o, nil
}

// Run serves until ctx is cancelled, then stops gracefully: the input being
// handled is finished and acknowledged, inputs not yet started are handed
// back, and model calls get drainGrace to finish.
func (o *Orchestrator) Run(ctx context.Context) error {
	err := o.run(ctx)
	if err != nil && ctx.Err() != nil {
		// Stopped while still setting up: a graceful stop like any other.
		return nil
	}
	return err
}

func (o *Orchestrator) run(ctx context.Context) error {
	setup, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	if err := bus.EnsureStreams(setup, o.js); err != nil {
		return err
	}
	var err error
	if o.store, err = bus.NewStore(setup, o.js); err != nil {
		return err
	}
	if o.tools, err = watchTools(ctx, o.js); err != nil {
		return err
	}
	if o.checkpoints, err = o.js.KeyValue(setup, bus.BucketCheckpoints); err != nil {
		return fmt.Errorf("orchestrator: bucket %s: %w", bus.BucketCheckpoints, err)
	}
	o.history = newHistoryCache(o.store, 1024)
	o.timers = newTimers(o.nc, o.js, o.log)
	defer o.timers.stopAll()

	inbox, err := o.js.CreateOrUpdateConsumer(setup, events.StreamInbox, bus.InboxConsumerConfig(o.ackWait))
	if err != nil {
		return fmt.Errorf("orchestrator: inbox consumer: %w", err)
	}
	// Whether another orchestrator is alive is judged once, by its pull on
	// the inbox: its model runners may all be busy in long calls, with no
	// pull waiting on the model jobs, and those calls must not run twice.
	alone, err := alone(setup, inbox)
	if err != nil {
		return err
	}
	if alone {
		if err := o.reclaim(setup, events.StreamInbox, inbox); err != nil {
			return err
		}
	}
	cancelSub, err := o.nc.Subscribe(events.CancelSubject("*"), func(m *nats.Msg) {
		o.cancels.Cancel(bus.TurnOf(m.Subject))
	})
	if err != nil {
		return fmt.Errorf("orchestrator: subscribe cancels: %w", err)
	}
	defer func() { _ = cancelSub.Unsubscribe() }()
	exhausted, err := o.watchExhausted()
	if err != nil {
		return err
	}
	defer func() { _ = exhausted.Unsubscribe() }()

	if err := o.rearm(setup, alone); err != nil {
		return err
	}

	g, gctx := errgroup.WithContext(ctx)
	if o.runners > 0 {
		r, err := newModelRunners(setup, o, alone)
		if err != nil {
			return err
		}
		g.Go(func() error { return r.run(gctx) })
	}
	g.Go(func() error { return o.serve(gctx, inbox) })
	g.Go(func() error { return o.retryStranded(gctx, strandedInterval) })
	o.ready.Store(true)
	defer o.ready.Store(false)
	o.log.Info("serving", "agents", o.agents.Names(), "shards", o.shards, "model_runners", o.runners)
	return g.Wait()
}

// serve pulls inputs and hands each to the shard that owns its turn, so one
// turn's inputs are handled in order while other turns go on in parallel.
func (o *Orchestrator) serve(ctx context.Context, inbox jetstream.Consumer) error {
	it, err := inbox.Messages(jetstream.PullMaxMessages(4 * o.shards))
	if err != nil {
		return fmt.Errorf("orchestrator: consume inbox: %w", err)
	}
	shards := make([]*shard, o.shards)
	var wg sync.WaitGroup
	var stopping atomic.Bool
	for i := range shards {
		shards[i] = &shard{o: o, in: newQueue(), cache: map[string]*entry{}, flows: map[string]*flow{}, stopping: &stopping}
		wg.Add(1)
		go func() {
			defer wg.Done()
			shards[i].run()
		}()
	}
	stop := context.AfterFunc(ctx, it.Stop)
	defer stop()
	for {
		msg, err := it.Next()
		if err != nil {
			stopping.Store(true)
			for _, s := range shards {
				s.in.close()
			}
			wg.Wait()
			if ctx.Err() != nil || errors.Is(err, jetstream.ErrMsgIteratorClosed) {
				return nil
			}
			return fmt.Errorf("orchestrator: consume inbox: %w", err)
		}
		shards[o.shardOf(msg, len(shards))].in.push(msg)
	}
}

func (o *Orchestrator) shardOf(msg jetstream.Msg, n int) int {
	_, turn, _ := events.InboxKind(msg.Subject())
	if turn == "" {
		var s struct {
			TurnID     string `json:"turn_id"`
			WorkflowID string `json:"workflow_id"`
		}
		_ = json.Unmarshal(msg.Data(), &s) // an invalid submit goes anywhere
		turn = s.TurnID + s.WorkflowID
	}
	h := fnv.New32a()
	h.Write([]byte(turn))
	return int(h.Sum32() % uint32(n))
}

// alone reports whether no other orchestrator serves the inbox: a live one
// keeps a pull waiting on it while it has room for inputs.
func alone(ctx context.Context, inbox jetstream.Consumer) (bool, error) {
	info, err := inbox.Info(ctx)
	if err != nil {
		return false, fmt.Errorf("orchestrator: consumer %s: %w", bus.InboxConsumer, err)
	}
	return info.NumWaiting == 0, nil
}

// reclaim hands back at once what a process that died held: inputs and model
// jobs it took and never acknowledged would otherwise wait for their ack
// wait (30 s by default) before anyone takes them again. It is called only
// when no other orchestrator is alive (see alone), so a lone orchestrator
// restarted after a crash goes on at once. Whatever comes again is handled
// as a redelivery: appends are fenced, jobs deduplicated, decisions
// idempotent. A replica so loaded that it had no pull waiting on the inbox
// at that moment may see some inputs or model calls done twice, never lost.
func (o *Orchestrator) reclaim(ctx context.Context, stream string, c jetstream.Consumer) error {
	info, err := c.Info(ctx)
	if err != nil {
		return fmt.Errorf("orchestrator: consumer %s: %w", c.CachedInfo().Name, err)
	}
	if info.NumAckPending == 0 {
		return nil
	}
	if _, err := o.js.ResetConsumer(ctx, stream, info.Name); err != nil {
		return fmt.Errorf("orchestrator: hand back the pending messages of %s: %w", info.Name, err)
	}
	o.log.Info("took back what a stopped process held", "consumer", info.Name, "pending", info.NumAckPending)
	return nil
}

// env is the outside world the pure machine may not reach itself.
func env() fsm.Env {
	return fsm.Env{Now: time.Now().UTC(), NewID: func() string { return uuid.Must(uuid.NewV7()).String() }}
}

// rearm arms the timers of every unfinished turn from the log, and caches
// nothing: a turn is folded again when its next input comes. It also counts
// them for the metrics when this process is alone.
func (o *Orchestrator) rearm(ctx context.Context, alone bool) error {
	subjects, err := o.store.Subjects(ctx, "jetloop.events.>")
	if err != nil {
		return err
	}
	n, paused := 0, 0
	for subj := range subjects {
		turn := bus.TurnOf(subj)
		last, _, ok, err := o.store.Last(ctx, turn)
		if err != nil {
			// Whatever else an admin put in the stream must not keep every
			// other turn from being served.
			o.log.Warn("cannot re-arm the timers of a turn", "turn", turn, "err", err)
			continue
		}
		if !ok || last.Type == events.TurnFinished || last.Type == events.WorkflowFinished {
			continue
		}
		if last.Type.Workflow() {
			st, _, err := o.store.LoadWorkflow(ctx, turn)
			if err != nil {
				o.log.Warn("cannot re-arm the deadline of a workflow", "workflow", turn, "err", err)
				continue
			}
			o.timers.arm(st.ID, workflowTimers(st))
			continue
		}
		st, _, err := o.store.Load(ctx, turn)
		if err != nil {
			o.log.Warn("cannot re-arm the timers of a turn", "turn", turn, "err", err)
			continue
		}
		o.timers.set(st)
		n++
		paused += b2i(st.Phase == fsm.PhasePaused)
	}
	o.seedTurns(alone, n, paused)
	if n > 0 {
		o.log.Info("re-armed the timers of unfinished turns", "turns", n)
	}
	return nil
}
