package cli

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"iter"

	"github.com/jetloop/jetloop/client"
	"github.com/jetloop/jetloop/internal/events"
	"github.com/jetloop/jetloop/internal/timeline"
)

// Watch follows a turn's log from its first event, printing each event and
// the streamed model text, until the turn finishes or ctx ends. It returns the
// turn's turn.finished data.
func Watch(ctx context.Context, cl *client.Client, turn string, t *timeline.Trace) (events.TurnFinishedData, error) {
	feed, err := openDeltas(ctx, cl, turn)
	if err != nil {
		return events.TurnFinishedData{}, err
	}
	defer feed.close()
	return watchFrom(ctx, feed, cl, turn, t)
}

// deltaFeed is a subscription to a turn's streamed text that took effect
// when the turn's log ended at seq after: every delta of a step that
// started later is on it. Opened before a turn is submitted, it has the
// text of every step.
type deltaFeed struct {
	deltas iter.Seq[client.Delta] // ends once the turn has finished
	cancel context.CancelFunc
	after  int
}

// openDeltas subscribes to a turn's deltas until close, then reads where
// its log ends.
func openDeltas(ctx context.Context, cl *client.Client, turn string) (*deltaFeed, error) {
	ctx, cancel := context.WithCancel(ctx)
	// The subscription is made here, before the read below goes out on the
	// same connection: the server has the interest when it answers it, so a
	// step that starts after the log's last event streams all its text to us.
	deltas, err := cl.StreamDeltas(ctx, turn)
	if err != nil {
		cancel()
		return nil, fmt.Errorf("watch: subscribe deltas: %w", err)
	}
	f := &deltaFeed{deltas: deltas, cancel: cancel}
	last, err := cl.Last(ctx, turn)
	switch {
	case errors.Is(err, client.ErrTurnNotFound):
	case err != nil:
		cancel()
		return nil, fmt.Errorf("watch: read turn %s: %w", turn, err)
	default:
		f.after = last.Seq
	}
	return f, nil
}

func (f *deltaFeed) close() { f.cancel() }

// watchFrom is Watch on a feed opened already.
func watchFrom(ctx context.Context, feed *deltaFeed, cl *client.Client, turn string, t *timeline.Trace) (events.TurnFinishedData, error) {
	var fin events.TurnFinishedData
	t.StreamAfter(feed.after)

	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	// The deltas are read on a goroutine of their own, as the log is
	// below, so that they print between its events.
	deltas := make(chan client.Delta)
	go func() {
		defer close(deltas)
		for d := range feed.deltas {
			select {
			case deltas <- d:
			case <-ctx.Done():
				return
			}
		}
	}()
	if t.Children == nil {
		t.Children = func(child string) ([]events.Envelope, error) { return readFinished(ctx, cl, child) }
	}
	type item struct {
		e   events.Envelope
		err error
	}
	evs := make(chan item)
	go func() {
		for e, err := range cl.FollowLog(ctx, turn) {
			select {
			case evs <- item{e, err}:
			case <-ctx.Done():
				return
			}
			if err != nil {
				return
			}
		}
	}()
	for {
		select {
		case <-ctx.Done():
			return fin, ctx.Err()
		case d, ok := <-deltas:
			if !ok {
				deltas = nil // the turn has finished: the rest is in its log
				continue
			}
			t.Delta(d)
		case it := <-evs:
			if it.err != nil {
				return fin, it.err
			}
			if err := t.Event(it.e); err != nil {
				return fin, fmt.Errorf("watch: %w", err)
			}
			if it.e.Type == events.TurnFinished {
				_ = json.Unmarshal(it.e.Data, &fin)
				return fin, nil
			}
		}
	}
}

// readFinished reads the log of a turn that has finished, up to its
// turn.finished.
func readFinished(ctx context.Context, cl *client.Client, turn string) ([]events.Envelope, error) {
	var log []events.Envelope
	for e, err := range cl.FollowLog(ctx, turn) {
		if err != nil {
			return log, err
		}
		log = append(log, e)
		if e.Type == events.TurnFinished {
			break
		}
	}
	return log, nil
}
