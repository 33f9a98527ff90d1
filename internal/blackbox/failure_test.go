package blackbox

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/jetloop/jetloop/internal/bus"
	"github.com/jetloop/jetloop/internal/testkit"

	"github.com/jetloop/jetloop/internal/events"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// failureAgents are the agents of the failure tests, all on the scripted
// model: Any may use every tool, Picky only some.
const failureAgents = `---
name: Any
model: script
---
Use any tool.
---
name: Picky
model: script
tools: [read_file, write_file, grep, ask_user]
---
Only these.
`

// stack is a server, an orchestrator process and the tool worker processes
// a test starts on it.
type stack struct {
	t    *testing.T
	srv  *testkit.Server
	url  string
	nc   *nats.Conn
	js   jetstream.JetStream
	dir  string
	orch *process
}

// newStack starts a server and an orchestrator. A toolsTTL above zero
// creates the tools bucket with that TTL first: every process follows the
// TTL of the bucket it finds.
func newStack(t *testing.T, toolsTTL time.Duration) *stack {
	t.Helper()
	if testing.Short() {
		t.Skip("builds and starts the binaries")
	}
	srv := testkit.Start(t)
	nc, js := srv.Connect(t)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if toolsTTL > 0 {
		if _, err := js.CreateKeyValue(ctx, bus.ToolsBucket(toolsTTL)); err != nil {
			t.Fatal(err)
		}
	}
	if err := bus.EnsureStreams(ctx, js); err != nil {
		t.Fatal(err)
	}
	s := &stack{t: t, srv: srv, url: srv.ClientURL(), nc: nc, js: js, dir: t.TempDir()}
	agents := filepath.Join(s.dir, "AGENTS.md")
	if err := os.WriteFile(agents, []byte(failureAgents), 0o644); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { testkit.CheckLogs(t, js) })
	s.orch = s.orchestrator()
	return s
}

// orchestrator starts an orchestrator process and waits until it serves.
func (s *stack) orchestrator() *process {
	s.t.Helper()
	p := start(s.t, s.dir, "orchestrator", "--nats", s.url, "--agents", filepath.Join(s.dir, "AGENTS.md"), "--ack-wait", "5s", "--allow-scripts")
	s.waitServing(p)
	return p
}

// worker starts a tool worker process and waits until it serves.
func (s *stack) worker(name string, args ...string) *process {
	s.t.Helper()
	p := start(s.t, s.dir, "toolworker", append([]string{"--nats", s.url, "--root", s.dir, "--name", name}, args...)...)
	s.waitServing(p)
	return p
}

func (s *stack) waitServing(p *process) {
	s.t.Helper()
	testkit.WaitFor(s.t, filepath.Base(p.cmd.Path)+" to serve", func() bool { return strings.Contains(p.out.String(), "serving") })
}

// submit starts a turn of agent with an inline script.
func (s *stack) submit(turn, agent, script string) {
	s.t.Helper()
	testkit.Submit(s.t, s.js, events.Submit{TurnID: turn, Agent: agent, Model: "script", Script: json.RawMessage(script),
		Input: []events.Message{{Role: events.RoleUser, Content: "go"}}})
}

// log reads a turn's events as they are now.
func (s *stack) log(turn string) []events.Envelope {
	s.t.Helper()
	return turnLog(s.t, s.js, turn)
}

// finished waits for a turn to finish and returns its log and outcome.
func (s *stack) finished(turn string) ([]events.Envelope, events.TurnFinishedData) {
	s.t.Helper()
	return testkit.Finished(s.t, s.js, turn)
}

// of decodes the data of the events of one type in a log.
func of[T any](t *testing.T, log []events.Envelope, typ events.Type) []T {
	t.Helper()
	return testkit.Of[T](t, log, typ)
}

// consumer reads the state of a tool's shared durable consumer.
func (s *stack) consumer(tool string) *jetstream.ConsumerInfo {
	s.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	c, err := s.js.Consumer(ctx, events.StreamJobs, events.ToolConsumer(tool))
	if err != nil {
		return nil
	}
	info, err := c.Info(ctx)
	if err != nil {
		return nil
	}
	return info
}

