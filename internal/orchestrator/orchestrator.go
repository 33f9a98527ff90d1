package orchestrator

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"hash/fnv"
	"log/slog"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/google/uuid"
	"github.com/jetloop/jetloop/internal/agents"
	"github.com/jetloop/jetloop/internal/bus"
	"github.com/jetloop/jetloop/internal/events"
	"github.com/jetloop/jetloop/internal/fsm"
	"github.com/jetloop/jetloop/internal/logstore"
	"github.com/jetloop/jetloop/internal/model"
	"github.com/jetloop/jetloop/internal/workflow"
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
	nc  *nats.Conn
	js  jetstream.JetStream
	log *slog.Logger
	cfg settings

	store   *logstore.Store
	cancels *bus.Cancels
	// runner makes model calls (nil with no model runners); serving are
	// the shards while they serve, to which it hands the answers of calls
	// made here.
	runner  *modelRunners
	serving atomic.Pointer[[]*shard]
	// jobsStream is JETLOOP_JOBS as found at start: made again as it was
	// if the server loses it.
	jobsStream jetstream.StreamConfig

	// The parts: which partitions this process pulls from (owner), what
	// a tenant may start (admit), what a submission resolves against
	// (starter), what a decision makes happen (eff), the metrics and spans
	// (obs) and the dead letters (graves).
	owner   *ownership
	admit   *admission
	starter *starter
	eff     *effects
	obs     *observer
	graves  *graves

	ready atomic.Bool // set up and serving, for /readyz
}

// Option configures an Orchestrator.
type Option func(*Orchestrator) error

// settings are how a process serves, as its options set them.
type settings struct {
	shards     int
	cacheSize  int
	ackWait    time.Duration
	runners    int
	beforeAck  func(stage string) error
	drainGrace time.Duration
}

// DefaultShards is how many inputs of different turns a process handles at
// once. A shard holds an input through its synced append, so it is sized
// for inputs waiting on the server, not for cores; more shards cost memory
// per paused turn (BENCHMARKS.md).
const DefaultShards = 64

// submissionsBuffer is how many submissions a process pulls ahead of its
// shards: enough to keep them busy in a burst, few enough to leave the rest
// of a burst to the other orchestrators sharing the consumer.
const submissionsBuffer = 64

// WithShards sets how many turns are advanced in parallel (default
// DefaultShards). One turn is only ever advanced by one shard of a process.
func WithShards(n int) Option {
	return func(o *Orchestrator) error {
		if n < 1 {
			return fmt.Errorf("orchestrator: shards must be ≥ 1, got %d", n)
		}
		o.cfg.shards = n
		return nil
	}
}

// WithCacheSize bounds the turn states kept in memory (default 100,000).
func WithCacheSize(n int) Option {
	return func(o *Orchestrator) error {
		if n < 1 {
			return fmt.Errorf("orchestrator: cache size must be ≥ 1, got %d", n)
		}
		o.cfg.cacheSize = n
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
		o.cfg.ackWait = d
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
		o.cfg.runners = n
		return nil
	}
}

// WithProvider registers a model provider under its prefix ("openai",
// "anthropic"); the scripted model is always there.
func WithProvider(name string, p model.Provider) Option {
	return func(o *Orchestrator) error {
		o.obs.providers[name] = p
		return nil
	}
}

// WithName sets this orchestrator's name among the live ones (default:
// host-pid). A restarted process that keeps its name, or runs on the same
// machine as the one it replaces, takes over its partitions at once; two
// live processes may not share one.
func WithName(name string) Option {
	return func(o *Orchestrator) error {
		if !events.ValidID(name) {
			return fmt.Errorf("orchestrator: invalid name %q: letters, digits, - and _, at most 64", name)
		}
		o.owner.name = name
		return nil
	}
}

// WithClocks sets the timeouts of turns whose agent sets none (default
// agents.DefaultTimeout) and of workflows whose submission sets none
// (default workflow.DefaultTimeout). A turn or workflow records its clock
// when it starts: a change affects only those that start after it.
func WithClocks(turn, wf time.Duration) Option {
	return func(o *Orchestrator) error {
		for _, d := range []time.Duration{turn, wf} {
			if d <= 0 || d > agents.MaxTimeout {
				return fmt.Errorf("orchestrator: a default timeout must be positive and at most %s, got %s", agents.MaxTimeout, d)
			}
		}
		o.starter.clock, o.starter.workflowClock = turn, wf
		return nil
	}
}

