package cli

import (
	"context"
	_ "embed"
	"encoding/json"
	"errors"
	"fmt"
	"html/template"
	"io"
	"math"
	"time"

	"github.com/jetloop/jetloop/internal/events"
	"github.com/jetloop/jetloop/internal/fsm"
	"github.com/jetloop/jetloop/internal/workflow"
)

// The workflow's page shares the turn page's style, script and event table
// (timeline.html defines it); only its header and data differ.
//
//go:embed timeline_workflow.html
var workflowHTML string

var workflowPage = template.Must(template.Must(timelinePage.Clone()).New("workflow").Parse(workflowHTML))

// WorkflowTimeline is a workflow laid out on one time axis: each task is a
// band that holds its turn's timeline, and the workflow's own events are
// marks. All times are milliseconds since the workflow's first event; the
// tasks' turns are measured from the same origin, so a task's steps fall
// inside its band.
type WorkflowTimeline struct {
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
	Tasks      []TimelineTask         `json:"tasks"`
	Marks      []WorkflowMark         `json:"marks"`
	Waits      []TimelineWait         `json:"waits"`
	Finished   *WorkflowFinish        `json:"finished,omitempty"`
	// Rows are the workflow's events, for the table under the chart; state
	// is the workflow machine's phase.
	Rows []Row `json:"rows"`
}

