package bus

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/jetloop/jetloop/internal/backoff"
	"github.com/jetloop/jetloop/internal/events"
	"github.com/nats-io/nats.go/jetstream"
)

// Dedup windows. A message re-published after a crash is dropped when its
// Nats-Msg-Id was seen within the window, so the window must cover the longest
// time between a publish and its retry: an input redelivered after its ack wait,
// a process restarted after a crash.
const (
	inboxDuplicates = 10 * time.Minute
	eventDuplicates = 2 * time.Minute
	deadDuplicates  = 2 * time.Minute
)

// Names of the buckets of docs/protocol.md that the events package does not
// name elsewhere.
const (
	BucketWorkers = "JETLOOP_WORKERS"
	// WorkerValueMax and WorkersMaxBytes bound the workers' bucket: a
	// value is a worker's last refresh time.
	WorkerValueMax      = 1024
	WorkersMaxBytes     = 64 << 20
	BucketCheckpoints   = "JETLOOP_CHECKPOINTS"
	BucketBlobs         = "JETLOOP_BLOBS"
	BucketOrchestrators = "JETLOOP_ORCHESTRATORS"
	BucketLive          = "JETLOOP_LIVE"
)

// OrchestratorsTTL is how long an orchestrator's key outlives its last
// refresh: how long its partitions wait for another owner after it dies.
const OrchestratorsTTL = 5 * time.Second

// Durable consumers of docs/protocol.md. The inbox consumer is shared by
// every orchestrator; the model runners share theirs.
const (
	InboxConsumer = "orchestrator"
	ModelConsumer = "model_runner"
)

// InboxMaxDeliver is how many times the inbox consumer delivers one input:
// an input that exhausts them is dead-lettered with its last error.
const InboxMaxDeliver = 10

// JobsDuplicates is the jobs stream's deduplication window: a job
// published again within it is dropped.
const JobsDuplicates = 10 * time.Minute

// ToolsTTL is how long a tool's entry outlives its worker's last heartbeat.
const ToolsTTL = 15 * time.Second

// Provision is the table of streams, consumers and buckets (docs/protocol.md)
// with the settings `jetloop streams apply` takes as flags. The zero value of
// a field means its default (DefaultProvision).
type Provision struct {
	// Replicas of every stream and bucket: 1 on a single server, 3 on a
	// cluster.
	Replicas int
	// JobsStorage is memory (the default), or file: jobs are derived from
	// the turns' logs, so a server restart loses none that a live turn
	// waits on, and a job in memory costs no fsync under sync_interval
	// always.
	JobsStorage jetstream.StorageType
	// EventsMaxAge is how long a turn's log is kept.
	EventsMaxAge time.Duration
	// EventsMaxBytes bounds the events stream (-1: unlimited).
	EventsMaxBytes int64
	// MaxBytes bounds the inbox, the jobs and the dead letters each.
	MaxBytes int64
	// DeadMaxAge is how long a dead letter is kept.
	DeadMaxAge time.Duration
	// MaxMsgSize is the inbox's largest message: the server's max payload.
	MaxMsgSize int32
	// ToolsTTL is the life of a tool worker's entries without a refresh.
	ToolsTTL time.Duration
	// WorkersMaxBytes bounds the workers' bucket, which worker
	// deployments write.
	WorkersMaxBytes int64
	// EventStreams is how many streams hold the logs (events.Layout): 1
	// is JETLOOP_EVENTS alone; 0 keeps the layout the server has, and is 1
	// on a server that has none. It is chosen once: Apply does not move
	// logs from one layout to another (see MoveLogs).
	EventStreams int
}

// settleLayout returns p with the layout of the logs the server has when p
// leaves it open, and an error when p asks for another or a move of the logs
// is unfinished (*MoveUnfinishedError).
func (p Provision) settleLayout(ctx context.Context, js jetstream.JetStream) (Provision, error) {
	have, err := FindLayout(ctx, js)
	if errors.Is(err, ErrNoEvents) {
		return p, nil
	}
	if err != nil {
		return p, err
	}
	if err := unfinishedMove(ctx, js); err != nil {
		return p, err
	}
	if p.EventStreams == 0 {
		p.EventStreams = max(have.Streams, 1)
	}
	if want := p.Layout(); max(have.Streams, 1) != want.Streams {
		return p, &LayoutError{Have: have, Want: want}
	}
	return p, nil
}

