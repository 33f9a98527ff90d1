package timeline

import (
	_ "embed"
	"encoding/json"
	"fmt"
	"html/template"
	"io"
	"math"
	"os"
	"path/filepath"
	"time"

	"github.com/jetloop/jetloop/internal/events"
	"github.com/jetloop/jetloop/internal/fsm"
)

// The timeline page is one file: its CSS and script are inlined in it, and
// the turn travels inside it as JSON, so it opens offline, from an e-mail or a
// bug report, and never fetches anything. The CSS and script are files of
// their own because `jetloop ui` serves the same ones to draw a turn live.
var (
	//go:embed timeline.html
	timelineHTML string
	// Style is the timeline's CSS.
	//
	//go:embed timeline.css
	Style string
	// Script is the timeline's script: it draws a Timeline or a Workflow.
	//
	//go:embed timeline.js
	Script string
)

var timelinePage = template.Must(template.New("timeline").Funcs(template.FuncMap{
	"since": func(ms int64) string { return since(time.Duration(ms) * time.Millisecond) },
	// table is the argument of the event table's template: its rows, and
	// what its ids start with where a page has more than one.
	"table": func(id string, rows []Row) any {
		return struct {
			ID   string
			Rows []Row
		}{id, rows}
	},
}).Parse(timelineHTML))

// Excerpt lengths of the texts the page shows on hover. The whole log is
// embedded as well, so nothing is lost by cutting them.
const (
	excerptText   = 600
	excerptOutput = 600
)

// Timeline is a turn laid out on a time axis: what the HTML page draws. All
// times are milliseconds since the turn's first event.
type Timeline struct {
	TurnID    string         `json:"turn_id"`
	SessionID string         `json:"session_id"`
	Agent     string         `json:"agent,omitempty"`
	Model     string         `json:"model,omitempty"`
	Input     string         `json:"input,omitempty"`
	Limits    *events.Limits `json:"limits,omitempty"`
	Started   time.Time      `json:"started"`
	EndMs     float64        `json:"end_ms"`
	Running   bool           `json:"running"`
	Steps     []Step         `json:"steps"`
	Pauses    []Pause        `json:"pauses"`
	Summary   *Summary       `json:"summary,omitempty"`
	Sentinel  *Sentinel      `json:"sentinel,omitempty"`
	// Compactions mark the turn's summarizing compactions (turn.compacted).
	Compactions []Compaction       `json:"compactions,omitempty"`
	Finished    *Finish            `json:"finished,omitempty"`
	ForkedFrom  *events.ForkedFrom `json:"forked_from,omitempty"`
	// Workflow names the workflow task the turn runs, if any.
	Workflow *events.WorkflowRef `json:"workflow,omitempty"`
	// Parent names the call that runs the turn, if it is a subagent's.
	Parent *events.ParentRef `json:"parent,omitempty"`
	// Rows are the trace's rows (as replay --json prints them), for the
	// event table under the chart.
	Rows []Row `json:"rows"`
}

// Step is one step: its band on the axis, its model call and the
// tool calls it asked for, one lane each in the order they were requested.
type Step struct {
	Step    int     `json:"step"`
	StartMs float64 `json:"start_ms"`
	EndMs   float64 `json:"end_ms"`
	Open    bool    `json:"open,omitempty"` // not checked (yet)
	Model   *Model  `json:"model,omitempty"`
	Tools   []Tool  `json:"tools"`
	// Decision and StopReason come from the step's step.checked.
	Decision   events.Decision   `json:"decision,omitempty"`
	StopReason events.StopReason `json:"stop_reason,omitempty"`
}

// Model is a step's model call, from step.started to model.completed.
type Model struct {
	StartMs      float64      `json:"start_ms"`
	EndMs        float64      `json:"end_ms"`
	Open         bool         `json:"open,omitempty"` // no answer (yet)
	Text         string       `json:"text,omitempty"`
	ToolCalls    []Call       `json:"tool_calls,omitempty"`
	FinishReason string       `json:"finish_reason,omitempty"`
	Usage        events.Usage `json:"usage"`
	DurationMs   int64        `json:"duration_ms"`
	Attempts     int          `json:"attempts,omitempty"`
	Error        string       `json:"error,omitempty"`
}

// Call is a tool call as the model asked for it.
type Call struct {
	CallID    string `json:"call_id"`
	Name      string `json:"name"`
	Arguments string `json:"arguments"`
}

