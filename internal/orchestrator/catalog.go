package orchestrator

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"slices"
	"sort"
	"sync"
	"time"

	"github.com/jetloop/jetloop/internal/bus"
	"github.com/jetloop/jetloop/internal/events"
	"github.com/jetloop/jetloop/schemas"
	"github.com/nats-io/nats.go/jetstream"
)

// toolCatalog mirrors KV JETLOOP_TOOLS through a watch, so starting a turn
// reads the tools served now from memory instead of the bucket.
//
// An entry lives for the bucket's TTL of time in which its worker could
// have refreshed it: while the registry cannot be written (a cluster's
// fault leaves its streams without a leader, or this process cannot reach
// the server) a worker's silence says nothing of the worker, and the
// server drops the entries it could not refresh as soon as it is back. A
// turn started then is offered the tools served before, until their
// workers have had the TTL to write again; a worker that died during the
// outage keeps its tools offered that much longer (a call to them ends at
// its deadline).
type toolCatalog struct {
	mu      sync.RWMutex
	entries map[string]toolEntry
	// ttl is the bucket's: an entry older than that has expired even
	// though no watcher was told (0: entries never expire).
	ttl time.Duration
	// out is the time the registry could not be written, which does not
	// age an entry.
	out outage
	// started is when the catalog began to watch the bucket.
	started time.Time
	// consumers are the tools' and hooks' consumers this process makes.
	consumers *jobConsumers
}

type toolEntry struct {
	info events.ToolInfo
	at   time.Time
	// out is the registry's outage time when the entry was read.
	out time.Duration
}

// watchTools starts mirroring the bucket until ctx ends; the catalog holds
// the bucket's content when it returns. It also makes the consumer of each
// tool and hook advertised (see jobConsumers).
func watchTools(ctx context.Context, js jetstream.JetStream, log *slog.Logger) (*toolCatalog, error) {
	kv, err := js.KeyValue(ctx, events.BucketTools)
	if err != nil {
		return nil, fmt.Errorf("orchestrator: bind %s: %w", events.BucketTools, err)
	}
	status, err := kv.Status(ctx)
	if err != nil {
		return nil, fmt.Errorf("orchestrator: status of %s: %w", events.BucketTools, err)
	}
	w, err := kv.WatchAll(ctx)
	if err != nil {
		return nil, fmt.Errorf("orchestrator: watch %s: %w", events.BucketTools, err)
	}
	made := &jobConsumers{js: js, log: log, checked: map[string]time.Time{}}
	c := &toolCatalog{entries: map[string]toolEntry{}, ttl: status.TTL(), consumers: made, started: time.Now()}
	c.out.up(c.started)
	if c.ttl > 0 {
		go c.out.watch(ctx, js, min(time.Second, max(c.ttl/10, 50*time.Millisecond)))
	}
	ready := make(chan struct{})
	go func() {
		defer func() { _ = w.Stop() }()
		initial := true
		for {
			select {
			case <-ctx.Done():
				return
			case u, ok := <-w.Updates():
				if !ok {
					return
				}
				if u == nil { // the end of the initial values
					if initial {
						initial = false
						close(ready)
					}
					continue
				}
				c.update(u)
				made.ensure(ctx, u)
			}
		}
	}()
	select {
	case <-ready:
		return c, nil
	case <-ctx.Done():
		return nil, ctx.Err()
	case <-time.After(defaultIOTimeout):
		return nil, errors.New("orchestrator: the tools bucket did not answer")
	}
}

func (c *toolCatalog) update(u jetstream.KeyValueEntry) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if u.Operation() != jetstream.KeyValuePut {
		delete(c.entries, u.Key())
		return
	}
	// Any process may write the bucket: an entry that is not a tool_info
	// is no tool.
	var info events.ToolInfo
	if schemas.Validate("tool_info", u.Value()) != nil || json.Unmarshal(u.Value(), &info) != nil || info.Name != u.Key() {
		delete(c.entries, u.Key())
		return
	}
	c.entries[u.Key()] = toolEntry{info: info, at: u.Created(), out: c.out.total(time.Now())}
}

// live returns the tools a worker refreshed within the bucket's TTL, not
// counting the time the registry could not be written: an entry that
// expires by age is not announced to watchers, so its age decides.
func (c *toolCatalog) live() []events.ToolSpec {
	now := time.Now()
	out := c.out.total(now)
	c.mu.RLock()
	defer c.mu.RUnlock()
	specs := make([]events.ToolSpec, 0, len(c.entries))
	for _, e := range c.entries {
		if c.ttl > 0 && now.Sub(e.at)-(out-e.out) > c.ttl || e.info.Workers < 1 {
			continue
		}
		specs = append(specs, events.ToolSpec{Name: e.info.Name, Description: e.info.Description,
			Parameters: e.info.Parameters, TimeoutMs: e.info.TimeoutMs})
	}
	sort.Slice(specs, func(i, j int) bool { return specs[i].Name < specs[j].Name })
	return specs
}

// settling is how much longer a catalog that shows no worker's tool may
// only not have heard from the workers yet: until it has watched the
// registry, writable, for the bucket's TTL, within which every live worker
// writes its entries. An orchestrator started just after a fault emptied
// the registry (a cluster's disks lost it) finds no entry to keep, while
// the workers that serve them are alive. 0: the catalog can be believed.
func (c *toolCatalog) settling(now time.Time) time.Duration {
	if c.ttl <= 0 {
		return 0
	}
	c.mu.RLock()
	for _, e := range c.entries {
		if e.info.Workers > 0 {
			c.mu.RUnlock()
			return 0 // workers wrote since the registry was emptied, if it was
		}
	}
	c.mu.RUnlock()
	return max(c.ttl-(now.Sub(c.started)-c.out.total(now)), 0)
}

