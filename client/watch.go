package client

import (
	"context"
	"fmt"
	"iter"

	"github.com/jetloop/jetloop/internal/bus"
	"github.com/jetloop/jetloop/internal/events"
	"github.com/jetloop/jetloop/internal/turnlog"
	"github.com/nats-io/nats.go"
)

// Result is how a turn ended: its turn.finished event.
type Result = TurnFinished

// WatchOption changes where Watch starts, or what it follows.
type WatchOption func(*watchConfig)

type watchConfig struct {
	from      turnlog.From
	subagents bool
}

func watchOptions(opts []WatchOption) watchConfig {
	cfg := watchConfig{from: turnlog.FromFirst}
	for _, opt := range opts {
		opt(&cfg)
	}
	return cfg
}

// FromNow makes Watch skip the events already in the log and yield only
// those written from now on.
func FromNow() WatchOption {
	return func(c *watchConfig) { c.from = turnlog.FromNext }
}

// Watch yields a turn's events from its first one (or, with FromNow, from
// the next one), as they are written, and ends after TurnFinished (with
// WithSubagents, once its subagents' turns have finished too). A turn not
// submitted yet is waited for. A failure is yielded once with a nil event
// and ends the sequence, as does ctx ending (with ctx's error).
func (c *Client) Watch(ctx context.Context, turnID string, opts ...WatchOption) iter.Seq2[Event, error] {
	cfg := watchOptions(opts)
	return func(yield func(Event, error) bool) {
		if !events.ValidID(turnID) {
			yield(nil, fmt.Errorf("client: invalid turn id %q", turnID))
			return
		}
		if cfg.subagents {
			c.watchTree(ctx, turnID, cfg.from, yield)
			return
		}
		for ev, err := range c.follow(ctx, turnID, cfg.from) {
			if !yield(ev, err) || err != nil {
				return
			}
			if ev.Info().Type == TypeTurnFinished {
				return
			}
		}
	}
}

// follow types the records of a log as they are written.
func (c *Client) follow(ctx context.Context, turnID string, from turnlog.From) iter.Seq2[Event, error] {
	return c.followOf(ctx, turnID, from, nil)
}

// followOf is follow of a turn parent runs (nil: none, or not known).
func (c *Client) followOf(ctx context.Context, turnID string, from turnlog.From, parent *ParentRef) iter.Seq2[Event, error] {
	return func(yield func(Event, error) bool) {
		for env, err := range c.records(ctx, turnID, from) {
			if err != nil {
				yield(nil, err)
				return
			}
			ev, err := fromEnvelopeOf(env, nil, parent)
			if !yield(ev, err) || err != nil {
				return
			}
		}
	}
}

// Wait returns how a turn ended, waiting for it to finish (or to be
// submitted) until ctx ends. A turn that finished with any stop reason is a
// Result and no error, but for StopRejected: its submission was refused, and
// the error is a *RejectedError with the orchestrator's reason.
func (c *Client) Wait(ctx context.Context, turnID string) (Result, error) {
	if !events.ValidID(turnID) {
		return Result{}, fmt.Errorf("client: invalid turn id %q", turnID)
	}
	// The last event first, then every later one: a finished turn is one
	// read, and a long log is not replayed to find its end.
	for ev, err := range c.follow(ctx, turnID, turnlog.FromLast) {
		if err != nil {
			return Result{}, err
		}
		if fin, ok := ev.(TurnFinished); ok {
			if fin.StopReason == StopRejected {
				return fin, &RejectedError{TurnID: turnID, Reason: fin.Error}
			}
			return fin, nil
		}
	}
	return Result{}, fmt.Errorf("client: wait %s: %w", turnID, ctx.Err())
}

// Events returns a turn's whole log as it is now, typed; ErrTurnNotFound
// when the turn has none.
func (c *Client) Events(ctx context.Context, turnID string) ([]Event, error) {
	if !events.ValidID(turnID) {
		return nil, fmt.Errorf("client: invalid turn id %q", turnID)
	}
	ctx, cancel := c.bounded(ctx)
	defer cancel()
	store, err := c.events(ctx)
	if err != nil {
		return nil, err
	}
	log, _, err := store.Read(ctx, turnID)
	if err != nil {
		return nil, fmt.Errorf("client: %w", err)
	}
	if len(log) == 0 {
		return nil, notFound(turnID)
	}
	out := make([]Event, 0, len(log))
	for _, env := range log {
		ev, err := fromEnvelope(env, nil)
		if err != nil {
			return nil, fmt.Errorf("client: turn %s, event %d: %w", turnID, env.Seq, err)
		}
		out = append(out, ev)
	}
	return out, nil
}

// deltaBuffer is how many deltas StreamDeltas keeps for a caller that reads
// slower than a model writes; beyond it, deltas are dropped (they are not
// persisted anyway: ModelCompleted has the whole text).
const deltaBuffer = 4096

// StreamDeltas subscribes to the text a turn's model calls stream, and
// returns the deltas in order. The subscription starts at once, before the
// sequence is ranged over: call StreamDeltas with an id of your own (NewID)
// before Submit to miss none. The sequence ends when the turn finishes or
// ctx ends, and can be ranged over once. Deltas are not persisted: a model
// call's whole text is in its ModelCompleted event.
func (c *Client) StreamDeltas(ctx context.Context, turnID string) (iter.Seq[Delta], error) {
	if !events.ValidID(turnID) {
		return nil, fmt.Errorf("client: invalid turn id %q", turnID)
	}
	deltas := make(chan *nats.Msg, deltaBuffer)
	sub, err := c.nc.ChanSubscribe(events.DeltaSubject(turnID), deltas)
	if err != nil {
		return nil, fmt.Errorf("client: stream deltas: %w", err)
	}
	ctx, cancel := context.WithCancel(ctx)
	// Nobody may range over the sequence: the subscription ends with ctx
	// all the same.
	context.AfterFunc(ctx, func() { _ = sub.Unsubscribe() })
	return func(yield func(Delta) bool) {
		defer cancel()
		// The end of the turn, watched from its last event on once the
		// deltas are read: what arrives before is buffered.
		finished := make(chan struct{})
		go func() {
			defer close(finished)
			_, _ = c.Wait(ctx, turnID)
		}()
		send := func(m *nats.Msg) bool {
			d, ok := bus.DeltaOf(m, turnID)
			if !ok {
				return true // not this turn's delta (bus.DeltaOf)
			}
			return yield(d)
		}
		for {
			select {
			case m := <-deltas:
				if !send(m) {
					return
				}
			case <-finished:
				// Deltas come before the answer that ends the turn: what
				// has arrived is the rest of them.
				for {
					select {
					case m := <-deltas:
						if !send(m) {
							return
						}
					default:
						return
					}
				}
			}
		}
	}, nil
}
