package tools_test

import (
	"encoding/json"
	"testing"
	"time"

	"github.com/jetloop/jetloop/internal/testkit"

	"github.com/jetloop/jetloop/internal/events"
	"github.com/jetloop/jetloop/internal/testkit/inproc"
	"github.com/jetloop/jetloop/internal/tools"
	"github.com/jetloop/jetloop/worker"
	"github.com/nats-io/nats.go/jetstream"
)

// The worker runtime has its own tests (package worker); these serve tools
// of this package through it.

type env struct {
	t   *testing.T
	srv *testkit.Server
	js  jetstream.JetStream
}

func newEnv(t *testing.T) *env {
	srv := testkit.Start(t)
	_, js := srv.Connect(t)
	testkit.EnsureStreams(t, js)
	return &env{t: t, srv: srv, js: js}
}

// worker serves ts through a worker.Worker until the test ends, and returns
// once they are advertised.
func (e *env) worker(ts []tools.Tool, opts ...worker.Option) {
	e.t.Helper()
	// Appended: these tests' workers always log to the test and drain in 50 ms.
	opts = append(opts, worker.WithLogger(testkit.Logger(e.t)), worker.WithDrainGrace(50*time.Millisecond))
	inproc.Serve(e.t, e.srv, func(w *worker.Worker) error { return tools.Register(w, ts...) }, opts...)
}

func (e *env) info(tool string) *events.ToolInfo { return testkit.ToolInfo(e.t, e.js, tool) }

func (e *env) job(j events.ToolJob) {
	e.t.Helper()
	testkit.Job(e.t, e.js, j)
}

// result waits for the result of a turn's call in the inbox.
func (e *env) result(turn string) events.ToolResult {
	e.t.Helper()
	r, _ := testkit.Result(e.t, e.js, turn)
	return r
}

func job(turn, tool, args string) events.ToolJob {
	return events.ToolJob{TurnID: turn, SessionID: turn, Step: 1, CallID: "c-" + turn, Tool: tool,
		Arguments: json.RawMessage(args), Deadline: time.Now().Add(time.Minute).UTC()}
}

// The built-in tools reach the registry with their schemas and timeouts,
// and answer jobs.
func TestBuiltinsThroughTheWorker(t *testing.T) {
	e := newEnv(t)
	ts, err := tools.Builtins(t.TempDir(), false)
	must(t, err)
	e.worker(ts, worker.WithName("w1"))
	if info := e.info("read_file"); info == nil || info.Workers != 1 || info.TimeoutMs != 30_000 || len(info.Parameters) == 0 {
		t.Fatalf("read_file advertised as %+v", info)
	}
	e.job(job("t1", "echo", `{"text":"hi"}`))
	if r := e.result("t1"); r.Output != "hi" || r.IsError || r.Worker != "w1" {
		t.Errorf("echo answered %+v", r)
	}
}
