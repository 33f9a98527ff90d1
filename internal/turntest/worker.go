package turntest

import (
	"context"
	"encoding/json"
	"log/slog"
	"testing"
	"time"

	"github.com/jetloop/jetloop/internal/events"
	"github.com/jetloop/jetloop/internal/natstest"
	"github.com/jetloop/jetloop/worker"
	"github.com/nats-io/nats.go/jetstream"
)

// Logger logs warnings and errors to the test's log.
func Logger(t testing.TB) *slog.Logger {
	return slog.New(slog.NewTextHandler(testWriter{t}, &slog.HandlerOptions{Level: slog.LevelWarn}))
}

type testWriter struct{ t testing.TB }

func (w testWriter) Write(p []byte) (int, error) { w.t.Log(string(p)); return len(p), nil }

// Serve runs a worker on a connection of its own to srv, with what register
// registers (it returns the names to wait for), and returns once the
// registry lists them. The worker logs to the test, and calls still running
// when it stops are cut short after 50 ms, unless opts say otherwise. stop
// stops it gracefully; kill closes its connection under it, like a crash.
// It stops when the test ends.
func Serve(t testing.TB, srv *natstest.Server, register func(*worker.Worker) []string, opts ...worker.Option) (stop, kill func()) {
	t.Helper()
	nc, js := srv.Connect(t)
	opts = append([]worker.Option{worker.WithLogger(Logger(t)), worker.WithDrainGrace(50 * time.Millisecond)}, opts...)
	w, err := worker.New(nc, opts...)
	if err != nil {
		t.Fatal(err)
	}
	names := register(w)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		if err := w.Run(ctx); err != nil && ctx.Err() == nil {
			t.Errorf("worker: %v", err)
		}
	}()
	natstest.WaitFor(t, "the worker's tools", func() bool {
		for _, name := range names {
			if ToolInfo(t, js, name) == nil {
				return false
			}
		}
		return true
	})
	stop = func() { cancel(); <-done; nc.Close() }
	kill = func() { nc.Close(); cancel(); <-done }
	t.Cleanup(func() { cancel(); <-done; nc.Close() })
	return stop, kill
}

// ToolInfo is what the registry says of a tool, nil while it has no entry.
func ToolInfo(t testing.TB, js jetstream.JetStream, tool string) *events.ToolInfo {
	t.Helper()
	kv, err := js.KeyValue(context.Background(), events.BucketTools)
	if err != nil {
		return nil
	}
	entry, err := kv.Get(context.Background(), tool)
	if err != nil {
		return nil
	}
	var info events.ToolInfo
	if err := json.Unmarshal(entry.Value(), &info); err != nil {
		t.Fatal(err)
	}
	return &info
}

// Job publishes a tool job, as an orchestrator does.
func Job(t testing.TB, js jetstream.JetStream, j events.ToolJob) {
	t.Helper()
	data, err := json.Marshal(j)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if _, err := js.Publish(ctx, events.ToolSubject(j.Tool), data); err != nil {
		t.Fatal(err)
	}
}