// Tool is one tool call, from tool.requested to tool.completed.
type Tool struct {
	CallID     string  `json:"call_id"`
	Name       string  `json:"name"`
	Arguments  string  `json:"arguments"`
	Lane       int     `json:"lane"`
	StartMs    float64 `json:"start_ms"`
	EndMs      float64 `json:"end_ms"`
	Open       bool    `json:"open,omitempty"` // not completed (yet)
	Output     string  `json:"output,omitempty"`
	IsError    bool    `json:"is_error,omitempty"`
	Final      bool    `json:"final,omitempty"`
	DurationMs int64   `json:"duration_ms"`
	Worker     string  `json:"worker,omitempty"`
	Attempts   int     `json:"attempts,omitempty"`
	// ChildTurnID is the turn a subagent call runs; Child is that turn on
	// the same axis, drawn as a band under the call, and ChildMissing says
	// why it is not there: no log (yet), or one that does not fold.
	ChildTurnID  string    `json:"child_turn_id,omitempty"`
	Child        *Timeline `json:"child,omitempty"`
	ChildMissing string    `json:"child_missing,omitempty"`
}

// Pause is a span in which the turn waited for a reply or an
// approval, from turn.paused to turn.resumed.
type Pause struct {
	Step     int              `json:"step"`
	CallID   string           `json:"call_id"`
	Kind     events.PauseKind `json:"kind"`
	Question string           `json:"question,omitempty"`
	Tool     string           `json:"tool,omitempty"`
	StartMs  float64          `json:"start_ms"`
	EndMs    float64          `json:"end_ms"`
	Open     bool             `json:"open,omitempty"` // not resumed (yet)
	Answer   string           `json:"answer,omitempty"`
	Approved *bool            `json:"approved,omitempty"`
	Note     string           `json:"note,omitempty"`
}

// Summary is the tool-less summary call of a cap or doom-loop stop:
// from the stopping step.checked to turn.sentinel.
type Summary struct {
	Step    int           `json:"step"`
	StartMs float64       `json:"start_ms"`
	EndMs   float64       `json:"end_ms"`
	Open    bool          `json:"open,omitempty"`
	Usage   *events.Usage `json:"usage,omitempty"`
}

// Sentinel marks a turn.sentinel.
type Sentinel struct {
	AtMs   float64             `json:"at_ms"`
	Kind   events.SentinelKind `json:"kind"`
	Reason events.StopReason   `json:"reason"`
	Text   string              `json:"text"`
}

// Compaction marks a turn.compacted: the summary, written by the
// child turn ChildTurnID, that replaced the steps through ThroughStep.
type Compaction struct {
	AtMs        float64 `json:"at_ms"`
	ThroughStep int     `json:"through_step"`
	ChildTurnID string  `json:"child_turn_id"`
	Summary     string  `json:"summary,omitempty"`
	Error       string  `json:"error,omitempty"`
}

// Finish marks the turn.finished.
type Finish struct {
	AtMs       float64           `json:"at_ms"`
	StopReason events.StopReason `json:"stop_reason"`
	Output     string            `json:"output,omitempty"`
	Error      string            `json:"error,omitempty"`
	Metrics    events.Metrics    `json:"metrics"`
}

// Build lays a turn's log out on a time axis. A log of a turn still
// running gives what exists so far: whatever has not ended (a step, a model
// or tool call, a pause) is open and ends at the last event. It fails only
// when the log does not fold through the machine.
func Build(log []events.Envelope) (*Timeline, error) {
	return BuildWithChildren(log, nil)
}

// ChildTurns lists the turns a log's subagent calls run: the logs
// BuildWithChildren wants, which the caller reads.
func ChildTurns(log []events.Envelope) []string {
	var out []string
	for _, e := range log {
		if e.Type != events.ToolRequested {
			continue
		}
		var d events.ToolRequestedData
		if json.Unmarshal(e.Data, &d) == nil && d.ChildTurnID != "" && events.ValidID(d.ChildTurnID) {
			out = append(out, d.ChildTurnID)
		}
	}
	return out
}

// BuildWithChildren is Build with the logs of the turn's
// subagents (and theirs), by turn id: each child is laid out on the
// parent's axis under the call that runs it.
func BuildWithChildren(log []events.Envelope, children map[string][]events.Envelope) (*Timeline, error) {
	if len(log) == 0 {
		return nil, fmt.Errorf("timeline: empty log")
	}
	return buildTimeline(log, log[0].Time, children)
}

