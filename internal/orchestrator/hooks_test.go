package orchestrator_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jetloop/jetloop/internal/events"
	"github.com/jetloop/jetloop/internal/fsm"
	"github.com/jetloop/jetloop/internal/orchestrator"
	"github.com/jetloop/jetloop/internal/testkit/inproc"
	"github.com/jetloop/jetloop/worker"
	"github.com/nats-io/nats.go"
)

// audit is a Checkpoint: it keeps every checkpoint it is asked about and
// answers continue.
type audit struct {
	mu   sync.Mutex
	seen []string // "<workflow>:<task>:<last>:<tool calls>"
}

func (a *audit) Check(_ context.Context, cp worker.Checkpoint) (worker.Decision, error) {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.seen = append(a.seen, fmt.Sprintf("%s:%d:%t:%d", cp.WorkflowID, cp.Task, cp.Last, cp.Metrics.ToolCalls))
	return worker.Continue("stored"), nil
}

func (a *audit) of(workflow string) string {
	a.mu.Lock()
	defer a.mu.Unlock()
	var out []string
	for _, s := range a.seen {
		if strings.HasPrefix(s, workflow+":") {
			out = append(out, strings.TrimPrefix(s, workflow+":"))
		}
	}
	return strings.Join(out, " ")
}

// guard is a PolicyCheckpoint: it stops a workflow whose tool calls reach
// 2, and asks a person about one named "ask-*".
func guard(_ context.Context, cp worker.Checkpoint) (worker.Decision, error) {
	switch {
	case cp.Metrics.ToolCalls >= 2:
		return worker.Stop(fmt.Sprintf("cost guard: %d tool calls reached the threshold of 2", cp.Metrics.ToolCalls)), nil
	case strings.HasPrefix(cp.WorkflowID, "ask-"):
		return worker.Wait("a person looks first"), nil
	}
	return worker.Continue("under the threshold"), nil
}

func (h *harness) hookWorker(a *audit) {
	h.t.Helper()
	h.worker(func(w *worker.Worker) {
		if err := w.HandleHook("audit", a); err != nil {
			h.t.Fatal(err)
		}
		if err := w.HandleHook("guard", worker.HookFunc(guard)); err != nil {
			h.t.Fatal(err)
		}
	})
	h.waitFor("the hooks in the registry", func() bool {
		kv, err := h.js.KeyValue(context.Background(), events.BucketTools)
		if err != nil {
			return false
		}
		e, err := kv.Get(context.Background(), events.HookKey("guard"))
		var info events.ToolInfo
		return err == nil && json.Unmarshal(e.Value(), &info) == nil && info.Name == "guard" && info.Workers == 1
	})
}

func gates(log []events.Envelope) string {
	var out []string
	for _, e := range log {
		if e.Type == events.WorkflowGated {
			var g events.WorkflowGatedData
			_ = json.Unmarshal(e.Data, &g)
			out = append(out, fmt.Sprintf("%d:%s:%s", g.Task, g.By, g.Decision))
		}
	}
	return strings.Join(out, " ")
}