// WithDrainGrace bounds how long a graceful stop waits for in-flight work.
func WithDrainGrace(d time.Duration) Option {
	return func(o *Orchestrator) error {
		o.cfg.drainGrace = d
		return nil
	}
}

// Crash stages, where a test can stop the orchestrator abruptly.
const (
	StagePartial   = "partial"   // the first of a decision's events appended, not the rest
	StageAppended  = "appended"  // events appended, no job published
	StagePublished = "published" // jobs published, input not acknowledged
)

// WithCrashHook calls hook after each stage of an input; when it returns an
// error the input is left as it is (not acknowledged, nothing more done), as
// if the process had died there. Crash tests use it.
func WithCrashHook(hook func(stage string) error) Option {
	return func(o *Orchestrator) error {
		o.cfg.beforeAck = hook
		return nil
	}
}

// New makes an orchestrator for the agents in set.
func New(nc *nats.Conn, js jetstream.JetStream, log *slog.Logger, set *agents.Set, opts ...Option) (*Orchestrator, error) {
	o := &Orchestrator{
		nc: nc, js: js, log: log,
		cfg: settings{shards: DefaultShards, cacheSize: 100_000, ackWait: bus.DefaultAckWait, runners: 32,
			drainGrace: 10 * time.Second},
		cancels: bus.NewCancels(),
		owner:   &ownership{name: defaultName()},
		admit:   &admission{},
		obs:     &observer{providers: map[string]model.Provider{"script": model.Scripted{}}},
	}
	o.starter = &starter{agents: set, providers: o.obs.providers, admit: o.admit,
		clock: agents.DefaultTimeout, workflowClock: workflow.DefaultTimeout}
	o.graves = &graves{js: js, log: log, obs: o.obs, stranded: newStranded()}
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
	if o.store, err = logstore.New(setup, o.js); err != nil {
		return err
	}
	tools, err := watchTools(ctx, o.js, o.log)
	if err != nil {
		return err
	}
	checkpoints, err := o.js.KeyValue(setup, bus.BucketCheckpoints)
	if err != nil {
		return fmt.Errorf("orchestrator: bucket %s: %w", bus.BucketCheckpoints, err)
	}
	index, err := o.js.KeyValue(setup, bus.BucketLive)
	if err != nil {
		return fmt.Errorf("orchestrator: bucket %s: %w", bus.BucketLive, err)
	}
	history := newHistoryCache(o.store, 1024)
	o.eff = &effects{nc: o.nc, js: o.js, log: o.log, store: o.store, owner: o.owner, obs: o.obs, calls: newCalls(),
		timers: newTimers(o.nc, o.js, o.log), history: history, index: &liveIndex{kv: index, log: o.log}, checkpoints: checkpoints}
	defer o.eff.timers.stopAll()
	o.starter.tools, o.starter.store, o.starter.history = tools, o.store, history
	o.admit.serve(o.log, o.obs.metrics, o.store, o.eff.index, o.js, o.starter.agents.Dir())
	// The submissions' consumer first: it gives up the partitions'
	// subjects before their consumers take them.
	inbox, err := o.js.CreateOrUpdateConsumer(setup, events.StreamInbox, bus.InboxConsumerConfig(o.cfg.ackWait))
	if err != nil {
		return fmt.Errorf("orchestrator: inbox consumer: %w", err)
	}
	parts := make([]jetstream.Consumer, bus.Partitions)
	for p := range parts {
		if parts[p], err = o.js.CreateOrUpdateConsumer(setup, events.StreamInbox, bus.PartitionConsumerConfig(p, o.cfg.ackWait)); err != nil {
			return fmt.Errorf("orchestrator: inbox consumer of partition %d: %w", p, err)
		}
	}
	jobs, err := o.js.Stream(setup, events.StreamJobs)
	if err != nil {
		return fmt.Errorf("orchestrator: stream %s: %w", events.StreamJobs, err)
	}
	o.jobsStream = jobs.CachedInfo().Config
	kv, err := o.js.KeyValue(setup, bus.BucketOrchestrators)
	if err != nil {
		return fmt.Errorf("orchestrator: bucket %s: %w", bus.BucketOrchestrators, err)
	}
	members := newMembers(kv, o.log, o.owner.name)
	o.owner.members = members
	watch, err := members.join(setup, ctx)
	if err != nil {
		return err
	}
	// Alone, this process may take back at once what a crashed one held of
	// the shared consumers (with others alive, it may be theirs); a
	// partition's consumer is reset when its owner is found dead (gain).
	alone := o.owner.members.alone()
	if alone {
		if err := o.reclaim(setup, events.StreamInbox, inbox); err != nil {
			return err
		}
	}
	cancelSub, err := o.nc.Subscribe(events.CancelSubject("*"), func(m *nats.Msg) {
		// Only the orchestrators' broadcast cancels; a delivery some
		// reader's push consumer aims here does not (bus.IsCancel).
		if !bus.IsCancel(m) {
			return
		}
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

	// The partitions owned from the start are re-armed before serving.
	live := o.owner.members.names()
	before := o.owner.members.found
	first := o.owner.members.owned(live)
	n, paused := 0, 0
	for _, p := range first {
		orphaned, err := o.takeOver(setup, p, before, live, parts[p])
		if err != nil {
			return err
		}
		pn, pp, failed, err := o.eff.rearm(setup, p, orphaned)
		if err != nil {
			return err
		}
		if len(failed) > 0 {
			go o.eff.rearmRetrying(ctx, p, failed, orphaned)
		}
		n, paused = n+pn, paused+pp
	}
	o.obs.seedTurns(alone, n, paused)
	if n > 0 {
		o.log.Info("re-armed the timers of unfinished turns", "turns", n)
	}

	g, gctx := errgroup.WithContext(ctx)
	g.Go(func() error { return o.owner.members.run(gctx, watch) })
	if o.cfg.runners > 0 {
		r, err := o.newRunners(setup, alone)
		if err != nil {
			return err
		}
		r.stop = gctx
		o.runner = r
		o.eff.runner = r
		g.Go(func() error { return r.run(gctx) })
	}
	g.Go(func() error { return o.serve(gctx, inbox, parts, first, live) })
	g.Go(func() error { return o.graves.retryStranded(gctx, strandedInterval) })
	g.Go(func() error { return o.watchRestarts(gctx) })
	g.Go(func() error { return o.admit.watch(gctx) })
	o.ready.Store(true)
	defer o.ready.Store(false)
	o.log.Info("serving", "name", o.owner.name, "agents", o.starter.agents.Names(), "shards", o.cfg.shards, "model_runners", o.cfg.runners,
		"orchestrators", len(live), "partitions", len(first))
	err = g.Wait()
	if o.runner != nil {
		o.runner.spawned.Wait() // no shard serves any more, so none begins
	}
	return err
}

// newRunners makes the model runners, bound to the model jobs' consumer.
// Alone, this process takes back at once the jobs a crashed one held.
func (o *Orchestrator) newRunners(ctx context.Context, alone bool) (*modelRunners, error) {
	cons, err := o.js.CreateOrUpdateConsumer(ctx, events.StreamJobs, bus.ModelConsumerConfig(o.cfg.ackWait))
	if err != nil {
		return nil, fmt.Errorf("orchestrator: model consumer: %w", err)
	}
	if alone {
		if err := o.reclaim(ctx, events.StreamJobs, cons); err != nil {
			return nil, err
		}
	}
	return newModelRunners(modelDeps{
		js: o.js, nc: o.nc, log: o.log, cons: cons, repair: o.repairJobs,
		runners: o.cfg.runners, providers: o.obs.providers,
		calls: o.eff.calls, store: o.store, history: o.eff.history, cancels: o.cancels,
		ackWait: o.cfg.ackWait, drainGrace: o.cfg.drainGrace,
		deliver: o.deliver, bury: o.graves.deadLetter, observe: o.obs.observeModelCall,
	}), nil
}

// serve pulls inputs and hands each to the shard that owns its turn, so one
// turn's inputs are handled in order while other turns go on in parallel.
// It pulls the submissions, which any orchestrator takes, and the
// partitions this one owns, following the live orchestrators: a partition
// given up is drained (what was pulled is handled), one taken over is
// re-armed and pulled.
func (o *Orchestrator) serve(ctx context.Context, inbox jetstream.Consumer, parts []jetstream.Consumer, owned []int, live []string) error {
	shards := make([]*shard, o.cfg.shards)
	var wg sync.WaitGroup
	var stopping atomic.Bool
	for i := range shards {
		shards[i] = newShard(o, max(o.cfg.cacheSize/o.cfg.shards, 1), &stopping)
		wg.Add(1)
		go func() {
			defer wg.Done()
			shards[i].run()
		}()
	}
	o.serving.Store(&shards)
	var pumps sync.WaitGroup
	failed := make(chan error, 1)
	pump := func(c jetstream.Consumer, buffer int) (jetstream.MessagesContext, error) {
		it, err := c.Messages(jetstream.PullMaxMessages(buffer))
		if err != nil {
			return nil, fmt.Errorf("orchestrator: consume %s: %w", c.CachedInfo().Name, err)
		}
		pumps.Add(1)
		go func() {
			defer pumps.Done()
			for {
				msg, err := it.Next()
				if errors.Is(err, jetstream.ErrNoHeartbeat) {
					// The pull's server went quiet (the node leading the
					// consumer died without a word, or a pause): the
					// iterator pulls again on the next Next. Stopping here
					// stopped every orchestrator pulling that consumer.
					o.log.Warn("a pull's heartbeats stopped; pulling again", "consumer", c.CachedInfo().Name)
					continue
				}
				if err != nil {
					if !errors.Is(err, jetstream.ErrMsgIteratorClosed) {
						select {
						case failed <- fmt.Errorf("orchestrator: consume %s: %w", c.CachedInfo().Name, err):
						default: // one failure stops serving; the others add nothing
						}
					}
					return
				}
				shards[o.shardOf(msg, len(shards))].in.push(input{msg: msg})
			}
		}()
		return it, nil
	}
	pulling := map[int]jetstream.MessagesContext{}
	stop := func() {
		for _, it := range pulling {
			if it != nil { // a pump that failed to start is stored as nil
				it.Stop()
			}
		}
		pumps.Wait()
		stopping.Store(true)
		o.serving.Store(nil)
		for _, s := range shards {
			s.in.close()
		}
		wg.Wait()
	}
	if subs, err := o.watchResults(shards); err != nil {
		o.log.Warn("results are taken from the inbox only", "err", err)
	} else {
		defer func() {
			for _, sub := range subs {
				_ = sub.Unsubscribe()
			}
		}()
	}
	submissions, err := pump(inbox, min(4*o.cfg.shards, submissionsBuffer))
	if err != nil {
		stop()
		return err
	}
	pulling[-1] = submissions
	for _, p := range owned {
		if pulling[p], err = pump(parts[p], 64); err != nil {
			stop()
			return err
		}
	}
	// A take-over that failed (the server away, a node failing over) is
	// tried again each second, not only at the next change of members.
	retry := time.NewTicker(time.Second)
	defer retry.Stop()
	failedFrom := map[int][]string{} // the live set before a failed take-over
	for {
		select {
		case <-ctx.Done():
			stop()
			return nil
		case err := <-failed:
			stop()
			return err
		case <-o.owner.members.changed:
		case <-retry.C:
		}
		now := o.owner.members.names()
		mine := o.owner.members.owned(now)
		for p, it := range pulling {
			if p >= 0 && !slices.Contains(mine, p) {
				o.owner.give(p)
				it.Drain()
				delete(pulling, p)
				o.log.Info("gave up a partition", "partition", p)
			}
		}
		for _, p := range mine {
			if pulling[p] != nil {
				continue
			}
			before, again := failedFrom[p]
			if !again {
				before = live
			}
			// Short: the others' take-overs wait behind this one.
			gctx, cancel := context.WithTimeout(ctx, defaultIOTimeout)
			orphaned, err := o.takeOver(gctx, p, before, now, parts[p])
			cancel()
			if err != nil {
				o.log.Error("cannot take a partition over; trying again", "partition", p, "err", err)
				failedFrom[p] = before
				continue
			}
			delete(failedFrom, p)
			if pulling[p], err = pump(parts[p], 64); err != nil {
				stop()
				return err
			}
			o.log.Info("took a partition over", "partition", p)
			// Its deadlines are armed while its inputs are already served.
			go o.eff.rearmRetrying(ctx, p, nil, orphaned)
		}
		live = now
	}
}

func (o *Orchestrator) shardOf(msg jetstream.Msg, n int) int {
	return shardIndex(inputTurn(msg), n)
}

// inputTurn is the turn or workflow an inbox message is an input of: a
// submission names it in its body.
func inputTurn(msg jetstream.Msg) string {
	_, turn := inputKind(msg.Subject())
	if turn == "" {
		var s struct {
			TurnID     string `json:"turn_id"`
			WorkflowID string `json:"workflow_id"`
		}
		_ = json.Unmarshal(msg.Data(), &s) // an invalid submit goes anywhere
		turn = s.TurnID + s.WorkflowID
	}
	return turn
}

// watchResults hands each tool result for a turn of this process's
// partitions to the turn's shard as it comes: handed to this process
// directly by its worker (jetloop.direct.result@<tool>.<turn_id>, a request
// the shard answers once the result's decision is appended), or seen as
// the worker publishes it to the inbox, while the inbox stores it. A
// direct result is stored only in the turn's log: under sync always two
// synced writes less on every tool step (the inbox's copy, and the removal
// its acknowledgement writes). An inbox result's decision is appended while
// the inbox syncs it, not after. The log, not the inbox, is what keeps an
// applied result, so applying it before it is stored loses nothing; and
// nothing depends on this early copy — a worker told nothing publishes to
// the inbox, and a stored copy alone is retried or dead-lettered
// (shard.applyEarly). It takes only what a stored copy's handling would
// take: a result of a valid turn id it owns, not a copy of a stored
// message, that decodes as a result of that turn and that tool.
func (o *Orchestrator) watchResults(shards []*shard) ([]*nats.Subscription, error) {
	take := func(m *nats.Msg, turn, by string, direct bool) {
		if !events.ValidID(turn) || !o.owner.owned(turn) || storedCopy(m.Header) != "" {
			return
		}
		r, err := decodeToolResult(m.Data)
		if err != nil || r.TurnID != turn || fsm.FromSubagent(r.Worker) || misboundTo(by, r) != "" {
			if direct {
				answerDirect(m, fmt.Errorf("not a result of this turn and tool: the inbox judges it"))
			}
			return
		}
		in := input{early: &r}
		if direct {
			in.direct = m
		}
		if !shards[shardIndex(turn, len(shards))].in.push(in) && direct {
			answerDirect(m, errNotHere)
		}
	}
	// A worker answers on its tool's subject (jetloop.inbox.result@<tool>.<turn>),
	// which no wildcard picks out of the other inputs.
	inbox, err := o.nc.Subscribe("jetloop.inbox.*.*", func(m *nats.Msg) {
		if !strings.HasPrefix(m.Subject, "jetloop.inbox.result") {
			return
		}
		if kind, turn, by := events.ParseInbox(m.Subject); kind == events.InputResult {
			take(m, turn, by, false)
		}
	})
	if err != nil {
		return nil, err
	}
	direct, err := o.nc.Subscribe(events.DirectPrefix+"*.*", func(m *nats.Msg) {
		if tool, turn, ok := events.ParseDirect(m.Subject); ok {
			take(m, turn, tool, true)
		}
	})
	if err != nil {
		_ = inbox.Unsubscribe()
		return nil, err
	}
	return []*nats.Subscription{inbox, direct}, nil
}

// shardIndex is the shard of n that handles a turn's inputs.
func shardIndex(turn string, n int) int {
	h := fnv.New32a()
	h.Write([]byte(turn))
	return int(h.Sum32() % uint32(n))
}

// env is the outside world the pure machine may not reach itself.
func env() fsm.Env {
	return fsm.Env{Now: time.Now().UTC(), NewID: func() string { return uuid.Must(uuid.NewV7()).String() }}
}

// defaultName names an orchestrator by where it runs: host-pid.
func defaultName() string {
	host := strings.Map(func(r rune) rune {
		if 'a' <= r && r <= 'z' || 'A' <= r && r <= 'Z' || '0' <= r && r <= '9' || r == '-' || r == '_' {
			return r
		}
		return '-'
	}, here.Host)
	if host = strings.Trim(host, "-"); host == "" {
		host = "orchestrator"
	}
	return host[:min(len(host), 40)] + "-" + strconv.Itoa(here.PID)
}
