package orchestrator_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jetloop/jetloop/internal/bus"
	"github.com/jetloop/jetloop/internal/logstore"
	"github.com/jetloop/jetloop/internal/orchestrator"
	"github.com/jetloop/jetloop/internal/testkit"

	"github.com/jetloop/jetloop/internal/agents"
	"github.com/jetloop/jetloop/internal/events"
	"github.com/jetloop/jetloop/internal/testkit/inproc"
	"github.com/jetloop/jetloop/internal/tools"
	"github.com/jetloop/jetloop/worker"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// testAgents are the agents of the end-to-end tests; each exercises a rule.
const testAgents = `---
name: General
model: script
---
You can use every tool.
---
name: Capped
model: script
steps: 2
---
Two steps at most.
---
name: Final
model: script
final_tools: [echo]
---
An echo is the answer.
---
name: Gated
model: script
approval: [echo]
---
Echo needs approval.
---
name: Text
model: script
steps: 0
---
Text only.
---
name: Reader
model: script
tools: [echo, ask_user]
---
Echo and ask.
`

// harness is a real embedded server with a real orchestrator and a real tool
// worker. Every turn log in the server is checked against the protocol's
// invariants when the test ends.
type harness struct {
	t     *testing.T
	srv   *testkit.Server
	nc    *nats.Conn
	js    jetstream.JetStream
	store *logstore.Store
	set   *agents.Set
	log   *slog.Logger
	calls *counter
	// connOpts make every connection of the harness: its user.
	connOpts []nats.Option

	namesMu sync.Mutex
	names   map[string]bool // of the orchestrators running
}

// counter is a tool that counts its executions per call, so tests can prove
// no call ran twice.
type counter struct {
	mu   sync.Mutex
	runs map[string]int
}

func (c *counter) Spec() events.ToolSpec {
	return events.ToolSpec{Name: "count", Description: "Counts.",
		Parameters: json.RawMessage(`{"type":"object","properties":{"n":{"type":"integer"}},"required":["n"],"additionalProperties":false}`)}
}

func (c *counter) Call(ctx context.Context, args json.RawMessage) (tools.Result, error) {
	var a struct{ N int }
	_ = json.Unmarshal(args, &a)
	c.mu.Lock()
	c.runs[string(args)]++
	c.mu.Unlock()
	return tools.Result{Output: "counted"}, nil
}

func (c *counter) max() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	m := 0
	for _, n := range c.runs {
		m = max(m, n)
	}
	return m
}

// meeting is a tool whose calls return once two of them run at the same
// time, or fail after a while alone: proof that calls run in parallel.
type meeting struct {
	mu      sync.Mutex
	arrived int
	all     chan struct{}
}

func (m *meeting) Spec() events.ToolSpec {
	return events.ToolSpec{Name: "meet", Description: "Waits for a second caller.",
		Parameters: json.RawMessage(`{"type":"object","properties":{"who":{"type":"string"}},"required":["who"]}`)}
}

func (m *meeting) Call(ctx context.Context, _ json.RawMessage) (tools.Result, error) {
	m.mu.Lock()
	m.arrived++
	if m.arrived == 2 {
		close(m.all)
	}
	m.mu.Unlock()
	select {
	case <-m.all:
		return tools.Result{Output: "met"}, nil
	case <-ctx.Done():
		return tools.Result{}, ctx.Err()
	case <-time.After(20 * time.Second):
		return tools.Result{Output: "nobody came", IsError: true}, nil
	}
}

func newHarness(t *testing.T) *harness {
	t.Helper()
	return newHarnessOn(t, testkit.Start(t), nil)
}

// newHarnessOn is newHarness on srv, with the streams provisioned by p when
// it is set.
func newHarnessOn(t *testing.T, srv *testkit.Server, p *bus.Provision) *harness {
	t.Helper()
	return newHarnessAs(t, srv, p)
}

// newHarnessAs is newHarnessOn whose connections, the test's and its
// processes', are made with opts: a user of one account of srv.
func newHarnessAs(t *testing.T, srv *testkit.Server, p *bus.Provision, opts ...nats.Option) *harness {
	t.Helper()
	return newHarnessServing(t, srv, p, testAgents, nil, opts...)
}

