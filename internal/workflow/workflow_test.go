package workflow

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/jetloop/jetloop/internal/events"
	lfsm "github.com/looplab/fsm"
)

var t0 = time.Date(2026, 11, 23, 10, 0, 0, 0, time.UTC)

// run is a workflow under test: its state and every event it wrote.
type run struct {
	t   *testing.T
	s   *State
	log []events.Envelope
	now time.Time
	n   int
}

func newRun(t *testing.T, tasks int, limits events.WorkflowLimits, policy events.Policy) *run {
	t.Helper()
	r := &run{t: t, s: New("wf"), now: t0}
	list := make([]events.Task, tasks)
	for i := range list {
		list[i] = events.Task{Input: json.RawMessage(fmt.Sprintf("%q", fmt.Sprint("task ", i+1)))}
	}
	r.do(Start{WorkflowID: "wf", SessionID: "wf", Agent: "General", Tasks: list,
		Limits: EffectiveLimits(&limits), Policy: EffectivePolicy(&policy)})
	return r
}

func (r *run) env() Env {
	return Env{Now: r.now, NewID: func() string { r.n++; return fmt.Sprint("e", r.n) }}
}

func (r *run) do(in Input) []events.Envelope {
	r.t.Helper()
	d, err := Decide(r.s, in, r.env())
	if err != nil {
		r.t.Fatalf("%T: %v", in, err)
	}
	r.s = d.State
	r.log = append(r.log, d.Events...)
	if err := events.CheckLog(r.log); err != nil {
		r.t.Fatalf("log: %v", err)
	}
	return d.Events
}

// finish ends the running task's turn with reason and metrics, then lets
// the gate decide, as the runtime does after its checkpoint put.
func (r *run) finish(reason events.StopReason, m events.Metrics) {
	r.t.Helper()
	r.do(TaskDone{WorkflowID: "wf", Task: r.s.Task, TurnID: TurnID("wf", r.s.Task),
		Finished: events.TurnFinishedData{StopReason: reason, Output: fmt.Sprint("out ", r.s.Task), Metrics: m}})
	if !r.s.AwaitsGate() {
		r.t.Fatalf("after a task: phase %s, want gate (the gate waits for the KV put)", r.s.Phase)
	}
	r.do(Gate{})
}

func types(log []events.Envelope) string {
	var out []string
	for _, e := range log {
		out = append(out, string(e.Type))
	}
	return strings.Join(out, " ")
}

func one(calls, tokens int) events.Metrics {
	return events.Metrics{Steps: 1, ToolCalls: calls, ModelCalls: 1, InputTokens: tokens, OutputTokens: 0, DurationMs: 10}
}

func TestThreeTasksComplete(t *testing.T) {
	r := newRun(t, 3, events.WorkflowLimits{}, events.Policy{})
	if j := Jobs(r.s); len(j) != 1 || j[0].Submit.TurnID != "wf-1" || j[0].Submit.Workflow.Task != 1 || j[0].Submit.Input[0].Content != "task 1" {
		t.Fatalf("jobs after start: %+v", j)
	}
	for range 3 {
		// Each task takes 10 ms of its own and the workflow's clock moves
		// a second between tasks: duration_ms is the wall clock, busy_ms
		// the tasks' sum.
		r.now = r.now.Add(time.Second)
		r.finish(events.StopCompleted, one(2, 100))
		if cp := r.s.Metrics; cp.DurationMs != r.now.Sub(t0).Milliseconds() || cp.BusyMs != int64(10*cp.Tasks) {
			t.Fatalf("checkpoint %d metrics %+v: want duration_ms %d (the wall clock), busy_ms %d", r.s.Task, cp, r.now.Sub(t0).Milliseconds(), 10*cp.Tasks)
		}
	}
	want := "workflow.started task.started " + strings.Repeat("task.finished workflow.checkpointed workflow.gated task.started ", 2) +
		"task.finished workflow.checkpointed workflow.gated workflow.finished"
	if got := types(r.log); got != want {
		t.Fatalf("log\n got %s\nwant %s", got, want)
	}
	f := r.s.Finished
	if f.StopReason != events.StopCompleted || f.Output != "out 3" || len(f.Tasks) != 3 {
		t.Fatalf("finished %+v", f)
	}
	if m := f.Metrics; m != (events.WorkflowMetrics{Tasks: 3, Steps: 3, ToolCalls: 6, ModelCalls: 3, InputTokens: 300, DurationMs: 3000, BusyMs: 30}) {
		t.Fatalf("metrics %+v", m)
	}
	if Jobs(r.s) != nil || Timers(r.s) != nil {
		t.Fatal("a finished workflow waits on nothing")
	}
}