// running waits until a worker holds a job of tool, unacknowledged.
func (s *stack) running(tool string) {
	s.t.Helper()
	testkit.WaitFor(s.t, "a "+tool+" call to run", func() bool {
		i := s.consumer(tool)
		return i != nil && i.NumAckPending == 1
	})
}

// jobs counts the jobs still in the jobs stream.
func (s *stack) jobs() uint64 {
	s.t.Helper()
	stream, err := s.js.Stream(context.Background(), events.StreamJobs)
	if err != nil {
		s.t.Fatal(err)
	}
	info, err := stream.Info(context.Background())
	if err != nil {
		s.t.Fatal(err)
	}
	return info.State.Msgs
}

// tool reads a tool's entry in the registry, nil without one.
func (s *stack) tool(name string) *events.ToolInfo { return testkit.ToolInfo(s.t, s.js, name) }

// kill9 kills a process the way an operator's kill -9 does.
func (p *process) kill9(t *testing.T) {
	t.Helper()
	if err := p.cmd.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	_ = p.cmd.Wait()
}

// A worker killed with SIGKILL in the middle of a call loses the job after
// its ack wait; another worker runs it, and tool.completed says it was the
// second attempt.
func TestKilledWorkersCallIsCompletedByAnother(t *testing.T) {
	s := newStack(t, 0)
	// One slot each: a redelivery cannot go back to the worker still running
	// the call, even when a heartbeat comes late.
	flags := []string{"--tools", "sleep", "--ack-wait", "1s", "--max-deliver", "3", "--concurrency", "1"}
	a := s.worker("wa", flags...)
	s.submit("kill9", "Any", `{"responses": [{"tool_calls": [{"name": "sleep", "arguments": {"ms": 2000}}]}, {"text": "done"}]}`)
	s.running("sleep")
	// The second worker starts while the first holds the job, so only a
	// redelivery can bring the job to it.
	s.worker("wb", flags...)
	a.kill9(t)
	log, fin := s.finished("kill9")
	if fin.StopReason != events.StopCompleted {
		t.Fatalf("finished %+v", fin)
	}
	done := of[events.ToolCompletedData](t, log, events.ToolCompleted)
	if len(done) != 1 || done[0].IsError || done[0].Output != "slept" || done[0].Worker != "wb" || done[0].Attempts != 2 {
		t.Fatalf("tool.completed %+v", done)
	}
	testkit.WaitFor(t, "the job acknowledged", func() bool { return s.jobs() == 0 })
}

// TestWorkflowSurvivesKill9 kills the orchestrator and the tool worker with
// SIGKILL while task 2 of a three-task workflow runs its tool call; fresh
// processes finish the workflow: every task ran once, each tool call
// completed once, each model call ran once, and every log verifies (the
// stack's cleanup replays them all, the workflow's gate decisions too).
func TestWorkflowSurvivesKill9(t *testing.T) {
	s := newStack(t, 0)
	flags := []string{"--tools", "sleep", "--ack-wait", "1s", "--concurrency", "1"}
	a := s.worker("wa", flags...)
	task := events.Task{Input: json.RawMessage(`"nap"`), Model: "script",
		Script: json.RawMessage(`{"responses": [{"tool_calls": [{"name": "sleep", "arguments": {"ms": 1500}}]}, {"text": "rested"}]}`)}
	data, err := json.Marshal(events.WorkflowSubmit{WorkflowID: "wfk", Agent: "Any", Tasks: []events.Task{task, task, task}})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.js.Publish(context.Background(), events.SubjectWorkflow, data, jetstream.WithMsgID("wfk")); err != nil {
		t.Fatal(err)
	}
	testkit.WaitFor(t, "task 2's call to run", func() bool {
		return slices.ContainsFunc(s.log("wfk-2"), func(e events.Envelope) bool { return e.Type == events.ToolRequested })
	})
	s.running("sleep")
	s.orch.kill9(t)
	a.kill9(t)
	s.worker("wb", flags...)
	s.orch = s.orchestrator()
	var wf []events.Envelope
	testkit.WaitFor(t, "the workflow to finish", func() bool {
		wf = turnLog(t, s.js, "wfk")
		return len(wf) > 0 && wf[len(wf)-1].Type == events.WorkflowFinished
	})
	fin := of[events.WorkflowFinishedData](t, wf, events.WorkflowFinished)[0]
	if fin.StopReason != events.StopCompleted || fin.Metrics.Tasks != 3 || fin.Metrics.ToolCalls != 3 {
		t.Fatalf("finished %+v", fin)
	}
	if n := len(of[events.TaskStartedData](t, wf, events.TaskStarted)); n != 3 {
		t.Fatalf("%d tasks started", n)
	}
	for _, turn := range []string{"wfk-1", "wfk-2", "wfk-3"} {
		log, f := s.finished(turn)
		done := of[events.ToolCompletedData](t, log, events.ToolCompleted)
		models := of[events.ModelCompletedData](t, log, events.ModelCompleted)
		if f.StopReason != events.StopCompleted || len(done) != 1 || done[0].IsError || len(models) != 2 {
			t.Fatalf("%s: %s, tool.completed %+v, %d model calls", turn, f.StopReason, done, len(models))
		}
		for _, m := range models {
			if m.Attempts > 1 {
				t.Errorf("%s: a model call ran %d times", turn, m.Attempts)
			}
		}
	}
}

