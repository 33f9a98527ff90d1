// Package sdktest runs what the public packages' examples and tests talk
// to: an embedded JetStream server with the streams provisioned and, when
// asked, an orchestrator that runs scripted turns. Unlike natstest it needs
// no *testing.T, so runnable Example functions can start it in TestMain.
package sdktest

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"time"

	"github.com/jetloop/jetloop/internal/bus"
	"github.com/jetloop/jetloop/internal/embedded"
	"github.com/jetloop/jetloop/internal/orchestrator"

	"github.com/jetloop/jetloop/internal/agents"
	"github.com/jetloop/jetloop/internal/events"
	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// Stack is an embedded server, and the orchestrator once Orchestrate has
// started it.
type Stack struct {
	// URL is the server's client URL.
	URL string

	dir   string
	srv   *server.Server
	nc    *nats.Conn
	js    jetstream.JetStream
	stops []func()
}

// Start starts a server in a new temporary directory and writes files
// (name → content) into it: the agents file AGENTS.md and the scripts it
// names, for Orchestrate.
func Start(files map[string]string) (*Stack, error) {
	dir, err := os.MkdirTemp("", "jetloop-sdktest-")
	if err != nil {
		return nil, err
	}
	for name, content := range files {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(content), 0o644); err != nil {
			_ = os.RemoveAll(dir)
			return nil, err
		}
	}
	// No URL: a random free port on loopback (port 0 would be 4222).
	srv, err := embedded.Start("", filepath.Join(dir, "nats"))
	if err != nil {
		_ = os.RemoveAll(dir)
		return nil, err
	}
	s := &Stack{URL: srv.ClientURL(), dir: dir, srv: srv}
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
		return nil, err
	}
	return s, nil
}

// Orchestrate starts an orchestrator of the agents in AGENTS.md that
// accepts scripted models, until Close.
func (s *Stack) Orchestrate() error {
	set, _, err := agents.Load(filepath.Join(s.dir, "AGENTS.md"))
	if err != nil {
		return err
	}
	nc, err := nats.Connect(s.URL)
	if err != nil {
		return err
	}
	js, err := jetstream.New(nc)
	if err != nil {
		nc.Close()
		return err
	}
	log := slog.New(slog.DiscardHandler)
	if os.Getenv("SDKTEST_LOG") != "" {
		log = slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	}
	o, err := orchestrator.New(nc, js, log, set, orchestrator.WithAllowScripts(true), orchestrator.WithAckWait(time.Second))
	if err != nil {
		nc.Close()
		return err
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		if err := o.Run(ctx); err != nil {
			fmt.Fprintln(os.Stderr, "sdktest: orchestrator:", err)
		}
	}()
	s.stops = append(s.stops, func() { cancel(); <-done; nc.Close() })
	return nil
}

// WaitForTool returns once a worker advertises tool in the registry, so a
// turn started next is offered it.
func (s *Stack) WaitForTool(ctx context.Context, tool string) error {
	ctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	for {
		if kv, err := s.js.KeyValue(ctx, events.BucketTools); err == nil {
			if e, err := kv.Get(ctx, tool); err == nil {
				var info events.ToolInfo
				if json.Unmarshal(e.Value(), &info) == nil && info.Workers > 0 {
					return nil
				}
			}
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("sdktest: no worker advertised %s: %w", tool, ctx.Err())
		case <-time.After(5 * time.Millisecond):
		}
	}
}

// Close stops the orchestrator and the server and removes the directory.
func (s *Stack) Close() {
	for i := len(s.stops) - 1; i >= 0; i-- {
		s.stops[i]()
	}
	if s.nc != nil {
		s.nc.Close()
	}
	s.srv.Shutdown()
	s.srv.WaitForShutdown()
	_ = os.RemoveAll(s.dir)
}
