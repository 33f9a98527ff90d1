package bus

import (
	"context"
	"errors"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// publishAttempt bounds one attempt of PublishAgain: far above an
// acknowledged append's time even under sync always on a loaded machine
// (milliseconds), far below the callers' deadlines.
const publishAttempt = 2 * time.Second

// PublishAgain publishes msg, with an id (Nats-Msg-Id), and sends it
// again while ctx allows when an attempt is not answered in publishAttempt
// or finds no stream: a publish sent as the server went away (a restart, a
// leader failing over) is never answered, and waiting out the caller's whole
// deadline for it held a job back until its call's deadline had passed. The
// stream drops a copy of a message it stored by its id.
func PublishAgain(ctx context.Context, js jetstream.JetStream, msg *nats.Msg, opts ...jetstream.PublishOpt) (*jetstream.PubAck, error) {
	var ack *jetstream.PubAck
	err := tryEach(ctx, publishAttempt, 50*time.Millisecond, func(err error) bool {
		return errors.Is(err, jetstream.ErrNoStreamResponse) || errors.Is(err, nats.ErrNoResponders)
	}, func(actx context.Context) (err error) {
		ack, err = js.PublishMsg(actx, msg, opts...)
		return err
	})
	if err != nil {
		return nil, err
	}
	return ack, nil
}
