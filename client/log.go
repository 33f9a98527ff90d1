package client

import (
	"context"
	"encoding/json"
	"fmt"
	"iter"

	"github.com/jetloop/jetloop/internal/events"
	"github.com/jetloop/jetloop/internal/turnlog"
)

// Record is one event of a log as it is stored (docs/protocol.md,
// "Events"): ID, Type, TurnID, SessionID, Seq, Step, Time, and Data, the
// type's data as raw JSON. Encoded with encoding/json it is the event's
// wire form, one line of what `jetloop export` prints. Watch and Events
// decode the same events into Go types; a Record keeps them as they are,
// to store, export or fold elsewhere.
type Record = events.Envelope

// Log returns a turn's (or a workflow's) whole log as it is now, each
// event checked against its schema; ErrTurnNotFound when it has none.
func (c *Client) Log(ctx context.Context, turnID string) ([]Record, error) {
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
	for _, r := range log {
		data, err := json.Marshal(r)
		if err == nil {
			err = events.ValidateEvent(data)
		}
		if err != nil {
			return nil, fmt.Errorf("client: turn %s: event %d: %w", turnID, r.Seq, err)
		}
	}
	return log, nil
}

// Last returns the last event of a turn's (or a workflow's) log as it is
// now: one read, however long the log; ErrTurnNotFound when it has none.
func (c *Client) Last(ctx context.Context, turnID string) (Record, error) {
	if !events.ValidID(turnID) {
		return Record{}, fmt.Errorf("client: invalid turn id %q", turnID)
	}
	ctx, cancel := c.bounded(ctx)
	defer cancel()
	store, err := c.events(ctx)
	if err != nil {
		return Record{}, err
	}
	last, _, ok, err := store.Last(ctx, turnID)
	switch {
	case err != nil:
		return Record{}, fmt.Errorf("client: %w", err)
	case !ok:
		return Record{}, notFound(turnID)
	}
	return last, nil
}

// FollowLog yields the events of a turn's (or a workflow's) log as
// records, each checked against its schema, from its first one (or, with
// FromNow, from the next one), as they are written; a log not written yet
// is waited for. It reads as Watch does, each event once and in order,
// and ends only when ctx ends (yielding ctx's error) or the caller stops:
// stop after TurnFinished (WorkflowFinished), the log's last event. A
// failure is yielded once with a zero Record and ends the sequence.
// WithSubagents does not apply: a record is of the one log.
func (c *Client) FollowLog(ctx context.Context, turnID string, opts ...WatchOption) iter.Seq2[Record, error] {
	from := watchOptions(opts).from
	return func(yield func(Record, error) bool) {
		if !events.ValidID(turnID) {
			yield(Record{}, fmt.Errorf("client: invalid turn id %q", turnID))
			return
		}
		for r, err := range c.records(ctx, turnID, from) {
			if !yield(r, err) || err != nil {
				return
			}
		}
	}
}

// records is every reader's follow of a log: FollowLog's, and Watch's,
// which types what it yields.
func (c *Client) records(ctx context.Context, turnID string, from turnlog.From) iter.Seq2[Record, error] {
	return func(yield func(Record, error) bool) {
		store, err := c.events(ctx)
		if err != nil {
			yield(Record{}, err)
			return
		}
		for r, err := range turnlog.Follow(ctx, c.js, store.Layout(), turnID, from) {
			if err != nil {
				yield(Record{}, fmt.Errorf("client: %w", err))
				return
			}
			if !yield(r, nil) {
				return
			}
		}
	}
}
