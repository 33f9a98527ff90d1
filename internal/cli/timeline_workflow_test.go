package cli

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/jetloop/jetloop/internal/events"
	"github.com/jetloop/jetloop/internal/timeline"
)

// gatedWorkflow is the workflow the timeline tests run: three tasks with
// one, two and no tool calls, a person approving between them.
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

// runGatedWorkflow runs gatedWorkflow to its end, approving between its
// tasks from the command line, and returns the workflow's log and its
// tasks' logs. Each waiting gate is passed to waiting, if given, before the
// approval.
func runGatedWorkflow(t *testing.T, e *env, waiting ...func(task int)) (string, []events.Envelope, map[string][]events.Envelope) {
	t.Helper()
	const id = "wf-html"
	e.mustRun(ExitOK, "workflow", "run", e.script("wf-html.yaml", gatedWorkflow))
	for task := 2; task <= 3; task++ {
		e.waitFor(fmt.Sprintf("the gate before task %d", task), func() bool {
			last, ok := e.last(id)
			return ok && last.Type == events.WorkflowGated && last.Step == task
		})
		for _, w := range waiting {
			w(task)
		}
		e.mustRun(ExitOK, "workflow", "approve", "--note", fmt.Sprintf("go on with %d", task), id)
	}
	e.waitType(id, events.WorkflowFinished)
	log := e.log(id)
	turns := map[string][]events.Envelope{}
	for i := 1; i <= 3; i++ {
		turn := fmt.Sprintf("%s-%d", id, i)
		turns[turn] = e.log(turn)
	}
	return id, log, turns
}

// TestReplayHTMLWorkflow runs a workflow on the embedded server and writes
// its page with replay --html: one band per task, holding exactly that
// task's turn's steps and tool calls inside its span; the workflow's own
// events as marks, the gate's waits as spans, the finish with the summed
// metrics; every log embedded unchanged; nothing loaded from elsewhere. The
// same page comes from a file of concatenated exports.
func TestReplayHTMLWorkflow(t *testing.T) {
	e := newEnv(t)
	id, log, turns := runGatedWorkflow(t, e)
	out := filepath.Join(t.TempDir(), "wf.html")
	stdout := e.mustRun(ExitOK, "replay", "--html", out, id)
	wt, page := checkWorkflowPage(t, out, log, turns)
	if want := fmt.Sprintf("wrote %s: %d events, 3 tasks, %d steps\n", out, len(log), wt.Steps()); stdout != want {
		t.Fatalf("stdout %q, want %q", stdout, want)
	}

	// The marks: every workflow event, in order, with its task; a gate's
	// with who decided.
	if len(wt.Marks) != len(log) {
		t.Fatalf("%d marks for %d events", len(wt.Marks), len(log))
	}
	var gates []string
	for i, m := range wt.Marks {
		if m.Type != log[i].Type || m.Seq != log[i].Seq || m.Text == "" {
			t.Errorf("mark %d: %+v, event %s", i, m, log[i].Type)
		}
		if m.Type == events.WorkflowGated {
			gates = append(gates, fmt.Sprintf("%d:%s:%s", m.Task, m.Decision, m.By))
		}
	}
	if got := strings.Join(gates, " "); got != "2:wait:approval 3:wait:approval 4:stop:rules" {
		t.Errorf("gate marks %q", got)
	}
	// Two waits for a person, each between the tasks it separates.
	if len(wt.Waits) != 2 {
		t.Fatalf("waits %+v", wt.Waits)
	}
	for i, w := range wt.Waits {
		before, after := wt.Tasks[i], wt.Tasks[i+1]
		if w.Open || w.Task != i+2 || w.Approved == nil || !*w.Approved || w.Note != fmt.Sprintf("go on with %d", i+2) ||
			w.StartMs < before.EndMs || w.EndMs > after.StartMs {
			t.Errorf("wait %d: %+v between task %v..%v and %v..", i, w, before.StartMs, before.EndMs, after.StartMs)
		}
	}
	var fin events.WorkflowFinishedData
	_ = json.Unmarshal(log[len(log)-1].Data, &fin)
	if f := wt.Finished; f == nil || f.StopReason != events.StopCompleted || f.Metrics != fin.Metrics || wt.Metrics != fin.Metrics ||
		f.Metrics.Tasks != 3 || f.Metrics.ToolCalls != 3 || wt.Running {
		t.Fatalf("finished %+v, metrics %+v, want %+v", f, wt.Metrics, fin.Metrics)
	}
	for _, want := range []string{`id="status">completed<`, "Stopped: completed", `<details class="task-events" id="task-2-log">`,
		`<table class="events" id="task-2-events">`, `<tr id="task-2-event-1"`, `<tr data-task="3" data-turn="wf-html-3">`} {
		if !strings.Contains(page, want) {
			t.Errorf("the page lacks %q", want)
		}
	}

	// replay --html --file: the workflow's export and its turns' exports,
	// concatenated, give the same page.
	var all strings.Builder
	all.WriteString(e.mustRun(ExitOK, "export", id))
	for i := 1; i <= 3; i++ {
		all.WriteString(e.mustRun(ExitOK, "export", fmt.Sprintf("%s-%d", id, i)))
	}
	file := e.script("wf.jsonl", all.String())
	fromFile := filepath.Join(t.TempDir(), "wf-file.html")
	e.mustRun(ExitOK, "replay", "--html", fromFile, "--file", file)
	wf, _ := checkWorkflowPage(t, fromFile, log, turns)
	a, _ := json.Marshal(wt)
	b, _ := json.Marshal(wf)
	if !bytes.Equal(a, b) {
		t.Error("the page from the file draws another timeline than the page from the server")
	}
	// Only the workflow's export: its bands are drawn, without steps.
	only := e.script("wf-only.jsonl", e.mustRun(ExitOK, "export", id))
	e.mustRun(ExitOK, "replay", "--html", fromFile, "--file", only)
	wf, _ = checkWorkflowPage(t, fromFile, log, map[string][]events.Envelope{})
	for _, k := range wf.Tasks {
		if k.Turn != nil || k.Missing == "" || k.StopReason != events.StopCompleted {
			t.Errorf("task %d without its log: %+v", k.Task, k)
		}
	}
}