// A job that used up its deliveries is answered with an error result that
// the turn goes on with, and leaves the jobs stream.
func TestExhaustedJobBecomesAnErrorResult(t *testing.T) {
	s := newStack(t, 0)
	flags := []string{"--tools", "sleep", "--ack-wait", "1s", "--max-deliver", "1"}
	a := s.worker("wa", flags...)
	s.submit("exhausted", "Any", `{"responses": [{"tool_calls": [{"name": "sleep", "arguments": {"ms": 600000}}]}, {"text": "gave up"}]}`)
	s.running("sleep")
	s.worker("wb", flags...) // hears the advisory
	a.kill9(t)
	log, fin := s.finished("exhausted")
	if fin.StopReason != events.StopCompleted || fin.Output != "gave up" {
		t.Fatalf("finished %+v", fin)
	}
	done := of[events.ToolCompletedData](t, log, events.ToolCompleted)
	if len(done) != 1 || !done[0].IsError || !strings.Contains(done[0].Output, "no worker finished the call in 1 attempts") || done[0].Worker != "wb" {
		t.Fatalf("tool.completed %+v", done)
	}
	// The model was asked again after the error: a second step.
	if n := len(of[events.ModelCompletedData](t, log, events.ModelCompleted)); n != 2 {
		t.Fatalf("%d model calls", n)
	}
	testkit.WaitFor(t, "the exhausted job deleted", func() bool { return s.jobs() == 0 })
}

// SIGTERM lets the running call finish and acknowledges it, starts no
// other, and exits 0; the job it did not start waits for the next worker.
func TestSIGTERMDrainsAndLosesNothing(t *testing.T) {
	s := newStack(t, 0)
	a := s.worker("wa", "--tools", "sleep", "--concurrency", "1", "--ack-wait", "10s")
	s.submit("drain", "Any", `{"responses": [{"tool_calls": [
		{"name": "sleep", "arguments": {"ms": 1500}}, {"name": "sleep", "arguments": {"ms": 1501}}]}, {"text": "both slept"}]}`)
	s.running("sleep")
	testkit.WaitFor(t, "the second call to wait", func() bool { i := s.consumer("sleep"); return i.NumPending == 1 })
	if code := a.stop(t); code != 0 {
		t.Fatalf("toolworker exited %d after SIGTERM", code)
	}
	if !strings.Contains(a.out.String(), "toolworker stopped gracefully") {
		t.Errorf("no graceful stop:\n%s", a.out.String())
	}
	// The call that ran is answered and acknowledged; the other was never
	// delivered and still waits in the stream.
	info := s.consumer("sleep")
	if info.NumAckPending != 0 || info.NumPending != 1 || info.Delivered.Consumer != 1 || info.NumRedelivered != 0 {
		t.Fatalf("after the drain: %d unacknowledged, %d waiting, %d delivered", info.NumAckPending, info.NumPending, info.Delivered.Consumer)
	}
	testkit.WaitFor(t, "the first call completed", func() bool {
		return len(of[events.ToolCompletedData](t, s.log("drain"), events.ToolCompleted)) == 1
	})
	s.worker("wb", "--tools", "sleep", "--concurrency", "1", "--ack-wait", "10s")
	log, fin := s.finished("drain")
	if fin.StopReason != events.StopCompleted {
		t.Fatalf("finished %+v", fin)
	}
	done := of[events.ToolCompletedData](t, log, events.ToolCompleted)
	if len(done) != 2 || done[0].Worker != "wa" || done[1].Worker != "wb" {
		t.Fatalf("tool.completed %+v", done)
	}
	for _, d := range done {
		if d.IsError || d.Output != "slept" || d.Attempts != 1 {
			t.Errorf("call %+v", d)
		}
	}
}