// TestWorkflowHooks: two hooks in order, a checkpoint that stores every
// task's (the last included) and a policy that stops, decide after each
// task's checkpoint, before the gate's rules; their decisions are in the
// log with by, and every log verifies.
func TestWorkflowHooks(t *testing.T) {
	h := newHarness(t)
	a := &audit{}
	h.hookWorker(a)
	h.orchestrator()
	hooks := &events.Policy{Hooks: []string{"audit", "guard"}}

	// Under the threshold: every task is asked about, the last one too.
	h.submitWorkflow(events.WorkflowSubmit{WorkflowID: "hooked", Agent: "General", Policy: hooks,
		Tasks: []events.Task{echoTask("one")}})
	log, fin := h.workflowFinished("hooked")
	if fin.StopReason != events.StopCompleted || a.of("hooked") != "1:true:1" {
		t.Fatalf("finished %+v; the checkpoint hook saw %q", fin, a.of("hooked"))
	}
	if got := gates(log); got != "2:audit:continue 2:guard:continue 2:rules:stop" {
		t.Fatalf("gates %s", got)
	}
	// A hook is advertised, but never offered to a model as a tool.
	var started events.TurnStartedData
	if err := json.Unmarshal(h.events("hooked-1")[0].Data, &started); err != nil {
		t.Fatal(err)
	}
	for _, tool := range started.Tools {
		if strings.Contains(tool, "audit") || strings.Contains(tool, "guard") {
			t.Fatalf("a hook offered as a tool: %v", started.Tools)
		}
	}
	if len(started.Tools) == 0 {
		t.Fatal("no tools offered at all")
	}

	// The policy stops the workflow at its threshold, denied with its reason.
	h.submitWorkflow(events.WorkflowSubmit{WorkflowID: "guarded", Agent: "General", Policy: hooks,
		Tasks: []events.Task{echoTask("one"), echoTask("two"), echoTask("three")}})
	log, fin = h.workflowFinished("guarded")
	if fin.StopReason != events.StopDenied || !strings.Contains(fin.Error, "2 tool calls reached") || len(fin.Tasks) != 2 {
		t.Fatalf("finished %+v", fin)
	}
	if got := gates(log); got != "2:audit:continue 2:guard:continue 2:rules:continue 3:audit:continue 3:guard:stop" {
		t.Fatalf("gates %s", got)
	}
	if got := a.of("guarded"); got != "1:false:1 2:false:2" {
		t.Fatalf("the checkpoint hook saw %q", got)
	}

	// wait pauses for a person, then the gate goes on.
	h.submitWorkflow(events.WorkflowSubmit{WorkflowID: "ask-1", Agent: "General", Policy: hooks,
		Tasks: []events.Task{echoTask("one")}})
	h.waitFor("the hook's wait", func() bool { return strings.HasSuffix(gates(h.events("ask-1")), "2:guard:wait") })
	yes := true
	h.control("ask-1", events.Control{Action: events.ActionApprove, Approved: &yes})
	log, fin = h.workflowFinished("ask-1")
	if fin.StopReason != events.StopCompleted {
		t.Fatalf("finished %+v", fin)
	}
	if got := gates(log); got != "2:audit:continue 2:guard:wait 2:rules:stop" {
		t.Fatalf("gates %s", got)
	}
}

// TestWorkflowHookTimeout: a hook nobody serves stops the workflow with
// error naming it, or is passed over under on_hook_timeout: continue.
func TestWorkflowHookTimeout(t *testing.T) {
	h := newHarness(t).start()
	h.submitWorkflow(events.WorkflowSubmit{WorkflowID: "silent", Agent: "General",
		Policy: &events.Policy{Hooks: []string{"nobody"}, HookTimeoutMs: 300},
		Tasks:  []events.Task{echoTask("one"), echoTask("two")}})
	log, fin := h.workflowFinished("silent")
	if fin.StopReason != events.StopError || !strings.Contains(fin.Error, "hook nobody did not answer") || len(fin.Tasks) != 1 {
		t.Fatalf("finished %+v", fin)
	}
	if got := gates(log); got != "2:nobody:stop" {
		t.Fatalf("gates %s", got)
	}
	h.submitWorkflow(events.WorkflowSubmit{WorkflowID: "passed", Agent: "General",
		Policy: &events.Policy{Hooks: []string{"nobody"}, HookTimeoutMs: 300, OnHookTimeout: events.HookTimeoutContinue},
		Tasks:  []events.Task{echoTask("one"), echoTask("two")}})
	log, fin = h.workflowFinished("passed")
	if fin.StopReason != events.StopCompleted {
		t.Fatalf("finished %+v", fin)
	}
	if got := gates(log); got != "2:nobody:continue 2:rules:continue 3:nobody:continue 3:rules:stop" {
		t.Fatalf("gates %s", got)
	}
	// A hook's answer about a workflow that waits for none is a dead letter.
	data, _ := json.Marshal(events.HookAnswer{WorkflowID: "passed", Task: 1, Hook: "nobody", Decision: events.GateStop, Reason: "late"})
	h.publish(events.HookAnswerSubject("passed"), data, events.HookAnswerID("passed", 1, "nobody"))
	data, _ = json.Marshal(events.HookAnswer{WorkflowID: "other", Task: 1, Hook: "x", Decision: events.GateStop, Reason: "x"})
	h.publish(events.HookAnswerSubject("passed"), data, "hook-answer:stray")
	h.waitFor("the stray answer's dead letter", func() bool {
		return len(h.deadBySubject()["jetloop.dead.hook jetloop.inbox.hook.passed"]) >= 1
	})
}

