package timeline

import (
	"encoding/json"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/jetloop/jetloop/internal/events"
	"github.com/jetloop/jetloop/internal/fsm"
)

// Trace prints a turn's events as they come, one row per event with the
// machine's transition, and the streamed text of its model calls in between.
type Trace struct {
	w      io.Writer
	color  bool
	state  *fsm.State
	start  time.Time
	inText bool // a delta line is open
	last   events.Envelope
	// held keeps text of a step whose step.started has not been printed:
	// deltas come on their own subject and may overtake the log.
	held []events.Delta
	// streamed is the text shown so far of each step whose deltas are
	// shown as they come: a step that started after liveAfter (the log's
	// last seq when the deltas' subscription took effect) and whose
	// model.completed is not printed yet. Any other step's text, or what
	// its deltas missed, is printed from its model.completed, so that
	// nothing is lost and nothing shown twice.
	streamed  map[int]*strings.Builder
	liveAfter int
	// Children reads a subagent's finished turn, so that its trace is
	// printed indented under the call it answers; nil prints none.
	Children func(turn string) ([]events.Envelope, error)
}

// NewTrace prints to w, in colour when color is set.
func NewTrace(w io.Writer, color bool) *Trace {
	return &Trace{w: w, color: color, state: fsm.New(""), streamed: map[int]*strings.Builder{}}
}

// ANSI styles, used only on a terminal.
const (
	dim    = "\033[2m"
	bold   = "\033[1m"
	cyan   = "\033[36m"
	green  = "\033[32m"
	yellow = "\033[33m"
	red    = "\033[31m"
	reset  = "\033[0m"
)

func (t *Trace) style(s, code string) string {
	if !t.color {
		return s
	}
	return code + s + reset
}

// Delta prints a piece of streamed model text.
func (t *Trace) Delta(d events.Delta) {
	if d.Step > t.state.Step {
		t.held = append(t.held, d)
		return
	}
	b := t.streamed[d.Step]
	if b == nil {
		return // printed whole from its model.completed
	}
	b.WriteString(d.Delta)
	t.text(d.Delta)
}

func (t *Trace) text(s string) {
	if !t.inText {
		fmt.Fprint(t.w, "        "+t.style("▸ ", cyan))
		t.inText = true
	}
	fmt.Fprint(t.w, t.style(strings.ReplaceAll(s, "\n", "\n          "), cyan))
}

// catchUp prints what a step's model.completed says the model wrote and
// its deltas did not show.
func (t *Trace) catchUp(e events.Envelope) {
	var d events.ModelCompletedData
	if json.Unmarshal(e.Data, &d) != nil {
		return
	}
	shown := ""
	if b := t.streamed[e.Step]; b != nil {
		shown = b.String()
	}
	delete(t.streamed, e.Step) // later deltas of the step are its text again
	rest, ok := strings.CutPrefix(d.Text, shown)
	if !ok {
		// Deltas were dropped on the way: the whole text, on a line of
		// its own.
		t.endText()
		rest = d.Text
	}
	if rest != "" {
		t.text(rest)
	}
}

func (t *Trace) endText() {
	if t.inText {
		fmt.Fprintln(t.w)
		t.inText = false
	}
}

// Event prints one event and folds it; it returns an error when the event
// does not fit the log so far.
func (t *Trace) Event(e events.Envelope) error {
	if e.Type == events.ModelCompleted {
		t.catchUp(e)
	}
	t.endText()
	before := t.state.Phase
	if err := fsm.Evolve(t.state, e); err != nil {
		return err
	}
	t.last = e
	if e.Seq == 1 {
		t.start = e.Time
		fmt.Fprintf(t.w, "%s %s  session %s\n", t.style("turn", bold), e.TurnID, e.SessionID)
	}
	if e.Type == events.ToolCompleted || e.Type == events.TurnCompacted {
		t.child(e)
	}
	after := t.state.Phase
	move := fmt.Sprintf("%s → %s", before, after)
	typ := fmt.Sprintf("%-15s", e.Type)
	switch e.Type {
	case events.TurnFinished:
		typ = t.style(typ, bold)
	case events.TurnSentinel, events.TurnPaused, events.TurnCompacted:
		typ = t.style(typ, yellow)
	}
	fmt.Fprintf(t.w, "  %s %s %-26s %s %s\n", t.style(fmt.Sprintf("%3d", e.Seq), dim),
		t.style(fmt.Sprintf("step %-2d %7s", e.Step, since(e.Time.Sub(t.start))), dim), move, typ, t.detail(e))
	if e.Type == events.TurnFinished {
		t.summary(e)
	}
	if e.Type == events.StepStarted {
		if e.Seq > t.liveAfter {
			t.streamed[e.Step] = &strings.Builder{}
		}
		held := t.held
		t.held = nil
		for _, d := range held {
			t.Delta(d)
		}
	}
	return nil
}

