package inproc

import (
	"context"
	"fmt"
	"log/slog"
	"sync"
	"testing"
	"time"

	"github.com/jetloop/jetloop/internal/agents"
	"github.com/jetloop/jetloop/internal/bus"
	"github.com/jetloop/jetloop/internal/orchestrator"
	"github.com/jetloop/jetloop/internal/testkit"
	"github.com/jetloop/jetloop/internal/tools"
	"github.com/jetloop/jetloop/worker"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// Stack is a server whose turns the test runs on orchestrators and tool
// workers of its own, each on a connection of its own. Every turn log on
// the server is checked (testkit.CheckLogs) when the test ends.
type Stack struct {
	// Server is the server the stack runs on.
	Server *testkit.Server
	// NC and JS are the test's own connection.
	NC *nats.Conn
	JS jetstream.JetStream
	// Agents are what the orchestrators started next serve.
	Agents *agents.Set
	// Log is where the processes log: the test's.
	Log *slog.Logger

	t    testing.TB
	conn []nats.Option

	mu    sync.Mutex
	names map[string]bool // of the orchestrators running
}

// Config is what a Stack's server differs in; the zero value is an open
// server's with the default streams.
type Config struct {
	// Conn makes every connection of the stack, the test's and its
	// processes': a user of the server's (testkit.Role).
	Conn []nats.Option
	// Provision, when set, makes the streams (bus.Apply) before the
	// defaults are ensured.
	Provision *bus.Provision
}

// NewStack readies srv for turns of set: it connects, makes jetloop's
// streams, and checks every log when the test ends. It starts no process:
// Orchestrator and Worker do.
func NewStack(t testing.TB, srv *testkit.Server, set *agents.Set, cfg Config) *Stack {
	t.Helper()
	nc, js := srv.ConnectAs(t, cfg.Conn...)
	if cfg.Provision != nil {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if _, err := bus.Apply(ctx, js, *cfg.Provision); err != nil {
			t.Fatal(err)
		}
	}
	testkit.EnsureStreams(t, js)
	s := &Stack{Server: srv, NC: nc, JS: js, Agents: set, Log: testkit.Logger(t), t: t, conn: cfg.Conn}
	t.Cleanup(func() { testkit.CheckLogs(t, js) })
	return s
}

// Connect opens a connection as the stack's processes do, closed when the
// test ends.
func (s *Stack) Connect() (*nats.Conn, jetstream.JetStream) {
	s.t.Helper()
	return s.Server.ConnectAs(s.t, s.conn...)
}

// Orchestrator runs an orchestrator of s.Agents until the test ends, as
// the package's Orchestrator does. It acks after a second and allows a
// submission's script, and it is named orchestrator-1, -2, …: the lowest
// name no running orchestrator of the stack has, so one started after
// another stopped replaces it as a restarted process would. opts come
// after these, so they may override them.
func (s *Stack) Orchestrator(opts ...orchestrator.Option) (o *orchestrator.Orchestrator, stop, kill func()) {
	s.t.Helper()
	nc, _ := s.Connect()
	name := s.claim()
	opts = append([]orchestrator.Option{orchestrator.WithAckWait(time.Second), orchestrator.WithAllowScripts(true),
		orchestrator.WithName(name)}, opts...)
	o, stopO, killO := Orchestrator(s.t, nc, s.Log.With("process", "orchestrator"), s.Agents, opts...)
	var once sync.Once
	release := func() { once.Do(func() { s.release(name) }) }
	s.t.Cleanup(release)
	return o, func() { stopO(); release() }, func() { killO(); release() }
}

// Worker runs a tool worker with the built-in tools, their files confined
// to root (a directory of the test's when empty), and what register
// registers before them (nothing when nil). It returns once the worker
// serves, and stops as Orchestrator's does.
func (s *Stack) Worker(root string, register func(*worker.Worker) error, opts ...worker.Option) (stop, kill func()) {
	s.t.Helper()
	if root == "" {
		root = s.t.TempDir()
	}
	builtins, err := tools.Builtins(root, false)
	if err != nil {
		s.t.Fatal(err)
	}
	nc, _ := s.Connect()
	return Worker(s.t, nc, s.Log.With("process", "toolworker"), func(w *worker.Worker) error {
		if register != nil {
			if err := register(w); err != nil {
				return err
			}
		}
		return tools.Register(w, builtins...)
	}, opts...)
}

func (s *Stack) claim() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.names == nil {
		s.names = map[string]bool{}
	}
	for i := 1; ; i++ {
		if n := fmt.Sprintf("orchestrator-%d", i); !s.names[n] {
			s.names[n] = true
			return n
		}
	}
}

func (s *Stack) release(name string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	delete(s.names, name)
}
