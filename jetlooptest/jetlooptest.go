// Package jetlooptest runs jetloop in your tests: an embedded NATS server
// with JetStream and jetloop's streams, and an orchestrator, in-process,
// whose agents answer with scripted models (no model provider, no API key).
// Test your own tool workers, hooks and workflows against it the way they
// run in production, with the client and worker packages:
//
//	srv := jetlooptest.Start(t, jetlooptest.WithAgents(agentsMD), jetlooptest.WithFile("billing.yaml", script))
//	nc, _ := nats.Connect(srv.URL)
//	w, _ := worker.New(nc) // your worker, your tools
//	go w.Run(ctx)
//	srv.WaitForTool(ctx, "invoice_total")
//	srv.Orchestrate() // the first turn is offered the tool
//	c, _ := client.New(nc)
//	id, _ := c.Submit(ctx, client.TurnRequest{Agent: "Billing", Input: client.Text("What does C-42 owe?")})
//	res, _ := c.Wait(ctx, id)
//
// An agent's model is a script, model: script:NAME.yaml, written with
// WithFile; a turn or a workflow's task may also carry its script inline
// (client.TurnRequest.Script). A script lists the model's answers in order:
//
//	responses:
//	  - tool_calls: [{name: invoice_total, arguments: {customer: C-42}}]
//	  - {text: "C-42 owes 120.50 EUR."}
//
// The kit links the server and the orchestrator: import it from tests only.
package jetlooptest

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/jetloop/jetloop/internal/agents"
	"github.com/jetloop/jetloop/internal/bus"
	"github.com/jetloop/jetloop/internal/embedded"
	"github.com/jetloop/jetloop/internal/orchestrator"
	"github.com/jetloop/jetloop/internal/stack"
	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// Server is an embedded NATS server with jetloop's streams and, once
// Orchestrate has started it, an orchestrator of the agents WithAgents
// gave.
type Server struct {
	// URL is the server's client URL, for nats.Connect.
	URL string

	dir    string
	srv    *server.Server
	nc     *nats.Conn
	js     jetstream.JetStream
	stops  []func()
	agents string
	files  map[string]string
	log    *slog.Logger
}

// Option configures a Server.
type Option func(*Server) error

// WithAgents gives the agents Orchestrate runs, defined as in AGENTS.md
// (docs/agents.md).
func WithAgents(md string) Option {
	return func(s *Server) error {
		if md == "" {
			return errors.New("jetlooptest: no agents")
		}
		s.agents = md
		return nil
	}
}

// WithFile writes a file beside the agents, for them to name: the script of
// model: script:NAME.yaml.
func WithFile(name, content string) Option {
	return func(s *Server) error {
		if name == "" || name != filepath.Base(name) || name == "AGENTS.md" {
			return fmt.Errorf("jetlooptest: file name %q: a plain name other than AGENTS.md", name)
		}
		s.files[name] = content
		return nil
	}
}

// WithLogger gives the orchestrator's log to log (default: discarded).
func WithLogger(log *slog.Logger) Option {
	return func(s *Server) error {
		if log == nil {
			return errors.New("jetlooptest: nil logger")
		}
		s.log = log
		return nil
	}
}

// New starts a server in a new temporary directory and returns once it
// serves, its streams made. It needs no *testing.T, so a TestMain can start
// one for runnable examples; Close stops it.
func New(opts ...Option) (*Server, error) {
	s := &Server{files: map[string]string{}, log: slog.New(slog.DiscardHandler)}
	for _, o := range opts {
		if err := o(s); err != nil {
			return nil, err
		}
	}
	dir, err := os.MkdirTemp("", "jetlooptest-")
	if err != nil {
		return nil, err
	}
	s.dir = dir
	files := s.files
	if s.agents != "" {
		files["AGENTS.md"] = s.agents
	}
	for name, content := range files {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(content), 0o644); err != nil {
			_ = os.RemoveAll(dir)
			return nil, err
		}
	}
	// No URL: a random free port on loopback.
	if s.srv, err = embedded.Start("", filepath.Join(dir, "nats")); err != nil {
		_ = os.RemoveAll(dir)
		return nil, fmt.Errorf("jetlooptest: %w", err)
	}
	s.URL = s.srv.ClientURL()
	s.nc, err = nats.Connect(s.URL)
	if err == nil {
		s.js, err = jetstream.New(s.nc)
	}
	if err == nil {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		err = bus.EnsureStreams(ctx, s.js)
		cancel()
	}
	if err != nil {
		s.Close()
		return nil, fmt.Errorf("jetlooptest: %w", err)
	}
	return s, nil
}

// Start is New for a test: it fails the test if the server cannot start,
// and stops it when the test ends.
func Start(t testing.TB, opts ...Option) *Server {
	t.Helper()
	s, err := New(opts...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.Close)
	return s
}

// Orchestrate starts an orchestrator of the agents WithAgents gave, which
// accepts scripted models, until Close. Its catalog of tools follows the
// registry, so a tool a worker advertises later is offered soon after; to
// have the first turn offered it, start the orchestrator once WaitForTool
// returns.
func (s *Server) Orchestrate() error {
	if s.agents == "" {
		return errors.New("jetlooptest: no agents to orchestrate: WithAgents")
	}
	set, _, err := agents.Load(filepath.Join(s.dir, "AGENTS.md"))
	if err != nil {
		return fmt.Errorf("jetlooptest: %w", err)
	}
	nc, err := nats.Connect(s.URL)
	if err != nil {
		return err
	}
	_, p, err := stack.Orchestrator(context.Background(), nc, s.log, set, stack.Observers{}, orchestrator.WithAllowScripts(true), orchestrator.WithAckWait(time.Second))
	if err != nil {
		nc.Close()
		return err
	}
	// Logged as it happens, and before Close returns: the log may be the
	// test's own.
	done := make(chan struct{})
	go func() {
		defer close(done)
		if err := p.Wait(); err != nil {
			s.log.Error("jetlooptest: orchestrator stopped", "err", err)
		}
	}()
	s.stops = append(s.stops, func() { _ = p.Stop(); <-done; nc.Close() })
	return nil
}

// WaitForTool returns once a worker advertises tool (or a hook, as
// hook.NAME), so a turn started next is offered it.
func (s *Server) WaitForTool(ctx context.Context, tool string) error {
	if err := stack.WaitTool(ctx, s.js, tool); err != nil {
		return fmt.Errorf("jetlooptest: no worker advertised %s: %w", tool, err)
	}
	return nil
}

// Close stops the orchestrator and the server and removes the directory.
func (s *Server) Close() {
	for i := len(s.stops) - 1; i >= 0; i-- {
		s.stops[i]()
	}
	s.stops = nil
	if s.nc != nil {
		s.nc.Close()
	}
	if s.srv != nil {
		s.srv.Shutdown()
		s.srv.WaitForShutdown()
	}
	_ = os.RemoveAll(s.dir)
}