// LayoutError: the logs are in another layout than the one asked for.
type LayoutError struct{ Have, Want events.Layout }

func (e *LayoutError) Error() string {
	return fmt.Sprintf("bus: the logs are in %d events stream(s), not %d: `jetloop streams move --event-streams %d` moves them (docs/scaling.md, \"Moving the logs\")",
		max(e.Have.Streams, 1), e.Want.Streams, e.Want.Streams)
}

// Layout is the layout of the logs p provisions.
func (p Provision) Layout() events.Layout { return events.Layout{Streams: max(p.EventStreams, 1)} }

// DefaultProvision is the table as it stands without flags.
// maxPayload is the server's (nats.Conn.MaxPayload).
func DefaultProvision(maxPayload int64) Provision {
	return Provision{
		Replicas:       1,
		JobsStorage:    jetstream.MemoryStorage,
		EventsMaxAge:   30 * 24 * time.Hour,
		EventsMaxBytes: -1,
		MaxBytes:       1 << 30,
		DeadMaxAge:     14 * 24 * time.Hour,
		MaxMsgSize:     int32(min(maxPayload, 1<<31-1)),
		ToolsTTL:       ToolsTTL,
		// A sixteenth of a tenant's storage at most (tenants.Fit).
		WorkersMaxBytes: WorkersMaxBytes,
	}
}

// StreamConfigs are the streams of docs/protocol.md as p sets them.
func (p Provision) StreamConfigs() []jetstream.StreamConfig {
	return append(p.fixedStreams(), p.EventsConfigs()...)
}

// EventsConfigs are the events streams of p's layout. A bound on the logs'
// bytes is shared out over them.
func (p Provision) EventsConfigs() []jetstream.StreamConfig {
	layout := p.Layout()
	maxBytes := p.EventsMaxBytes
	if maxBytes > 0 {
		maxBytes /= int64(len(layout.Names()))
	}
	var out []jetstream.StreamConfig
	for k, name := range layout.Names() {
		desc := "jetloop: the event log of every turn"
		if layout.Partitioned() {
			desc = fmt.Sprintf("jetloop: the event logs of the turns of partitions %d mod %d", k, layout.Streams)
		}
		out = append(out, jetstream.StreamConfig{
			Name:        name,
			Description: desc,
			Subjects:    layout.StreamSubjects(k),
			Retention:   jetstream.LimitsPolicy,
			Storage:     jetstream.FileStorage,
			Replicas:    p.Replicas,
			MaxAge:      p.EventsMaxAge,
			MaxBytes:    maxBytes,
			Discard:     jetstream.DiscardOld,
			Duplicates:  eventDuplicates,
			// Direct gets serve the last event of a turn without a consumer.
			AllowDirect: true,
		})
	}
	return out
}

// fixedStreams are the streams every layout has.
func (p Provision) fixedStreams() []jetstream.StreamConfig {
	return []jetstream.StreamConfig{
		{
			Name:        events.StreamInbox,
			Description: "jetloop: inputs of the orchestrators (submits, controls, results)",
			// Every input naming a turn or workflow is stored under its
			// partition (bus.Partitions), as five tokens; the stream takes
			// every other inbox subject, to dead-letter it, but one of five
			// tokens, which a publisher could otherwise aim at a partition
			// its id is not in.
			Subjects:         []string{"jetloop.inbox.*", "jetloop.inbox.*.*", "jetloop.inbox.*.*.*.>"},
			SubjectTransform: inboxTransform,
			Retention:        jetstream.WorkQueuePolicy,
			Storage:          jetstream.FileStorage,
			Replicas:         p.Replicas,
			MaxBytes:         p.MaxBytes,
			MaxMsgSize:       p.MaxMsgSize,
			Discard:          jetstream.DiscardNew,
			Duplicates:       inboxDuplicates,
		},
		{
			Name:        events.StreamJobs,
			Description: "jetloop: model and tool jobs",
			Subjects:    []string{"jetloop.jobs.>"},
			Retention:   jetstream.WorkQueuePolicy,
			Storage:     p.JobsStorage,
			Replicas:    p.Replicas,
			MaxBytes:    p.MaxBytes,
			Discard:     jetstream.DiscardNew,
			Duplicates:  JobsDuplicates,
		},
		{
			Name:        events.StreamDead,
			Description: "jetloop: dead letters, with the reason in the Jetloop-Error header",
			Subjects:    []string{"jetloop.dead.>"},
			Retention:   jetstream.LimitsPolicy,
			Storage:     jetstream.FileStorage,
			Replicas:    p.Replicas,
			MaxAge:      p.DeadMaxAge,
			MaxBytes:    p.MaxBytes,
			Discard:     jetstream.DiscardOld,
			Duplicates:  deadDuplicates,
			// No direct gets: a direct get sends a dead letter's payload,
			// raw and without headers (no_hdr), to any reply subject, and
			// an inbox subject would take it as an input. A plain get
			// answers in a JSON wrapper no input can be mistaken for.
			AllowDirect: false,
		},
	}
}