// buildTimeline is Build on an axis that starts at t0: a workflow
// lays its tasks' turns out from its own first event, so each turn's steps
// fall inside its task's band, and a turn its subagents' turns. The event
// rows keep the turn's own times. children holds the logs of subagents'
// turns by id.
func buildTimeline(log []events.Envelope, t0 time.Time, children map[string][]events.Envelope) (*Timeline, error) {
	return buildTimelineAt(log, t0, children, 0)
}

func buildTimelineAt(log []events.Envelope, t0 time.Time, children map[string][]events.Envelope, depth int) (*Timeline, error) {
	at := func(e events.Envelope) float64 {
		// Microseconds keep sub-millisecond tool calls apart on a zoomed axis.
		return math.Round(float64(e.Time.Sub(t0).Microseconds())) / 1000
	}
	tl := &Timeline{TurnID: log[0].TurnID, SessionID: log[0].SessionID, Started: log[0].Time,
		EndMs: at(log[len(log)-1]), Running: true, Steps: []Step{}, Pauses: []Pause{}}
	step := func(n int) *Step {
		for i := range tl.Steps {
			if tl.Steps[i].Step == n {
				return &tl.Steps[i]
			}
		}
		// An event of a step whose step.started is missing still gets drawn.
		tl.Steps = append(tl.Steps, Step{Step: n, Tools: []Tool{}, Open: true})
		return &tl.Steps[len(tl.Steps)-1]
	}
	tool := func(s *Step, id string) *Tool {
		for i := range s.Tools {
			if s.Tools[i].CallID == id {
				return &s.Tools[i]
			}
		}
		return nil
	}
	decode := func(e events.Envelope, v any) error {
		if err := json.Unmarshal(e.Data, v); err != nil {
			return fmt.Errorf("timeline: seq %d (%s): %w", e.Seq, e.Type, err)
		}
		return nil
	}
	var err error
	if tl.Rows, err = FoldRows(log); err != nil {
		return nil, err
	}
	for _, e := range log {
		now := at(e)
		switch e.Type {
		case events.TurnStarted:
			var d events.TurnStartedData
			if err := decode(e, &d); err != nil {
				return nil, err
			}
			tl.Agent, tl.Model, tl.Limits, tl.ForkedFrom, tl.Workflow = d.Agent, d.Model, &d.Limits, d.ForkedFrom, d.Workflow
			tl.Parent = d.Parent
			for _, m := range d.Input {
				if m.Role == events.RoleUser {
					tl.Input = clipKeep(m.Content, excerptText)
				}
			}
		case events.StepStarted:
			s := step(e.Step)
			s.StartMs, s.EndMs = now, now
		case events.ModelCompleted:
			var d events.ModelCompletedData
			if err := decode(e, &d); err != nil {
				return nil, err
			}
			s := step(e.Step)
			m := &Model{StartMs: s.StartMs, EndMs: now, Text: clipKeep(d.Text, excerptText),
				FinishReason: d.FinishReason, Usage: d.Usage, DurationMs: d.DurationMs, Attempts: d.Attempts, Error: d.Error}
			for _, c := range d.ToolCalls {
				m.ToolCalls = append(m.ToolCalls, Call{CallID: c.CallID, Name: c.Name, Arguments: string(c.Arguments)})
			}
			s.Model = m
		case events.ToolRequested:
			var d events.ToolRequestedData
			if err := decode(e, &d); err != nil {
				return nil, err
			}
			s := step(e.Step)
			s.Tools = append(s.Tools, Tool{CallID: d.CallID, Name: d.Name, Arguments: string(d.Arguments),
				Lane: len(s.Tools), StartMs: now, Open: true, ChildTurnID: d.ChildTurnID})
		case events.ToolCompleted:
			var d events.ToolCompletedData
			if err := decode(e, &d); err != nil {
				return nil, err
			}
			s := step(e.Step)
			c := tool(s, d.CallID)
			if c == nil {
				s.Tools = append(s.Tools, Tool{CallID: d.CallID, Name: d.Name, Lane: len(s.Tools), StartMs: now})
				c = &s.Tools[len(s.Tools)-1]
			}
			c.EndMs, c.Open = now, false
			c.Output, c.IsError, c.Final = clipKeep(d.Output, excerptOutput), d.IsError, d.Final
			c.DurationMs, c.Worker, c.Attempts = d.DurationMs, d.Worker, d.Attempts
			if c.ChildTurnID == "" {
				c.ChildTurnID = d.ChildTurnID
			}
		case events.TurnPaused:
			var d events.TurnPausedData
			if err := decode(e, &d); err != nil {
				return nil, err
			}
			q := d.Question
			if d.Kind == events.PauseApproval {
				q = string(d.Arguments)
			}
			tl.Pauses = append(tl.Pauses, Pause{Step: e.Step, CallID: d.CallID, Kind: d.Kind,
				Question: clipKeep(q, excerptText), Tool: d.Tool, StartMs: now, Open: true})
		case events.TurnResumed:
			var d events.TurnResumedData
			if err := decode(e, &d); err != nil {
				return nil, err
			}
			for i := range tl.Pauses {
				if p := &tl.Pauses[i]; p.Open && p.CallID == d.CallID {
					p.EndMs, p.Open = now, false
					p.Answer, p.Approved, p.Note = clipKeep(d.Answer, excerptText), d.Approved, d.Note
				}
			}
		case events.StepChecked:
			var d events.StepCheckedData
			if err := decode(e, &d); err != nil {
				return nil, err
			}
			s := step(e.Step)
			s.EndMs, s.Open, s.Decision, s.StopReason = now, false, d.Decision, d.StopReason
			switch d.StopReason {
			case events.StopStepCap, events.StopBudget, events.StopDoomLoop:
				// The summary call runs from here to the sentinel.
				tl.Summary = &Summary{Step: e.Step, StartMs: now, EndMs: now, Open: true}
			}
		case events.TurnSentinel:
			var d events.TurnSentinelData
			if err := decode(e, &d); err != nil {
				return nil, err
			}
			tl.Sentinel = &Sentinel{AtMs: now, Kind: d.Kind, Reason: d.Reason, Text: clipKeep(d.Text, excerptText)}
			if tl.Summary == nil {
				tl.Summary = &Summary{Step: e.Step, StartMs: now}
			}
			tl.Summary.EndMs, tl.Summary.Open, tl.Summary.Usage = now, false, d.Usage
		case events.TurnCompacted:
			var d events.TurnCompactedData
			if err := decode(e, &d); err != nil {
				return nil, err
			}
			tl.Compactions = append(tl.Compactions, Compaction{AtMs: now, ThroughStep: d.ThroughStep,
				ChildTurnID: d.ChildTurnID, Summary: clipKeep(d.Summary, excerptText), Error: d.Error})
		case events.TurnFinished:
			var d events.TurnFinishedData
			if err := decode(e, &d); err != nil {
				return nil, err
			}
			tl.Running = false
			tl.Finished = &Finish{AtMs: now, StopReason: d.StopReason, Output: clipKeep(d.Output, excerptText),
				Error: d.Error, Metrics: d.Metrics}
		}
	}
	// What has not ended is drawn up to the last event: still running, or cut
	// short by an abort or the timeout.
	for i := range tl.Steps {
		s := &tl.Steps[i]
		if s.Open {
			s.EndMs = tl.EndMs
		}
		if s.Model == nil {
			s.Model = &Model{StartMs: s.StartMs, EndMs: s.EndMs, Open: true}
		}
		for j := range s.Tools {
			if c := &s.Tools[j]; c.Open {
				c.EndMs = tl.EndMs
			}
		}
	}
	for i := range tl.Pauses {
		if p := &tl.Pauses[i]; p.Open {
			p.EndMs = tl.EndMs
		}
	}
	if tl.Summary != nil && tl.Summary.Open {
		tl.Summary.EndMs = tl.EndMs
	}
	for i := range tl.Steps {
		for j := range tl.Steps[i].Tools {
			c := &tl.Steps[i].Tools[j]
			if c.ChildTurnID == "" {
				continue
			}
			clog, ok := children[c.ChildTurnID]
			switch {
			case !ok || len(clog) == 0:
				c.ChildMissing = "no log (yet)"
			case depth >= fsm.MaxDepth:
				// A chain is never deeper; logs that say otherwise are not
				// followed further.
				c.ChildMissing = "deeper than subagents go"
			default:
				child, err := buildTimelineAt(clog, t0, children, depth+1)
				if err != nil {
					c.ChildMissing = "its log does not fold: " + err.Error()
					continue
				}
				c.Child = child
			}
		}
	}
	return tl, nil
}

