package cli

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jetloop/jetloop/client"
	"github.com/jetloop/jetloop/internal/events"
	"github.com/jetloop/jetloop/internal/model"
	"github.com/jetloop/jetloop/internal/orchestrator"
	"github.com/jetloop/jetloop/internal/testkit"
	"github.com/jetloop/jetloop/internal/testkit/inproc"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// cliAgents are the agents the command tests run turns with.
const cliAgents = `---
name: Capped
model: script
steps: 3
---
Three steps at most.
---
name: Wide
model: script
steps: 10
---
Ten steps.
---
name: Gated
model: script
approval: [echo]
---
Echo needs approval.
---
name: Asker
model: script
tools: [echo, ask_user]
---
Echo and ask.
---
name: Refactorer
model: script
steps: 5
tools: [echo]
---
The agent of examples/workflow.
`

// env is a real embedded server with an orchestrator and a tool worker
// (inproc.Stack), and the jetloop command pointed at it. Every turn log is
// checked when the test ends.
type env struct {
	*inproc.Stack
	t   *testing.T
	srv *testkit.Server
	nc  *nats.Conn
	js  jetstream.JetStream
	// dir holds the test's files: AGENTS.md (cliAgents, unless the test
	// serves another) and the scripts of script.
	dir   string
	stopO func()
	calls *modelJobs
}

func newEnv(t *testing.T) *env {
	t.Helper()
	return newEnvWith(t, testkit.Start(t), inproc.Config{}, "", "")
}

// newEnvServing is newEnv with the orchestrator serving the agents file at
// path, and the worker's tools reading root.
func newEnvServing(t *testing.T, path, root string) *env {
	t.Helper()
	return newEnvWith(t, testkit.Start(t), inproc.Config{}, path, root)
}

// newRolesEnv is newEnv on a server with the repository's nats.conf, its
// orchestrator and worker connected as admin.
func newRolesEnv(t *testing.T) (*env, *testkit.Server) {
	t.Helper()
	srv := testkit.StartRoles(t)
	return newEnvWith(t, srv, inproc.Config{Conn: testkit.Role(t, "admin")}, "", ""), srv
}