// Buckets are the key-value buckets of docs/protocol.md as p sets them.
func (p Provision) Buckets() []jetstream.KeyValueConfig {
	return []jetstream.KeyValueConfig{
		{
			Bucket:      events.BucketTools,
			Description: "jetloop: tools served by live workers",
			TTL:         p.ToolsTTL,
			Storage:     jetstream.FileStorage,
			Replicas:    p.Replicas,
		},
		{
			Bucket:      BucketWorkers,
			Description: "jetloop: live workers of each tool",
			TTL:         p.ToolsTTL,
			Storage:     jetstream.FileStorage,
			Replicas:    p.Replicas,
			// Worker deployments write it (each its own tools' keys, any
			// number of them): bounded, so that one cannot fill its
			// tenant's storage with presence.
			MaxValueSize: WorkerValueMax,
			MaxBytes:     p.WorkersMaxBytes,
		},
		{
			Bucket:      BucketOrchestrators,
			Description: "jetloop: live orchestrators, one key each, refreshed three times per TTL",
			TTL:         OrchestratorsTTL,
			// A key that expires leaves a marker, so every watcher sees an
			// orchestrator die.
			LimitMarkerTTL: time.Minute,
			Storage:        jetstream.FileStorage,
			Replicas:       p.Replicas,
		},
		{
			Bucket:      BucketLive,
			Description: "jetloop: the unfinished turns and workflows, by partition (<partition>.<id>)",
			Storage:     jetstream.FileStorage,
			Replicas:    p.Replicas,
		},
		{
			Bucket:      BucketCheckpoints,
			Description: "jetloop: the last checkpoint of each workflow",
			Storage:     jetstream.FileStorage,
			Replicas:    p.Replicas,
		},
	}
}

// Blobs is the object store of outputs too big for one message.
func (p Provision) Blobs() jetstream.ObjectStoreConfig {
	return jetstream.ObjectStoreConfig{
		Bucket:      BucketBlobs,
		Description: "jetloop: outputs too big for one message, referenced by events",
		TTL:         p.EventsMaxAge,
		Storage:     jetstream.FileStorage,
		Replicas:    p.Replicas,
	}
}

// Consumer is a durable consumer of one of the streams.
type Consumer struct {
	Stream string
	Config jetstream.ConsumerConfig
}

// Consumers are the durable consumers that no tool names:
// the orchestrators' submissions, one per inbox partition, and the model
// runners'. ackWait is the orchestrator's (--ack-wait); each orchestrator
// sets it again on its own consumers. The submissions' consumer comes first:
// it must give up the partitions' subjects before they are taken (the
// filters of a work queue's consumers may not overlap).
func (p Provision) Consumers(ackWait time.Duration) []Consumer {
	cs := []Consumer{{events.StreamInbox, InboxConsumerConfig(ackWait)}}
	for i := range Partitions {
		cs = append(cs, Consumer{events.StreamInbox, PartitionConsumerConfig(i, ackWait)})
	}
	return append(cs, Consumer{events.StreamJobs, ModelConsumerConfig(ackWait)})
}