// TestGateRules: each rule, and that an earlier one wins over a later one
// that holds too.
func TestGateRules(t *testing.T) {
	for _, tt := range []struct {
		name   string
		tasks  int
		limits events.WorkflowLimits
		policy events.Policy
		last   events.StopReason
		late   bool // the wall clock passed
		want   events.StopReason
		after  int // tasks run
	}{
		{"timeout over completed", 1, events.WorkflowLimits{TimeoutMs: 1000}, events.Policy{}, events.StopCompleted, true, events.StopTimeout, 1},
		{"completed over max_tasks", 2, events.WorkflowLimits{MaxTasks: 2}, events.Policy{}, events.StopCompleted, false, events.StopCompleted, 2},
		{"max_tasks over budget", 5, events.WorkflowLimits{MaxTasks: 1, Budget: 1}, events.Policy{}, events.StopCompleted, false, events.StopMaxTasks, 1},
		{"budget over tokens", 5, events.WorkflowLimits{Budget: 2, Tokens: 1}, events.Policy{}, events.StopCompleted, false, events.StopBudget, 1},
		{"tokens over approval", 5, events.WorkflowLimits{Tokens: 100}, events.Policy{ApproveBetween: true}, events.StopCompleted, false, events.StopTokens, 1},
		{"task_failed over tokens", 5, events.WorkflowLimits{Tokens: 100}, events.Policy{}, events.StopStepCap, false, events.StopTaskFailed, 1},
		{"task_failed over completed", 1, events.WorkflowLimits{}, events.Policy{}, events.StopError, false, events.StopTaskFailed, 1},
		{"the workflow's budget spent by a task", 5, events.WorkflowLimits{Budget: 2}, events.Policy{}, events.StopBudget, false, events.StopBudget, 1},
		{"a task's own budget is a failure", 5, events.WorkflowLimits{Budget: 3}, events.Policy{}, events.StopBudget, false, events.StopTaskFailed, 1},
		{"task_failed over max_tasks", 5, events.WorkflowLimits{MaxTasks: 1}, events.Policy{}, events.StopDoomLoop, false, events.StopTaskFailed, 1},
		{"task_failed over approval", 5, events.WorkflowLimits{}, events.Policy{ApproveBetween: true}, events.StopError, false, events.StopTaskFailed, 1},
		{"synthesis_done is success", 2, events.WorkflowLimits{}, events.Policy{}, events.StopSynthesisDone, false, events.StopCompleted, 2},
		{"on_task_failure continue", 2, events.WorkflowLimits{}, events.Policy{OnTaskFailure: events.FailureContinue}, events.StopDoomLoop, false, events.StopCompleted, 2},
	} {
		t.Run(tt.name, func(t *testing.T) {
			r := newRun(t, tt.tasks, tt.limits, tt.policy)
			if tt.late {
				r.now = t0.Add(time.Hour)
			}
			r.finish(tt.last, one(2, 100))
			for !r.s.Done() {
				r.finish(events.StopCompleted, one(2, 100))
			}
			f := r.s.Finished
			if f.StopReason != tt.want || len(f.Tasks) != tt.after {
				t.Fatalf("finished %s after %d tasks, want %s after %d", f.StopReason, len(f.Tasks), tt.want, tt.after)
			}
			// The stop's detail is the gate's reason, for every stop but
			// completed (the seed's StopCondition.Detail).
			g := r.s.Gated
			if (f.StopReason == events.StopCompleted) != (f.Error == "") || g == nil || (f.Error != "" && f.Error != g.Reason) ||
				!strings.HasPrefix(g.Reason, string(tt.want)) || g.By != events.GateByRules {
				t.Fatalf("finished %s with error %q after the gate's %+v", f.StopReason, f.Error, g)
			}
		})
	}
}