// TestWorkflowHooksSurviveCrashes stops the orchestrator abruptly after it
// appended (or published for) its nth input, for every input of a workflow
// with two hooks: a fresh orchestrator finishes it, and each hook was asked
// once about each task (its job published once) and each answer is in the
// log once.
func TestWorkflowHooksSurviveCrashes(t *testing.T) {
	run := func(t *testing.T, id string, crash func(h *harness) (crashed <-chan struct{}, kill func())) {
		h := newHarness(t)
		a := &audit{}
		h.hookWorker(a)
		crashed, kill := crash(h)
		h.submitWorkflow(events.WorkflowSubmit{WorkflowID: id, Agent: "General",
			Policy: &events.Policy{Hooks: []string{"audit", "guard"}},
			Tasks:  []events.Task{countTask(1), countTask(2), countTask(3)}})
		if crashed != nil {
			select {
			case <-crashed:
				kill()
				h.orchestrator()
			case <-time.After(30 * time.Second):
				t.Fatal("never reached the crash")
			}
		}
		log, fin := h.workflowFinished(id)
		if fin.StopReason != events.StopDenied || fin.Metrics.Tasks != 2 || fin.Metrics.ToolCalls != 2 {
			t.Fatalf("finished %+v", fin)
		}
		if got := gates(log); got != "2:audit:continue 2:guard:continue 2:rules:continue 3:audit:continue 3:guard:stop" {
			t.Fatalf("gates %s", got)
		}
		if got := a.of(id); got != "1:false:1 2:false:2" {
			t.Fatalf("the checkpoint hook was asked %q", got)
		}
		if got := h.calls.max(); got != 1 {
			t.Fatalf("a tool call ran %d times", got)
		}
	}
	// A run without a crash counts the stages its inputs pass.
	var stages sync.Map
	run(t, "wf-hooks-count", func(h *harness) (<-chan struct{}, func()) {
		h.orchestrator(orchestrator.WithCrashHook(func(s string) error {
			n, _ := stages.LoadOrStore(s, new(atomic.Int32))
			n.(*atomic.Int32).Add(1)
			return nil
		}))
		return nil, nil
	})
	for _, stage := range []string{orchestrator.StageAppended, orchestrator.StagePublished} {
		total, ok := stages.Load(stage)
		if !ok {
			t.Fatalf("no input passed %s", stage)
		}
		for n := 1; n <= int(total.(*atomic.Int32).Load()); n++ {
			t.Run(fmt.Sprintf("%s/input-%d", stage, n), func(t *testing.T) {
				run(t, fmt.Sprintf("wf-hooks-%s-%d", stage, n), func(h *harness) (<-chan struct{}, func()) {
					return h.orchestratorCrashing(stage, n)
				})
			})
		}
	}
}

// TestHookKilledMidJobIsAskedAgain: a hook process that dies while it
// decides leaves its job unacknowledged; after the ack wait another
// process of the hook is asked, and the workflow goes on.
func TestHookKilledMidJobIsAskedAgain(t *testing.T) {
	h := newHarness(t).start()
	serve := func(fn worker.HookFunc) (stop, kill func()) {
		nc, _ := h.Connect()
		return inproc.Worker(t, nc, h.Log.With("process", "hook"), func(w *worker.Worker) error { return w.HandleHook("slowpoke", fn) },
			worker.WithAckWait(500*time.Millisecond), worker.WithDrainGrace(100*time.Millisecond))
	}
	// The first process takes the job and dies with it.
	asked := make(chan struct{})
	var once sync.Once
	_, kill1 := serve(func(ctx context.Context, cp worker.Checkpoint) (worker.Decision, error) {
		once.Do(func() { close(asked) })
		<-ctx.Done()
		return worker.Decision{}, ctx.Err()
	})
	h.submitWorkflow(events.WorkflowSubmit{WorkflowID: "killed-hook", Agent: "General",
		Policy: &events.Policy{Hooks: []string{"slowpoke"}}, Tasks: []events.Task{echoTask("one"), echoTask("two")}})
	select {
	case <-asked:
	case <-time.After(30 * time.Second):
		t.Fatal("the hook was never asked")
	}
	kill1() // kill -9: no answer, no ack, no goodbye
	var attempts sync.Map
	serve(func(_ context.Context, cp worker.Checkpoint) (worker.Decision, error) {
		attempts.Store(cp.Task, cp.Attempt)
		return worker.Continue("asked again"), nil
	})
	log, fin := h.workflowFinished("killed-hook")
	if fin.StopReason != events.StopCompleted {
		t.Fatalf("finished %+v", fin)
	}
	if got := gates(log); got != "2:slowpoke:continue 2:rules:continue 3:slowpoke:continue 3:rules:stop" {
		t.Fatalf("gates %s", got)
	}
	if a, _ := attempts.Load(1); a == nil || a.(int) < 2 {
		t.Fatalf("task 1's job was delivered %v times to the second process, want a redelivery", a)
	}
}