// InboxConsumerConfig is the durable inbox consumer all orchestrators share:
// the submissions of turns and workflows, and whatever else reaches the
// inbox outside a partition, which is dead-lettered as unknown.
func InboxConsumerConfig(ackWait time.Duration) jetstream.ConsumerConfig {
	return jetstream.ConsumerConfig{
		Durable:     InboxConsumer,
		Description: "jetloop: submissions of turns and workflows",
		// Four-token subjects are mapped into partitions, whose consumers
		// take the five-token ones, all but those whose id is a literal *
		// or >: the server maps literal subjects only and stores those as
		// published, so they are taken here, to be dead-lettered.
		// Six tokens or more are written as two filters, not as the
		// stream's jetloop.inbox.*.*.*.>: a consumer whose filters are the
		// stream's subjects counts as unfiltered for the server, which
		// then keeps every input the partitions' consumers acknowledge
		// (it does not see that the transform moved them out of its reach).
		FilterSubjects: []string{"jetloop.inbox.*", "jetloop.inbox.*.*", "jetloop.inbox.*.*.*.*", "jetloop.inbox.*.*.*.*.>"},
		AckPolicy:      jetstream.AckExplicitPolicy,
		AckWait:        ackWait,
		// An input that fails this often is dead-lettered, by its handler
		// on the last delivery or from the MAX_DELIVERIES advisory when the
		// process died handling it.
		MaxDeliver:    InboxMaxDeliver,
		MaxAckPending: 20_000,
	}
}

// PartitionConsumerConfig is the durable consumer of inbox partition p: the
// inputs of the turns and workflows in it, pulled by its owner only.
func PartitionConsumerConfig(p int, ackWait time.Duration) jetstream.ConsumerConfig {
	c := InboxConsumerConfig(ackWait)
	c.Durable = PartitionConsumer(p)
	c.Description = "jetloop: inputs of the turns and workflows of partition " + strconv.Itoa(p)
	c.FilterSubjects, c.FilterSubject = nil, partitionFilter(p)
	c.MaxAckPending = 20_000 / Partitions * 2
	return c
}

// Defaults of a tool's or hook's consumer (docs/protocol.md: an ack wait of
// 30 s, at most 5 deliveries), which an orchestrator gives the consumers it
// makes for confined worker deployments.
const (
	JobAckWait    = 30 * time.Second
	JobMaxDeliver = 5
)

// JobConsumerConfig is the durable consumer every worker of a tool (or a
// hook) shares, on its job subject.
func JobConsumerConfig(durable, subject string, ackWait time.Duration, maxDeliver int) jetstream.ConsumerConfig {
	return jetstream.ConsumerConfig{
		Durable:       durable,
		FilterSubject: subject,
		AckPolicy:     jetstream.AckExplicitPolicy,
		AckWait:       ackWait,
		MaxDeliver:    maxDeliver,
		MaxAckPending: 10_000,
	}
}

// JobConsumerFor is the consumer of the tool or hook a key of the tools
// bucket advertises (a tool under its name, a hook under hook.<name>); ok
// is false for a key that names neither.
func JobConsumerFor(key string) (cfg jetstream.ConsumerConfig, ok bool) {
	name, hook := strings.CutPrefix(key, "hook.")
	if name == "" || strings.ContainsAny(name, ".*> ") {
		return cfg, false
	}
	if hook {
		return JobConsumerConfig(events.HookConsumer(name), events.HookSubject(name), JobAckWait, JobMaxDeliver), true
	}
	return JobConsumerConfig(events.ToolConsumer(name), events.ToolSubject(name), JobAckWait, JobMaxDeliver), true
}

// ModelConsumerConfig is the model runners' durable consumer of model jobs.
func ModelConsumerConfig(ackWait time.Duration) jetstream.ConsumerConfig {
	return jetstream.ConsumerConfig{
		Durable:       ModelConsumer,
		Description:   "jetloop: model calls",
		FilterSubject: events.SubjectModel,
		AckPolicy:     jetstream.AckExplicitPolicy,
		AckWait:       ackWait,
		// Attempts are counted by the runner (model.MaxAttempts); deliveries
		// beyond them are redeliveries after a crash, which must go on.
		MaxDeliver:    -1,
		MaxAckPending: 10_000,
	}
}