func TestApprovalBetweenTasks(t *testing.T) {
	yes, no := true, false
	r := newRun(t, 3, events.WorkflowLimits{}, events.Policy{ApproveBetween: true})
	r.finish(events.StopCompleted, one(0, 0))
	if r.s.Phase != PhasePaused || Jobs(r.s) != nil {
		t.Fatalf("phase %s, jobs %v: want paused, waiting on a person only", r.s.Phase, Jobs(r.s))
	}
	r.do(Command{Action: events.ActionApprove, Approved: &yes, Note: "go"})
	if r.s.Phase != PhaseTaskExecute || r.s.Task != 2 {
		t.Fatalf("after approval: %s task %d", r.s.Phase, r.s.Task)
	}
	if _, err := Decide(r.s, Command{Action: events.ActionApprove, Approved: &yes}, r.env()); !errors.As(err, new(*InputError)) {
		t.Fatalf("approval while a task runs: %v, want an InputError", err)
	}
	r.finish(events.StopCompleted, one(0, 0))
	r.do(Command{Action: events.ActionApprove, Approved: &no, Note: "enough"})
	if f := r.s.Finished; f == nil || f.StopReason != events.StopDenied || !strings.Contains(f.Error, "enough") {
		t.Fatalf("after denial: %+v", f)
	}
}

func TestAbortStopsTheRunningTask(t *testing.T) {
	r := newRun(t, 3, events.WorkflowLimits{}, events.Policy{})
	r.finish(events.StopCompleted, one(1, 10))
	r.do(Command{Action: events.ActionAbort, Reason: "wrong repo"})
	f := r.s.Finished
	if f.StopReason != events.StopAborted || len(f.Tasks) != 2 || f.Tasks[1].StopReason != events.StopAborted {
		t.Fatalf("finished %+v", f)
	}
	jobs := Jobs(r.s)
	if len(jobs) != 1 || jobs[0].Abort == nil || jobs[0].Subject != events.ControlSubject("wf-2") {
		t.Fatalf("jobs %+v: want the abort of wf-2", jobs)
	}
	// The aborted task's end arrives later and changes nothing.
	if _, err := Decide(r.s, TaskDone{WorkflowID: "wf", Task: 2, TurnID: "wf-2"}, r.env()); !errors.Is(err, ErrFinished) {
		t.Fatalf("late task end: %v", err)
	}
}

func TestTimeoutTickAndTightenedLimits(t *testing.T) {
	r := newRun(t, 3, events.WorkflowLimits{TimeoutMs: 60_000, Budget: 5}, events.Policy{})
	if ts := Timers(r.s); len(ts) != 1 || !ts[0].At.Equal(t0.Add(time.Minute)) {
		t.Fatalf("timers %+v", ts)
	}
	r.now = t0.Add(20 * time.Second)
	r.finish(events.StopCompleted, one(3, 0))
	sub := Jobs(r.s)[0].Submit
	if sub.Limits == nil || sub.Limits.Budget != 2 || sub.Limits.TimeoutMs != 40_000 {
		t.Fatalf("task 2's limits %+v: want the workflow's 2 calls and 40 s left", sub.Limits)
	}
	r.do(Tick{TurnID: "wf", Kind: events.TimerTurn, At: t0.Add(time.Minute)}) // early: nothing
	if r.s.Done() {
		t.Fatal("a tick before the deadline ended the workflow")
	}
	r.now = t0.Add(time.Minute)
	r.do(Tick{TurnID: "wf", Kind: events.TimerTurn, At: t0.Add(time.Minute)})
	if f := r.s.Finished; f == nil || f.StopReason != events.StopTimeout {
		t.Fatalf("after the deadline: %+v", f)
	}
}

