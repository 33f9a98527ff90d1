package timeline

import (
	_ "embed"
	"encoding/json"
	"fmt"
	"html/template"
	"io"
	"math"
	"strings"
	"time"

	"github.com/jetloop/jetloop/internal/events"
	"github.com/jetloop/jetloop/internal/fsm"
	"github.com/jetloop/jetloop/internal/workflow"
)

// The workflow's page shares the turn page's style, script and event table
// (timeline.html defines it); only its header and data differ.
//
//go:embed workflow.html
var workflowHTML string

var workflowPage = template.Must(template.Must(timelinePage.Clone()).New("workflow").Parse(workflowHTML))

// Workflow is a workflow laid out on one time axis: each task is a
// band that holds its turn's timeline, and the workflow's own events are
// marks. All times are milliseconds since the workflow's first event; the
// tasks' turns are measured from the same origin, so a task's steps fall
// inside its band.
type Workflow struct {
	WorkflowID string                 `json:"workflow_id"`
	SessionID  string                 `json:"session_id"`
	Agent      string                 `json:"agent,omitempty"`
	Phase      workflow.Phase         `json:"phase"`
	TaskCount  int                    `json:"task_count"`
	Limits     events.WorkflowLimits  `json:"limits"`
	Policy     events.Policy          `json:"policy"`
	Started    time.Time              `json:"started"`
	EndMs      float64                `json:"end_ms"`
	Running    bool                   `json:"running"`
	Metrics    events.WorkflowMetrics `json:"metrics"` // summed over the tasks finished so far
	Tasks      []Task                 `json:"tasks"`
	Marks      []Mark                 `json:"marks"`
	Waits      []Wait                 `json:"waits"`
	Finished   *WorkflowFinish        `json:"finished,omitempty"`
	// Rows are the workflow's events, for the table under the chart; state
	// is the workflow machine's phase.
	Rows []Row `json:"rows"`
}

// Task is one task: its band, from task.started to task.finished,
// and its turn drawn inside it.
type Task struct {
	Task       int               `json:"task"`
	TurnID     string            `json:"turn_id"`
	Agent      string            `json:"agent,omitempty"`
	Input      string            `json:"input,omitempty"` // the task's prompt
	StartMs    float64           `json:"start_ms"`
	EndMs      float64           `json:"end_ms"`
	Open       bool              `json:"open,omitempty"` // not finished (yet)
	StopReason events.StopReason `json:"stop_reason,omitempty"`
	Output     string            `json:"output,omitempty"`
	Error      string            `json:"error,omitempty"`
	Metrics    *events.Metrics   `json:"metrics,omitempty"`
	// Turn is the task's turn on the workflow's axis; Missing says why it
	// is not there: no log (yet), or one that does not fold.
	Turn    *Timeline `json:"turn,omitempty"`
	Missing string    `json:"missing,omitempty"`
}

// Mark is one event of the workflow's own log, at its time.
type Mark struct {
	AtMs     float64             `json:"at_ms"`
	Seq      int                 `json:"seq"`
	Type     events.Type         `json:"type"`
	Task     int                 `json:"task"`
	Decision events.GateDecision `json:"decision,omitempty"` // workflow.gated
	By       string              `json:"by,omitempty"`       // workflow.gated: rules, approval or a hook
	Text     string              `json:"text"`
}

// Wait is a span in which the gate waited for a person, from the
// workflow.gated that said wait to the workflow.resumed.
type Wait struct {
	Task     int     `json:"task"` // the task it waited before
	StartMs  float64 `json:"start_ms"`
	EndMs    float64 `json:"end_ms"`
	Open     bool    `json:"open,omitempty"`
	Reason   string  `json:"reason,omitempty"`
	Approved *bool   `json:"approved,omitempty"`
	Note     string  `json:"note,omitempty"`
}

// WorkflowFinish marks the workflow.finished.
type WorkflowFinish struct {
	AtMs       float64                `json:"at_ms"`
	StopReason events.StopReason      `json:"stop_reason"`
	Output     string                 `json:"output,omitempty"`
	Error      string                 `json:"error,omitempty"`
	Metrics    events.WorkflowMetrics `json:"metrics"`
}