// newEnvWith starts a worker (its tools reading root, or a directory of
// the test's) and an orchestrator serving the agents file at agentsPath,
// or cliAgents, whose scripted model records its calls.
func newEnvWith(t *testing.T, srv *testkit.Server, cfg inproc.Config, agentsPath, root string) *env {
	t.Helper()
	dir := t.TempDir()
	if agentsPath == "" {
		agentsPath = filepath.Join(dir, "AGENTS.md")
		if err := os.WriteFile(agentsPath, []byte(cliAgents), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	s := inproc.NewStack(t, srv, testkit.LoadAgents(t, agentsPath), cfg)
	e := &env{Stack: s, t: t, srv: srv, nc: s.NC, js: s.JS, dir: dir, calls: &modelJobs{jobs: map[string][]model.Request{}}}
	s.Worker(root, nil)
	e.stopO = e.orchestrator()
	return e
}

// orchestrator runs an orchestrator until the test ends or the returned
// stop is called.
func (e *env) orchestrator() (stop func()) {
	e.t.Helper()
	_, stop, _ = e.Orchestrator(orchestrator.WithProvider("script", recorder{e.calls}))
	return stop
}

// jetloop runs the command against the test's server and returns its exit
// status and output.
func (e *env) jetloop(args ...string) (code int, stdout, stderr string) {
	e.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	var out, errOut bytes.Buffer
	full := append([]string{args[0], "--nats", e.srv.ClientURL()}, args[1:]...)
	code = Main(ctx, full, &out, &errOut)
	return code, out.String(), errOut.String()
}

// mustRun runs the command and fails the test unless it exits with want.
func (e *env) mustRun(want int, args ...string) string {
	e.t.Helper()
	code, out, errOut := e.jetloop(args...)
	if code != want {
		e.t.Fatalf("jetloop %s: exit %d, want %d\nstdout:\n%s\nstderr:\n%s", strings.Join(args, " "), code, want, out, errOut)
	}
	return out
}

// script writes a scripted model file and returns its path.
func (e *env) script(name, yaml string) string {
	e.t.Helper()
	path := filepath.Join(e.dir, name)
	if err := os.WriteFile(path, []byte(yaml), 0o644); err != nil {
		e.t.Fatal(err)
	}
	return path
}

// The tests' names for testkit's reads, on the test's connection.

func (e *env) log(turn string) []events.Envelope {
	e.t.Helper()
	return testkit.Log(e.t, e.js, turn)
}

// tryLog is log that is nil when the log cannot be read: a rejected turn's
// log is replaced by its valid submission's, and a read in between may fail.
func (e *env) tryLog(turn string) []events.Envelope { return testkit.TryLog(e.js, turn) }

func (e *env) last(turn string) (events.Envelope, bool) {
	e.t.Helper()
	return testkit.Last(e.t, e.js, turn)
}

// waitType waits until turn's last event is of type typ and returns it.
func (e *env) waitType(turn string, typ events.Type) events.Envelope {
	e.t.Helper()
	return testkit.WaitLast(e.t, e.js, turn, typ)
}

// finished waits for a turn to finish and returns its turn.finished data.
func (e *env) finished(turn string) events.TurnFinishedData {
	e.t.Helper()
	_, fin := testkit.Finished(e.t, e.js, turn)
	return fin
}

func (e *env) waitFor(what string, cond func() bool) {
	e.t.Helper()
	testkit.WaitFor(e.t, what, cond)
}

// modelJobs records the model calls the orchestrator makes, per turn: the
// scripted model, wrapped, sees each request as a provider does.
type modelJobs struct {
	mu   sync.Mutex
	jobs map[string][]model.Request
}

// recorder is the scripted model, recording what each call sends.
type recorder struct{ r *modelJobs }

func (p recorder) Call(ctx context.Context, req model.Request, emit func(string)) (model.Response, error) {
	p.r.mu.Lock()
	p.r.jobs[req.TurnID] = append(p.r.jobs[req.TurnID], req)
	p.r.mu.Unlock()
	return model.Scripted{}.Call(ctx, req, emit)
}

func (e *env) recordModelJobs() *modelJobs { return e.calls }

// of returns the model calls of a turn recorded so far, by step, the last
// call of each step winning.
func (r *modelJobs) of(turn string) map[int]model.Request {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := map[int]model.Request{}
	for _, j := range r.jobs[turn] {
		if j.Kind == events.ModelStep {
			out[j.Step] = j
		}
	}
	return out
}

// Submit publishes a turn request and returns once the inbox has it.
func Submit(ctx context.Context, nc *nats.Conn, sub events.Submit) error {
	c, err := client.New(nc)
	if err != nil {
		return err
	}
	_, err = c.Submit(ctx, client.TurnRequest{TurnID: sub.TurnID, SessionID: sub.SessionID, Agent: sub.Agent, Input: sub.Input,
		Model: sub.Model, Script: sub.Script, Limits: sub.Limits, Metadata: sub.Metadata, ForkedFrom: sub.ForkedFrom})
	return err
}

// askJSON is a scripted model that asks a question, then answers.
const askJSON = `{"responses":[{"text":"asking","tool_calls":[{"name":"ask_user","arguments":{"question":"which colour?"}}]},` +
	`{"text":"blue it is"}]}`

// submitScript submits a scripted turn of agent straight to the inbox.
func submitScript(t *testing.T, js jetstream.JetStream, turn, agent, script string) {
	t.Helper()
	testkit.Submit(t, js, events.Submit{TurnID: turn, Agent: agent, Model: "script", Script: json.RawMessage(script),
		Input: []events.Message{{Role: events.RoleUser, Content: "paint it"}}})
}