// Children returns the subagents' turns drawn under the timeline's calls,
// and theirs, by turn id.
func (tl *Timeline) Children() map[string]*Timeline {
	out := map[string]*Timeline{}
	var walk func(*Timeline)
	walk = func(t *Timeline) {
		for _, s := range t.Steps {
			for _, c := range s.Tools {
				if c.Child != nil {
					out[c.ChildTurnID] = c.Child
					walk(c.Child)
				}
			}
		}
	}
	walk(tl)
	return out
}

// Row is one event of a replayed turn as replay --json prints it.
type Row struct {
	Seq     int         `json:"seq"`
	Step    int         `json:"step"`
	Before  fsm.Phase   `json:"before"`
	After   fsm.Phase   `json:"after"`
	Type    events.Type `json:"type"`
	Time    time.Time   `json:"time"`
	SinceMs int64       `json:"since_ms"`
	Detail  string      `json:"detail"`
}

// FoldRows folds the log into one Row per event: replay --json prints them,
// the page's event table shows them.
func FoldRows(log []events.Envelope) ([]Row, error) {
	st := fsm.New("")
	plain := NewTrace(io.Discard, false)
	out := make([]Row, 0, len(log))
	for _, e := range log {
		before := st.Phase
		if err := fsm.Evolve(st, e); err != nil {
			return nil, fmt.Errorf("seq %d (%s): %w", e.Seq, e.Type, err)
		}
		out = append(out, Row{Seq: e.Seq, Step: e.Step, Before: before, After: st.Phase, Type: e.Type, Time: e.Time,
			SinceMs: e.Time.Sub(log[0].Time).Milliseconds(), Detail: plain.detail(e)})
	}
	return out, nil
}