// TimelineTask is one task: its band, from task.started to task.finished,
// and its turn drawn inside it.
type TimelineTask struct {
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

// WorkflowMark is one event of the workflow's own log, at its time.
type WorkflowMark struct {
	AtMs     float64             `json:"at_ms"`
	Seq      int                 `json:"seq"`
	Type     events.Type         `json:"type"`
	Task     int                 `json:"task"`
	Decision events.GateDecision `json:"decision,omitempty"` // workflow.gated
	By       string              `json:"by,omitempty"`       // workflow.gated: rules, approval or a hook
	Text     string              `json:"text"`
}

// TimelineWait is a span in which the gate waited for a person, from the
// workflow.gated that said wait to the workflow.resumed.
type TimelineWait struct {
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

// BuildWorkflowTimeline lays a workflow's log out on a time axis, each task's
// turn inside its band; turns holds the tasks' logs by turn id, and a task
// whose log is not in it is drawn as a band without steps. It fails only when
// the workflow's log does not fold through the workflow machine; a task's log
// that does not fold is noted on its band.
func BuildWorkflowTimeline(log []events.Envelope, turns map[string][]events.Envelope) (*WorkflowTimeline, error) {
	if len(log) == 0 {
		return nil, fmt.Errorf("timeline: empty log")
	}
	t0 := log[0].Time
	at := func(e events.Envelope) float64 {
		return math.Round(float64(e.Time.Sub(t0).Microseconds())) / 1000
	}
	w := &WorkflowTimeline{WorkflowID: log[0].TurnID, SessionID: log[0].SessionID, Started: t0, EndMs: at(log[len(log)-1]),
		Running: true, Tasks: []TimelineTask{}, Marks: []WorkflowMark{}, Waits: []TimelineWait{}, Rows: make([]Row, 0, len(log))}
	st := workflow.New("")
	for _, e := range log {
		before := st.Phase
		if err := workflow.Evolve(st, e); err != nil {
			return nil, fmt.Errorf("seq %d (%s): %w", e.Seq, e.Type, err)
		}
		now := at(e)
		// The event table's state column holds the workflow machine's phases.
		w.Rows = append(w.Rows, Row{Seq: e.Seq, Step: e.Step, Before: fsm.Phase(before), After: fsm.Phase(st.Phase), Type: e.Type,
			Time: e.Time, SinceMs: e.Time.Sub(t0).Milliseconds(), Detail: workflowDetail(e)})
		mark := WorkflowMark{AtMs: now, Seq: e.Seq, Type: e.Type, Task: e.Step, Text: workflowDetail(e)}
		data, _ := events.NewData(e.Type)
		_ = json.Unmarshal(e.Data, data) // Evolve decoded it already
		switch d := data.(type) {
		case *events.TaskStartedData:
			t := TimelineTask{Task: d.Task, TurnID: d.TurnID, Agent: d.Agent, StartMs: now, Open: true}
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
				w.Waits = append(w.Waits, TimelineWait{Task: d.Task, StartMs: now, Open: true, Reason: d.Reason})
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
func (w *WorkflowTimeline) Steps() int {
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

// WriteWorkflowTimeline writes a workflow as one self-contained HTML page,
// its tasks as bands with their turns' steps inside: inline CSS and script,
// the timeline and every log embedded as JSON, no reference to any other
// resource.
func WriteWorkflowTimeline(w io.Writer, log []events.Envelope, turns map[string][]events.Envelope) error {
	wt, err := BuildWorkflowTimeline(log, turns)
	if err != nil {
		return err
	}
	return writeWorkflowPage(w, wt, WorkflowLogs{Workflow: log, Turns: turns})
}

func writeWorkflowPage(w io.Writer, wt *WorkflowTimeline, logs WorkflowLogs) error {
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
		Timeline *WorkflowTimeline
		Events   WorkflowLogs
		Style    template.CSS
		Script   template.JS
	}{status, wt, logs, template.CSS(timelineCSS), template.JS(timelineJS)})
}

// workflowTimeline is replay --html of a workflow: it reads the tasks'
// turns (from the server, or from the same file when the log comes from
// one: exports of the workflow and of its turns, concatenated), writes the
// page, then checks every log like a replay does. A workflow's log that
// does not fold gets no page and exits 1; so does one whose logs break the
// invariants or do not fold, after its page is written.
func (c *command) workflowTimeline(ctx context.Context, path string, log []events.Envelope, turns map[string][]events.Envelope, fromServer bool) int {
	if fromServer {
		var ids []string
		for _, e := range log {
			if e.Type == events.TaskStarted {
				var d events.TaskStartedData
				_ = json.Unmarshal(e.Data, &d)
				ids = append(ids, d.TurnID)
			}
		}
		// A task just started may have no log yet: its band says so.
		var err error
		if turns, err = c.readLogs(ctx, ids...); err != nil {
			return c.fail("%v", err)
		}
	}
	wt, err := BuildWorkflowTimeline(log, turns)
	if err != nil {
		fmt.Fprintf(c.stderr, "jetloop replay: the log does not fold: %v\n", err)
		return ExitStopped
	}
	if err := writeTimelineFileWith(path, func(w io.Writer) error {
		return writeWorkflowPage(w, wt, WorkflowLogs{Workflow: log, Turns: turns})
	}); err != nil {
		return c.fail("%v", err)
	}
	var problems []error
	if err := events.CheckLog(log); err != nil {
		problems = append(problems, fmt.Errorf("the workflow's log: %w", err))
	}
	for _, t := range wt.Tasks {
		if t.Turn == nil {
			if _, ok := turns[t.TurnID]; ok {
				problems = append(problems, fmt.Errorf("task %d: %s", t.Task, t.Missing))
			}
			continue
		}
		if err := events.CheckLog(turns[t.TurnID]); err != nil {
			problems = append(problems, fmt.Errorf("task %d (turn %s): %w", t.Task, t.TurnID, err))
		}
	}
	if err := errors.Join(problems...); err != nil {
		fmt.Fprintf(c.stderr, "jetloop replay: wrote %s, but the logs break the invariants: %v\n", path, err)
		return ExitStopped
	}
	fmt.Fprintf(c.stdout, "wrote %s: %d events, %d tasks, %d steps\n", path, len(log), len(wt.Tasks), wt.Steps())
	return ExitOK
}

// splitWorkflowFile separates a file of concatenated exports into the
// workflow's log (the events of the first event's id) and the other logs,
// by turn id.
func splitWorkflowFile(all []events.Envelope) (log []events.Envelope, turns map[string][]events.Envelope) {
	turns = map[string][]events.Envelope{}
	for _, e := range all {
		if e.TurnID == all[0].TurnID {
			log = append(log, e)
		} else {
			turns[e.TurnID] = append(turns[e.TurnID], e)
		}
	}
	return log, turns
}
