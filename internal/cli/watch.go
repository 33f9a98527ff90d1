package cli

import (
	"context"
	"encoding/json"
	"fmt"

	"github.com/jetloop/jetloop/client"
	"github.com/jetloop/jetloop/internal/bus"
	"github.com/jetloop/jetloop/internal/events"
	"github.com/jetloop/jetloop/internal/turnlog"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// Watch follows a turn's log from its first event, printing each event and
// the streamed model text, until the turn finishes or ctx ends. It returns the
// turn's turn.finished data.
func Watch(ctx context.Context, nc *nats.Conn, js jetstream.JetStream, turn string, t *Trace) (events.TurnFinishedData, error) {
	var fin events.TurnFinishedData
	deltas := make(chan *nats.Msg, 1024)
	sub, err := nc.ChanSubscribe(events.DeltaSubject(turn), deltas)
	if err != nil {
		return fin, fmt.Errorf("watch: subscribe deltas: %w", err)
	}
	defer func() { _ = sub.Unsubscribe() }()

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

// Submit publishes a turn request and returns once the inbox has it.
func Submit(ctx context.Context, nc *nats.Conn, sub events.Submit) error {
	c, err := client.New(nc)
	if err != nil {
		return err
	}
	_, err = c.Submit(ctx, sub)
	return err
}