// checkWorkflowPage reads the page at path and checks it draws the workflow
// of log with the tasks' logs in turns: one band per task, each holding its
// turn's steps and calls inside its span, every log embedded unchanged,
// nothing loaded from elsewhere. It returns the page's timeline and text.
func checkWorkflowPage(t *testing.T, path string, log []events.Envelope, turns map[string][]events.Envelope) (*timeline.Workflow, string) {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	page := string(data)
	checkSelfContained(t, page)
	// Links and the script find elements by id: no two share one.
	seen := map[string]bool{}
	for _, m := range regexp.MustCompile(`\sid="([^"]*)"`).FindAllStringSubmatch(scriptBlock.ReplaceAllString(page, ""), -1) {
		if seen[m[1]] {
			t.Errorf("two elements have the id %q", m[1])
		}
		seen[m[1]] = true
	}
	blocks := map[string]string{}
	for _, m := range scriptBlock.FindAllStringSubmatch(page, -1) {
		blocks[m[1]] = m[2]
	}
	if len(blocks) != 2 || blocks["timeline-data"] == "" || blocks["workflow-events"] == "" {
		t.Fatalf("the page embeds %d JSON blocks, want timeline-data and workflow-events", len(blocks))
	}
	var wt timeline.Workflow
	if err := json.Unmarshal([]byte(blocks["timeline-data"]), &wt); err != nil {
		t.Fatalf("timeline-data: %v", err)
	}
	var logs timeline.WorkflowLogs
	if err := json.Unmarshal([]byte(blocks["workflow-events"]), &logs); err != nil {
		t.Fatalf("workflow-events: %v", err)
	}
	want, _ := json.Marshal(timeline.WorkflowLogs{Workflow: log, Turns: turns})
	got, _ := json.Marshal(logs)
	if !bytes.Equal(got, want) {
		t.Error("the embedded logs differ from the logs")
	}
	if wt.WorkflowID != log[0].TurnID || len(wt.Rows) != len(log) || wt.TaskCount != 3 {
		t.Fatalf("workflow %q, %d rows, %d tasks", wt.WorkflowID, len(wt.Rows), wt.TaskCount)
	}
	for _, e := range log {
		if !strings.Contains(page, `<tr id="event-`+itoa(e.Seq)+`"`) {
			t.Errorf("no table row for the workflow's event %d", e.Seq)
		}
	}
	if len(wt.Tasks) != 3 {
		t.Fatalf("%d task bands, want 3", len(wt.Tasks))
	}
	for i, k := range wt.Tasks {
		turn := fmt.Sprintf("%s-%d", wt.WorkflowID, i+1)
		if k.Task != i+1 || k.TurnID != turn || k.Open || k.StartMs >= k.EndMs || k.Metrics == nil || k.Agent != "Refactorer" ||
			k.Input == "" {
			t.Errorf("task band %d: %+v", i+1, k)
		}
		tlog, ok := turns[turn]
		if !ok {
			continue
		}
		if k.Turn == nil {
			t.Errorf("task %d: no turn drawn (%s)", k.Task, k.Missing)
			continue
		}
		// The band holds exactly its turn's steps and calls, inside its span.
		steps, calls := stepsAndCalls(tlog)
		if len(k.Turn.Steps) != len(steps) || k.Metrics.Steps != len(steps) {
			t.Errorf("task %d: %d steps drawn, its turn has %d (metrics %d)", k.Task, len(k.Turn.Steps), len(steps), k.Metrics.Steps)
		}
		for _, s := range k.Turn.Steps {
			if s.StartMs < k.StartMs || s.EndMs > k.EndMs || s.Model == nil {
				t.Errorf("task %d step %d: %v..%v outside the band %v..%v", k.Task, s.Step, s.StartMs, s.EndMs, k.StartMs, k.EndMs)
			}
			for _, c := range s.Tools {
				if calls[c.CallID] != s.Step || c.StartMs < s.StartMs || c.EndMs > s.EndMs {
					t.Errorf("task %d: call %s drawn in step %d at %v..%v", k.Task, c.CallID, s.Step, c.StartMs, c.EndMs)
				}
				delete(calls, c.CallID)
			}
		}
		if len(calls) > 0 {
			t.Errorf("task %d: calls missing from its band: %v", k.Task, calls)
		}
		if k.Turn.Workflow == nil || k.Turn.Workflow.WorkflowID != wt.WorkflowID || k.Turn.Workflow.Task != k.Task {
			t.Errorf("task %d: its turn names workflow %+v", k.Task, k.Turn.Workflow)
		}
		if len(k.Turn.Rows) != len(tlog) {
			t.Errorf("task %d: %d event rows, its log has %d", k.Task, len(k.Turn.Rows), len(tlog))
		}
	}
	return &wt, page
}

