package turnlog

import (
	"context"
	"fmt"
	"iter"

	"github.com/jetloop/jetloop/internal/bus"
	"github.com/jetloop/jetloop/internal/events"
	"github.com/nats-io/nats.go/jetstream"
)

// From says where Follow starts in a log.
type From int

// Where to start following.
const (
	FromFirst From = iota // every event, from seq 1
	FromLast              // the last event written, then every later one
	FromNext              // only events written from now on
)

// Follow yields the events of a turn's log, checked against their schemas,
// as they are written (a log that does not exist yet is waited for), until
// ctx ends or the caller stops. It never ends on its own: a caller stops
// after turn.finished. A failure is its last item, ctx's error when ctx
// ended.
func Follow(ctx context.Context, js jetstream.JetStream, layout events.Layout, turn string, from From) iter.Seq2[events.Envelope, error] {
	var start bus.Start
	switch from {
	case FromLast:
		start.Last = true
	case FromNext:
		start.New = true
	}
	return func(yield func(events.Envelope, error) bool) {
		fail := func(err error) {
			if ctx.Err() != nil {
				err = ctx.Err()
			}
			yield(events.Envelope{}, fmt.Errorf("watch %s: %w", turn, err))
		}
		// Read by get, never by a consumer: a reader may not create one
		// (docs/accounts.md).
		tail, err := Tail(ctx, js, []string{layout.Stream(turn)}, layout.TurnFilter(turn), start)
		if err != nil {
			fail(err)
			return
		}
		defer tail.Close()
		for first := true; ; first = false {
			m, err := tail.Next(ctx)
			if err != nil {
				fail(err)
				return
			}
			// A message stores one event or a decision's events
			// (docs/protocol.md, "Reading a log").
			parts, err := events.Split(m.Data)
			if err != nil {
				yield(events.Envelope{}, fmt.Errorf("watch %s: message on %s: %w", turn, m.Subject, err))
				return
			}
			if first && from == FromLast {
				parts = parts[len(parts)-1:] // the last event, not its whole decision
			}
			for _, p := range parts {
				e, _, err := events.Decode(p)
				if err != nil {
					yield(events.Envelope{}, fmt.Errorf("watch %s: event on %s: %w", turn, m.Subject, err))
					return
				}
				if !yield(e, nil) {
					return
				}
			}
		}
	}
}

// Tail follows the logs that filter selects (a turn's, a session's or
// every log's subjects of a layout) in streams from start, by get
// (bus.Tails). Follow and the client's feeds read through it.
func Tail(ctx context.Context, js jetstream.JetStream, streams []string, filter string, start bus.Start) (*bus.Tails, error) {
	return bus.NewTails(ctx, js, streams, filter, start)
}