// child prints the trace of the subagent turn whose end a tool.completed
// (or a turn.compacted, the summary's turn) is, indented, just above it: a
// child ends before its call does, so its whole log is there to read.
func (t *Trace) child(e events.Envelope) {
	var d struct {
		ChildTurnID string `json:"child_turn_id"`
	}
	if t.Children == nil || json.Unmarshal(e.Data, &d) != nil || d.ChildTurnID == "" {
		return
	}
	w := &nested{w: t.w}
	log, err := t.Children(d.ChildTurnID)
	if err != nil {
		fmt.Fprintf(w, "subagent turn %s: %v\n", d.ChildTurnID, err)
		return
	}
	ct := NewTrace(w, t.color)
	ct.Children = t.Children
	for _, ce := range log {
		if err := ct.Event(ce); err != nil {
			fmt.Fprintf(w, "subagent turn %s: %v\n", d.ChildTurnID, err)
			return
		}
	}
}

// State is the turn's state after the events printed so far.
func (t *Trace) State() *fsm.State { return t.state }

// StreamAfter says that the deltas reaching Delta are those of the steps
// after the log's event seq (the last one when their subscription took
// effect): only those steps' text is shown as it streams.
func (t *Trace) StreamAfter(seq int) { t.liveAfter = seq }

func since(d time.Duration) string {
	if d < time.Second {
		return fmt.Sprintf("+%dms", d.Milliseconds())
	}
	return fmt.Sprintf("+%.1fs", d.Seconds())
}

func (t *Trace) detail(e events.Envelope) string {
	switch e.Type {
	case events.TurnStarted:
		var d events.TurnStartedData
		_ = json.Unmarshal(e.Data, &d)
		s := fmt.Sprintf("agent %s, model %s, history %d, tools [%s], limits steps=%d budget=%d",
			d.Agent, d.Model, d.History, strings.Join(d.Tools, " "), deref(d.Limits.Steps), d.Limits.Budget)
		if f := d.ForkedFrom; f != nil {
			s += fmt.Sprintf(", forked from %s step %d", f.TurnID, f.Step)
		}
		if p := d.Parent; p != nil {
			s += fmt.Sprintf(", subagent of %s call %s (depth %d)", p.TurnID, p.CallID, p.Depth)
		}
		return s
	case events.ModelCompleted:
		var d events.ModelCompletedData
		_ = json.Unmarshal(e.Data, &d)
		if d.Error != "" {
			return t.style("error: "+d.Error, red)
		}
		return fmt.Sprintf("%d tool call(s), %s, %d+%d tokens, %dms", len(d.ToolCalls), d.FinishReason,
			d.Usage.InputTokens, d.Usage.OutputTokens, d.DurationMs)
	case events.ToolRequested:
		var d events.ToolRequestedData
		_ = json.Unmarshal(e.Data, &d)
		s := fmt.Sprintf("%s %s", d.Name, Clip(unescapeHTML(string(d.Arguments)), 60))
		if d.ChildTurnID != "" {
			s += " → subagent turn " + d.ChildTurnID
		}
		return s
	case events.ToolCompleted:
		var d events.ToolCompletedData
		_ = json.Unmarshal(e.Data, &d)
		status := t.style("ok", green)
		if d.IsError {
			status = t.style("error", red)
		}
		if d.Final {
			status += " final"
		}
		return fmt.Sprintf("%s %s %dms by %s: %s", d.Name, status, d.DurationMs, d.Worker, Clip(d.Output, 60))
	case events.TurnPaused:
		var d events.TurnPausedData
		_ = json.Unmarshal(e.Data, &d)
		if d.Kind == events.PauseInput {
			return fmt.Sprintf("waits for a reply to %s: %s", d.CallID, d.Question)
		}
		return fmt.Sprintf("waits for approval of %s %s (%s)", d.Tool, Clip(string(d.Arguments), 40), d.CallID)
	case events.TurnResumed:
		var d events.TurnResumedData
		_ = json.Unmarshal(e.Data, &d)
		if d.Approved != nil {
			return fmt.Sprintf("approved=%t %s", *d.Approved, d.Note)
		}
		return "answer: " + Clip(d.Answer, 60)
	case events.StepChecked:
		var d events.StepCheckedData
		_ = json.Unmarshal(e.Data, &d)
		if d.Decision == events.DecisionStop {
			return "stop: " + string(d.StopReason)
		}
		return string(d.Decision)
	case events.TurnSentinel:
		var d events.TurnSentinelData
		_ = json.Unmarshal(e.Data, &d)
		return fmt.Sprintf("%s: %s", d.Kind, Clip(d.Text, 70))
	case events.TurnCompacted:
		var d events.TurnCompactedData
		_ = json.Unmarshal(e.Data, &d)
		if d.Error != "" {
			return fmt.Sprintf("steps 1-%d not summarized: %s", d.ThroughStep, t.style(d.Error, red))
		}
		return fmt.Sprintf("steps 1-%d summarized by turn %s: %s", d.ThroughStep, d.ChildTurnID, Clip(d.Summary, 60))
	case events.TurnFinished:
		var d events.TurnFinishedData
		_ = json.Unmarshal(e.Data, &d)
		s := "stop_reason " + string(d.StopReason)
		if d.Error != "" {
			s += ": " + d.Error
		}
		return s
	}
	return ""
}