// Apply creates or updates every stream, bucket and consumer of p. It needs
// a user that may manage streams (admin). It returns what it did, one line
// each.
func Apply(ctx context.Context, js jetstream.JetStream, p Provision) ([]string, error) {
	var done []string
	p, err := p.settleLayout(ctx, js)
	if err != nil {
		return nil, err
	}
	for _, cfg := range p.StreamConfigs() {
		old, err := js.Stream(ctx, cfg.Name)
		switch {
		case errors.Is(err, jetstream.ErrStreamNotFound):
			if err := create(ctx, js, cfg); err != nil {
				return done, fmt.Errorf("bus: create stream %s: %w", cfg.Name, err)
			}
			done = append(done, "created stream "+cfg.Name)
			continue
		case err != nil:
			return done, fmt.Errorf("bus: stream %s: %w", cfg.Name, err)
		}
		diffs := diffStream(old.CachedInfo().Config, cfg)
		if len(diffs) == 0 {
			continue
		}
		if old.CachedInfo().Config.Storage != cfg.Storage {
			return done, fmt.Errorf("bus: stream %s: its storage cannot change in place (%s → %s): delete it first as admin (nothing is lost for %s: jobs are derived from the logs)",
				cfg.Name, old.CachedInfo().Config.Storage, cfg.Storage, events.StreamJobs)
		}
		if _, err := js.UpdateStream(ctx, cfg); err != nil {
			return done, fmt.Errorf("bus: update stream %s: %w", cfg.Name, err)
		}
		done = append(done, fmt.Sprintf("updated stream %s: %s", cfg.Name, strings.Join(diffs, "; ")))
	}
	for _, cfg := range p.Buckets() {
		_, err := js.KeyValue(ctx, cfg.Bucket)
		if uerr := tryAgain(ctx, func(tctx context.Context) error {
			_, err := js.CreateOrUpdateKeyValue(tctx, cfg)
			return err
		}); uerr != nil {
			return done, fmt.Errorf("bus: bucket %s: %w", cfg.Bucket, uerr)
		}
		if errors.Is(err, jetstream.ErrBucketNotFound) {
			done = append(done, "created bucket "+cfg.Bucket)
		}
	}
	_, err = js.ObjectStore(ctx, BucketBlobs)
	if _, uerr := js.CreateOrUpdateObjectStore(ctx, p.Blobs()); uerr != nil {
		return done, fmt.Errorf("bus: object store %s: %w", BucketBlobs, uerr)
	}
	if errors.Is(err, jetstream.ErrBucketNotFound) {
		done = append(done, "created object store "+BucketBlobs)
	}
	for _, pc := range p.Consumers(DefaultAckWait) {
		stream, cfg := pc.Stream, pc.Config
		c, err := js.Consumer(ctx, stream, cfg.Durable)
		if err == nil {
			// The ack wait is the orchestrator's own (--ack-wait): keep it.
			cfg.AckWait = c.CachedInfo().Config.AckWait
			if len(diffConsumer(c.CachedInfo().Config, cfg)) == 0 {
				continue
			}
		}
		if _, err := js.CreateOrUpdateConsumer(ctx, stream, cfg); err != nil {
			return done, fmt.Errorf("bus: consumer %s of %s: %w", cfg.Durable, stream, err)
		}
		done = append(done, fmt.Sprintf("set consumer %s of %s", cfg.Durable, stream))
	}
	return done, nil
}

// create makes a stream, each try with a deadline of its own: on a cluster
// a request made while the meta leader changes is never answered, and one
// try must not use up the whole command's time. A try that was answered
// too late for its caller may have made the stream: the next one finds it.
func create(ctx context.Context, js jetstream.JetStream, cfg jetstream.StreamConfig) error {
	return tryAgain(ctx, func(tctx context.Context) error {
		_, err := js.CreateStream(tctx, cfg)
		if errors.Is(err, jetstream.ErrStreamNameAlreadyInUse) {
			return nil
		}
		if errors.Is(err, context.DeadlineExceeded) {
			if _, serr := js.Stream(ctx, cfg.Name); serr == nil {
				return nil
			}
		}
		return err
	})
}

