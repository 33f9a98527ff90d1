package bus

import (
	"context"
	"log/slog"
	"time"

	"github.com/nats-io/nats.go/jetstream"
)

// PullEach pulls one message at a time from cons and handles it, until ctx
// ends. Asking for a message only when free to handle it keeps every message
// out of client buffers, where its ack timer would run while it waits.
func PullEach(ctx context.Context, cons jetstream.Consumer, log *slog.Logger, handle func(jetstream.Msg)) {
	for ctx.Err() == nil {
		fctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		batch, err := cons.Fetch(1, jetstream.FetchContext(fctx))
		if err != nil {
			cancel()
			if ctx.Err() == nil {
				log.Warn("fetch failed", "err", err)
				select {
				case <-ctx.Done():
				case <-time.After(time.Second):
				}
			}
			continue
		}
		for msg := range batch.Messages() {
			handle(msg)
		}
		cancel()
	}
}

// Heartbeat tells JetStream that a long call is alive, so its job is not
// handed to another process while it runs.
func Heartbeat(ctx context.Context, msg jetstream.Msg, every time.Duration) (stop func()) {
	ctx, cancel := context.WithCancel(ctx)
	go func() {
		t := time.NewTicker(every)
		defer t.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-t.C:
				_ = msg.InProgress()
			}
		}
	}()
	return cancel
}