// clipKeep cuts s to n runes, keeping its line breaks (unlike clip, which
// makes one line of it for the trace).
func clipKeep(s string, n int) string {
	if r := []rune(s); len(r) > n {
		return string(r[:n-1]) + "…"
	}
	return s
}

// Write writes the turn as one self-contained HTML page: inline CSS
// and script, the timeline and the whole log embedded as JSON, no reference
// to any other resource.
func Write(w io.Writer, log []events.Envelope) error {
	tl, err := Build(log)
	if err != nil {
		return err
	}
	return WritePage(w, tl, log)
}

func WritePage(w io.Writer, tl *Timeline, log []events.Envelope) error {
	title := "turn " + tl.TurnID
	if tl.Agent != "" {
		title += " · " + tl.Agent
	}
	status := "running"
	if tl.Finished != nil {
		status = string(tl.Finished.StopReason)
	}
	// html/template escapes both values for their places: the timeline and
	// the log become JSON in which <, > and & are \u escapes, so no text of a
	// model or a tool can close the script element.
	return timelinePage.Execute(w, struct {
		Title    string
		Status   string
		Timeline *Timeline
		Events   []events.Envelope
		Style    template.CSS
		Script   template.JS
	}{title, status, tl, log, template.CSS(Style), template.JS(Script)})
}

// WriteFile writes the page to path, through a temporary file so a
// reader never sees half a page.
func WriteFile(path string, tl *Timeline, log []events.Envelope) error {
	return writeFileWith(path, func(w io.Writer) error { return WritePage(w, tl, log) })
}

// writeFileWith writes what write writes to path, through a
// temporary file.
func writeFileWith(path string, write func(io.Writer) error) (err error) {
	f, err := os.CreateTemp(filepath.Dir(path), ".timeline-*.html")
	if err != nil {
		return fmt.Errorf("timeline: %w", err)
	}
	defer func() {
		if err != nil {
			f.Close()
			os.Remove(f.Name())
		}
	}()
	if err = write(f); err != nil {
		return fmt.Errorf("timeline: %w", err)
	}
	if err = f.Chmod(0o644); err != nil {
		return fmt.Errorf("timeline: %w", err)
	}
	if err = f.Close(); err != nil {
		return fmt.Errorf("timeline: %w", err)
	}
	if err = os.Rename(f.Name(), path); err != nil {
		return fmt.Errorf("timeline: %w", err)
	}
	return nil
}
