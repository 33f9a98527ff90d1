package cli

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"time"

	"github.com/jetloop/jetloop/client"
	"github.com/jetloop/jetloop/client/workflowfile"
	"github.com/jetloop/jetloop/internal/bus"
	"github.com/jetloop/jetloop/internal/embedded"
	"github.com/jetloop/jetloop/internal/orchestrator"
	"github.com/jetloop/jetloop/internal/proc"
	"github.com/jetloop/jetloop/internal/providers"
	"github.com/jetloop/jetloop/internal/stack"
	"github.com/jetloop/jetloop/internal/timeline"
	"github.com/jetloop/jetloop/internal/ui"

	"github.com/jetloop/jetloop/internal/agents"
	"github.com/jetloop/jetloop/internal/events"
	"github.com/jetloop/jetloop/internal/tools"
	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// devStack is a whole jetloop in one process: an embedded server, and an
// orchestrator and a tool worker (internal/stack) on one connection to it.
type devStack struct {
	srv *server.Server
	nc  *nats.Conn
	js  jetstream.JetStream
	run *stack.Stack
}

// observers are what a stack's processes report to: both nil in the demo.
type observers struct {
	stack.Observers
	// sync is the embedded server's --sync-interval (empty: always).
	sync string
}

// startStack starts the stack with its server at url (empty: a free port)
// storing in dir, the agents of set, and the built-in tools on root.
// The orchestrator and the worker share obs: one endpoint, one registry.
func startStack(ctx context.Context, url, dir string, set *agents.Set, root string, log *slog.Logger, obs observers) (*devStack, error) {
	srv, err := embedded.Start(url, dir, embedded.Sync(obs.sync))
	if err != nil {
		return nil, err
	}
	nc, err := bus.Connect(srv.ClientURL(), "jetloop", func(err error) { log.Warn("nats", "err", err) })
	if err != nil {
		srv.Shutdown()
		return nil, err
	}
	fail := func(err error) (*devStack, error) {
		nc.Close()
		srv.Shutdown()
		return nil, err
	}
	js, err := jetstream.New(nc)
	if err != nil {
		return fail(err)
	}
	if err := bus.EnsureStreams(ctx, js); err != nil {
		return fail(err)
	}
	provs, err := providers.Options(os.Getenv, set, log.With("process", "orchestrator"))
	if err != nil {
		return fail(err)
	}
	if err := tools.CheckRoot(root, tools.DefaultProtect); err != nil {
		return fail(err)
	}
	builtins, err := tools.Builtins(root, false)
	if err != nil {
		return fail(err)
	}
	// demo and dev are a developer's own machine: their submissions may
	// run scripts, as the demo turn and the dev hint do.
	run, err := stack.Start(ctx, nc, log, set, builtins, obs.Observers, append(provs, orchestrator.WithAllowScripts(true))...)
	if err != nil {
		return fail(err)
	}
	return &devStack{srv: srv, nc: nc, js: js, run: run}, nil
}

func (s *devStack) stop() error {
	err := s.run.Wait()
	s.nc.Close()
	s.srv.Shutdown()
	s.srv.WaitForShutdown()
	return err
}

// demoTurn is the sample turn: the General agent looks around with the demo
// script beside its agents file (data/scripts/demo.yaml reads this
// repository; the built-in one works in any directory).
func demoTurn() client.TurnRequest {
	id := NewID()
	return client.TurnRequest{TurnID: id, Agent: "General", Model: "script:scripts/demo.yaml",
		Input:    []events.Message{{Role: events.RoleUser, Content: "What is this project, and what can I run?"}},
		Metadata: map[string]string{"source": "jetloop demo"}}
}

func demo(ctx context.Context, c *command, args []string) int {
	agentsPath := c.flags.String("agents", "", agentsUsage)
	root := c.flags.String("root", ".", "directory the file tools may read")
	verbose := c.flags.Bool("v", false, "log what the processes do")
	workflowFile := c.flags.String("workflow", "", "run this workflow file (see examples/workflow) instead of the sample turn")
	agent := c.flags.String("agent", "", "run the sample turn with this agent of --agents, on the agent's own model (see examples/subagents)")
	input := c.flags.String("input", "", "the sample turn's prompt, with --agent")
	if !c.parse(args) {
		return c.exit
	}
	if *input != "" && *agent == "" {
		return c.usageErr("--input goes with --agent")
	}
	level := slog.LevelError
	if *verbose {
		level = slog.LevelInfo
	}
	log := proc.Logger(c.stderr, level)
	dir, err := os.MkdirTemp("", "jetloop-demo-")
	if err != nil {
		return c.fail("%v", err)
	}
	defer os.RemoveAll(dir)
	set, _, cleanup, err := c.loadAgents(*agentsPath)
	if err != nil {
		return c.fail("%v", err)
	}
	defer cleanup()
	runCtx, stop := context.WithCancel(ctx)
	defer stop()
	s, err := startStack(runCtx, "", dir, set, *root, log, observers{})
	if err != nil {
		return c.fail("%v", err)
	}
	fmt.Fprintf(c.stdout, "jetloop demo: embedded JetStream at %s, orchestrator and tool worker in this process\n\n", s.srv.ClientURL())
	if *workflowFile != "" {
		code := c.demoWorkflow(ctx, s, *workflowFile)
		stop()
		if err := s.stop(); err != nil && code == ExitOK {
			return c.fail("%v", err)
		}
		return code
	}
	sub := demoTurn()
	if *agent != "" {
		if _, ok := set.Get(*agent); !ok {
			stop()
			_ = s.stop()
			return c.usageErr("--agent %s: no such agent in %s", *agent, *agentsPath)
		}
		sub.Agent, sub.Model = *agent, ""
		if *input != "" {
			sub.Input = []events.Message{{Role: events.RoleUser, Content: *input}}
		}
	}
	cl, err := client.New(s.nc)
	var feed *deltaFeed
	if err == nil {
		feed, err = openDeltas(ctx, cl, sub.TurnID)
	}
	if err == nil {
		defer feed.close()
		_, err = cl.Submit(ctx, sub)
	}
	if err != nil {
		stop()
		_ = s.stop()
		return c.fail("%v", err)
	}
	fin, werr := watchFrom(ctx, feed, cl, sub.TurnID, timeline.NewTrace(c.stdout, c.color()))
	stop()
	if err := s.stop(); err != nil && werr == nil {
		werr = err
	}
	if werr != nil {
		return c.fail("%v", werr)
	}
	if !timeline.Success(fin.StopReason) {
		return ExitStopped
	}
	return ExitOK
}

