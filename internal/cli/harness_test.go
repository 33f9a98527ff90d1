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
	"github.com/jetloop/jetloop/internal/bus"
	"github.com/jetloop/jetloop/internal/logstore"
	"github.com/jetloop/jetloop/internal/orchestrator"
	"github.com/jetloop/jetloop/internal/stack"
	"github.com/jetloop/jetloop/internal/testkit"

	"github.com/jetloop/jetloop/internal/agents"
	"github.com/jetloop/jetloop/internal/events"
	"github.com/jetloop/jetloop/internal/model"
	"github.com/jetloop/jetloop/internal/testkit/inproc"
	"github.com/jetloop/jetloop/internal/tools"
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

// env is a real embedded server with an orchestrator and a tool worker, and
// the jetloop command pointed at it. Every turn log is checked when the test
// ends.
type env struct {
	t     *testing.T
	srv   *testkit.Server
	nc    *nats.Conn
	js    jetstream.JetStream
	store *logstore.Store
	dir   string
	stopO func()
	calls *modelJobs
	// connect opens the connections of the orchestrator and the worker.
	connect func(testing.TB) (*nats.Conn, jetstream.JetStream)
	// agents, when set, is the agents file the orchestrator serves instead
	// of cliAgents, and root the directory the worker's tools read.
	agents, root string
}

func newEnv(t *testing.T) *env {
	t.Helper()
	srv := testkit.Start(t)
	return newEnvOn(t, srv, srv.Connect)
}

// newEnvServing is newEnv with the orchestrator serving the agents file at
// path, and the worker's tools reading root.
func newEnvServing(t *testing.T, path, root string) *env {
	t.Helper()
	srv := testkit.Start(t)
	return newEnvWith(t, srv, srv.Connect, path, root)
}

// newEnvOn is newEnv on a server of the test's own, whose processes connect
// with connect (a server with nats.conf's users needs credentials).
func newEnvOn(t *testing.T, srv *testkit.Server, connect func(testing.TB) (*nats.Conn, jetstream.JetStream)) *env {
	t.Helper()
	return newEnvWith(t, srv, connect, "", "")
}

func newEnvWith(t *testing.T, srv *testkit.Server, connect func(testing.TB) (*nats.Conn, jetstream.JetStream), agentsPath, root string) *env {
	t.Helper()
	nc, js := connect(t)
	e := &env{t: t, srv: srv, nc: nc, js: js, dir: t.TempDir(), calls: &modelJobs{jobs: map[string][]model.Request{}},
		connect: connect, agents: agentsPath, root: root}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := bus.EnsureStreams(ctx, js); err != nil {
		t.Fatal(err)
	}
	store, err := logstore.New(ctx, js)
	if err != nil {
		t.Fatal(err)
	}
	e.store = store
	t.Cleanup(func() { testkit.CheckLogs(t, js) })
	e.worker()
	e.stopO = e.orchestrator()
	return e
}

// orchestrator runs an orchestrator on its own connection until the test
// ends or the returned stop is called.
func (e *env) orchestrator() (stop func()) {
	e.t.Helper()
	path := e.agents
	if path == "" {
		path = filepath.Join(e.dir, "AGENTS.md")
		if err := os.WriteFile(path, []byte(cliAgents), 0o644); err != nil {
			e.t.Fatal(err)
		}
	}
	set, _, err := agents.Load(path)
	if err != nil {
		e.t.Fatal(err)
	}
	nc, _ := e.connect(e.t)
	_, stop, _ = inproc.Orchestrator(e.t, nc, testkit.Logger(e.t), set, orchestrator.WithAckWait(time.Second), orchestrator.WithAllowScripts(true),
		orchestrator.WithProvider("script", recorder{e.calls}))
	return stop
}

// worker runs a tool worker with the built-in tools on its own connection
// until the test ends.
func (e *env) worker() {
	e.t.Helper()
	nc, _ := e.connect(e.t)
	root := e.root
	if root == "" {
		root = e.t.TempDir()
	}
	builtins, err := tools.Builtins(root, false)
	if err != nil {
		e.t.Fatal(err)
	}
	inproc.Worker(e.t, nc, testkit.Logger(e.t), stack.Tools(builtins...))
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

// log reads a turn's log as it is now.
func (e *env) log(turn string) []events.Envelope {
	e.t.Helper()
	return testkit.Log(e.t, e.js, turn)
}

// tryLog reads a turn's log as it is now, nil when it cannot be read: a
// rejected turn's log is replaced by its valid submission's, and a read in
// between may fail.
func (e *env) tryLog(turn string) []events.Envelope {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	log, _, err := e.store.Read(ctx, turn)
	if err != nil {
		return nil
	}
	return log
}

// last returns a turn's last event; ok is false while it has no log.
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

func (e *env) waitFor(what string, cond func() bool) {
	e.t.Helper()
	testkit.WaitFor(e.t, what, cond)
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

func submitScript(t *testing.T, js jetstream.JetStream, turn, agent, script string) {
	t.Helper()
	data, err := json.Marshal(events.Submit{TurnID: turn, Agent: agent, Model: "script", Script: json.RawMessage(script),
		Input: []events.Message{{Role: events.RoleUser, Content: "paint it"}}})
	if err == nil {
		_, err = js.Publish(t.Context(), events.SubjectSubmit, data, jetstream.WithMsgID(turn))
	}
	if err != nil {
		t.Fatal(err)
	}
}

// dialAs connects as one of nats.conf's roles with its development password.
func dialAs(url, role string) func(opts ...nats.Option) (*nats.Conn, error) {
	return func(opts ...nats.Option) (*nats.Conn, error) {
		secret, err := os.ReadFile(filepath.Join("..", "..", "deploy", "dev", role+".password"))
		if err != nil {
			return nil, err
		}
		opts = append(opts, nats.UserInfo(role, strings.TrimSpace(string(secret))), nats.CustomInboxPrefix(bus.InboxCLI))
		return nats.Connect(url, opts...)
	}
}

// newRolesEnv is newEnv on a server with the repository's nats.conf, its
// orchestrator and worker connected as admin.
func newRolesEnv(t *testing.T) (*env, *testkit.Server) {
	t.Helper()
	srv := testkit.StartConfig(t, filepath.Join("..", "..", "nats.conf"))
	admin := func(t testing.TB) (*nats.Conn, jetstream.JetStream) {
		nc, err := dialAs(srv.ClientURL(), "admin")(nats.ErrorHandler(func(_ *nats.Conn, sub *nats.Subscription, err error) {
			t.Logf("admin: %v", err)
		}))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(nc.Close)
		js, err := jetstream.New(nc)
		if err != nil {
			t.Fatal(err)
		}
		return nc, js
	}
	return newEnvOn(t, srv, admin), srv
}
