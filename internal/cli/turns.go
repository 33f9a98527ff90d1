package cli

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"slices"
	"strings"
	"sync"
	"text/tabwriter"
	"time"

	"github.com/jetloop/jetloop/internal/events"
	"github.com/jetloop/jetloop/internal/fsm"
	"github.com/jetloop/jetloop/internal/runtime"
	"github.com/nats-io/nats.go/jetstream"
	"golang.org/x/sync/errgroup"
)

// Turn statuses.
const (
	StatusRunning  = "running"
	StatusPaused   = "paused"
	StatusFinished = "finished"
)

// Waiting is what a paused turn waits for: a reply to a question, or the
// approval of a tool call.
type Waiting struct {
	Kind      events.PauseKind `json:"kind"`
	CallID    string           `json:"call_id"`
	Question  string           `json:"question,omitempty"`
	Tool      string           `json:"tool,omitempty"`
	Arguments json.RawMessage  `json:"arguments,omitempty"`
}

// Summary is a turn at a glance, as `turns --json` and `show --json` print
// it.
type Summary struct {
	Turn       string             `json:"turn_id"`
	Session    string             `json:"session_id"`
	Status     string             `json:"status"`
	StopReason events.StopReason  `json:"stop_reason,omitempty"`
	Waiting    *Waiting           `json:"waiting,omitempty"`
	Agent      string             `json:"agent,omitempty"`
	Model      string             `json:"model,omitempty"`
	Steps      int                `json:"steps"`
	ToolCalls  int                `json:"tool_calls"`
	Started    time.Time          `json:"started"`
	Last       time.Time          `json:"last"`
	Events     int                `json:"events"`
	ForkedFrom *events.ForkedFrom `json:"forked_from,omitempty"`
	Error      string             `json:"error,omitempty"`

	// Only show fills these.
	Detail *Detail `json:"detail,omitempty"`
}

// Detail is what show adds to a summary.
type Detail struct {
	Limits       events.Limits     `json:"limits"`
	KeepSteps    int               `json:"keep_steps,omitempty"` // compaction; 0 sends everything
	Tools        []string          `json:"tools"`
	History      int               `json:"history"`
	HistoryTurns []string          `json:"history_turns,omitempty"`
	Input        []events.Message  `json:"input"`
	ModelCalls   int               `json:"model_calls"`
	InputTokens  int               `json:"input_tokens"`
	OutputTokens int               `json:"output_tokens"`
	Output       string            `json:"output,omitempty"`
	Metadata     map[string]string `json:"metadata,omitempty"`
}

// summarize describes a turn from its folded state.
func summarize(st *fsm.State) Summary {
	s := Summary{Turn: st.TurnID, Session: st.SessionID, Agent: st.Agent, Model: st.Model, Steps: st.Step,
		ToolCalls: st.Used, Started: st.Started, Last: st.LastTime, Events: st.Seq, ForkedFrom: st.ForkedFrom}
	switch {
	case st.Done():
		s.Status, s.StopReason, s.Error = StatusFinished, st.Finished.StopReason, st.Finished.Error
	case st.Phase == fsm.PhasePaused:
		s.Status = StatusPaused
		if c := st.Pending(); c != nil {
			s.Waiting = waitingFor(c)
		}
	default:
		s.Status = StatusRunning
	}
	return s
}

func waitingFor(c *fsm.Call) *Waiting {
	if c.Gate == fsm.GateInput {
		var a struct {
			Question string `json:"question"`
		}
		_ = json.Unmarshal(c.Arguments, &a)
		return &Waiting{Kind: events.PauseInput, CallID: c.CallID, Question: a.Question}
	}
	return &Waiting{Kind: events.PauseApproval, CallID: c.CallID, Tool: c.Name, Arguments: c.Arguments}
}

// statusText is a summary's status in a table cell.
func (s Summary) statusText() string {
	switch s.Status {
	case StatusFinished:
		return "finished: " + string(s.StopReason)
	case StatusPaused:
		if s.Waiting == nil {
			return StatusPaused
		}
		if s.Waiting.Kind == events.PauseInput {
			return fmt.Sprintf("paused: asks %q", clip(s.Waiting.Question, 40))
		}
		return fmt.Sprintf("paused: approve %s %s", s.Waiting.Tool, clip(string(s.Waiting.Arguments), 30))
	}
	return s.Status
}