func (t *Trace) summary(e events.Envelope) {
	var d events.TurnFinishedData
	_ = json.Unmarshal(e.Data, &d)
	if d.Output != "" {
		fmt.Fprintf(t.w, "\n%s\n%s\n", t.style("output:", bold), Indent(d.Output))
	}
	m := d.Metrics
	colour := green
	if !Success(d.StopReason) {
		colour = yellow
	}
	fmt.Fprintf(t.w, "\n%s %s · steps %d · tool calls %d · model calls %d · tokens %d in / %d out · %s\n",
		t.style("finished:", bold), t.style(string(d.StopReason), colour), m.Steps, m.ToolCalls, m.ModelCalls,
		m.InputTokens, m.OutputTokens, time.Duration(m.DurationMs)*time.Millisecond)
}

// Success reports the stop reasons after which watch exits 0.
func Success(r events.StopReason) bool {
	return r == events.StopCompleted || r == events.StopSynthesisDone
}

// Indent indents every line of s by two spaces.
func Indent(s string) string { return "  " + strings.ReplaceAll(s, "\n", "\n  ") }

// Clip makes one line of s, cut to n runes.
func Clip(s string, n int) string {
	s = strings.Join(strings.Fields(s), " ")
	if r := []rune(s); len(r) > n {
		return string(r[:n-1]) + "…"
	}
	return s
}

func deref(p *int) int {
	if p == nil {
		return fsm.MaxSteps
	}
	return *p
}

// unescapeHTML undoes the escapes of <, > and & that encoding/json writes by
// default, which a person reads as noise ("a -\u003e b"); an escaped
// backslash before one keeps it as it is.
func unescapeHTML(s string) string {
	if !strings.Contains(s, `\u00`) {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] != '\\' {
			b.WriteByte(s[i])
			continue
		}
		if i+6 <= len(s) {
			switch s[i : i+6] {
			case `\u003c`, `\u003C`:
				b.WriteByte('<')
				i += 5
				continue
			case `\u003e`, `\u003E`:
				b.WriteByte('>')
				i += 5
				continue
			case `\u0026`:
				b.WriteByte('&')
				i += 5
				continue
			}
		}
		// Any other escape, \\ included, is copied whole.
		b.WriteByte(s[i])
		if i+1 < len(s) {
			i++
			b.WriteByte(s[i])
		}
	}
	return b.String()
}
