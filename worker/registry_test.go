package worker_test

import (
	"context"
	"testing"
	"time"

	"github.com/jetloop/jetloop/internal/bus"
	"github.com/jetloop/jetloop/internal/events"
	"github.com/jetloop/jetloop/worker"
	"github.com/nats-io/nats.go/jetstream"
)

// A worker that cannot read its own presence back (after a node's fault, a
// replica that has not seen it may answer) still serves its tools: it
// never withdraws them while it lives.
func TestAWorkerNeverWithdrawsWhatItServes(t *testing.T) {
	e := newEnvTTL(t, 600*time.Millisecond) // refreshed every 200 ms
	e.worker(nil, worker.WithName("a"))
	e.waitFor("echo advertised", func() bool { return e.info("echo") != nil })
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	tools, err := e.js.KeyValue(ctx, events.BucketTools)
	must(t, err)
	w, err := tools.Watch(ctx, "echo", jetstream.UpdatesOnly())
	must(t, err)
	defer func() { _ = w.Stop() }()
	workers, err := e.js.KeyValue(ctx, bus.BucketWorkers)
	must(t, err)
	// Its presence is taken away as fast as it writes it, for a few
	// refreshes: what a read from a replica behind shows.
	refreshes := 0
	for refreshes < 5 {
		_ = workers.Purge(ctx, "echo.a")
		select {
		case u := <-w.Updates():
			if u == nil {
				continue
			}
			if u.Operation() != jetstream.KeyValuePut {
				t.Fatalf("the worker withdrew echo while serving it (%s)", u.Operation())
			}
			refreshes++
		case <-ctx.Done():
			t.Fatalf("echo refreshed %d times in 10 s", refreshes)
		default:
		}
	}
}
