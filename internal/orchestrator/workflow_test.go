package orchestrator_test

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/jetloop/jetloop/internal/bus"
	"github.com/jetloop/jetloop/internal/orchestrator"

	"github.com/jetloop/jetloop/internal/events"
)

// echoTask is a task whose scripted model calls echo once, then answers.
func echoTask(text string) events.Task {
	return events.Task{Input: json.RawMessage(fmt.Sprintf("%q", text)), Model: "script",
		Script: json.RawMessage(fmt.Sprintf(`{"responses":[{"tool_calls":[{"name":"echo","arguments":{"text":%q}}]},{"text":%q}]}`, text, "done: "+text))}
}

func (h *harness) submitWorkflow(w events.WorkflowSubmit) {
	h.t.Helper()
	data, err := json.Marshal(w)
	if err != nil {
		h.t.Fatal(err)
	}
	h.publish(events.SubjectWorkflow, data, w.WorkflowID)
}

func (h *harness) workflowFinished(id string) ([]events.Envelope, events.WorkflowFinishedData) {
	h.t.Helper()
	h.waitFor("workflow "+id+" to finish", func() bool { return h.last(id) == events.WorkflowFinished })
	log := h.events(id)
	var f events.WorkflowFinishedData
	if err := json.Unmarshal(log[len(log)-1].Data, &f); err != nil {
		h.t.Fatal(err)
	}
	return log, f
}