// BuildWorkflow lays a workflow's log out on a time axis, each task's
// turn inside its band; turns holds the tasks' logs by turn id, and a task
// whose log is not in it is drawn as a band without steps. It fails only when
// the workflow's log does not fold through the workflow machine; a task's log
// that does not fold is noted on its band.
func BuildWorkflow(log []events.Envelope, turns map[string][]events.Envelope) (*Workflow, error) {
	if len(log) == 0 {
		return nil, fmt.Errorf("timeline: empty log")
	}
	t0 := log[0].Time
	at := func(e events.Envelope) float64 {
		return math.Round(float64(e.Time.Sub(t0).Microseconds())) / 1000
	}
	w := &Workflow{WorkflowID: log[0].TurnID, SessionID: log[0].SessionID, Started: t0, EndMs: at(log[len(log)-1]),
		Running: true, Tasks: []Task{}, Marks: []Mark{}, Waits: []Wait{}, Rows: make([]Row, 0, len(log))}
	st := workflow.New("")
	for _, e := range log {
		before := st.Phase
		if err := workflow.Evolve(st, e); err != nil {
			return nil, fmt.Errorf("seq %d (%s): %w", e.Seq, e.Type, err)
		}
		now := at(e)
		// The event table's state column holds the workflow machine's phases.
		w.Rows = append(w.Rows, Row{Seq: e.Seq, Step: e.Step, Before: fsm.Phase(before), After: fsm.Phase(st.Phase), Type: e.Type,
			Time: e.Time, SinceMs: e.Time.Sub(t0).Milliseconds(), Detail: WorkflowDetail(e)})
		mark := Mark{AtMs: now, Seq: e.Seq, Type: e.Type, Task: e.Step, Text: WorkflowDetail(e)}
		data, _ := events.NewData(e.Type)
		_ = json.Unmarshal(e.Data, data) // Evolve decoded it already
		switch d := data.(type) {
		case *events.TaskStartedData:
			t := Task{Task: d.Task, TurnID: d.TurnID, Agent: d.Agent, StartMs: now, Open: true}
			if t.Agent == "" {
				t.Agent = st.Agent
			}
			if d.Task >= 1 && d.Task <= len(st.Tasks) {
				if msgs, err := st.Tasks[d.Task-1].Messages(); err == nil {
					for _, m := range msgs {
						if m.Role == events.RoleUser {
							t.Input = clipKeep(m.Content, excerptText)
						}
					}
				}
			}
			w.Tasks = append(w.Tasks, t)
			mark.Task = d.Task
		case *events.TaskFinishedData:
			for i := range w.Tasks {
				if t := &w.Tasks[i]; t.Task == d.Task && t.Open {
					m := d.Metrics
					t.EndMs, t.Open, t.StopReason, t.Error, t.Metrics = now, false, d.StopReason, d.Error, &m
					t.Output = clipKeep(d.Output, excerptOutput)
				}
			}
			mark.Task = d.Task
		case *events.WorkflowCheckpointedData:
			mark.Task = d.Task
		case *events.WorkflowGatedData:
			mark.Task, mark.Decision, mark.By = d.Task, d.Decision, d.By
			if d.Decision == events.GateWait {
				w.Waits = append(w.Waits, Wait{Task: d.Task, StartMs: now, Open: true, Reason: d.Reason})
			}
		case *events.WorkflowResumedData:
			for i := range w.Waits {
				if p := &w.Waits[i]; p.Open {
					approved := d.Approved
					p.EndMs, p.Open, p.Approved, p.Note = now, false, &approved, d.Note
					mark.Task = p.Task
				}
			}
		case *events.WorkflowFinishedData:
			w.Finished = &WorkflowFinish{AtMs: now, StopReason: d.StopReason, Output: clipKeep(d.Output, excerptText),
				Error: d.Error, Metrics: d.Metrics}
		}
		w.Marks = append(w.Marks, mark)
	}
	w.Agent, w.Phase, w.TaskCount, w.Limits, w.Policy, w.Metrics = st.Agent, st.Phase, len(st.Tasks), st.Limits, st.Policy, st.Metrics
	w.Running = w.Finished == nil
	for i := range w.Tasks {
		t := &w.Tasks[i]
		tlog := turns[t.TurnID]
		if len(tlog) == 0 {
			t.Missing = "no log of turn " + t.TurnID
			continue
		}
		tl, err := buildTimeline(tlog, t0, turns)
		if err != nil {
			t.Missing = fmt.Sprintf("the log of turn %s does not fold: %v", t.TurnID, err)
			continue
		}
		t.Turn = tl
		w.EndMs = max(w.EndMs, tl.EndMs)
		if t.Agent == "" {
			t.Agent = tl.Agent
		}
		if t.Input == "" {
			t.Input = tl.Input
		}
	}
	// What has not ended is drawn up to the last event, of the workflow or
	// of a task's turn, whichever came later.
	for i := range w.Tasks {
		if t := &w.Tasks[i]; t.Open {
			t.EndMs = w.EndMs
		}
	}
	for i := range w.Waits {
		if p := &w.Waits[i]; p.Open {
			p.EndMs = w.EndMs
		}
	}
	return w, nil
}

