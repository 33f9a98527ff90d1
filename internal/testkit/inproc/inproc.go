// Package inproc runs jetloop's processes inside a test: an orchestrator
// and a tool worker (started by internal/stack, with the test's stop, kill
// and failure added), a Stack of them on one server, and the public test
// kit jetlooptest started with an agents file and its scripts; and a copy
// of a multi-tenant deployment to run. It is apart from internal/testkit because it
// links the orchestrator, whose own tests use testkit.
package inproc

import (
	"context"
	"log/slog"
	"os"
	"sync"
	"testing"
	"time"

	"github.com/jetloop/jetloop/internal/agents"
	"github.com/jetloop/jetloop/internal/orchestrator"
	"github.com/jetloop/jetloop/internal/stack"
	"github.com/jetloop/jetloop/internal/testkit"
	"github.com/jetloop/jetloop/jetlooptest"
	"github.com/jetloop/jetloop/worker"
	"github.com/nats-io/nats.go"
)

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
func Serve(t testing.TB, srv *testkit.Server, register func(*worker.Worker) error, opts ...worker.Option) (stop, kill func()) {
	t.Helper()
	nc, _ := srv.Connect(t)
	return Worker(t, nc, testkit.Logger(t), register, append([]worker.Option{worker.WithDrainGrace(50 * time.Millisecond)}, opts...)...)
}

// PublicKit starts the public test kit's server with files (name →
// content): the agents file AGENTS.md and the scripts it names, for
// Orchestrate. The orchestrator logs to standard error when SDKTEST_LOG is
// set. It needs no *testing.T, so a TestMain can start one for runnable
// examples.
func PublicKit(files map[string]string) (*jetlooptest.Server, error) {
	var opts []jetlooptest.Option
	for name, content := range files {
		if name == "AGENTS.md" {
			opts = append(opts, jetlooptest.WithAgents(content))
		} else {
			opts = append(opts, jetlooptest.WithFile(name, content))
		}
	}
	if os.Getenv("SDKTEST_LOG") != "" {
		opts = append(opts, jetlooptest.WithLogger(slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))))
	}
	return jetlooptest.New(opts...)
}