// hookRecorder keeps every checkpoint a hook is handed, as the wire names it.
type hookRecorder struct {
	mu   sync.Mutex
	seen []worker.Checkpoint
}

func (r *hookRecorder) Check(_ context.Context, cp worker.Checkpoint) (worker.Decision, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.seen = append(r.seen, cp)
	return worker.Continue("stored"), nil
}

func (r *hookRecorder) of(workflow string) []worker.Checkpoint {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []worker.Checkpoint
	for _, cp := range r.seen {
		if cp.WorkflowID == workflow {
			out = append(out, cp)
		}
	}
	return out
}

// TestHooksAreToldEverything: a hook is handed the task's own metrics, as
// task.finished has them; a workflow that ends by its clock while a hook
// decides hands every hook that had not decided its last checkpoint, in a
// final job sent before workflow.finished, whose answers are acknowledged
// with no event and no dead letter; and a hook that fails ends the
// workflow error with its message, not denied.
func TestHooksAreToldEverything(t *testing.T) {
	h := newHarness(t)
	rec := &hookRecorder{}
	release := make(chan struct{})
	// hold decides only when released: the workflow's clock runs out first.
	hold := worker.HookFunc(func(ctx context.Context, cp worker.Checkpoint) (worker.Decision, error) {
		if cp.Ended == nil {
			select {
			case <-release:
			case <-ctx.Done():
			}
		}
		return worker.Continue("held"), nil
	})
	fail := worker.HookFunc(func(context.Context, worker.Checkpoint) (worker.Decision, error) {
		return worker.Decision{}, errors.New("cannot write the audit: disk full")
	})
	h.worker(func(w *worker.Worker) {
		for name, hk := range map[string]worker.Hook{"rec": rec, "hold": hold, "fail": fail} {
			if err := w.HandleHook(name, hk); err != nil {
				t.Fatal(err)
			}
		}
	})
	var released sync.Once
	free := func() { released.Do(func() { close(release) }) }
	t.Cleanup(free)
	h.orchestrator()

	// The task's own numbers.
	h.submitWorkflow(events.WorkflowSubmit{WorkflowID: "told", Agent: "General",
		Policy: &events.Policy{Hooks: []string{"rec"}}, Tasks: []events.Task{echoTask("one"), echoTask("two")}})
	log, fin := h.workflowFinished("told")
	if fin.StopReason != events.StopCompleted {
		t.Fatalf("finished %+v", fin)
	}
	var own []events.Metrics
	for _, e := range log {
		if e.Type == events.TaskFinished {
			var d events.TaskFinishedData
			if err := json.Unmarshal(e.Data, &d); err != nil {
				t.Fatal(err)
			}
			own = append(own, d.Metrics)
		}
	}
	seen := rec.of("told")
	if len(seen) != 2 || len(own) != 2 {
		t.Fatalf("the hook saw %d checkpoints of %d tasks", len(seen), len(own))
	}
	for i, cp := range seen {
		if cp.TaskMetrics != own[i] || cp.TaskMetrics.ToolCalls != 1 || cp.Metrics.ToolCalls != i+1 || cp.Ended != nil {
			t.Fatalf("task %d: the hook saw task metrics %+v and sums %+v; task.finished has %+v", i+1, cp.TaskMetrics, cp.Metrics, own[i])
		}
	}
	// The SDK's Checkpoint marshals as the wire names it.
	raw, err := json.Marshal(seen[0])
	if err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{`"workflow_id":"told"`, `"task_metrics":{"steps":2,"tool_calls":1`, `"stop_reason":"completed"`} {
		if !strings.Contains(string(raw), name) {
			t.Fatalf("%s lacks %s", raw, name)
		}
	}

	// The clock runs out while hold decides about task 1: rec, never asked,
	// and hold are handed that checkpoint as the last one. A task that
	// outlives the clock under load leaves no checkpoint to hand: try again
	// with a longer clock.
	// What reaches a subscriber, in order: rec's jobs and every event. One
	// subscription: two would each deliver on a goroutine of their own, in
	// no order between them.
	var seenMu sync.Mutex
	var order []string
	sub, err := h.nc.Subscribe("jetloop.>", func(m *nats.Msg) {
		if m.Subject != events.HookSubject("rec") && !strings.HasPrefix(m.Subject, "jetloop.events.") {
			return
		}
		seenMu.Lock()
		defer seenMu.Unlock()
		order = append(order, m.Subject+" "+string(m.Data))
	})
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Unsubscribe()
	var id string
	for timeout := int64(1000); ; timeout *= 4 {
		id = fmt.Sprintf("clocked-%d", timeout)
		h.submitWorkflow(events.WorkflowSubmit{WorkflowID: id, Agent: "General", Limits: &events.WorkflowLimits{TimeoutMs: timeout},
			Policy: &events.Policy{Hooks: []string{"hold", "rec"}, HookTimeoutMs: 10 * timeout},
			Tasks:  []events.Task{echoTask("one"), echoTask("two")}})
		_, fin = h.workflowFinished(id)
		if fin.StopReason != events.StopTimeout {
			t.Fatalf("finished %+v", fin)
		}
		if len(fin.Tasks) == 1 && fin.Tasks[0].StopReason == events.StopCompleted {
			break
		}
		if timeout > 60_000 {
			t.Fatalf("task 1 never finished before the clock: %+v", fin)
		}
	}
	// The final job was published before workflow.finished.
	h.waitFor("the final job and the finish seen", func() bool {
		seenMu.Lock()
		defer seenMu.Unlock()
		job, finish := -1, -1
		for i, o := range order {
			switch {
			case job < 0 && strings.HasPrefix(o, events.HookSubject("rec")+" ") && strings.Contains(o, `"workflow_id":"`+id+`"`) && strings.Contains(o, `"ended":`):
				job = i
			case finish < 0 && strings.HasPrefix(o, events.EventsSubject(id, id)+" ") && strings.Contains(o, string(events.WorkflowFinished)):
				finish = i
			}
		}
		if job >= 0 && finish >= 0 && job > finish {
			t.Fatalf("rec's final job came after workflow.finished")
		}
		return job >= 0 && finish >= 0
	})
	free() // hold's answer to its first job now comes after the end, and changes nothing either
	h.waitFor("rec handed the last checkpoint", func() bool { return len(rec.of(id)) == 1 })
	cp := rec.of(id)[0]
	if cp.Ended == nil || cp.Ended.StopReason != events.StopTimeout || cp.Ended.Error != fin.Error || cp.Task != 1 ||
		cp.Metrics.Tasks != 1 || cp.TaskMetrics.ToolCalls != 1 || cp.StopReason != events.StopCompleted {
		t.Fatalf("rec was handed %+v (ended %+v)", cp, cp.Ended)
	}
	// Every answer is published (a job is acknowledged after its answer)
	// and changes nothing.
	for _, hook := range []string{"hold", "rec"} {
		h.waitFor(hook+"'s jobs answered", func() bool {
			c, err := h.js.Consumer(context.Background(), events.StreamJobs, events.HookConsumer(hook))
			if err != nil {
				return false
			}
			info, err := c.Info(context.Background())
			return err == nil && info.NumPending == 0 && info.NumAckPending == 0
		})
	}
	h.waitFor("the final answers taken from the inbox", func() bool { return h.inboxLeft() == 0 })
	if log := h.events(id); log[len(log)-1].Type != events.WorkflowFinished {
		t.Fatalf("after the final answers the log ends with %s", log[len(log)-1].Type)
	}
	for subject := range h.deadBySubject() {
		if strings.Contains(subject, "hook") {
			t.Fatalf("a dead letter of a hook: %s", subject)
		}
	}

	// A hook that fails ends the workflow error with its message.
	h.submitWorkflow(events.WorkflowSubmit{WorkflowID: "broken", Agent: "General",
		Policy: &events.Policy{Hooks: []string{"fail", "rec"}}, Tasks: []events.Task{echoTask("one"), echoTask("two")}})
	log, fin = h.workflowFinished("broken")
	if fin.StopReason != events.StopError || fin.Error != "hook fail failed: cannot write the audit: disk full" {
		t.Fatalf("finished %+v", fin)
	}
	if got := gates(log); got != "2:fail:stop" {
		t.Fatalf("gates %s", got)
	}
	h.waitFor("rec handed the checkpoint fail ended on", func() bool {
		s := rec.of("broken")
		return len(s) == 1 && s[0].Ended != nil && s[0].Ended.StopReason == events.StopError
	})
}

