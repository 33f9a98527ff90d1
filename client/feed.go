package client

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jetloop/jetloop/internal/bus"
	"github.com/jetloop/jetloop/internal/events"
	"github.com/jetloop/jetloop/internal/turnlog"
	"github.com/nats-io/nats.go/jetstream"
)

// FeedFilter selects what a Feed reads: the logs of one session, or one
// turn's (or workflow's) log; the zero value reads every log. Since, when
// set, makes the feed begin at the first event stored at or after it;
// otherwise it begins at the first event stored.
type FeedFilter struct {
	SessionID string
	TurnID    string
	Since     time.Time
}

// where is the filter's subject and the streams it reads in layout.
func (f FeedFilter) where(layout events.Layout) (string, []string, error) {
	switch {
	case f.TurnID != "" && f.SessionID != "":
		return "", nil, errors.New("client: a feed reads a session's logs or a turn's log, not both")
	case f.TurnID != "":
		if !events.ValidID(f.TurnID) {
			return "", nil, fmt.Errorf("client: invalid turn id %q", f.TurnID)
		}
		return layout.TurnFilter(f.TurnID), []string{layout.Stream(f.TurnID)}, nil
	case f.SessionID != "":
		if !events.ValidID(f.SessionID) {
			return "", nil, fmt.Errorf("client: invalid session id %q", f.SessionID)
		}
		return layout.SessionFilter(f.SessionID), layout.Names(), nil
	}
	return layout.AllFilter(), layout.Names(), nil
}

// Feed reads logs as they are written, many at once: each event once, in
// the order they were stored, and says when it has caught up with what is
// stored (CaughtUp), as a screen that redraws after each burst of events
// needs. Records are as stored: the orchestrator checked them against
// their schemas when it wrote them, and a feed of every log does not check
// them again (FollowLog and Log do). It reads by direct gets, as the
// client and viewer roles may. A Feed is for one goroutine; Close it when
// done.
type Feed struct {
	tail     *bus.Tails
	buf      []Record
	pending  uint64
	caughtUp bool
}

// OpenFeed opens a feed of the logs filter selects.
func (c *Client) OpenFeed(ctx context.Context, filter FeedFilter) (*Feed, error) {
	ctx, cancel := c.bounded(ctx)
	defer cancel()
	store, err := c.events(ctx)
	if err != nil {
		return nil, err
	}
	subject, streams, err := filter.where(store.Layout())
	if err != nil {
		return nil, err
	}
	tail, err := turnlog.Tail(ctx, c.js, streams, subject, bus.Start{Time: filter.Since})
	if err != nil {
		return nil, fmt.Errorf("client: open feed: %w", err)
	}
	f := &Feed{tail: tail, caughtUp: true}
	// Caught up from the start when nothing is stored from where it begins.
	for _, name := range streams {
		m, err := store.Reads(name).GetLastMsgForSubject(ctx, subject)
		switch {
		case errors.Is(err, jetstream.ErrMsgNotFound):
		case err != nil:
			tail.Close()
			return nil, fmt.Errorf("client: open feed: %w", err)
		default:
			f.caughtUp = f.caughtUp && m.Time.Before(filter.Since)
		}
	}
	return f, nil
}

// Next returns the next event stored, waiting for one until ctx ends.
func (f *Feed) Next(ctx context.Context) (Record, error) {
	for len(f.buf) == 0 {
		m, err := f.tail.Next(ctx)
		if err != nil {
			return Record{}, fmt.Errorf("client: feed: %w", err)
		}
		// One event, or a decision's events, per message.
		if err := events.Each(m.Data, func(r Record) error { f.buf = append(f.buf, r); return nil }); err != nil {
			return Record{}, fmt.Errorf("client: feed: message on %s: %w", m.Subject, err)
		}
		f.pending = m.Pending
	}
	r := f.buf[0]
	f.buf = f.buf[1:]
	f.caughtUp = len(f.buf) == 0 && f.pending == 0
	return r, nil
}

// CaughtUp reports whether the feed has returned every event stored when
// it last read: a burst of events has been read whole. Before the first
// Next, it reports whether nothing was stored from where the feed begins.
func (f *Feed) CaughtUp() bool { return f.caughtUp }

// Close ends the feed.
func (f *Feed) Close() { f.tail.Close() }

// FeedEvent is an event a feed read, and whether the feed had caught up
// once it was read (CaughtUp).
type FeedEvent struct {
	Record
	CaughtUp bool
}

// Chan delivers the feed's events to a channel until ctx ends, to wait for
// them in a select beside other channels; the error channel says why it
// stopped otherwise. The feed is then Chan's: call neither Next nor
// CaughtUp, which each event repeats.
func (f *Feed) Chan(ctx context.Context) (<-chan FeedEvent, <-chan error) {
	out := make(chan FeedEvent, 64)
	errs := make(chan error, 1)
	go func() {
		for {
			r, err := f.Next(ctx)
			if err != nil {
				if ctx.Err() == nil {
					errs <- err
				}
				return
			}
			select {
			case out <- FeedEvent{r, f.CaughtUp()}:
			case <-ctx.Done():
				return
			}
		}
	}()
	return out, errs
}
