package bench

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jetloop/jetloop/internal/bus"
	"github.com/jetloop/jetloop/internal/events"
	"github.com/jetloop/jetloop/internal/tenants"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// Sizes of the untrusted roles' load.
const (
	// roleReaders is how many connections of each reading role read at
	// once, one reader each.
	roleReaders = 4
	// rolePutters is how many presence keys the tool worker rewrites at
	// once.
	rolePutters = 4
	// heldSubs is how many subscriptions a reading role's connection
	// holds: its account's max_subscriptions (CLIENT_LIMITS and
	// VIEWER_LIMITS in deploy/permissions.conf), less a few for its reads.
	heldSubs = 10_000 - 10
)

// roleLoad is the worst tenant a's untrusted roles may still do to the
// server without submitting anything: its viewer and client follow a's
// logs from the first message again and again, as fast as they can (each
// follow is a stream info, a subscription and batched direct gets: the
// readers' path, bus.Tail), and one connection of each holds as many
// subscriptions as its account allows; its tool worker rewrites
// presence keys of its tool with values of the bucket's largest size.
type roleLoad struct {
	reads, follows, puts atomic.Int64
	subs                 int
	began                time.Time

	cancel context.CancelFunc
	wg     sync.WaitGroup
	conns  []*nats.Conn

	mu   sync.Mutex
	errs []error // the readers' and writers' errors, and the server's
}

// startRoleLoad connects as tenant a's viewer, client and tool worker (seed
// gives a role's credentials) and starts their load. a's logs must not be
// empty: a follow ends when it has read them. Stop it to learn whether
// every role did its work within its permissions.
func startRoleLoad(ctx context.Context, url string, seed func(role string) string) (_ *roleLoad, err error) {
	ctx, cancel := context.WithCancel(ctx)
	l := &roleLoad{cancel: cancel, began: time.Now()}
	defer func() {
		if err != nil {
			_ = l.stop()
		}
	}()
	for _, role := range []string{tenants.Viewer, tenants.Client} {
		for range roleReaders {
			_, js, err := l.dial(url, role, bus.InboxCLI, seed)
			if err != nil {
				return nil, err
			}
			l.wg.Go(func() { l.read(ctx, js) })
		}
		nc, _, err := l.dial(url, role, bus.InboxCLI, seed)
		if err != nil {
			return nil, err
		}
		if err := l.hold(nc); err != nil {
			return nil, fmt.Errorf("%s: %w", role, err)
		}
	}
	_, js, err := l.dial(url, tenants.Toolworker, bus.InboxToolworker, seed)
	if err != nil {
		return nil, err
	}
	kv, err := js.KeyValue(ctx, bus.BucketWorkers)
	if err != nil {
		return nil, fmt.Errorf("toolworker: %w", err)
	}
	for i := range rolePutters {
		l.wg.Go(func() { l.put(ctx, kv, fmt.Sprintf("echo.bench-roles-%d", i)) })
	}
	return l, nil
}

// dial connects as one of a's roles, noting what the server says went
// wrong (a permissions violation, a limit).
func (l *roleLoad) dial(url, role, inbox string, seed func(string) string) (*nats.Conn, jetstream.JetStream, error) {
	opts, err := bus.Auth{Creds: seed(role), Inbox: inbox}.Options()
	if err != nil {
		return nil, nil, err
	}
	nc, err := bus.Connect(url, "jetloop bench a "+role, func(err error) { l.fail(fmt.Errorf("%s: %w", role, err)) }, opts...)
	if err != nil {
		return nil, nil, err
	}
	l.conns = append(l.conns, nc)
	js, err := bus.JetStreamFor(context.Background(), nc, "")
	if err != nil {
		return nil, nil, err
	}
	return nc, js, nil
}

func (l *roleLoad) fail(err error) {
	l.mu.Lock()
	l.errs = append(l.errs, err)
	l.mu.Unlock()
}

// read follows a's logs from the first message to the last, again until
// ctx ends.
func (l *roleLoad) read(ctx context.Context, js jetstream.JetStream) {
	for ctx.Err() == nil {
		t, err := bus.NewTail(ctx, js, events.StreamEvents, "jetloop.events.>", bus.Start{})
		if err != nil {
			if ctx.Err() == nil {
				l.fail(err)
			}
			return
		}
		for {
			m, err := t.Next(ctx)
			if err != nil {
				if ctx.Err() == nil {
					l.fail(err)
				}
				break
			}
			l.reads.Add(1)
			if m.Pending == 0 {
				l.follows.Add(1)
				break
			}
		}
		t.Close()
	}
}

// hold subscribes nc to a's events up to its account's limit: every one of
// a's events is then sent heldSubs times over this connection.
func (l *roleLoad) hold(nc *nats.Conn) error {
	for range heldSubs {
		sub, err := nc.Subscribe("jetloop.events.>", func(*nats.Msg) {})
		if err != nil {
			return err
		}
		// Dropped messages are the reader's loss, not an error of the load.
		_ = sub.SetPendingLimits(-1, -1)
	}
	// The server takes thousands of subscriptions while the readers keep
	// it busy: on a loaded machine that outlasts Flush's 10 s.
	if err := nc.FlushTimeout(time.Minute); err != nil {
		return err
	}
	l.subs += heldSubs
	return nil
}

// put rewrites key with values of the bucket's largest size until ctx ends.
func (l *roleLoad) put(ctx context.Context, kv jetstream.KeyValue, key string) {
	value := bytes.Repeat([]byte("x"), bus.WorkerValueMax)
	for ctx.Err() == nil {
		if _, err := kv.Put(ctx, key, value); err != nil {
			if ctx.Err() == nil {
				l.fail(fmt.Errorf("toolworker: put %s: %w", key, err))
			}
			return
		}
		l.puts.Add(1)
	}
}

// busy waits until every role has done some of its work.
func (l *roleLoad) busy(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	tick := time.NewTicker(10 * time.Millisecond)
	defer tick.Stop()
	for l.follows.Load() == 0 || l.puts.Load() == 0 {
		if err := l.err(); err != nil {
			return err
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("bench: a's roles not busy: %d follows, %d puts: %w", l.follows.Load(), l.puts.Load(), ctx.Err())
		case <-tick.C:
		}
	}
	return nil
}

func (l *roleLoad) err() error {
	l.mu.Lock()
	defer l.mu.Unlock()
	return errors.Join(l.errs...)
}

// stop ends the load and returns what went wrong during it.
func (l *roleLoad) stop() error {
	l.cancel()
	l.wg.Wait()
	for _, nc := range l.conns {
		nc.Close()
	}
	return l.err()
}

// rates are the load's reads and puts per second since it started.
func (l *roleLoad) rates() (reads, puts float64) {
	s := time.Since(l.began).Seconds()
	return float64(l.reads.Load()) / s, float64(l.puts.Load()) / s
}