// Steps counts the steps drawn in all the tasks' bands.
func (w *Workflow) Steps() int {
	n := 0
	for _, t := range w.Tasks {
		if t.Turn != nil {
			n += len(t.Turn.Steps)
		}
	}
	return n
}

// WorkflowLogs are the logs a workflow's page embeds: its own and its tasks'
// turns', each exactly as stored.
type WorkflowLogs struct {
	Workflow []events.Envelope            `json:"workflow"`
	Turns    map[string][]events.Envelope `json:"turns"`
}

// WriteWorkflow writes a workflow as one self-contained HTML page,
// its tasks as bands with their turns' steps inside: inline CSS and script,
// the timeline and every log embedded as JSON, no reference to any other
// resource.
func WriteWorkflow(w io.Writer, log []events.Envelope, turns map[string][]events.Envelope) error {
	wt, err := BuildWorkflow(log, turns)
	if err != nil {
		return err
	}
	return WriteWorkflowPage(w, wt, WorkflowLogs{Workflow: log, Turns: turns})
}

func WriteWorkflowPage(w io.Writer, wt *Workflow, logs WorkflowLogs) error {
	status := "running"
	if wt.Finished != nil {
		status = string(wt.Finished.StopReason)
	} else if wt.Phase == workflow.PhasePaused {
		status = "paused"
	}
	if logs.Turns == nil {
		logs.Turns = map[string][]events.Envelope{}
	}
	// As for a turn's page, html/template makes the embedded JSON safe.
	return workflowPage.ExecuteTemplate(w, "workflow", struct {
		Status   string
		Timeline *Workflow
		Events   WorkflowLogs
		Style    template.CSS
		Script   template.JS
	}{status, wt, logs, template.CSS(Style), template.JS(Script)})
}

// WriteWorkflowFile writes a workflow's page to path, through a temporary
// file so a reader never sees half a page.
func WriteWorkflowFile(path string, wt *Workflow, logs WorkflowLogs) error {
	return writeFileWith(path, func(w io.Writer) error { return WriteWorkflowPage(w, wt, logs) })
}

// WorkflowDetail is one event's line of a workflow's trace.
func WorkflowDetail(e events.Envelope) string {
	data, _ := events.NewData(e.Type)
	_ = json.Unmarshal(e.Data, data)
	switch d := data.(type) {
	case *events.WorkflowStartedData:
		return fmt.Sprintf("%d tasks, max_tasks %d", d.Tasks, d.Limits.MaxTasks)
	case *events.TaskStartedData:
		return fmt.Sprintf("task %d: turn %s (%s)", d.Task, d.TurnID, orDash(d.Agent))
	case *events.TaskFinishedData:
		return fmt.Sprintf("task %d: %s, %d steps, %d tool calls", d.Task, d.StopReason, d.Metrics.Steps, d.Metrics.ToolCalls)
	case *events.WorkflowCheckpointedData:
		m := d.Metrics
		return fmt.Sprintf("after task %d: %d tasks, %d steps, %d tool calls, %d+%d tokens", d.Task, m.Tasks, m.Steps, m.ToolCalls, m.InputTokens, m.OutputTokens)
	case *events.WorkflowGatedData:
		// by says which decided: the rules, a person's approval, or a hook.
		if d.Decision == events.GateStop {
			// No task d.Task will run: the gate closed the last one.
			return fmt.Sprintf("after task %d: %s by %s (%s)", d.Task-1, d.Decision, orDash(d.By), d.Reason)
		}
		return fmt.Sprintf("before task %d: %s by %s (%s)", d.Task, d.Decision, orDash(d.By), d.Reason)
	case *events.WorkflowResumedData:
		return fmt.Sprintf("approved %t %s", d.Approved, d.Note)
	case *events.WorkflowFinishedData:
		s := fmt.Sprintf("%s after %d tasks: %s", d.StopReason, len(d.Tasks), Clip(d.Output, 60))
		if d.Error != "" {
			s += " — " + d.Error
		}
		return s
	}
	return ""
}

// nested writes a trace indented under a line of another: a task's turn
// under its task, a subagent's under its call.
type nested struct {
	w    io.Writer
	midl bool
}

func (in *nested) Write(p []byte) (int, error) {
	var b strings.Builder
	for _, r := range string(p) {
		if !in.midl {
			b.WriteString("    │ ")
			in.midl = true
		}
		b.WriteRune(r)
		if r == '\n' {
			in.midl = false
		}
	}
	if _, err := io.WriteString(in.w, b.String()); err != nil {
		return 0, err
	}
	return len(p), nil
}

// Indented writes to w what a trace prints, indented under the line
// before it: a workflow's trace prints each task's turn so.
func Indented(w io.Writer) io.Writer { return &nested{w: w} }

// orDash is s, or a dash for nothing.
func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}