// TestWorkflowTimelineEscapesEverything: a task's prompt and output, and its
// turn's texts, written to break out of the page stay data.
func TestWorkflowTimelineEscapesEverything(t *testing.T) {
	turn := hostileLog(t)
	wf, err := readLogFile("testdata/workflow/hostile.jsonl")
	if err != nil {
		t.Fatal(err)
	}
	// The recorded turn, as the workflow's task: its id, and its times
	// inside the task's span.
	shift := wf[1].Time.Sub(turn[0].Time) + time.Millisecond
	for i := range turn {
		turn[i].TurnID, turn[i].SessionID, turn[i].Time = "wfh-1", "wfh", turn[i].Time.Add(shift)
	}
	var b bytes.Buffer
	if err := timeline.WriteWorkflow(&b, wf, map[string][]events.Envelope{"wfh-1": turn}); err != nil {
		t.Fatal(err)
	}
	page := b.String()
	checkSelfContained(t, page)
	if n := strings.Count(strings.ToLower(page), "<script"); n != 3 {
		t.Fatalf("the page has %d script elements, want 3", n)
	}
	if n := strings.Count(strings.ToLower(page), "</script"); n != 3 {
		t.Fatalf("the page closes %d script elements, want 3", n)
	}
	if strings.Contains(page, "<!--") {
		t.Fatal("a comment opener got into the page")
	}
	if n := len(regexp.MustCompile(`&lt;/script&gt;&lt;script&gt;alert\(1\)&lt;/script&gt;`).FindAllString(page, -1)); n < 3 {
		t.Fatalf("the hostile text is shown escaped %d times, want it in the prompt, the output and the turn's events", n)
	}
	var wt timeline.Workflow
	for _, m := range scriptBlock.FindAllStringSubmatch(page, -1) {
		if m[1] == "timeline-data" {
			if err := json.Unmarshal([]byte(m[2]), &wt); err != nil {
				t.Fatal(err)
			}
		}
	}
	if k := wt.Tasks[0]; k.Input != hostile || k.Output != hostile || k.Turn == nil || k.Turn.Steps[0].Model.Text != hostile {
		t.Fatalf("the texts changed: %+v", k)
	}
}

