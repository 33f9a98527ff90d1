package cli

import (
	"context"
	"encoding/json"
	"fmt"

	"github.com/jetloop/jetloop/internal/events"
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

	cons, err := js.OrderedConsumer(ctx, events.StreamEvents, jetstream.OrderedConsumerConfig{
		FilterSubjects: []string{events.TurnEventsFilter(turn)},
	})
	if err != nil {
		return fin, fmt.Errorf("watch: %w", err)
	}
	it, err := cons.Messages()
	if err != nil {
		return fin, fmt.Errorf("watch: %w", err)
	}
	defer it.Stop()
	evs := make(chan jetstream.Msg)
	errs := make(chan error, 1)
	go func() {
		for {
			m, err := it.Next()
			if err != nil {
				errs <- err
				return
			}
			select {
			case evs <- m:
			case <-ctx.Done():
				return
			}
		}
	}()
	for {
		select {
		case <-ctx.Done():
			return fin, ctx.Err()
		case err := <-errs:
			return fin, fmt.Errorf("watch: %w", err)
		case m := <-deltas:
			var d events.Delta
			if json.Unmarshal(m.Data, &d) == nil {
				t.Delta(d)
			}
		case m := <-evs:
			e, _, err := events.Decode(m.Data())
			if err != nil {
				return fin, fmt.Errorf("watch: event %s: %w", m.Subject(), err)
			}
			if err := t.Event(e); err != nil {
				return fin, fmt.Errorf("watch: %w", err)
			}
			if e.Type == events.TurnFinished {
				_ = json.Unmarshal(e.Data, &fin)
				return fin, nil
			}
		}
	}
}

// Submit publishes a turn request and returns once the inbox has it.
func Submit(ctx context.Context, js jetstream.JetStream, sub events.Submit) error {
	data, err := json.Marshal(sub)
	if err != nil {
		return err
	}
	if _, err := js.Publish(ctx, events.SubjectSubmit, data, jetstream.WithMsgID(sub.TurnID)); err != nil {
		return fmt.Errorf("submit: %w", err)
	}
	return nil
}