func TestRepeatsAndStrangers(t *testing.T) {
	r := newRun(t, 2, events.WorkflowLimits{}, events.Policy{})
	done := TaskDone{WorkflowID: "wf", Task: 1, TurnID: "wf-1", Finished: events.TurnFinishedData{StopReason: events.StopCompleted}}
	r.do(done)
	if evs := r.do(done); len(evs) != 0 {
		t.Fatalf("a repeated task end wrote %s", types(evs))
	}
	r.do(Gate{})
	if evs := r.do(Gate{}); len(evs) != 0 {
		t.Fatalf("a repeated gate wrote %s", types(evs))
	}
	for _, in := range []Input{
		TaskDone{WorkflowID: "wf", Task: 2, TurnID: "someone-else"},
		TaskDone{WorkflowID: "wf", Task: 3, TurnID: "wf-3"},
		Command{Action: events.ActionReply, CallID: "c1", Answer: "x"},
	} {
		if _, err := Decide(r.s, in, r.env()); !errors.As(err, new(*InputError)) {
			t.Errorf("%+v: %v, want an InputError", in, err)
		}
	}
	if _, err := Decide(New("x"), Gate{}, r.env()); !errors.Is(err, ErrUnknownWorkflow) {
		t.Errorf("gate of no workflow: %v", err)
	}
	if _, err := Decide(r.s, Start{WorkflowID: "wf"}, r.env()); !errors.Is(err, ErrExists) {
		t.Errorf("second start: %v", err)
	}
	// The log folds back to the same state.
	s, err := Fold(r.log)
	if err != nil || s.Phase != r.s.Phase || s.Task != r.s.Task || s.Metrics != r.s.Metrics {
		t.Fatalf("fold: %v %+v", err, s)
	}
}

func TestReject(t *testing.T) {
	r := &run{t: t, s: New("bad"), now: t0}
	r.do(Reject{WorkflowID: "bad", SessionID: "bad", Reason: "no tasks"})
	if f := r.s.Finished; f.StopReason != events.StopRejected || f.Error != "no tasks" {
		t.Fatalf("%+v", f)
	}
}

func TestMovesAreLooplabsTable(t *testing.T) {
	m := lfsm.NewFSM(string(PhaseInit), table, nil)
	phases := append([]string{string(PhaseDone)}, live...)
	for _, p := range phases {
		for _, e := range table {
			m.SetState(p)
			err := m.Event(t.Context(), e.Name)
			dst, ok := index.Next(Phase(p), e.Name)
			var noTr lfsm.NoTransitionError
			switch {
			case ok && err != nil && !errors.As(err, &noTr):
				t.Errorf("%s --%s--> looplab refuses: %v", p, e.Name, err)
			case ok && m.Current() != string(dst):
				t.Errorf("%s --%s--> %s, looplab %s", p, e.Name, dst, m.Current())
			case !ok && err == nil:
				t.Errorf("%s --%s--> looplab allows what the index refuses", p, e.Name)
			}
		}
	}
}

// The diagram in docs/workflow.md is generated from the table.
func TestDiagram(t *testing.T) {
	d, err := Diagram()
	if err != nil {
		t.Fatal(err)
	}
	doc := "# The workflow machine\n\n" +
		"Generated from `internal/workflow`'s transition table by\n" +
		"`go test ./internal/workflow -run Diagram -update`; do not edit by hand.\n\n" +
		"`finish` (workflow.finished) leaves every live state for `done`: the gate's stop, an abort,\n" +
		"the timeout, a denial or a rejection.\n\n" +
		"```mermaid\n" + strings.TrimSpace(d) + "\n```\n"
	// The diagram opens the page; what follows it is written by hand and
	// kept as it is.
	const path = "../../docs/workflow.md"
	got, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	rest := ""
	if _, after, ok := strings.Cut(string(got), "\n```\n"); ok {
		rest = after
	}
	if os.Getenv("UPDATE") != "" {
		if err := os.WriteFile(path, []byte(doc+rest), 0o644); err != nil {
			t.Fatal(err)
		}
		got = []byte(doc + rest)
	}
	if !strings.HasPrefix(string(got), doc) {
		t.Fatalf("docs/workflow.md is out of date: UPDATE=1 go test ./internal/workflow -run Diagram")
	}
}