// tryAgain does a provisioning request until it succeeds or fails for a
// reason time does not cure, each try with a deadline of its own. Time
// cures a request a cluster never answered, and a placement refused while
// the meta leader sees a node offline for a moment.
func tryAgain(ctx context.Context, do func(context.Context) error) error {
	return tryEach(ctx, 10*time.Second, 250*time.Millisecond, func(err error) bool {
		var apiErr *jetstream.APIError
		return errors.As(err, &apiErr) && apiErr.ErrorCode == codeNoSuitablePeers
	}, do)
}

// tryEach calls do, each time with a deadline of attempt, until it
// succeeds, ctx ends, or it fails with an error that is neither its own
// deadline (tried again at once) nor one again says time cures (tried again
// after pause).
func tryEach(ctx context.Context, attempt, pause time.Duration, again func(error) bool, do func(context.Context) error) error {
	for {
		tctx, cancel := context.WithTimeout(ctx, attempt)
		err := do(tctx)
		cancel()
		switch {
		case err == nil:
			return nil
		case ctx.Err() != nil:
			return err
		case errors.Is(err, context.DeadlineExceeded):
		case again(err):
			if !backoff.Sleep(ctx, pause) {
				return err
			}
		default:
			return err
		}
	}
}

// codeNoSuitablePeers is a cluster's refusal to place a replicated asset.
const codeNoSuitablePeers = 10005

// Check compares what the server has with p and returns every difference,
// one line each: a missing stream, bucket or consumer, or a setting that
// differs.
func Check(ctx context.Context, js jetstream.JetStream, p Provision) ([]string, error) {
	var diffs []string
	p, err := p.settleLayout(ctx, js)
	if lerr := (*LayoutError)(nil); errors.As(err, &lerr) {
		return []string{fmt.Sprintf("events: the logs are in %d stream(s), want %d", max(lerr.Have.Streams, 1), lerr.Want.Streams)}, nil
	}
	if merr := (*MoveUnfinishedError)(nil); errors.As(err, &merr) {
		return []string{"events: " + strings.TrimPrefix(merr.Error(), "bus: ")}, nil
	}
	if err != nil {
		return nil, err
	}
	for _, cfg := range p.StreamConfigs() {
		s, err := js.Stream(ctx, cfg.Name)
		switch {
		case errors.Is(err, jetstream.ErrStreamNotFound):
			diffs = append(diffs, fmt.Sprintf("stream %s: missing", cfg.Name))
			continue
		case err != nil:
			return nil, fmt.Errorf("bus: stream %s: %w", cfg.Name, err)
		}
		for _, d := range diffStream(s.CachedInfo().Config, cfg) {
			diffs = append(diffs, fmt.Sprintf("stream %s: %s", cfg.Name, d))
		}
	}
	for _, cfg := range p.Buckets() {
		d, err := checkBucket(ctx, js, "KV_"+cfg.Bucket, "bucket "+cfg.Bucket, cfg.TTL, cfg.Replicas, cfg.Storage)
		if err != nil {
			return nil, err
		}
		diffs = append(diffs, d...)
		if cfg.MaxValueSize > 0 {
			s, err := js.Stream(ctx, "KV_"+cfg.Bucket)
			if err == nil {
				have := s.CachedInfo().Config
				diffs = differ(diffs, "bucket "+cfg.Bucket+": max_value_size", unlimited(int64(have.MaxMsgSize)), int64(cfg.MaxValueSize))
				diffs = differ(diffs, "bucket "+cfg.Bucket+": max_bytes", unlimited(have.MaxBytes), cfg.MaxBytes)
			}
		}
	}
	b := p.Blobs()
	d, err := checkBucket(ctx, js, "OBJ_"+b.Bucket, "object store "+b.Bucket, b.TTL, b.Replicas, b.Storage)
	if err != nil {
		return nil, err
	}
	diffs = append(diffs, d...)
	for _, pc := range p.Consumers(DefaultAckWait) {
		stream, cfg := pc.Stream, pc.Config
		c, err := js.Consumer(ctx, stream, cfg.Durable)
		switch {
		case errors.Is(err, jetstream.ErrConsumerNotFound), errors.Is(err, jetstream.ErrStreamNotFound):
			diffs = append(diffs, fmt.Sprintf("consumer %s of %s: missing", cfg.Durable, stream))
			continue
		case err != nil:
			return nil, fmt.Errorf("bus: consumer %s of %s: %w", cfg.Durable, stream, err)
		}
		for _, d := range diffConsumer(c.CachedInfo().Config, cfg) {
			diffs = append(diffs, fmt.Sprintf("consumer %s of %s: %s", cfg.Durable, stream, d))
		}
	}
	return diffs, nil
}

