package cli

import (
	"context"
	"fmt"

	"github.com/jetloop/jetloop/internal/events"
	"github.com/nats-io/nats.go/jetstream"
)

// publishControl sends an encoded control message for turn, as every
// command and page that steers a turn does. Each intent gets a Nats-Msg-Id
// of its own (control:<turn>:<uuid>): a retried publish of it is dropped,
// and pressing a button twice sends two.
func publishControl(ctx context.Context, js jetstream.JetStream, turn string, data []byte) error {
	if _, err := js.Publish(ctx, events.ControlSubject(turn), data, jetstream.WithMsgID("control:"+turn+":"+NewID())); err != nil {
		return fmt.Errorf("send control message to turn %s: %w", turn, err)
	}
	return nil
}
