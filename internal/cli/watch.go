package cli

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	"github.com/jetloop/jetloop/internal/bus"
	"github.com/jetloop/jetloop/internal/events"
	"github.com/jetloop/jetloop/internal/timeline"
	"github.com/jetloop/jetloop/internal/turnlog"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// Watch follows a turn's log from its first event, printing each event and
// the streamed model text, until the turn finishes or ctx ends. It returns the
// turn's turn.finished data.
func Watch(ctx context.Context, nc *nats.Conn, js jetstream.JetStream, turn string, t *timeline.Trace) (events.TurnFinishedData, error) {
	feed, err := openDeltas(ctx, nc, js, turn)
	if err != nil {
		return events.TurnFinishedData{}, err
	}
	defer feed.close()
	return watchFrom(ctx, feed, js, turn, t)
}

// deltaFeed is a subscription to a turn's streamed text that took effect
// when the turn's log ended at seq after: every delta of a step that
// started later is on it. Opened before a turn is submitted, it has the
// text of every step.
type deltaFeed struct {
	sub   *nats.Subscription
	ch    chan *nats.Msg
	after int
}

func openDeltas(ctx context.Context, nc *nats.Conn, js jetstream.JetStream, turn string) (*deltaFeed, error) {
	f := &deltaFeed{ch: make(chan *nats.Msg, 4096)}
	sub, err := nc.ChanSubscribe(events.DeltaSubject(turn), f.ch)
	if err != nil {
		return nil, fmt.Errorf("watch: subscribe deltas: %w", err)
	}
	f.sub = sub
	// Once a flush returns the server has the interest: a step that starts
	// after the log's last event below streams all its text to us.
	fctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	if err := nc.FlushWithContext(fctx); err != nil {
		f.close()
		return nil, fmt.Errorf("watch: subscribe deltas: %w", err)
	}
	store, err := bus.NewStore(fctx, js)
	if err != nil {
		f.close()
		return nil, err
	}
	last, _, ok, err := store.Last(fctx, turn)
	if err != nil {
		f.close()
		return nil, fmt.Errorf("watch: read turn %s: %w", turn, err)
	}
	if ok {
		f.after = last.Seq
	}
	return f, nil
}

func (f *deltaFeed) close() { _ = f.sub.Unsubscribe() }

// watchFrom is Watch on a feed opened already.
func watchFrom(ctx context.Context, feed *deltaFeed, js jetstream.JetStream, turn string, t *timeline.Trace) (events.TurnFinishedData, error) {
	var fin events.TurnFinishedData
	deltas := feed.ch
	t.StreamAfter(feed.after)

	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	if t.Children == nil {
		t.Children = func(child string) ([]events.Envelope, error) { return readFinished(ctx, js, child) }
	}
	type item struct {
		e   events.Envelope
		err error
	}
	// The log is read on its own goroutine so that deltas print between
	// its events.
	evs := make(chan item)
	go func() {
		for e, err := range turnlog.Follow(ctx, js, turn, turnlog.FromFirst) {
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
		case m := <-deltas:
			if d, ok := bus.DeltaOf(m, turn); ok { // only this turn's deltas
				t.Delta(d)
			}
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
func readFinished(ctx context.Context, js jetstream.JetStream, turn string) ([]events.Envelope, error) {
	var log []events.Envelope
	for e, err := range turnlog.Follow(ctx, js, turn, turnlog.FromFirst) {
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