// TestWorkflowTimelineLayout: a workflow still running is drawn up to its
// last event, of its own log or of its running task's turn, with what has
// not ended open; a rejected workflow is a page without tasks.
func TestWorkflowTimelineLayout(t *testing.T) {
	wf, err := readLogFile("testdata/workflow/hostile.jsonl")
	if err != nil {
		t.Fatal(err)
	}
	t.Run("running", func(t *testing.T) {
		// Cut after task.started, its turn cut mid-step.
		turn := append([]events.Envelope(nil), goldenLogs(t)["completed"][:11]...)
		shift := wf[1].Time.Sub(turn[0].Time) + time.Millisecond
		for i := range turn {
			turn[i].TurnID, turn[i].SessionID, turn[i].Time = "wfh-1", "wfh", turn[i].Time.Add(shift)
		}
		wt, err := timeline.BuildWorkflow(wf[:2], map[string][]events.Envelope{"wfh-1": turn})
		if err != nil {
			t.Fatal(err)
		}
		k := wt.Tasks[0]
		if !wt.Running || wt.Finished != nil || !k.Open || k.Metrics != nil || k.Turn == nil || !k.Turn.Running {
			t.Fatalf("running %v finished %+v task %+v", wt.Running, wt.Finished, k)
		}
		if wt.EndMs != k.Turn.EndMs || k.EndMs != wt.EndMs || wt.EndMs <= 1 {
			t.Fatalf("the workflow ends at %v, its task at %v, the task's turn at %v", wt.EndMs, k.EndMs, k.Turn.EndMs)
		}
		if len(k.Turn.Steps) != 2 || !k.Turn.Steps[1].Open || k.Turn.Steps[1].StartMs < k.StartMs {
			t.Fatalf("the running task's steps: %+v", k.Turn.Steps)
		}
		var b bytes.Buffer
		if err := timeline.WriteWorkflowPage(&b, wt, timeline.WorkflowLogs{Workflow: wf[:2]}); err != nil {
			t.Fatal(err)
		}
		if page := b.String(); !strings.Contains(page, `id="status">running<`) || !strings.Contains(page, "so far:") {
			t.Fatal("the page of a running workflow does not say so")
		}
	})
	t.Run("rejected", func(t *testing.T) {
		data, _ := json.Marshal(events.WorkflowFinishedData{StopReason: events.StopRejected, Error: "unknown agent \"Nobody\"",
			Tasks: []events.TaskOutcome{}})
		log := []events.Envelope{{ID: "01a20577-5181-78d6-ad8c-7c32306c1099", Type: events.WorkflowFinished, TurnID: "rej",
			SessionID: "rej", Seq: 1, Time: time.Date(2026, 11, 22, 10, 0, 0, 0, time.UTC), Data: data}}
		var b bytes.Buffer
		if err := timeline.WriteWorkflow(&b, log, nil); err != nil {
			t.Fatal(err)
		}
		page := b.String()
		if !strings.Contains(page, `id="status">rejected<`) || !strings.Contains(page, "unknown agent &#34;Nobody&#34;") {
			t.Fatal("the page of a rejected workflow does not show its error")
		}
	})
	t.Run("does not fold", func(t *testing.T) {
		swapped := []events.Envelope{wf[0], wf[2], wf[1]}
		if _, err := timeline.BuildWorkflow(swapped, nil); err == nil {
			t.Fatal("a log out of order was drawn")
		}
	})
}