func checkBucket(ctx context.Context, js jetstream.JetStream, stream, what string, ttl time.Duration, replicas int, storage jetstream.StorageType) ([]string, error) {
	s, err := js.Stream(ctx, stream)
	if errors.Is(err, jetstream.ErrStreamNotFound) {
		return []string{what + ": missing"}, nil
	}
	if err != nil {
		return nil, fmt.Errorf("bus: %s: %w", what, err)
	}
	have := s.CachedInfo().Config
	var diffs []string
	diffs = differ(diffs, what+": ttl", have.MaxAge, ttl)
	diffs = differ(diffs, what+": replicas", max(have.Replicas, 1), max(replicas, 1))
	diffs = differ(diffs, what+": storage", have.Storage, storage)
	return diffs, nil
}

// diffStream lists the settings of the table in which have differs from
// want.
func diffStream(have, want jetstream.StreamConfig) []string {
	var d []string
	if !slices.Equal(have.Subjects, want.Subjects) {
		d = append(d, fmt.Sprintf("subjects are %v, want %v", have.Subjects, want.Subjects))
	}
	d = differ(d, "retention", have.Retention, want.Retention)
	d = differ(d, "storage", have.Storage, want.Storage)
	d = differ(d, "replicas", max(have.Replicas, 1), max(want.Replicas, 1))
	d = differ(d, "max_age", have.MaxAge, want.MaxAge)
	d = differ(d, "max_bytes", unlimited(have.MaxBytes), unlimited(want.MaxBytes))
	d = differ(d, "max_msgs", unlimited(have.MaxMsgs), int64(-1))
	d = differ(d, "max_msg_size", unlimited(int64(have.MaxMsgSize)), unlimited(int64(want.MaxMsgSize)))
	d = differ(d, "discard", have.Discard, want.Discard)
	d = differ(d, "duplicates", have.Duplicates, want.Duplicates)
	d = differ(d, "allow_direct", have.AllowDirect, want.AllowDirect)
	if transform(have.SubjectTransform) != transform(want.SubjectTransform) {
		d = append(d, fmt.Sprintf("subject transform is %q, want %q", transform(have.SubjectTransform), transform(want.SubjectTransform)))
	}
	if have.RePublish != nil {
		d = append(d, fmt.Sprintf("republishes %s to %s, want none", have.RePublish.Source, have.RePublish.Destination))
	}
	if len(have.Sources) > 0 || have.Mirror != nil {
		d = append(d, "has sources or a mirror, want none")
	}
	return d
}

// diffConsumer lists the settings of the table in which have differs from
// want. The ack wait is each orchestrator's own (--ack-wait).
func diffConsumer(have, want jetstream.ConsumerConfig) []string {
	var d []string
	d = differ(d, "filter_subject", have.FilterSubject, want.FilterSubject)
	if !slices.Equal(have.FilterSubjects, want.FilterSubjects) {
		d = append(d, fmt.Sprintf("filter_subjects are %v, want %v", have.FilterSubjects, want.FilterSubjects))
	}
	d = differ(d, "ack_policy", have.AckPolicy, want.AckPolicy)
	d = differ(d, "max_deliver", unlimited(int64(have.MaxDeliver)), unlimited(int64(want.MaxDeliver)))
	d = differ(d, "max_ack_pending", have.MaxAckPending, want.MaxAckPending)
	return d
}

