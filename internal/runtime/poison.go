package runtime

import (
	"context"
	"encoding/json"
	"fmt"

	"github.com/jetloop/jetloop/internal/events"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// inboxMaxDeliveries is the advisory JetStream sends when an input hit the
// inbox consumer's MaxDeliver: the input stays in the stream, delivered to
// no one, unless something keeps it elsewhere.
const inboxMaxDeliveries = "$JS.EVENT.ADVISORY.CONSUMER.MAX_DELIVERIES." + events.StreamInbox + "." + InboxConsumer

// watchExhausted turns every input that exhausted its deliveries into a dead
// letter. A handler dead-letters an input itself on its last delivery; this
// catches the inputs whose every delivery ended with the process that took
// it (a crash, a kill, an input that crashes the process). Every
// orchestrator sees the advisory: the dead letter's id makes their copies
// one.
func (o *Orchestrator) watchExhausted() (*nats.Subscription, error) {
	sub, err := o.nc.Subscribe(inboxMaxDeliveries, func(m *nats.Msg) {
		var adv struct {
			StreamSeq  uint64 `json:"stream_seq"`
			Deliveries int    `json:"deliveries"`
		}
		if err := json.Unmarshal(m.Data, &adv); err != nil || adv.StreamSeq == 0 {
			return
		}
		ctx, cancel := context.WithTimeout(context.Background(), defaultIOTimeout)
		defer cancel()
		if err := o.buryExhausted(ctx, adv.StreamSeq, adv.Deliveries); err != nil {
			o.log.Error("cannot dead-letter an input that exhausted its deliveries; it stays in the inbox", "seq", adv.StreamSeq, "err", err)
		}
	})
	if err != nil {
		return nil, fmt.Errorf("runtime: subscribe %s: %w", inboxMaxDeliveries, err)
	}
	return sub, nil
}

func (o *Orchestrator) buryExhausted(ctx context.Context, seq uint64, deliveries int) error {
	stream, err := o.js.Stream(ctx, events.StreamInbox)
	if err != nil {
		return err
	}
	raw, err := stream.GetMsg(ctx, seq)
	if err != nil {
		return nil // another orchestrator handled it
	}
	kind, _ := inputKind(raw.Subject)
	reason := fmt.Sprintf("delivered %d times, and the process handling it stopped each time", deliveries)
	o.log.Error("dead letter", "input", kind, "seq", seq, "reason", reason)
	if err := DeadLetter(ctx, o.js, storedMsg{raw}, kind, reason); err != nil {
		return err
	}
	if err := stream.DeleteMsg(ctx, seq); err != nil {
		return fmt.Errorf("runtime: delete input %d: %w", seq, err)
	}
	return nil
}

// storedMsg is a message read from a stream, as DeadLetter takes it.
type storedMsg struct{ raw *jetstream.RawStreamMsg }

func (m storedMsg) Subject() string { return m.raw.Subject }
func (m storedMsg) Data() []byte    { return m.raw.Data }
func (m storedMsg) Metadata() (*jetstream.MsgMetadata, error) {
	return &jetstream.MsgMetadata{Stream: events.StreamInbox, Sequence: jetstream.SequencePair{Stream: m.raw.Sequence}}, nil
}