// newHarnessServing is newHarnessAs whose orchestrators serve the agents md
// defines, with files (their scripts) beside them.
func newHarnessServing(t *testing.T, srv *testkit.Server, p *bus.Provision, md string, files map[string]string, opts ...nats.Option) *harness {
	t.Helper()
	nc, js := srv.ConnectAs(t, opts...)
	dir := t.TempDir()
	for name, text := range files {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	path := filepath.Join(dir, "AGENTS.md")
	if err := os.WriteFile(path, []byte(md), 0o644); err != nil {
		t.Fatal(err)
	}
	set, _, err := agents.Load(path)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if p != nil {
		if _, err := bus.Apply(ctx, js, *p); err != nil {
			t.Fatal(err)
		}
	}
	if err := bus.EnsureStreams(ctx, js); err != nil {
		t.Fatal(err)
	}
	store, err := logstore.New(ctx, js)
	if err != nil {
		t.Fatal(err)
	}
	h := &harness{t: t, srv: srv, nc: nc, js: js, store: store, set: set, connOpts: opts,
		log:   testkit.Logger(t),
		calls: &counter{runs: map[string]int{}}}
	t.Cleanup(h.checkAllLogs)
	return h
}

// orchestrator runs an orchestrator on its own connection until the test
// ends or the returned stop is called; stop waits for Run to return.
func (h *harness) orchestrator(opts ...orchestrator.Option) (stop func()) {
	stop, _ = h.orchestratorKill(opts...)
	return stop
}

// orchestratorKill also returns kill, which stops the orchestrator the way a
// crash does: its connection closes under it, nothing more is acknowledged.
// orchestratorCrashing runs an orchestrator that dies the n-th time an
// input reaches stage (its crash hook fails there, as a process killed at
// that line would): crashed is closed then, and kill ends it as a crash.
func (h *harness) orchestratorCrashing(stage string, n int) (crashed <-chan struct{}, kill func()) {
	var seen atomic.Int32
	ch := make(chan struct{})
	_, kill = h.orchestratorKill(orchestrator.WithCrashHook(func(s string) error {
		if s != stage || seen.Add(1) != int32(n) {
			return nil
		}
		close(ch)
		return errors.New("crash")
	}))
	return ch, kill
}

// closed reports whether ch is closed.
func closed(ch <-chan struct{}) bool {
	select {
	case <-ch:
		return true
	default:
		return false
	}
}

func (h *harness) orchestratorKill(opts ...orchestrator.Option) (stop, kill func()) {
	h.t.Helper()
	_, stop, kill = h.running(opts...)
	return stop, kill
}

// running starts an orchestrator like orchestratorKill and returns it too.
func (h *harness) running(opts ...orchestrator.Option) (o *orchestrator.Orchestrator, stop, kill func()) {
	h.t.Helper()
	nc, _ := h.srv.ConnectAs(h.t, h.connOpts...)
	// The tests' submissions carry their scripts; a test of the default
	// turns scripts off again with an option of its own.
	// Each running orchestrator of the test has its own name; one started
	// after another stopped takes the lowest free one, as a process
	// restarted on its machine replaces the one before it.
	name := h.claimName()
	opts = append([]orchestrator.Option{orchestrator.WithAckWait(time.Second), orchestrator.WithAllowScripts(true),
		orchestrator.WithName(name)}, opts...)
	o, stopO, killO := inproc.Orchestrator(h.t, nc, h.log.With("process", "orchestrator"), h.set, opts...)
	var once sync.Once
	release := func() { once.Do(func() { h.releaseName(name) }) }
	stop = func() { stopO(); release() }
	kill = func() { killO(); release() }
	h.t.Cleanup(release)
	return o, stop, kill
}

// worker runs a tool worker with the built-in tools and count.
func (h *harness) worker(setup ...func(*worker.Worker)) (stop func()) {
	h.t.Helper()
	return h.workerIn(h.t.TempDir(), setup...)
}

// workerIn runs a tool worker whose file tools are confined to root.
func (h *harness) workerIn(root string, setup ...func(*worker.Worker)) (stop func()) {
	h.t.Helper()
	return h.workerWith(root, nil, setup...)
}

// workerWith runs a tool worker whose file tools are confined to root,
// with options opts sets.
func (h *harness) workerWith(root string, opts []worker.Option, setup ...func(*worker.Worker)) (stop func()) {
	h.t.Helper()
	nc, _ := h.srv.ConnectAs(h.t, h.connOpts...)
	builtins, err := tools.Builtins(root, false)
	if err != nil {
		h.t.Fatal(err)
	}
	stop, _ = inproc.Worker(h.t, nc, h.log.With("process", "toolworker"), func(w *worker.Worker) error {
		for _, f := range setup {
			f(w)
		}
		return tools.Register(w, append(builtins, h.calls, &meeting{all: make(chan struct{})})...)
	}, opts...)
	return stop
}

// start runs an orchestrator and a worker: the usual test setup.
func (h *harness) start() *harness {
	h.worker()
	h.orchestrator()
	return h
}

// waitFor polls cond until it holds, failing the test after a deadline.
func (h *harness) waitFor(what string, cond func() bool) {
	h.t.Helper()
	testkit.WaitFor(h.t, what, cond)
}

func (h *harness) submit(sub events.Submit) {
	h.t.Helper()
	data, err := json.Marshal(sub)
	if err != nil {
		h.t.Fatal(err)
	}
	h.publish(events.SubjectSubmit, data, sub.TurnID)
}

func (h *harness) publish(subject string, data []byte, id string) {
	h.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	var opts []jetstream.PublishOpt
	if id != "" {
		opts = append(opts, jetstream.WithMsgID(id))
	}
	if _, err := h.js.Publish(ctx, subject, data, opts...); err != nil {
		h.t.Fatal(err)
	}
}

func (h *harness) control(turn string, c events.Control) {
	h.t.Helper()
	data, _ := json.Marshal(c)
	h.publish(events.ControlSubject(turn), data, "")
}

// script makes a scripted submission of agent with an inline script.
func script(turn, agent string, sc string) events.Submit {
	return events.Submit{TurnID: turn, Agent: agent, Model: "script", Script: json.RawMessage(sc),
		Input: []events.Message{{Role: events.RoleUser, Content: "go"}}}
}

// events reads a turn's log as it is now.
func (h *harness) events(turn string) []events.Envelope {
	h.t.Helper()
	return testkit.Log(h.t, h.js, turn)
}

// last returns a turn's last event type, "" without a log.
func (h *harness) last(turn string) events.Type {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	e, _, ok, err := h.store.Last(ctx, turn)
	if err != nil || !ok {
		return ""
	}
	return e.Type
}

// finished waits for a turn to finish and returns its log and result.
func (h *harness) finished(turn string) ([]events.Envelope, events.TurnFinishedData) {
	h.t.Helper()
	return testkit.Finished(h.t, h.js, turn)
}

// waitType waits until a turn's log has an event of type typ and returns the
// first one.
func (h *harness) waitType(turn string, typ events.Type) events.Envelope {
	h.t.Helper()
	return testkit.WaitType(h.t, h.js, turn, typ)
}

// checkAllLogs checks every turn log the test produced.
func (h *harness) checkAllLogs() { testkit.CheckLogs(h.t, h.js) }

func mustJSON(v any) []byte {
	data, err := json.Marshal(v)
	if err != nil {
		panic(err)
	}
	return data
}

func dump(log []events.Envelope) string { return testkit.Dump(log) }

// of decodes the data of the events of one type in a log.
func of[T any](t *testing.T, log []events.Envelope, typ events.Type) []T {
	t.Helper()
	return testkit.Of[T](t, log, typ)
}

// claimName returns the lowest orchestrator name no running orchestrator of
// the test has.
func (h *harness) claimName() string {
	h.namesMu.Lock()
	defer h.namesMu.Unlock()
	if h.names == nil {
		h.names = map[string]bool{}
	}
	for i := 1; ; i++ {
		if n := fmt.Sprintf("orchestrator-%d", i); !h.names[n] {
			h.names[n] = true
			return n
		}
	}
}

func (h *harness) releaseName(name string) {
	h.namesMu.Lock()
	defer h.namesMu.Unlock()
	delete(h.names, name)
}
