package bench

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/jetloop/jetloop/internal/bus"
	"github.com/jetloop/jetloop/internal/embedded"
	"github.com/jetloop/jetloop/internal/orchestrator"
	"github.com/jetloop/jetloop/internal/stack"

	"github.com/jetloop/jetloop/internal/agents"
	"github.com/jetloop/jetloop/internal/metrics"
	"github.com/jetloop/jetloop/internal/model"
	"github.com/jetloop/jetloop/internal/tools"
	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"golang.org/x/sync/errgroup"
)

// agentsFile is the one agent every benchmark turn runs: the scripted model,
// every tool served plus ask_user, a budget that long turns never reach.
const agentsFile = `---
name: Bench
model: script
budget: 1000
---
You are the benchmark agent.
`

// site is an embedded JetStream server with file storage in its own
// directory, and a client connection to it.
type site struct {
	srv *server.Server
	dir string
	nc  *nats.Conn
	js  jetstream.JetStream
	// metrics, when set, is where the site's components record metrics.
	metrics *metrics.Metrics
}

// serverOptions configure the embedded server of the in-process runs
// (tests measure with NATS's default sync as well as the default "always").
var serverOptions []embedded.Option

func startServer(ctx context.Context, log *slog.Logger) (*site, error) {
	return startServerOn(ctx, log, "")
}

// startServerOn starts the site's server with its store in store, or in
// the site's directory when store is empty.
func startServerOn(ctx context.Context, log *slog.Logger, store string) (*site, error) {
	dir, err := os.MkdirTemp("", "jetloop-bench-")
	if err != nil {
		return nil, err
	}
	if store == "" {
		store = filepath.Join(dir, "js")
	}
	srv, err := embedded.Start("", store, serverOptions...)
	if err != nil {
		os.RemoveAll(dir)
		return nil, err
	}
	s := &site{srv: srv, dir: dir}
	if s.nc, s.js, err = s.connect("jetloop bench", log); err != nil {
		s.stop()
		return nil, err
	}
	if err := bus.EnsureStreams(ctx, s.js); err != nil {
		s.stop()
		return nil, err
	}
	if err := os.WriteFile(s.agentsPath(), []byte(agentsFile), 0o644); err != nil {
		s.stop()
		return nil, err
	}
	return s, nil
}

// connect opens a connection with the settings every jetloop process uses.
func (s *site) connect(name string, log *slog.Logger) (*nats.Conn, jetstream.JetStream, error) {
	nc, err := bus.Connect(s.srv.ClientURL(), name, func(err error) { log.Warn("nats", "err", err) })
	if err != nil {
		return nil, nil, err
	}
	js, err := jetstream.New(nc)
	if err != nil {
		nc.Close()
		return nil, nil, err
	}
	return nc, js, nil
}

func (s *site) agentsPath() string { return filepath.Join(s.dir, "AGENTS.md") }

func (s *site) stop() {
	if s.nc != nil {
		s.nc.Close()
	}
	s.srv.Shutdown()
	s.srv.WaitForShutdown()
	os.RemoveAll(s.dir)
}

// timings records how long model and tool calls took, keyed by what the
// bench can find again in the log, so their time is taken out of a step's.
type timings struct {
	mu sync.Mutex
	d  map[string]time.Duration
}

func newTimings() *timings { return &timings{d: map[string]time.Duration{}} }

func (t *timings) add(key string, d time.Duration) {
	t.mu.Lock()
	t.d[key] += d
	t.mu.Unlock()
}

func (t *timings) get(key string) (time.Duration, bool) {
	t.mu.Lock()
	defer t.mu.Unlock()
	d, ok := t.d[key]
	return d, ok
}

// timedModel is the scripted model, timed per turn and step.
type timedModel struct {
	model.Provider
	t *timings
}

func (m timedModel) Call(ctx context.Context, req model.Request, emit func(string)) (model.Response, error) {
	began := time.Now()
	resp, err := m.Provider.Call(ctx, req, emit)
	m.t.add(fmt.Sprintf("model:%s:%d", req.TurnID, req.Step), time.Since(began))
	return resp, err
}

// timedTool is a tool timed per call, keyed by its arguments' text (the bench
// makes each unique: turn and step).
type timedTool struct {
	tools.Tool
	t *timings
}

func (tt timedTool) Call(ctx context.Context, args json.RawMessage) (tools.Result, error) {
	began := time.Now()
	res, err := tt.Tool.Call(ctx, args)
	var a struct{ Text string }
	_ = json.Unmarshal(args, &a)
	tt.t.add("tool:"+a.Text, time.Since(began))
	return res, err
}

// startWorker runs the stock tool worker with the echo tool on its own
// connection, as a toolworker process would, until ctx ends; it returns once
// echo is advertised.
func (s *site) startWorker(ctx context.Context, g *errgroup.Group, log *slog.Logger, t *timings) error {
	builtins, err := tools.Builtins(s.dir, false)
	if err != nil {
		return err
	}
	var echo []tools.Tool
	for _, b := range builtins {
		if b.Spec().Name == "echo" {
			echo = append(echo, timedTool{Tool: b, t: t})
		}
	}
	nc, _, err := s.connect("jetloop bench toolworker", log)
	if err != nil {
		return err
	}
	_, p, err := stack.Worker(ctx, nc, log.With("process", "toolworker"), stack.Observers{Metrics: s.metrics}, stack.Tools(echo...))
	if err != nil {
		nc.Close()
		return err
	}
	g.Go(func() error {
		defer nc.Close()
		return p.Wait()
	})
	return nil
}