// TestAnswersBoundToTheirSubject: on a tool's or hook's own subject
// (jetloop.inbox.result@<tool>, jetloop.inbox.hook@<hook>), which only the
// deployment serving it is granted, an answer is taken only for that tool
// or hook: one naming another, or a subagent's notice, is a dead letter.
// The hook's answer on its own subject passes the gate.
func TestAnswersBoundToTheirSubject(t *testing.T) {
	h := newHarness(t).start()
	h.submitWorkflow(events.WorkflowSubmit{WorkflowID: "bound", Agent: "General",
		Policy: &events.Policy{Hooks: []string{"review"}, HookTimeoutMs: 120_000},
		Tasks:  []events.Task{echoTask("one")}})
	answer := func(hook string) []byte {
		data, _ := json.Marshal(events.HookAnswer{WorkflowID: "bound", Task: 1, Hook: hook, Decision: events.GateContinue, Reason: "fine by " + hook})
		return data
	}
	h.publish(events.HookAnswerSubjectOf("audit", "bound"), answer("review"), "hook-answer:foreign")
	result := func(tool, worker string) []byte {
		data, _ := json.Marshal(events.ToolResult{TurnID: "t-bound", CallID: "c1", Tool: tool, Output: "forged", Final: true, Worker: worker, Attempt: 1})
		return data
	}
	h.publish(events.ToolResultSubject("echo", "t-bound"), result("grep", "w1"), "result:foreign")
	h.publish(events.ToolResultSubject("echo", "t-bound"), result("echo", fsm.SubagentWorker+"x"), "result:notice")
	for key, want := range map[string]string{
		"jetloop.dead.hook " + events.HookAnswerSubjectOf("audit", "bound"):  "answer of hook review published on hook audit's subject",
		"jetloop.dead.result " + events.ToolResultSubject("echo", "t-bound"): "result for tool grep published on tool echo's subject",
	} {
		h.waitFor("the dead letter "+want, func() bool {
			return slices.ContainsFunc(h.deadBySubject()[key], func(r string) bool { return strings.Contains(r, want) })
		})
	}
	h.waitFor("the notice's dead letter", func() bool {
		return slices.ContainsFunc(h.deadBySubject()["jetloop.dead.result "+events.ToolResultSubject("echo", "t-bound")],
			func(r string) bool { return strings.Contains(r, "only an orchestrator sends one") })
	})
	// The gate asks the hook once task 1 is done: answered then, not before.
	h.waitFor("the hook to be asked", func() bool {
		s, err := h.js.Stream(context.Background(), events.StreamJobs)
		if err != nil {
			return false
		}
		_, err = s.GetLastMsgForSubject(context.Background(), events.HookSubject("review"))
		return err == nil
	})
	h.publish(events.HookAnswerSubjectOf("review", "bound"), answer("review"), events.HookAnswerID("bound", 1, "review"))
	log, fin := h.workflowFinished("bound")
	if fin.StopReason != events.StopCompleted {
		t.Fatalf("finished %+v", fin)
	}
	if got := gates(log); !strings.HasPrefix(got, "2:review:continue") {
		t.Fatalf("gates %s", got)
	}
}