// lister reads turn summaries from JETLOOP_EVENTS without folding every
// log: the subjects listing names every turn, and a finished turn is known
// by two direct gets, its last event (turn.finished, with its metrics) and
// its first (turn.started, with agent, model and start time). Only turns
// still under way are read whole and folded, because whether one is paused,
// and on what, depends on more than its last event.
type lister struct {
	stream jetstream.Stream
	store  *runtime.Store
	folded int // turns read whole
}

func newLister(ctx context.Context, js jetstream.JetStream) (*lister, error) {
	stream, err := js.Stream(ctx, events.StreamEvents)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", events.StreamEvents, err)
	}
	store, err := runtime.NewStore(ctx, js)
	if err != nil {
		return nil, err
	}
	return &lister{stream: stream, store: store}, nil
}

// list summarizes the turns of session ("" for all), in parallel.
func (l *lister) list(ctx context.Context, session string) ([]Summary, error) {
	var (
		mu  sync.Mutex
		out []Summary
	)
	err := l.each(ctx, session, func(ctx context.Context, subj string) error {
		s, folded, err := l.summary(ctx, subj)
		if errors.Is(err, jetstream.ErrMsgNotFound) {
			return nil // purged since the listing: no turn any more
		}
		if err != nil {
			return err
		}
		if s.Turn == "" {
			return nil // not a turn's log: no turn.started (a workflow's)
		}
		mu.Lock()
		defer mu.Unlock()
		out = append(out, s)
		if folded {
			l.folded++
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	sortSummaries(out)
	return out, nil
}

// each calls f, in parallel, with the subject of every log of session (""
// for all) in the events stream.
func (l *lister) each(ctx context.Context, session string, f func(ctx context.Context, subject string) error) error {
	filter := "jetloop.events.*.*"
	if session != "" {
		filter = events.SessionEventsFilter(session)
	}
	info, err := l.stream.Info(ctx, jetstream.WithSubjectFilter(filter))
	if err != nil {
		return fmt.Errorf("list turns: %w", err)
	}
	g, gctx := errgroup.WithContext(ctx)
	g.SetLimit(16)
	for subj := range info.State.Subjects {
		g.Go(func() error { return f(gctx, subj) })
	}
	return g.Wait()
}

// sortSummaries puts the newest turns first.
func sortSummaries(list []Summary) {
	slices.SortFunc(list, func(a, b Summary) int {
		if c := b.Started.Compare(a.Started); c != 0 {
			return c
		}
		return strings.Compare(a.Turn, b.Turn)
	})
}

func (l *lister) summary(ctx context.Context, subject string) (Summary, bool, error) {
	lastMsg, err := l.stream.GetLastMsgForSubject(ctx, subject)
	if err != nil {
		return Summary{}, false, fmt.Errorf("last event of %s: %w", subject, err)
	}
	// Plain decoding: the orchestrator validated what it wrote, and schema
	// validation would be most of the listing's time (show and replay
	// validate every event).
	var last events.Envelope
	if err := json.Unmarshal(lastMsg.Data, &last); err != nil {
		return Summary{}, false, fmt.Errorf("last event of %s: %w", subject, err)
	}
	if last.Type != events.TurnFinished {
		st, err := l.fold(ctx, last.TurnID)
		if err != nil {
			return Summary{}, false, err
		}
		return summarize(st), true, nil
	}
	var fin events.TurnFinishedData
	_ = json.Unmarshal(last.Data, &fin)
	s := Summary{Turn: last.TurnID, Session: last.SessionID, Status: StatusFinished, StopReason: fin.StopReason,
		Error: fin.Error, Steps: fin.Metrics.Steps, ToolCalls: fin.Metrics.ToolCalls, Started: last.Time,
		Last: last.Time, Events: last.Seq}
	if last.Seq == 1 {
		return s, false, nil // rejected: the log is this one event
	}
	firstMsg, err := l.stream.GetMsg(ctx, 1, jetstream.WithGetMsgSubject(subject))
	if err != nil {
		return Summary{}, false, fmt.Errorf("first event of %s: %w", subject, err)
	}
	var first events.Envelope
	if err := json.Unmarshal(firstMsg.Data, &first); err != nil {
		return Summary{}, false, fmt.Errorf("first event of %s: %w", subject, err)
	}
	var d events.TurnStartedData
	if first.Type == events.TurnStarted && json.Unmarshal(first.Data, &d) == nil {
		s.Agent, s.Model, s.Started, s.ForkedFrom = d.Agent, d.Model, first.Time, d.ForkedFrom
	}
	return s, false, nil
}

func (l *lister) fold(ctx context.Context, turn string) (*fsm.State, error) {
	log, _, err := l.store.Read(ctx, turn)
	if err != nil {
		return nil, err
	}
	if len(log) == 0 {
		return nil, fmt.Errorf("no turn %q", turn)
	}
	st, err := fsm.Fold(log)
	if err != nil {
		return nil, fmt.Errorf("turn %s does not fold: %w", turn, err)
	}
	return st, nil
}

// turns lists turns with their status, newest first.
func turns(ctx context.Context, c *command, args []string) int {
	session := c.flags.String("session", "", "only the turns of this session")
	status := c.flags.String("status", "", "only turns that are running, paused or finished, or that stopped with this stop reason")
	agent := c.flags.String("agent", "", "only the turns of this agent")
	asJSON := c.flags.Bool("json", false, "print one JSON object per turn")
	if !c.parse(args) {
		return ExitUsage
	}
	if c.flags.NArg() != 0 {
		return c.usageErr("usage: jetloop turns [--session S] [--status S] [--agent A] [--json]")
	}
	if *session != "" && !events.ValidID(*session) {
		return c.usageErr("invalid session id %q", *session)
	}
	if *status != "" && !validStatus(*status) {
		return c.usageErr("--status: want running, paused, finished or a stop reason, got %q", *status)
	}
	nc, js, err := c.connect()
	if err != nil {
		return c.fail("%v", err)
	}
	defer nc.Close()
	cctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	l, err := newLister(cctx, js)
	if err != nil {
		return c.fail("%v", err)
	}
	all, err := l.list(cctx, *session)
	if err != nil {
		return c.fail("%v", err)
	}
	var shown []Summary
	for _, s := range all {
		if (*status == "" || s.Status == *status || string(s.StopReason) == *status) && (*agent == "" || s.Agent == *agent) {
			shown = append(shown, s)
		}
	}
	if *asJSON {
		enc := json.NewEncoder(c.stdout)
		for _, s := range shown {
			if err := enc.Encode(s); err != nil {
				return c.fail("%v", err)
			}
		}
		return ExitOK
	}
	if len(shown) == 0 {
		fmt.Fprintln(c.stdout, "no turns")
		return ExitOK
	}
	printTurns(c.stdout, shown, time.Now())
	return ExitOK
}

func printTurns(w io.Writer, list []Summary, now time.Time) {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "TURN\tSESSION\tAGENT\tSTATUS\tSTEPS\tTOOLS\tAGE")
	for _, s := range list {
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%d\t%d\t%s\n", s.Turn, sessionText(s), orDash(s.Agent), s.statusText(),
			s.Steps, s.ToolCalls, age(now.Sub(s.Started)))
	}
	_ = tw.Flush()
}

// sessionText shows a session only when it is not the turn's own.
func sessionText(s Summary) string {
	if s.Session == s.Turn {
		return "-"
	}
	return s.Session
}

func validStatus(s string) bool {
	switch s {
	case StatusRunning, StatusPaused, StatusFinished:
		return true
	}
	return slices.Contains([]events.StopReason{events.StopCompleted, events.StopStepCap, events.StopBudget,
		events.StopDoomLoop, events.StopTimeout, events.StopAborted, events.StopSynthesisDone, events.StopError,
		events.StopRejected}, events.StopReason(s))
}

// age is a duration rounded the way a person reads it.
func age(d time.Duration) string {
	switch {
	case d < time.Minute:
		return fmt.Sprintf("%ds", int(d.Seconds()))
	case d < time.Hour:
		return fmt.Sprintf("%dm", int(d.Minutes()))
	case d < 48*time.Hour:
		return fmt.Sprintf("%dh%02dm", int(d.Hours()), int(d.Minutes())%60)
	}
	return fmt.Sprintf("%dd", int(d.Hours()/24))
}
