package turntest

import (
	"context"
	"encoding/json"
	"log/slog"
	"sync"
	"testing"
	"time"

	"github.com/jetloop/jetloop/internal/agents"
	"github.com/jetloop/jetloop/internal/events"
	"github.com/jetloop/jetloop/internal/natstest"
	"github.com/jetloop/jetloop/internal/orchestrator"
	"github.com/jetloop/jetloop/internal/stack"
	"github.com/jetloop/jetloop/worker"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// Logger logs warnings and errors to the test's log.
func Logger(t testing.TB) *slog.Logger {
	return slog.New(slog.NewTextHandler(testWriter{t}, &slog.HandlerOptions{Level: slog.LevelWarn}))
}

type testWriter struct{ t testing.TB }

func (w testWriter) Write(p []byte) (int, error) { w.t.Log(string(p)); return len(p), nil }

// Orchestrator runs an orchestrator of set with opts (internal/stack) on nc,
// a connection of its own, until the test ends. stop stops it gracefully
// and closes nc; kill closes nc under it, like a crash. An error its Run
// returns fails the test, unless it was killed.
func Orchestrator(t testing.TB, nc *nats.Conn, log *slog.Logger, set *agents.Set, opts ...orchestrator.Option) (o *orchestrator.Orchestrator, stop, kill func()) {
	t.Helper()
	o, p, err := stack.Orchestrator(context.Background(), nc, log, set, stack.Observers{}, opts...)
	if err != nil {
		t.Fatal(err)
	}
	stop, kill = ends(t, "orchestrator", nc, p)
	return o, stop, kill
}

// Worker runs a tool worker serving what register registers, with opts
// (internal/stack), on nc, a connection of its own, and returns once it
// serves. It stops as Orchestrator's does.
func Worker(t testing.TB, nc *nats.Conn, log *slog.Logger, register func(*worker.Worker) error, opts ...worker.Option) (stop, kill func()) {
	t.Helper()
	_, p, err := stack.Worker(context.Background(), nc, log, stack.Observers{}, register, opts...)
	if err != nil {
		t.Fatal(err)
	}
	return ends(t, "toolworker", nc, p)
}

// ends are the stop and kill of a process of the test; the first called
// counts, and the test's end stops the process.
func ends(t testing.TB, what string, nc *nats.Conn, p *stack.Proc) (stop, kill func()) {
	var once sync.Once
	stop = func() {
		once.Do(func() {
			err := p.Stop()
			nc.Close()
			if err != nil {
				t.Errorf("%s: %v", what, err)
			}
		})
	}
	kill = func() {
		once.Do(func() {
			nc.Close()
			_ = p.Stop()
		})
	}
	t.Cleanup(stop)
	return stop, kill
}

// Serve runs a worker on a connection of its own to srv, with what register
// registers, and returns once it serves. The worker logs to the test, and
// calls still running when it stops are cut short after 50 ms, unless opts
// say otherwise. stop stops it gracefully; kill closes its connection under
// it, like a crash. It stops when the test ends.
func Serve(t testing.TB, srv *natstest.Server, register func(*worker.Worker) error, opts ...worker.Option) (stop, kill func()) {
	t.Helper()
	nc, _ := srv.Connect(t)
	return Worker(t, nc, Logger(t), register, append([]worker.Option{worker.WithDrainGrace(50 * time.Millisecond)}, opts...)...)
}

// WaitTool waits until a worker advertises tool (or a hook, as
// events.HookKey), so a turn started next is offered it.
func WaitTool(t testing.TB, js jetstream.JetStream, tool string) {
	t.Helper()
	if err := stack.WaitTool(context.Background(), js, tool); err != nil {
		t.Fatal(err)
	}
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