// An abort reaches the worker running the turn's call: the call's context
// is cancelled and its job acknowledged without a result.
func TestAbortCancelsTheRunningCall(t *testing.T) {
	s := newStack(t, 0)
	w := s.worker("wa", "--tools", "sleep")
	s.submit("abort", "Any", `{"responses": [{"tool_calls": [{"name": "sleep", "arguments": {"ms": 600000}}]}]}`)
	s.running("sleep")
	broadcast := make(chan time.Time, 1)
	sub, err := s.nc.Subscribe(events.CancelSubject("abort"), func(*nats.Msg) {
		select {
		case broadcast <- time.Now():
		default:
		}
	})
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Unsubscribe()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if _, err := s.js.Publish(ctx, events.ControlSubject("abort"), []byte(`{"action":"abort","reason":"stop now"}`)); err != nil {
		t.Fatal(err)
	}
	testkit.WaitFor(t, "the aborted call acknowledged", func() bool {
		i := s.consumer("sleep")
		return i.NumAckPending == 0 && s.jobs() == 0
	})
	// The broadcast's callback may run after the ack was seen.
	select {
	case at := <-broadcast:
		t.Logf("call acknowledged within %s of the cancel broadcast", time.Since(at).Round(time.Millisecond))
	case <-time.After(10 * time.Second):
		t.Error("the orchestrator did not broadcast the cancel")
	}
	if !strings.Contains(w.out.String(), "call aborted with its turn") {
		t.Errorf("the worker did not see the call's context cancelled:\n%s", w.out.String())
	}
	log, fin := s.finished("abort")
	if fin.StopReason != events.StopAborted || len(of[events.ToolCompletedData](t, log, events.ToolCompleted)) != 0 {
		t.Fatalf("finished %+v", fin)
	}
}

// A tool that no worker answers at all is ended by the orchestrator's
// per-call deadline, and the turn goes on. The registry entry is the only
// trace of a worker: none ever takes the job.
func TestCallDeadlineIsTheBackstop(t *testing.T) {
	s := newStack(t, 0)
	kv, err := s.js.KeyValue(context.Background(), events.BucketTools)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := kv.Put(context.Background(), "ghost", []byte(`{"name":"ghost","description":"Never answers.",
		"parameters":{"type":"object"},"timeout_ms":1000,"workers":1}`)); err != nil {
		t.Fatal(err)
	}
	s.submit("ghost", "Any", `{"responses": [{"tool_calls": [{"name": "ghost", "arguments": {}}]}, {"text": "moved on"}]}`)
	log, fin := s.finished("ghost")
	if fin.StopReason != events.StopCompleted || fin.Output != "moved on" {
		t.Fatalf("finished %+v", fin)
	}
	done := of[events.ToolCompletedData](t, log, events.ToolCompleted)
	if len(done) != 1 || !done[0].IsError || done[0].Worker != "orchestrator" || !strings.Contains(done[0].Output, "deadline") {
		t.Fatalf("tool.completed %+v", done)
	}
}