func TestWorkflowRunsItsTasks(t *testing.T) {
	h := newHarness(t).start()
	h.submitWorkflow(events.WorkflowSubmit{WorkflowID: "wf3", Agent: "General",
		Tasks: []events.Task{echoTask("one"), echoTask("two"), echoTask("three")}})
	log, fin := h.workflowFinished("wf3")
	if fin.StopReason != events.StopCompleted || fin.Output != "done: three" || len(fin.Tasks) != 3 {
		t.Fatalf("finished %+v", fin)
	}
	// Every checkpoint is the exact sum of the turns' metrics so far, but
	// for duration_ms: the wall clock since workflow.started.
	var sum events.WorkflowMetrics
	var last events.WorkflowCheckpointedData
	n := 0
	for _, e := range log {
		if e.Type != events.WorkflowCheckpointed {
			continue
		}
		n++
		_, tf := h.finished(fmt.Sprintf("wf3-%d", n))
		sum.Add(tf.Metrics)
		if err := json.Unmarshal(e.Data, &last); err != nil {
			t.Fatal(err)
		}
		sum.DurationMs = e.Time.Sub(log[0].Time).Milliseconds()
		if last.Task != n || last.Metrics != sum {
			t.Fatalf("checkpoint %d: %+v, want %+v", n, last.Metrics, sum)
		}
	}
	sum.DurationMs = log[len(log)-1].Time.Sub(log[0].Time).Milliseconds()
	if n != 3 || fin.Metrics != sum || sum.ToolCalls != 3 {
		t.Fatalf("%d checkpoints, finished metrics %+v, sum %+v", n, fin.Metrics, sum)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	kv, err := h.js.KeyValue(ctx, bus.BucketCheckpoints)
	if err != nil {
		t.Fatal(err)
	}
	entry, err := kv.Get(ctx, "wf3")
	if err != nil {
		t.Fatal(err)
	}
	var stored events.WorkflowCheckpointedData
	if err := json.Unmarshal(entry.Value(), &stored); err != nil || stored != last {
		t.Fatalf("KV holds %s, want the last checkpoint %+v", entry.Value(), last)
	}
	// Tasks share the session: the third task's turn saw the first two.
	started := h.events("wf3-3")[0]
	var d events.TurnStartedData
	_ = json.Unmarshal(started.Data, &d)
	if started.SessionID != "wf3" || d.Workflow == nil || d.Workflow.Task != 3 || len(d.HistoryTurns) != 2 {
		t.Fatalf("task 3 started %+v in session %s", d, started.SessionID)
	}
	if h.calls.max() > 1 {
		t.Fatal("a tool call ran twice")
	}
}

// TestWorkflowKeepTasks: under keep_tasks 2, task 4's history is task 1's
// conversation, one note for task 2, and task 3's.
func TestWorkflowKeepTasks(t *testing.T) {
	h := newHarness(t).start()
	h.submitWorkflow(events.WorkflowSubmit{WorkflowID: "wfk", Agent: "General",
		Tasks:  []events.Task{echoTask("one"), echoTask("two"), echoTask("three"), echoTask("four")},
		Policy: &events.Policy{KeepTasks: 2}})
	if _, fin := h.workflowFinished("wfk"); fin.StopReason != events.StopCompleted {
		t.Fatalf("finished %+v", fin)
	}
	var d events.TurnStartedData
	if err := json.Unmarshal(h.events("wfk-4")[0].Data, &d); err != nil {
		t.Fatal(err)
	}
	// Each echo task's conversation is 4 messages: its input, the call,
	// the result and the answer.
	if strings.Join(d.HistoryTurns, " ") != "wfk-1 wfk-3" || d.History != 4+1+4 {
		t.Fatalf("task 4's history: %d messages of turns %v, want 9 (tasks 1 and 3, and the note)", d.History, d.HistoryTurns)
	}
	if err := json.Unmarshal(h.events("wfk-3")[0].Data, &d); err != nil {
		t.Fatal(err)
	}
	if strings.Join(d.HistoryTurns, " ") != "wfk-1 wfk-2" || d.History != 8 {
		t.Fatalf("task 3's history: %d messages of turns %v, want 8 (tasks 1 and 2, nothing left out)", d.History, d.HistoryTurns)
	}
}

func TestWorkflowStops(t *testing.T) {
	h := newHarness(t).start()
	h.submitWorkflow(events.WorkflowSubmit{WorkflowID: "capped", Agent: "General",
		Tasks: []events.Task{echoTask("a"), echoTask("b"), echoTask("c")}, Limits: &events.WorkflowLimits{MaxTasks: 2}})
	h.submitWorkflow(events.WorkflowSubmit{WorkflowID: "spent", Agent: "General",
		Tasks: []events.Task{echoTask("a"), echoTask("b"), echoTask("c")}, Limits: &events.WorkflowLimits{Budget: 1}})
	if _, f := h.workflowFinished("capped"); f.StopReason != events.StopMaxTasks || len(f.Tasks) != 2 {
		t.Errorf("max_tasks: %+v", f)
	}
	if _, f := h.workflowFinished("spent"); f.StopReason != events.StopBudget || len(f.Tasks) != 1 {
		t.Errorf("budget: %+v", f)
	}

	// An abort stops the running task's turn too.
	h.submitWorkflow(events.WorkflowSubmit{WorkflowID: "asking", Agent: "Reader", Tasks: []events.Task{{
		Input: json.RawMessage(`"ask"`), Model: "script",
		Script: json.RawMessage(`{"responses":[{"tool_calls":[{"name":"ask_user","arguments":{"question":"?"}}]},{"text":"ok"}]}`)}}})
	h.waitType("asking-1", events.TurnPaused)
	h.control("asking", events.Control{Action: events.ActionAbort, Reason: "enough"})
	if _, f := h.workflowFinished("asking"); f.StopReason != events.StopAborted {
		t.Errorf("abort: %+v", f)
	}
	if _, f := h.finished("asking-1"); f.StopReason != events.StopAborted {
		t.Errorf("the task's turn: %s", f.StopReason)
	}

	// The workflow's wall clock ends it at once, and the running task's
	// turn with it: aborted by the workflow, or timed out by itself, since
	// the time a task is given is what the workflow has left. The two
	// deadlines are a start apart (the task's turn.started is a moment
	// after its task.started), and either may be handled first.
	h.submitWorkflow(events.WorkflowSubmit{WorkflowID: "slow", Agent: "Reader", Limits: &events.WorkflowLimits{TimeoutMs: 300},
		Tasks: []events.Task{{Input: json.RawMessage(`"ask"`), Model: "script",
			Script: json.RawMessage(`{"responses":[{"tool_calls":[{"name":"ask_user","arguments":{"question":"?"}}]},{"text":"ok"}]}`)}}})
	if _, f := h.workflowFinished("slow"); f.StopReason != events.StopTimeout || len(f.Tasks) != 1 {
		t.Errorf("timeout: %+v", f)
	}
	if _, f := h.finished("slow-1"); f.StopReason != events.StopAborted && f.StopReason != events.StopTimeout {
		t.Errorf("the timed-out workflow's task: %s", f.StopReason)
	}

	// Approval between tasks pauses, durably, until a person answers.
	h.submitWorkflow(events.WorkflowSubmit{WorkflowID: "gated", Agent: "General",
		Tasks: []events.Task{echoTask("a"), echoTask("b")}, Policy: &events.Policy{ApproveBetween: true}})
	h.waitType("gated", events.WorkflowGated)
	yes := true
	h.control("gated", events.Control{Action: events.ActionApprove, Approved: &yes})
	if _, f := h.workflowFinished("gated"); f.StopReason != events.StopCompleted || len(f.Tasks) != 2 {
		t.Errorf("approved: %+v", f)
	}
}

func TestBadWorkflowsAreRejected(t *testing.T) {
	h := newHarness(t).start()
	h.submit(script("taken", "General", `{"responses":[{"text":"hi"}]}`))
	h.finished("taken")
	for _, tt := range []struct{ id, body, want string }{
		{"notjson", `{"workflow_id":"notjson",`, ""},
		{"empty", `{"workflow_id":"empty","tasks":[]}`, "tasks"},
		{"stranger", `{"workflow_id":"stranger","tasks":[{"input":"x","agent":"Nobody"}]}`, "Nobody"},
		{"taken", `{"workflow_id":"taken","agent":"General","tasks":[{"input":"x"}]}`, "turn"},
		{"toomany", `{"workflow_id":"toomany","agent":"General","tasks":[` + strings.Repeat(`{"input":"x"},`, events.MaxTasksCeiling) + `{"input":"x"}]}`, "maxItems"},
	} {
		h.publish(events.SubjectWorkflow, []byte(tt.body), "wf-"+tt.id)
		h.waitFor("dead letter of "+tt.id, func() bool {
			for key, reasons := range h.deadBySubject() {
				if strings.HasPrefix(key, "jetloop.dead.workflow ") && strings.Contains(strings.Join(reasons, " "), tt.want) {
					return true
				}
			}
			return false
		})
	}
	if _, f := h.workflowFinished("empty"); f.StopReason != events.StopRejected {
		t.Fatalf("empty: %+v", f)
	}
	if h.last("taken") != events.TurnFinished {
		t.Fatal("the turn's log changed")
	}
	// A turn submission that claims a task no workflow started is refused.
	sub := script("forged-1", "General", `{"responses":[{"text":"hi"}]}`)
	sub.Workflow = &events.WorkflowRef{WorkflowID: "forged", Task: 1}
	h.submit(sub)
	if _, f := h.finished("forged-1"); f.StopReason != events.StopRejected {
		t.Fatalf("forged task: %s", f.StopReason)
	}
	// A control a workflow cannot take now is a dead letter with the
	// reason, and the workflow goes on.
	h.submitWorkflow(events.WorkflowSubmit{WorkflowID: "busy", Agent: "Reader", Tasks: []events.Task{{
		Input: json.RawMessage(`"ask"`), Model: "script",
		Script: json.RawMessage(`{"responses":[{"tool_calls":[{"name":"ask_user","arguments":{"question":"?"}}]},{"text":"ok"}]}`)}}})
	h.waitType("busy-1", events.TurnPaused)
	yes := true
	h.control("busy", events.Control{Action: events.ActionApprove, Approved: &yes})
	h.control("busy", events.Control{Action: events.ActionReply, CallID: "c", Answer: "x"})
	for _, want := range []string{"waits for no approval", "takes abort and approve, not reply"} {
		h.waitFor("the refused control's dead letter", func() bool {
			return strings.Contains(strings.Join(h.deadBySubject()["jetloop.dead.control jetloop.inbox.control.busy"], " "), want)
		})
	}
	if h.last("busy") != events.TaskStarted {
		t.Fatalf("the refused controls moved the workflow: %s", h.last("busy"))
	}
	h.control("busy", events.Control{Action: events.ActionAbort})
	h.workflowFinished("busy")
}

// TestWorkflowTaskTurnTaken: a client submitted a plain turn under the id
// a workflow's task would take, the first task's or the last's. The task
// cannot start under it: the workflow hears so at once and stops with
// error naming that turn, instead of waiting for a turn that is not its
// task's or reporting the task done; the client's turn is left as it was.
func TestWorkflowTaskTurnTaken(t *testing.T) {
	h := newHarness(t).start()
	for _, squat := range []struct {
		wf   string
		task int
	}{{"pre", 1}, {"wfv", 2}} {
		turn := fmt.Sprintf("%s-%d", squat.wf, squat.task)
		h.submit(script(turn, "General", `{"responses":[{"text":"mine"}]}`))
		h.finished(turn)
		before := len(h.events(turn))
		h.submitWorkflow(events.WorkflowSubmit{WorkflowID: squat.wf, Agent: "General", Tasks: []events.Task{echoTask("a"), echoTask("b")}})
		_, f := h.workflowFinished(squat.wf)
		if f.StopReason != events.StopError || len(f.Tasks) != squat.task || f.Tasks[squat.task-1].StopReason != events.StopRejected {
			t.Fatalf("%s finished %+v", squat.wf, f)
		}
		if !strings.Contains(f.Error, "already exists") || !strings.Contains(f.Error, turn) {
			t.Errorf("the workflow's error %q does not say why", f.Error)
		}
		if n := len(h.events(turn)); n != before {
			t.Fatalf("the client's turn went from %d to %d events", before, n)
		}
	}
}

// TestWorkflowStartTooBigIsRejected: a submission the inbox takes but whose
// workflow.started (the submission's tasks plus the envelope) cannot be
// stored is rejected once, with the reason, not retried ten times.
func TestWorkflowStartTooBigIsRejected(t *testing.T) {
	h := newHarness(t).start()
	room := int(h.nc.MaxPayload())
	w := events.WorkflowSubmit{WorkflowID: "huge", Agent: "General", Tasks: []events.Task{{Input: json.RawMessage(`""`)}}}
	empty, _ := json.Marshal(w)
	w.Tasks[0].Input = json.RawMessage(fmt.Sprintf("%q", strings.Repeat("x", room-len(empty)-64)))
	data, _ := json.Marshal(w)
	if len(data) >= room {
		t.Fatalf("the submission is %d bytes, the server takes %d", len(data), room)
	}
	h.publish(events.SubjectWorkflow, data, "huge")
	log, f := h.workflowFinished("huge")
	if f.StopReason != events.StopRejected || len(log) != 1 {
		t.Fatalf("finished %+v after %d events", f, len(log))
	}
	h.waitFor("the dead letter", func() bool {
		return len(h.deadBySubject()["jetloop.dead.workflow jetloop.inbox.workflow"]) == 1
	})
}

// countTask is a task whose turn calls count once with n, then answers.
func countTask(n int) events.Task {
	return events.Task{Input: json.RawMessage(fmt.Sprintf(`"count %d"`, n)), Model: "script",
		Script: json.RawMessage(fmt.Sprintf(`{"responses":[{"tool_calls":[{"name":"count","arguments":{"n":%d}}]},{"text":"counted %d"}]}`, n, n))}
}

// TestWorkflowSurvivesCrashes stops the orchestrator abruptly after it
// appended (or published for) its nth input — workflow inputs and task turns'
// inputs alike — before acknowledging it; a fresh orchestrator finishes the
// workflow: every task ran once, no tool call ran twice, every log verifies.
func TestWorkflowSurvivesCrashes(t *testing.T) {
	for _, stage := range []string{orchestrator.StageAppended, orchestrator.StagePublished} {
		for n := 1; n <= 16; n++ {
			t.Run(fmt.Sprintf("%s/input-%d", stage, n), func(t *testing.T) {
				h := newHarness(t)
				h.worker()
				crashed, kill := h.orchestratorCrashing(stage, n)
				id := fmt.Sprintf("wf-crash-%s-%d", stage, n)
				h.submitWorkflow(events.WorkflowSubmit{WorkflowID: id, Agent: "General",
					Tasks: []events.Task{countTask(1), countTask(2), countTask(3)}})
				select {
				case <-crashed:
					kill()
					h.orchestrator()
				case <-time.After(30 * time.Second):
					t.Fatal("never reached the crash")
				}
				_, fin := h.workflowFinished(id)
				if fin.StopReason != events.StopCompleted || fin.Metrics.Tasks != 3 || fin.Metrics.ToolCalls != 3 {
					t.Fatalf("finished %+v", fin)
				}
				if got := h.calls.max(); got != 1 {
					t.Fatalf("a tool call ran %d times", got)
				}
			})
		}
	}
}

// TestWorkflowTasksReadTheirWorkflowsLogOnce: a task's turn reads its
// workflow's log once as it starts (that the workflow started it), not a
// second time as a turn of the session that might be history: the history
// remembers a workflow's log as no turn's. Before, every task of a
// workflow read it twice.
func TestWorkflowTasksReadTheirWorkflowsLogOnce(t *testing.T) {
	h := newHarness(t)
	h.worker()
	// An input delivered again (its ack wait passed on a loaded machine)
	// would read the log again: none is.
	h.orchestrator(orchestrator.WithAckWait(10 * time.Minute))
	const tasks = 6
	sub, err := h.nc.SubscribeSync("$JS.API.DIRECT.GET." + events.StreamEvents + ".jetloop.events.*.wfread")
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Unsubscribe()
	if err := h.nc.Flush(); err != nil {
		t.Fatal(err)
	}
	var list []events.Task
	for i := range tasks {
		list = append(list, echoTask(fmt.Sprint(i)))
	}
	h.submitWorkflow(events.WorkflowSubmit{WorkflowID: "wfread", Agent: "General", Tasks: list})
	if _, f := h.workflowFinished("wfread"); f.StopReason != events.StopCompleted {
		t.Fatalf("finished %+v", f)
	}
	// The orchestrator's reads were sent before the end they led to, and
	// each came here before this connection's read of that end did. This
	// test's own reads (waiting for the end) are told by their reply
	// subjects, which are this connection's.
	pending, _, err := sub.Pending()
	if err != nil {
		t.Fatal(err)
	}
	mine := h.nc.NewRespInbox()
	mine = mine[:strings.LastIndexByte(mine, '.')+1]
	reads := 0
	for range pending {
		m, err := sub.NextMsg(time.Second)
		if err != nil {
			t.Fatal(err)
		}
		if !strings.HasPrefix(m.Reply, mine) {
			reads++
		}
	}
	// One per task, one more by the first task's history, and one by the
	// workflow's start (its log was empty then).
	if reads == 0 || reads > tasks+2 {
		t.Fatalf("the orchestrator read the workflow's log %d times for %d tasks", reads, tasks)
	}
	h.checkAllLogs()
}