// outage measures the time the registry could not be written, by asking
// for its streams' state every few moments: a stream without a leader
// takes no write (its replicas still answer for their own state), and an
// unanswered question means this process cannot tell either.
type outage struct {
	mu sync.Mutex
	// past is the length of the outages that ended.
	past time.Duration
	// since is when the one under way began (zero: none), lastUp when the
	// registry was last found writable.
	since, lastUp time.Time
}

// registryStreams are the streams a worker writes to refresh its entries:
// its presence, then its tools.
var registryStreams = []string{"KV_" + events.BucketTools, "KV_" + bus.BucketWorkers}

func (o *outage) watch(ctx context.Context, js jetstream.JetStream, every time.Duration) {
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		began := time.Now()
		if writable(ctx, js, max(every, time.Second)) {
			o.up(began)
		} else if ctx.Err() == nil {
			o.down()
		}
	}
}

func writable(ctx context.Context, js jetstream.JetStream, timeout time.Duration) bool {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	for _, name := range registryStreams {
		s, err := js.Stream(ctx, name)
		if errors.Is(err, jetstream.ErrStreamNotFound) {
			continue // the workers' bucket is made by the first worker
		}
		if err != nil {
			return false
		}
		if info := s.CachedInfo(); info.Cluster != nil && info.Cluster.Leader == "" {
			return false
		}
	}
	return true
}

// up says the registry was writable at at, ending an outage under way.
func (o *outage) up(at time.Time) {
	o.mu.Lock()
	defer o.mu.Unlock()
	if !o.since.IsZero() {
		o.past += max(at.Sub(o.since), 0)
		o.since = time.Time{}
	}
	o.lastUp = at
}

// down says the registry cannot be written: since it was last found
// writable, as far as any worker could tell.
func (o *outage) down() {
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.since.IsZero() {
		o.since = o.lastUp
	}
}

// total is the outage time up to now, the one under way included.
func (o *outage) total(now time.Time) time.Duration {
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.since.IsZero() {
		return o.past
	}
	return o.past + max(now.Sub(o.since), 0)
}

// jobConsumers makes the durable consumers of tools and hooks. A worker
// deployment in an account of its own may not create consumers: one that
// may would aim a push consumer's deliveries at any pull or reset subject
// of the streams' account (docs/accounts.md). It may write only the tools
// bucket's keys of what it is granted, so a key seen there is what it may
// serve, and the orchestrator, trusted, makes that consumer with the
// protocol's settings (docs/protocol.md). A consumer that exists is left as it is: a worker
// that may make its own (on an open server) made it to its own settings.
type jobConsumers struct {
	js  jetstream.JetStream
	log *slog.Logger
	// checked is when each key's consumer was last found or made: a key
	// is refreshed every few seconds, and its consumer checked again only
	// after recheck. A jobs stream kept in memory loses its consumers with
	// a server restart, and the turns waiting on the tool wait that long.
	mu      sync.Mutex
	checked map[string]time.Time
}

const recheck = 5 * time.Second

func (m *jobConsumers) ensure(ctx context.Context, u jetstream.KeyValueEntry) {
	if u.Operation() != jetstream.KeyValuePut {
		return
	}
	cfg, ok := bus.JobConsumerFor(u.Key())
	if !ok {
		return
	}
	m.mu.Lock()
	if at, ok := m.checked[u.Key()]; ok && time.Since(at) < recheck {
		m.mu.Unlock()
		return
	}
	m.checked[u.Key()] = time.Now()
	m.mu.Unlock()
	go func() {
		ctx, cancel := context.WithTimeout(ctx, defaultIOTimeout)
		defer cancel()
		_, err := m.js.Consumer(ctx, events.StreamJobs, cfg.Durable)
		if errors.Is(err, jetstream.ErrConsumerNotFound) {
			_, err = m.js.CreateConsumer(ctx, events.StreamJobs, cfg)
			if errors.Is(err, jetstream.ErrConsumerExists) {
				err = nil // another orchestrator or the worker made it first
			}
			if err == nil {
				m.log.Info("made the consumer of an advertised tool", "consumer", cfg.Durable)
			}
		}
		if err != nil {
			m.mu.Lock()
			delete(m.checked, u.Key()) // tried again at the key's next refresh
			m.mu.Unlock()
			if ctx.Err() == nil {
				m.log.Warn("cannot make the consumer of an advertised tool", "consumer", cfg.Durable, "err", err)
			}
		}
	}()
}

// remake makes again, at once, every consumer it made or found before: a
// jobs stream made again after its server lost it has none, and the turns
// waiting on those tools should not wait for their keys' next refresh.
func (m *jobConsumers) remake(ctx context.Context) {
	m.mu.Lock()
	keys := slices.Collect(maps.Keys(m.checked))
	m.mu.Unlock()
	for _, key := range keys {
		cfg, _ := bus.JobConsumerFor(key)
		_, err := m.js.CreateConsumer(ctx, events.StreamJobs, cfg)
		if err != nil && !errors.Is(err, jetstream.ErrConsumerExists) {
			m.mu.Lock()
			delete(m.checked, key) // made at the key's next refresh
			m.mu.Unlock()
			m.log.Warn("cannot make the consumer of an advertised tool again", "consumer", cfg.Durable, "err", err)
		}
	}
}