func gatesOf(log []events.Envelope) string {
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

func (r *run) answer(hook string, d events.GateDecision, reason string) []events.Envelope {
	r.t.Helper()
	return r.do(HookAnswer{WorkflowID: "wf", Task: r.s.Task, Hook: hook, Decision: d, Reason: reason})
}

// TestHooks: the hooks of policy.hooks are asked one at a time after every
// task's checkpoint, the last included, before the gate's rules; their
// answers are recorded with by, repeats change nothing, strangers are input
// errors, and the log verifies.
func TestHooks(t *testing.T) {
	r := newRun(t, 2, events.WorkflowLimits{}, events.Policy{Hooks: []string{"audit", "guard"}, HookTimeoutMs: 1000})
	r.finish(events.StopCompleted, one(1, 10))
	// The gate waits for audit: its job is out, its deadline armed.
	j := Jobs(r.s)
	if len(j) != 1 || j[0].Hook == nil || j[0].ID != "hook:wf:1:audit" || j[0].Subject != "jetloop.jobs.hook.audit" ||
		j[0].Hook.Last || j[0].Hook.Checkpoint.Metrics.ToolCalls != 1 || j[0].Hook.TaskResult.Output != "out 1" ||
		!j[0].Hook.Deadline.Equal(r.now.Add(time.Second)) {
		t.Fatalf("jobs at the gate: %+v", j)
	}
	if tm := Timers(r.s); len(tm) != 1 || tm[0].Timer.Kind != events.TimerHook || tm[0].Timer.CallID != "audit" {
		t.Fatalf("timers at the gate: %+v", tm)
	}
	// guard cannot answer before audit; audit's answer asks guard.
	if _, err := Decide(r.s, HookAnswer{WorkflowID: "wf", Task: 1, Hook: "guard", Decision: events.GateStop}, r.env()); !errors.As(err, new(*InputError)) {
		t.Fatalf("an answer out of order: %v", err)
	}
	r.answer("audit", events.GateContinue, "stored")
	if j := Jobs(r.s); len(j) != 1 || j[0].ID != "hook:wf:1:guard" {
		t.Fatalf("jobs after audit: %+v", j)
	}
	if ev := r.answer("audit", events.GateStop, "again"); len(ev) != 0 {
		t.Fatalf("a repeated answer wrote %s", types(ev))
	}
	r.answer("guard", events.GateContinue, "")
	if r.s.Phase != PhaseTaskExecute || r.s.Task != 2 {
		t.Fatalf("after both hooks: %s task %d", r.s.Phase, r.s.Task)
	}
	if ev := r.do(HookAnswer{WorkflowID: "wf", Task: 1, Hook: "guard", Decision: events.GateStop}); len(ev) != 0 {
		t.Fatalf("an answer about a task gone by wrote %s", types(ev))
	}
	// After the last task too: a stop vetoes the result.
	r.finish(events.StopCompleted, one(1, 10))
	if j := Jobs(r.s); len(j) != 1 || !j[0].Hook.Last {
		t.Fatalf("jobs after the last task: %+v", j)
	}
	r.answer("audit", events.GateContinue, "stored")
	r.answer("guard", events.GateStop, "2 tool calls is too many")
	f := r.s.Finished
	if f == nil || f.StopReason != events.StopDenied || f.Error != "2 tool calls is too many" {
		t.Fatalf("finished %+v", f)
	}
	if got := gatesOf(r.log); got != "2:audit:continue 2:guard:continue 2:rules:continue 3:audit:continue 3:guard:stop" {
		t.Fatalf("gates %s", got)
	}
	if n, err := Verify(r.log); err != nil || n != 5 {
		t.Fatalf("verify: %d gates, %v", n, err)
	}
	// A log whose hook answer was followed by something else does not verify.
	bad := append([]events.Envelope(nil), r.log...)
	fin := bad[len(bad)-1]
	fin.Data = json.RawMessage(strings.Replace(string(fin.Data), `"denied"`, `"completed"`, 1))
	bad[len(bad)-1] = fin
	if _, err := Verify(bad); err == nil {
		t.Fatal("a denial rewritten as completed verifies")
	}
}

// TestHookWaitAndTimeout: a hook's wait pauses for a person, once per gate,
// and the gate goes on after the approval; a hook that does not answer
// stops the workflow with error, or is passed over under on_hook_timeout:
// continue.
func TestHookWaitAndTimeout(t *testing.T) {
	yes := true
	r := newRun(t, 2, events.WorkflowLimits{}, events.Policy{Hooks: []string{"ask", "again"}, ApproveBetween: true})
	r.finish(events.StopCompleted, one(0, 0))
	r.answer("ask", events.GateWait, "look first")
	if r.s.Phase != PhasePaused || Jobs(r.s) != nil {
		t.Fatalf("after a wait: %s, jobs %v", r.s.Phase, Jobs(r.s))
	}
	r.do(Command{Action: events.ActionApprove, Approved: &yes})
	if r.s.PendingHook() != "again" {
		t.Fatalf("after the approval the gate waits for %q", r.s.PendingHook())
	}
	// One wait per gate: a second is taken as continue, and
	// approve_between does not wait again.
	r.answer("again", events.GateWait, "me too")
	if r.s.Phase != PhaseTaskExecute || r.s.Task != 2 {
		t.Fatalf("after the second wait: %s task %d", r.s.Phase, r.s.Task)
	}
	if got := gatesOf(r.log); got != "2:ask:wait 2:again:continue 2:rules:continue" {
		t.Fatalf("gates %s", got)
	}
	if _, err := Verify(r.log); err != nil {
		t.Fatal(err)
	}

	for _, on := range []string{"", events.HookTimeoutContinue} {
		r := newRun(t, 1, events.WorkflowLimits{}, events.Policy{Hooks: []string{"slow"}, OnHookTimeout: on})
		r.finish(events.StopCompleted, one(0, 0))
		tm := Timers(r.s)
		if len(tm) != 1 || !tm[0].At.Equal(r.now.Add(30*time.Second)) {
			t.Fatalf("the default hook timeout: %+v", tm)
		}
		if ev := r.do(Tick(tm[0].Timer)); len(ev) != 0 {
			t.Fatal("a hook timer before its time did something")
		}
		r.now = tm[0].At
		r.do(Tick(tm[0].Timer))
		f := r.s.Finished
		want := events.StopError
		if on == events.HookTimeoutContinue {
			want = events.StopCompleted
		}
		if f == nil || f.StopReason != want || (want == events.StopError) != strings.Contains(f.Error, "hook slow did not answer") {
			t.Fatalf("on_hook_timeout %q: finished %+v", on, f)
		}
		if _, err := Verify(r.log); err != nil {
			t.Fatal(err)
		}
	}
}

// TestHookJobCarriesTheTasksOwnMetrics: a hook is told the task's own
// numbers, as task.finished has them, beside the workflow's sums.
func TestHookJobCarriesTheTasksOwnMetrics(t *testing.T) {
	r := newRun(t, 2, events.WorkflowLimits{}, events.Policy{Hooks: []string{"audit"}})
	r.finish(events.StopCompleted, one(3, 100))
	r.answer("audit", events.GateContinue, "")
	task := events.Metrics{Steps: 2, ToolCalls: 5, ModelCalls: 2, InputTokens: 70, OutputTokens: 9, DurationMs: 40}
	r.finish(events.StopCompleted, task)
	j := Jobs(r.s)
	if len(j) != 1 || j[0].Hook == nil {
		t.Fatalf("jobs at the gate: %+v", j)
	}
	if got := j[0].Hook.TaskResult.Metrics; got != task {
		t.Fatalf("the task's metrics in the job: %+v, want %+v", got, task)
	}
	if m := j[0].Hook.Checkpoint.Metrics; m.ToolCalls != 8 || m.Tasks != 2 || j[0].Hook.Checkpoint.Task != 2 || j[0].Hook.Ended != nil {
		t.Fatalf("the checkpoint in the job: %+v", j[0].Hook.Checkpoint)
	}
}

// TestFinalCheckpointReachesEveryHook: however a workflow ends at a
// checkpoint, each hook that did not decide there is handed that
// checkpoint in a final job that says how the workflow ended; a hook that
// answered is not asked twice, and a hook's error ends the workflow error.
func TestFinalCheckpointReachesEveryHook(t *testing.T) {
	hooks := events.Policy{Hooks: []string{"audit", "guard"}, HookTimeoutMs: 1000}
	finals := func(s *State) string {
		var out []string
		for _, j := range FinalJobs(s) {
			h := j.Hook
			if h == nil || h.Ended == nil || h.Ended.StopReason != s.Finished.StopReason || h.Ended.Error != s.Finished.Error ||
				h.Checkpoint != s.Checkpoint || h.Task != s.Task || j.Subject != events.HookSubject(strings.TrimPrefix(j.ID, fmt.Sprintf("hook-final:wf:%d:", s.Task))) {
				t.Fatalf("a final job %+v (ended %+v) of %+v", j, h.Ended, s.Finished)
			}
			out = append(out, j.ID)
		}
		return strings.Join(out, " ")
	}
	cases := []struct {
		name   string
		policy events.Policy
		limits events.WorkflowLimits
		end    func(r *run)
		stop   events.StopReason
		error  string // a part of workflow.finished's error
		finals string
	}{
		{"timed out at the gate", hooks, events.WorkflowLimits{TimeoutMs: 100}, func(r *run) {
			r.do(TaskDone{WorkflowID: "wf", Task: 1, TurnID: "wf-1", Finished: events.TurnFinishedData{StopReason: events.StopCompleted, Metrics: one(1, 1)}})
			r.now = r.now.Add(time.Second)
			r.do(Gate{})
		}, events.StopTimeout, "wall clock", "hook-final:wf:1:audit hook-final:wf:1:guard"},
		{"timed out while a hook thinks", hooks, events.WorkflowLimits{TimeoutMs: 500}, func(r *run) {
			r.finish(events.StopCompleted, one(1, 1))
			r.answer("audit", events.GateContinue, "stored")
			r.now = r.s.Deadline()
			r.do(Tick{TurnID: "wf", Kind: events.TimerTurn, At: r.now})
		}, events.StopTimeout, "timeout of", "hook-final:wf:1:guard"},
		{"a rejected task", hooks, events.WorkflowLimits{}, func(r *run) {
			r.finish(events.StopRejected, events.Metrics{})
		}, events.StopError, "was rejected", "hook-final:wf:1:audit hook-final:wf:1:guard"},
		{"the first hook stops", hooks, events.WorkflowLimits{}, func(r *run) {
			r.finish(events.StopCompleted, one(1, 1))
			r.answer("audit", events.GateStop, "no")
		}, events.StopDenied, "no", "hook-final:wf:1:guard"},
		{"the first hook fails", hooks, events.WorkflowLimits{}, func(r *run) {
			r.finish(events.StopCompleted, one(1, 1))
			r.answer("audit", events.GateError, "disk full")
		}, events.StopError, "hook audit failed: disk full", "hook-final:wf:1:guard"},
		{"a person denies after a hook's wait", hooks, events.WorkflowLimits{}, func(r *run) {
			no := false
			r.finish(events.StopCompleted, one(1, 1))
			r.answer("audit", events.GateWait, "look")
			r.do(Command{Action: events.ActionApprove, Approved: &no})
		}, events.StopDenied, "denied", "hook-final:wf:1:guard"},
		{"aborted while a hook thinks", hooks, events.WorkflowLimits{}, func(r *run) {
			r.finish(events.StopCompleted, one(1, 1))
			r.do(Command{Action: events.ActionAbort})
		}, events.StopAborted, "aborted", "hook-final:wf:1:audit hook-final:wf:1:guard"},
		{"the first hook never answers", hooks, events.WorkflowLimits{}, func(r *run) {
			r.finish(events.StopCompleted, one(1, 1))
			r.now = r.s.HookDeadline()
			r.do(Tick{TurnID: "wf", Kind: events.TimerHook, CallID: "audit", At: r.now})
		}, events.StopError, "hook audit did not answer", "hook-final:wf:1:guard"},
		{"completed: every hook was asked", hooks, events.WorkflowLimits{}, func(r *run) {
			for range 2 {
				r.finish(events.StopCompleted, one(1, 1))
				r.answer("audit", events.GateContinue, "")
				r.answer("guard", events.GateContinue, "")
			}
		}, events.StopCompleted, "", ""},
		{"aborted while a task runs: its checkpoint is not made", hooks, events.WorkflowLimits{}, func(r *run) {
			r.do(Command{Action: events.ActionAbort})
		}, events.StopAborted, "aborted", ""},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			r := newRun(t, 2, c.limits, c.policy)
			c.end(r)
			f := r.s.Finished
			if f == nil || f.StopReason != c.stop || !strings.Contains(f.Error, c.error) {
				t.Fatalf("finished %+v, want %s with %q", f, c.stop, c.error)
			}
			if got := finals(r.s); got != c.finals {
				t.Fatalf("final jobs %q, want %q", got, c.finals)
			}
			if _, err := Verify(r.log); err != nil {
				t.Fatal(err)
			}
		})
	}
}