func dev(ctx context.Context, c *command, args []string) int {
	agentsPath := c.flags.String("agents", "", agentsUsage)
	root := c.flags.String("root", ".", "directory the file tools may read and write")
	dir := c.flags.String("data", embedded.DefaultDataDir, "where the embedded server stores its streams")
	metricsAddr := c.flags.String("metrics-addr", "", proc.MetricsAddrUsage)
	sync := c.flags.String("sync-interval", embedded.SyncAlways, embedded.SyncUsage)
	withUI := c.flags.Bool("ui", false, "serve the web view too (jetloop ui), at --ui-addr")
	uiAddr := c.flags.String("ui-addr", "127.0.0.1:8080", "where --ui serves the web view")
	if !c.parse(args) {
		return c.exit
	}
	if _, _, err := embedded.ParseSync(*sync); err != nil {
		return c.usageErr("--sync-interval: %v", err)
	}
	url := c.url
	if url == "" {
		url = os.Getenv("NATS_URL")
	}
	if url == "" {
		url = bus.DefaultURL
	}
	if bus.Answers(url) {
		return c.fail("something already listens at %s; stop it or pass --nats with a free address", url)
	}
	abs, _ := filepath.Abs(*dir)
	log := proc.Logger(c.stderr, slog.LevelInfo)
	m, stopMetrics, err := proc.StartMetrics(*metricsAddr, log)
	if err != nil {
		return c.fail("%v", err)
	}
	defer stopMetrics()
	tracer, stopTracing, err := proc.StartTracing(ctx, "jetloop", log)
	if err != nil {
		return c.fail("%v", err)
	}
	defer stopTracing()
	set, agentsDir, cleanup, err := c.loadAgents(*agentsPath)
	if err != nil {
		return c.fail("%v", err)
	}
	defer cleanup()
	s, err := startStack(ctx, url, *dir, set, *root, log, observers{stack.Observers{Metrics: m, Tracer: tracer}, *sync})
	if err != nil {
		return c.fail("%v", err)
	}
	fmt.Fprintf(c.stdout, "jetloop dev: NATS_URL=%s (data in %s)\n", s.srv.ClientURL(), abs)
	fallback := filepath.Join(abs, "try.yaml")
	if err := os.WriteFile(fallback, []byte("responses:\n  - {text: \"Hello from jetloop dev: this answer is scripted.\"}\n"), 0o644); err != nil {
		fallback = ""
	}
	fmt.Fprintf(c.stdout, "try: NATS_URL=%s jetloop %s\n", s.srv.ClientURL(), tryHint(set, agentsDir, fallback, os.Getenv))
	code := ExitOK
	if *withUI {
		// The web view on the stack's own connection, until dev stops; a
		// view that cannot serve stops dev, rather than leave it half up.
		code = c.serveUI(ctx, ui.New(), s.nc, s.js, *uiAddr)
	} else {
		<-ctx.Done()
	}
	if err := s.stop(); err != nil && !errors.Is(err, context.Canceled) {
		return c.fail("%v", err)
	}
	if code != ExitOK {
		return code
	}
	return interrupted(ctx) // 130 after SIGINT, as help promises
}

// demoWorkflow runs a workflow file on the demo's stack and prints its trace.
func (c *command) demoWorkflow(ctx context.Context, s *devStack, path string) int {
	w, err := workflowfile.Read(path)
	if err != nil {
		return c.fail("%v", err)
	}
	cl, err := client.New(s.nc)
	if err != nil {
		return c.fail("%v", err)
	}
	pctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	if _, err := cl.RunWorkflow(pctx, w); err != nil {
		return c.fail("%v", err)
	}
	return c.followWorkflow(ctx, cl, w.WorkflowID)
}