// startOrchestrator runs an orchestrator in this process, with the scripted
// model timed, until ctx ends.
func (s *site) startOrchestrator(ctx context.Context, g *errgroup.Group, log *slog.Logger, t *timings) error {
	set, _, err := agents.Load(s.agentsPath())
	if err != nil {
		return err
	}
	nc, _, err := s.connect("jetloop bench orchestrator", log)
	if err != nil {
		return err
	}
	_, p, err := stack.Orchestrator(ctx, nc, log.With("process", "orchestrator"), set, stack.Observers{Metrics: s.metrics},
		orchestrator.WithProvider("script", timedModel{Provider: model.Scripted{}, t: t}), orchestrator.WithAllowScripts(true))
	if err != nil {
		nc.Close()
		return err
	}
	g.Go(func() error {
		defer nc.Close()
		return p.Wait()
	})
	return stack.WaitServing(ctx, s.js)
}

// child is a process the benchmark started: an orchestrator (`jetloop
// bench --orchestrator URL --agents FILE`), or in the deployed shape one of
// the real binaries.
type child struct {
	name string
	cmd  *exec.Cmd
	done chan struct{}
	err  error
}

func (b *run) spawn(s *site, extra ...string) (*child, error) {
	args := slices.Concat(b.cfg.Child[1:], []string{"--orchestrator", s.srv.ClientURL(), "--agents", s.agentsPath()}, extra)
	if b.cfg.Metrics {
		args = append(args, "--metrics")
	}
	cmd := exec.Command(b.cfg.Child[0], args...)
	cmd.Stdout = io.Discard
	cmd.Stderr = b.cfg.ChildLog
	return startChild("orchestrator", cmd)
}

// startChild starts cmd as the process called name.
func startChild(name string, cmd *exec.Cmd) (*child, error) {
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("bench: start the %s: %w", name, err)
	}
	c := &child{name: name, cmd: cmd, done: make(chan struct{})}
	go func() {
		c.err = cmd.Wait()
		close(c.done)
	}()
	return c, nil
}

func (c *child) pid() int { return c.cmd.Process.Pid }

// exited reports whether the process ended.
func (c *child) exited() bool {
	select {
	case <-c.done:
		return true
	default:
		return false
	}
}

// stop ends the child gracefully (SIGTERM), killing it when it takes long.
func (c *child) stop() error {
	_ = c.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-c.done:
		return c.err
	case <-time.After(30 * time.Second):
		_ = c.cmd.Process.Kill()
		<-c.done
		return fmt.Errorf("bench: the %s did not stop within 30 s", c.name)
	}
}

// kill ends the child at once, as a crash would.
func (c *child) kill() {
	_ = c.cmd.Process.Kill()
	<-c.done
}

// cpu returns the CPU time the process used so far (user + system), from
// /proc/PID/stat.
func cpu(pid int) (time.Duration, error) {
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0, err
	}
	// Fields after the command name, which is in parentheses and may hold
	// spaces: state is field 3, utime 14, stime 15.
	s := string(data)
	f := strings.Fields(s[strings.LastIndexByte(s, ')')+2:])
	if len(f) < 13 {
		return 0, fmt.Errorf("bench: /proc/%d/stat: too short", pid)
	}
	utime, err1 := strconv.ParseInt(f[11], 10, 64)
	stime, err2 := strconv.ParseInt(f[12], 10, 64)
	if err1 != nil || err2 != nil {
		return 0, fmt.Errorf("bench: /proc/%d/stat: bad times", pid)
	}
	const ticksPerSecond = 100 // USER_HZ on Linux
	return time.Duration(utime+stime) * time.Second / ticksPerSecond, nil
}

// selfCPU returns the CPU time this process used so far: the server, the tool
// worker and the driver of the benchmark.
func selfCPU() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// rss returns the resident set size of a process, from /proc/PID/status.
func rss(pid int) (int64, error) {
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0, err
	}
	for line := range strings.SplitSeq(string(data), "\n") {
		if rest, ok := strings.CutPrefix(line, "VmRSS:"); ok {
			kb, err := strconv.ParseInt(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(rest), "kB")), 10, 64)
			if err != nil {
				return 0, err
			}
			return kb * 1024, nil
		}
	}
	return 0, fmt.Errorf("bench: /proc/%d/status has no VmRSS", pid)
}

// waitFor polls cond until it holds or the time is up.
func waitFor(ctx context.Context, limit time.Duration, what string, cond func() bool) error {
	deadline := time.Now().Add(limit)
	for !cond() {
		if time.Now().After(deadline) {
			return fmt.Errorf("bench: timed out after %s waiting for %s", limit, what)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(5 * time.Millisecond):
		}
	}
	return nil
}

func discard() *slog.Logger { return slog.New(slog.DiscardHandler) }