// TestHookErrorIsNotADenial: a hook's error answer is recorded as its stop
// and ends the workflow error with its message; a rewritten finish does not
// verify.
func TestHookErrorIsNotADenial(t *testing.T) {
	r := newRun(t, 1, events.WorkflowLimits{}, events.Policy{Hooks: []string{"audit"}})
	r.finish(events.StopCompleted, one(1, 1))
	r.answer("audit", events.GateError, "cannot write checkpoints.jsonl: disk full")
	f := r.s.Finished
	if f == nil || f.StopReason != events.StopError || f.Error != "hook audit failed: cannot write checkpoints.jsonl: disk full" {
		t.Fatalf("finished %+v", f)
	}
	if got := gatesOf(r.log); got != "2:audit:stop" {
		t.Fatalf("gates %s", got)
	}
	if n, err := Verify(r.log); err != nil || n != 1 {
		t.Fatalf("verify: %d, %v", n, err)
	}
	bad := append([]events.Envelope(nil), r.log...)
	fin := bad[len(bad)-1]
	fin.Data = json.RawMessage(strings.Replace(string(fin.Data), `"error"`, `"denied"`, 1))
	bad[len(bad)-1] = fin
	if _, err := Verify(bad); err == nil {
		t.Fatal("a hook's failure rewritten as a denial verifies")
	}
}

