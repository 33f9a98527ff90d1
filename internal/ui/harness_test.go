package ui

import (
	"context"
	"testing"
	"time"

	"github.com/jetloop/jetloop/client"
	"github.com/jetloop/jetloop/client/workflowfile"
	"github.com/jetloop/jetloop/internal/agents"
	"github.com/jetloop/jetloop/internal/events"
	"github.com/jetloop/jetloop/internal/model"
	"github.com/jetloop/jetloop/internal/orchestrator"
	"github.com/jetloop/jetloop/internal/testkit"
	"github.com/jetloop/jetloop/internal/testkit/inproc"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// uiAgents are the agents the UI's tests run turns with.
const uiAgents = `---
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

// gatedWorkflow is examples/workflow on scripted models: three tasks, the
// gate waiting for an approval before the second and the third.
const gatedWorkflow = `workflow_id: wf-html
agent: Refactorer
tasks:
  - input: Find every use of Foo.
    model: script
    script:
      responses:
        - text: Searching.
          tool_calls: [{name: echo, arguments: {text: "Foo is used in a.go and b.go"}}]
        - text: Foo is used in a.go and b.go.
  - input: Rename Foo to Bar where it is used.
    model: script
    script:
      responses:
        - text: Renaming.
          tool_calls:
            - {name: echo, arguments: {text: "a.go: Foo -> Bar"}}
            - {name: echo, arguments: {text: "b.go: Foo -> Bar"}}
        - text: Renamed Foo to Bar in a.go and b.go.
  - input: Summarize what changed.
    model: script
    script:
      responses:
        - text: Foo is now Bar in a.go and b.go; nothing else changed.
policy: {approve_between: true}
`

// env is a real embedded server with an orchestrator and a tool worker
// (inproc.Stack) for the UI to show. Every turn log is checked when the
// test ends.
type env struct {
	t   *testing.T
	srv *testkit.Server
	nc  *nats.Conn
	js  jetstream.JetStream
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

// newEnvWith starts the worker (its tools reading root, or a directory of
// the test's own) and the orchestrator (serving the agents file at
// agentsPath, or uiAgents).
func newEnvWith(t *testing.T, srv *testkit.Server, cfg inproc.Config, agentsPath, root string) *env {
	t.Helper()
	var set *agents.Set
	if agentsPath != "" {
		set = testkit.LoadAgents(t, agentsPath)
	} else {
		set = testkit.Agents(t, uiAgents, nil)
	}
	s := inproc.NewStack(t, srv, set, cfg)
	s.Worker(root, nil)
	s.Orchestrator(orchestrator.WithProvider("script", model.Scripted{}))
	return &env{t: t, srv: srv, nc: s.NC, js: s.JS}
}

// client is the SDK on the test's connection.
func (e *env) client() *client.Client {
	e.t.Helper()
	cl, err := client.New(e.nc)
	if err != nil {
		e.t.Fatal(err)
	}
	return cl
}

// runWorkflow starts the workflow of a workflow file's text, as `jetloop
// workflow run` does.
func (e *env) runWorkflow(yaml string) {
	e.t.Helper()
	w, err := workflowfile.Parse([]byte(yaml))
	if err != nil {
		e.t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if _, err := e.client().RunWorkflow(ctx, w); err != nil {
		e.t.Fatal(err)
	}
}

// approveWorkflow lets a workflow waiting at its gate go on, as `jetloop
// workflow approve` does.
func (e *env) approveWorkflow(id, note string) {
	e.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := e.client().ApproveWorkflow(ctx, id, true, note); err != nil {
		e.t.Fatal(err)
	}
}

// submit submits a turn through the SDK.
func (e *env) submit(req client.TurnRequest) {
	e.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if _, err := e.client().Submit(ctx, req); err != nil {
		e.t.Fatal(err)
	}
}

// The tests' names for testkit's reads, on the test's connection.

func (e *env) log(turn string) []events.Envelope {
	e.t.Helper()
	return testkit.Log(e.t, e.js, turn)
}

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
