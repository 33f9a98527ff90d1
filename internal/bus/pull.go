package bus

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jetloop/jetloop/internal/backoff"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// PullEach pulls one message at a time from cons and handles it, until ctx
// ends. Asking for a message only when free to handle it keeps every message
// out of client buffers, where its ack timer would run while it waits.
func PullEach(ctx context.Context, cons jetstream.Consumer, log *slog.Logger, handle func(jetstream.Msg)) {
	PullRepairing(ctx, cons, log, nil, handle)
}

// Repair makes a consumer again, with its stream, after the server lost
// them: a stream kept in memory on a single server does not survive its
// restart.
type Repair func(ctx context.Context) (jetstream.Consumer, error)

// PullRepairing is PullEach that calls repair when the consumer or its
// stream is gone.
func PullRepairing(ctx context.Context, cons jetstream.Consumer, log *slog.Logger, repair Repair, handle func(jetstream.Msg)) {
	for ctx.Err() == nil {
		fctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		batch, err := cons.Fetch(1, jetstream.FetchContext(fctx))
		if err == nil {
			for msg := range batch.Messages() {
				handle(msg)
			}
			err = batch.Error()
			if errors.Is(err, context.DeadlineExceeded) || errors.Is(err, nats.ErrTimeout) {
				err = nil // no message within the wait
			}
		}
		cancel()
		if err == nil || ctx.Err() != nil {
			continue
		}
		if repair != nil && Gone(err) {
			if c, rerr := repair(ctx); rerr == nil {
				log.Info("made the consumer again: the server had lost it", "consumer", c.CachedInfo().Name)
				cons = c
				continue
			} else {
				log.Warn("cannot make the consumer again", "err", rerr)
			}
		} else {
			log.Warn("fetch failed", "err", err)
		}
		backoff.Sleep(ctx, time.Second)
	}
}

// Gone reports whether err says a consumer or its stream does not exist.
func Gone(err error) bool {
	// A pull from a consumer that does not exist is not answered at all.
	if errors.Is(err, jetstream.ErrConsumerNotFound) || errors.Is(err, jetstream.ErrStreamNotFound) ||
		errors.Is(err, jetstream.ErrConsumerDeleted) || errors.Is(err, nats.ErrNoResponders) {
		return true
	}
	var apiErr *jetstream.APIError
	return errors.As(err, &apiErr) && (apiErr.ErrorCode == jetstream.JSErrCodeConsumerNotFound || apiErr.ErrorCode == jetstream.JSErrCodeStreamNotFound)
}

// EnsureStream makes a stream with cfg when it does not exist.
func EnsureStream(ctx context.Context, js jetstream.JetStream, cfg jetstream.StreamConfig) error {
	if _, err := js.Stream(ctx, cfg.Name); !errors.Is(err, jetstream.ErrStreamNotFound) {
		return err
	}
	if _, err := js.CreateStream(ctx, cfg); err != nil && !errors.Is(err, jetstream.ErrStreamNameAlreadyInUse) {
		return fmt.Errorf("bus: make stream %s again: %w", cfg.Name, err)
	}
	return nil
}

// Heartbeat tells JetStream that a long call is alive, so its job is not
// handed to another process while it runs, until stop is called or ctx
// ends.
//
// It is a timer that re-arms itself, not a goroutine: every job has two or
// three of these and almost every job ends before the first beat, so a
// goroutine each would be made and parked only to exit.
func Heartbeat(ctx context.Context, msg jetstream.Msg, every time.Duration) (stop func()) {
	var stopped atomic.Bool
	var t *time.Timer
	var mu sync.Mutex // t is set before its first beat can read it
	mu.Lock()
	defer mu.Unlock()
	t = time.AfterFunc(every, func() {
		if stopped.Load() || ctx.Err() != nil {
			return
		}
		_ = msg.InProgress()
		mu.Lock()
		defer mu.Unlock()
		t.Reset(every)
	})
	return func() {
		stopped.Store(true)
		t.Stop()
	}
}

// AckSure acknowledges msg and waits for the server to confirm it, trying
// again until it does or ctx ends. A plain ack sent while a server restarts
// or a node fails over is lost without a word, and the job comes back after
// its ack wait to run a second time: a model called twice, a shell command
// run twice.
func AckSure(ctx context.Context, msg jetstream.Msg) error {
	return backoff.Policy{First: 100 * time.Millisecond, Max: 2 * time.Second}.Do(ctx, func(int) error {
		actx, cancel := context.WithTimeout(ctx, 2*time.Second)
		err := msg.DoubleAck(actx)
		cancel()
		if errors.Is(err, jetstream.ErrMsgAlreadyAckd) {
			return nil
		}
		return err
	})
}
