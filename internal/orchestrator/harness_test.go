package orchestrator_test

import (
	"context"
	"encoding/json"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jetloop/jetloop/internal/bus"
	"github.com/jetloop/jetloop/internal/events"
	"github.com/jetloop/jetloop/internal/orchestrator"
	"github.com/jetloop/jetloop/internal/testkit"
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

// harness is a real embedded server on which the tests run real
// orchestrators and tool workers (inproc.Stack); every turn log on it is
// checked against the protocol's invariants when the test ends.
type harness struct {
	*inproc.Stack
	t *testing.T
	// nc and js are the Stack's NC and JS, by the names the tests use.
	nc    *nats.Conn
	js    jetstream.JetStream
	calls *counter
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
	s := inproc.NewStack(t, srv, testkit.Agents(t, md, files), inproc.Config{Conn: opts, Provision: p})
	return &harness{Stack: s, t: t, nc: s.NC, js: s.JS, calls: &counter{runs: map[string]int{}}}
}

// orchestrator runs an orchestrator (inproc.Stack.Orchestrator) until the
// test ends or the returned stop is called; stop waits for Run to return.
func (h *harness) orchestrator(opts ...orchestrator.Option) (stop func()) {
	h.t.Helper()
	_, stop, _ = h.Orchestrator(opts...)
	return stop
}

// running is orchestrator that also returns the orchestrator and kill,
// which stops it the way a crash does: its connection closes under it,
// nothing more is acknowledged.
func (h *harness) running(opts ...orchestrator.Option) (o *orchestrator.Orchestrator, stop, kill func()) {
	h.t.Helper()
	return h.Orchestrator(opts...)
}

// orchestratorCrashing runs an orchestrator that dies the n-th time an
// input reaches stage (its crash hook fails there, as a process killed at
// that line would): crashed is closed then, and kill ends it as a crash.
func (h *harness) orchestratorCrashing(stage string, n int) (crashed <-chan struct{}, kill func()) {
	h.t.Helper()
	var seen atomic.Int32
	ch := make(chan struct{})
	_, _, kill = h.Orchestrator(orchestrator.WithCrashHook(func(s string) error {
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

// worker runs a tool worker with the built-in tools, count and meet, after
// setup has had the worker.
func (h *harness) worker(setup ...func(*worker.Worker)) (stop func()) {
	h.t.Helper()
	return h.workerWith("", nil, setup...)
}

// workerWith is worker with its file tools confined to root and with opts.
func (h *harness) workerWith(root string, opts []worker.Option, setup ...func(*worker.Worker)) (stop func()) {
	h.t.Helper()
	stop, _ = h.Worker(root, func(w *worker.Worker) error {
		for _, f := range setup {
			f(w)
		}
		return tools.Register(w, h.calls, &meeting{all: make(chan struct{})})
	}, opts...)
	return stop
}

// start runs an orchestrator and a worker: the usual test setup.
func (h *harness) start() *harness {
	h.worker()
	h.orchestrator()
	return h
}

// script makes a scripted submission of agent with an inline script.
func script(turn, agent string, sc string) events.Submit {
	return events.Submit{TurnID: turn, Agent: agent, Model: "script", Script: json.RawMessage(sc),
		Input: []events.Message{{Role: events.RoleUser, Content: "go"}}}
}

// last returns a turn's last event type, "" while it has no log or it
// cannot be read.
func (h *harness) last(turn string) events.Type {
	e, _ := testkit.TryLast(h.js, turn)
	return e.Type
}

// The tests' names for testkit's inputs and reads, on the harness's
// connection.

func (h *harness) submit(sub events.Submit) {
	h.t.Helper()
	testkit.Submit(h.t, h.js, sub)
}

func (h *harness) control(turn string, c events.Control) {
	h.t.Helper()
	testkit.Control(h.t, h.js, turn, c)
}

func (h *harness) publish(subject string, data []byte, id string) {
	h.t.Helper()
	testkit.Publish(h.t, h.js, subject, data, id)
}

func (h *harness) waitFor(what string, cond func() bool) {
	h.t.Helper()
	testkit.WaitFor(h.t, what, cond)
}

func (h *harness) events(turn string) []events.Envelope {
	h.t.Helper()
	return testkit.Log(h.t, h.js, turn)
}

func (h *harness) finished(turn string) ([]events.Envelope, events.TurnFinishedData) {
	h.t.Helper()
	return testkit.Finished(h.t, h.js, turn)
}

func (h *harness) waitType(turn string, typ events.Type) events.Envelope {
	h.t.Helper()
	return testkit.WaitType(h.t, h.js, turn, typ)
}

func (h *harness) checkAllLogs() { testkit.CheckLogs(h.t, h.js) }

func dump(log []events.Envelope) string { return testkit.Dump(log) }

func of[T any](t *testing.T, log []events.Envelope, typ events.Type) []T {
	t.Helper()
	return testkit.Of[T](t, log, typ)
}

func mustJSON(v any) []byte {
	data, err := json.Marshal(v)
	if err != nil {
		panic(err)
	}
	return data
}