func transform(t *jetstream.SubjectTransformConfig) string {
	if t == nil {
		return "none"
	}
	return t.Source + " → " + t.Destination
}

func differ[T comparable](d []string, name string, have, want T) []string {
	if have != want {
		d = append(d, fmt.Sprintf("%s is %v, want %v", name, have, want))
	}
	return d
}

// unlimited maps every "no limit" value (0 or negative) to -1.
func unlimited(n int64) int64 {
	if n <= 0 {
		return -1
	}
	return n
}

// DefaultAckWait is the ack wait of the inbox and model consumers when no
// --ack-wait says otherwise.
const DefaultAckWait = 30 * time.Second

// EnsureStreams makes sure a process can run: every stream and bucket of
// docs/protocol.md exists, created with the table's defaults where missing
// and the server allows it. A process whose user may not create them
// (production) only checks that they exist and have the subjects and
// retention it relies on; limits are the operator's (`jetloop streams
// apply|check`). What exists is never changed here.
func EnsureStreams(ctx context.Context, js jetstream.JetStream) error {
	p, err := DefaultProvision(js.Conn().MaxPayload()).settleLayout(ctx, js)
	if err != nil {
		return err
	}
	var missing, wrong []string
	for _, cfg := range p.StreamConfigs() {
		s, err := js.Stream(ctx, cfg.Name)
		if errors.Is(err, jetstream.ErrStreamNotFound) {
			if s, err = js.CreateStream(ctx, cfg); err != nil && !errors.Is(err, jetstream.ErrStreamNameAlreadyInUse) {
				missing = append(missing, fmt.Sprintf("stream %s (%v)", cfg.Name, err))
				continue
			}
			if s == nil {
				continue // created by another process meanwhile
			}
		} else if err != nil {
			return fmt.Errorf("bus: stream %s: %w", cfg.Name, err)
		}
		have := s.CachedInfo().Config
		if !slices.Equal(have.Subjects, cfg.Subjects) || have.Retention != cfg.Retention {
			wrong = append(wrong, fmt.Sprintf("stream %s has subjects %v and retention %s, want %v and %s",
				cfg.Name, have.Subjects, have.Retention, cfg.Subjects, cfg.Retention))
		}
		if transform(have.SubjectTransform) != transform(cfg.SubjectTransform) {
			wrong = append(wrong, fmt.Sprintf("stream %s has the subject transform %q, want %q (the inbox's partitions)",
				cfg.Name, transform(have.SubjectTransform), transform(cfg.SubjectTransform)))
		}
	}
	for _, cfg := range p.Buckets() {
		if _, err := js.KeyValue(ctx, cfg.Bucket); errors.Is(err, jetstream.ErrBucketNotFound) {
			if _, err := js.CreateKeyValue(ctx, cfg); err != nil && !errors.Is(err, jetstream.ErrBucketExists) {
				missing = append(missing, fmt.Sprintf("bucket %s (%v)", cfg.Bucket, err))
			}
		} else if err != nil {
			return fmt.Errorf("bus: bucket %s: %w", cfg.Bucket, err)
		}
	}
	if _, err := js.ObjectStore(ctx, BucketBlobs); errors.Is(err, jetstream.ErrBucketNotFound) || errors.Is(err, jetstream.ErrStreamNotFound) {
		if _, err := js.CreateObjectStore(ctx, p.Blobs()); err != nil && !errors.Is(err, jetstream.ErrBucketExists) {
			missing = append(missing, fmt.Sprintf("object store %s (%v)", BucketBlobs, err))
		}
	} else if err != nil {
		return fmt.Errorf("bus: object store %s: %w", BucketBlobs, err)
	}
	if len(missing)+len(wrong) == 0 {
		return nil
	}
	return fmt.Errorf("bus: the server is not provisioned for jetloop: %s; run `jetloop streams apply` with admin credentials",
		strings.Join(append(missing, wrong...), "; "))
}

// ToolsBucket is the tools bucket with an entry life of ttl (tests shorten
// it).
func ToolsBucket(ttl time.Duration) jetstream.KeyValueConfig {
	p := DefaultProvision(1 << 20)
	p.ToolsTTL = ttl
	return p.Buckets()[0]
}