// TestSeedMap: docs/workflow.md's seed map names every name of the seeds
// (testdata/seed_names.txt, written from them) in a table's first column,
// once, and names nothing that is not a seed's.
func TestSeedMap(t *testing.T) {
	doc, err := os.ReadFile("../../docs/workflow.md")
	if err != nil {
		t.Fatal(err)
	}
	_, section, ok := strings.Cut(string(doc), "\n## Seed map\n")
	if !ok {
		t.Fatal("docs/workflow.md has no seed map")
	}
	// A first column is names in backquotes, separated by ", ".
	mapped := map[string]int{}
	for line := range strings.Lines(section) {
		if !strings.HasPrefix(line, "| `") {
			continue
		}
		first := strings.Split(line, "|")[1]
		for name := range strings.SplitSeq(strings.TrimSpace(first), ", ") {
			mapped[strings.Trim(name, "`")]++
		}
	}
	names, err := os.ReadFile("testdata/seed_names.txt")
	if err != nil {
		t.Fatal(err)
	}
	seed := map[string]bool{}
	for line := range strings.Lines(string(names)) {
		name := strings.TrimSpace(line)
		if name == "" || strings.HasPrefix(name, "#") {
			continue
		}
		if seed[name] {
			t.Errorf("%s is listed twice", name)
		}
		seed[name] = true
		switch mapped[name] {
		case 0:
			t.Errorf("the seed map does not say where %s lives", name)
		case 1:
		default:
			t.Errorf("the seed map has %d rows for %s", mapped[name], name)
		}
	}
	for name := range mapped {
		if !seed[name] {
			t.Errorf("the seed map names %q, which is no seed's name (testdata/seed_names.txt)", name)
		}
	}
	if len(seed) < 150 {
		t.Fatalf("only %d seed names", len(seed))
	}
}