// The orchestrator offers a turn exactly the tools its agent allows and a
// live worker serves, with the schemas the workers advertise; it refuses
// a call with invalid arguments or of a tool not allowed without sending a
// job. A worker killed with SIGKILL takes the tools it alone served with it
// once the registry's TTL passes; one stopped with SIGTERM at once.
func TestOfferedToolsAreAllowedAndServed(t *testing.T) {
	// Workers refresh their entries every third of the TTL: 5 s leaves a
	// loaded machine room before a live worker's entry lapses.
	s := newStack(t, 5*time.Second)
	a := s.worker("wa", "--tools", "read_file,grep")
	b := s.worker("wb") // every built-in but shell
	for _, name := range []string{"read_file", "grep", "write_file", "list_dir", "echo", "sleep"} {
		testkit.WaitFor(t, name+" advertised", func() bool { return s.tool(name) != nil })
	}
	if i := s.tool("read_file"); i.Workers != 2 {
		t.Errorf("read_file counted with %d workers", i.Workers)
	}
	if s.tool("shell") != nil {
		t.Error("shell advertised without --allow-shell")
	}
	jobs := make(chan *nats.Msg, 16)
	sub, err := s.nc.ChanSubscribe(events.ToolSubject("*"), jobs)
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Unsubscribe()

	s.submit("offered", "Picky", `{"responses": [{"tool_calls": [
		{"name": "read_file", "arguments": {"path": 7}},
		{"name": "echo", "arguments": {"text": "not allowed"}},
		{"name": "grep", "arguments": {"pattern": "Use any", "glob": "*.md"}}]}, {"text": "ok"}]}`)
	log, _ := s.finished("offered")
	started := of[events.TurnStartedData](t, log, events.TurnStarted)[0]
	if want := []string{"ask_user", "grep", "read_file", "write_file"}; !sameSet(started.Tools, want) {
		t.Errorf("offered %v, want %v", started.Tools, want)
	}
	for _, spec := range started.ToolSpecs {
		if info := s.tool(spec.Name); info != nil && !jsonEqual(info.Parameters, spec.Parameters) {
			t.Errorf("%s offered with schema %s, advertised %s", spec.Name, spec.Parameters, info.Parameters)
		}
	}
	done := of[events.ToolCompletedData](t, log, events.ToolCompleted)
	if len(done) != 3 || !done[0].IsError || done[0].Worker != "orchestrator" || !done[1].IsError || done[1].Worker != "orchestrator" ||
		done[2].IsError || !strings.Contains(done[2].Output, "AGENTS.md") {
		t.Fatalf("tool.completed %+v", done)
	}
	// Only the valid, allowed call became a job.
	if len(jobs) != 1 {
		t.Fatalf("%d jobs sent", len(jobs))
	}
	if m := <-jobs; m.Subject != events.ToolSubject("grep") {
		t.Fatalf("job on %s", m.Subject)
	}

	b.kill9(t)
	testkit.WaitFor(t, "write_file to expire with its only worker", func() bool { return s.tool("write_file") == nil })
	testkit.WaitFor(t, "read_file counted with one worker", func() bool { i := s.tool("read_file"); return i != nil && i.Workers == 1 })
	s.submit("after-kill", "Picky", `{"responses": [{"text": "ok"}]}`)
	log, _ = s.finished("after-kill")
	if got := of[events.TurnStartedData](t, log, events.TurnStarted)[0].Tools; !sameSet(got, []string{"ask_user", "grep", "read_file"}) {
		t.Errorf("offered %v after the kill", got)
	}

	if code := a.stop(t); code != 0 {
		t.Fatalf("toolworker exited %d after SIGTERM", code)
	}
	if s.tool("read_file") != nil || s.tool("grep") != nil {
		t.Error("a stopped worker's tools are still advertised")
	}
	s.submit("after-stop", "Picky", `{"responses": [{"text": "ok"}]}`)
	log, _ = s.finished("after-stop")
	if got := of[events.TurnStartedData](t, log, events.TurnStarted)[0].Tools; !sameSet(got, []string{"ask_user"}) {
		t.Errorf("offered %v after the stop", got)
	}
}

func sameSet(got, want []string) bool {
	got, want = slices.Clone(got), slices.Clone(want)
	slices.Sort(got)
	slices.Sort(want)
	return slices.Equal(got, want)
}

func jsonEqual(a, b json.RawMessage) bool {
	var x, y any
	if json.Unmarshal(a, &x) != nil || json.Unmarshal(b, &y) != nil {
		return false
	}
	ja, _ := json.Marshal(x)
	jb, _ := json.Marshal(y)
	return string(ja) == string(jb)
}
