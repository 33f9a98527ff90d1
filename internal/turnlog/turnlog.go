// Package turnlog reads turn logs as clients do, for the jetloop command
// (watch, turns, show) and the public client package (Watch, Wait, Turns):
// it follows a log as it grows, and describes turns at a glance, so that
// what "running", "paused on what" and "finished how" mean has one
// implementation.
package turnlog

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/jetloop/jetloop/internal/bus"
	"github.com/jetloop/jetloop/internal/events"
	"github.com/jetloop/jetloop/internal/fsm"
	"github.com/jetloop/jetloop/internal/logstore"
	"github.com/nats-io/nats.go/jetstream"
	"golang.org/x/sync/errgroup"
)

// Status is where a turn stands.
type Status string

// Turn statuses.
const (
	Running  Status = "running"
	Paused   Status = "paused"
	Finished Status = "finished"
)

func (s Status) String() string { return string(s) }

// Waiting is what a paused turn waits for: a reply to a question, or the
// approval of a tool call.
type Waiting struct {
	Kind      events.PauseKind `json:"kind"`
	CallID    string           `json:"call_id"`
	Question  string           `json:"question,omitempty"`
	Tool      string           `json:"tool,omitempty"`
	Arguments json.RawMessage  `json:"arguments,omitempty"`
}

// Turn is a turn at a glance, as `turns --json` prints it.
type Turn struct {
	TurnID     string             `json:"turn_id"`
	SessionID  string             `json:"session_id"`
	Status     Status             `json:"status"`
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
}

// Of describes a turn from its folded state.
func Of(st *fsm.State) Turn {
	s := Turn{TurnID: st.TurnID, SessionID: st.SessionID, Agent: st.Agent, Model: st.Model, Steps: st.Step,
		ToolCalls: st.Used, Started: st.Started, Last: st.LastTime, Events: st.Seq, ForkedFrom: st.ForkedFrom}
	switch {
	case st.Done():
		s.Status, s.StopReason, s.Error = Finished, st.Finished.StopReason, st.Finished.Error
	case st.Phase == fsm.PhasePaused:
		s.Status = Paused
		if c := st.Pending(); c != nil {
			s.Waiting = waitingFor(c)
		}
	default:
		s.Status = Running
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

// ErrNoTurn is a turn without a log.
var ErrNoTurn = errors.New("no turn")

// Lister reads turn summaries from JETLOOP_EVENTS without folding every
// log: the subjects listing names every turn, and a finished turn is known
// by two direct gets, its last event (turn.finished, with its metrics) and
// its first (turn.started, with agent, model and start time). Only turns
// still under way are read whole and folded, because whether one is paused,
// and on what, depends on more than its last event.
type Lister struct {
	store *logstore.Store

	mu     sync.Mutex
	folded int
}

// NewLister binds the events streams.
func NewLister(ctx context.Context, js jetstream.JetStream) (*Lister, error) {
	store, err := logstore.New(ctx, js)
	if err != nil {
		return nil, err
	}
	return &Lister{store: store}, nil
}

// Folded counts the turns this lister has read whole.
func (l *Lister) Folded() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.folded
}

// List summarizes the turns of session ("" for all), in parallel, newest
// first.
func (l *Lister) List(ctx context.Context, session string) ([]Turn, error) {
	var (
		mu  sync.Mutex
		out []Turn
	)
	err := l.Each(ctx, session, func(ctx context.Context, subj string) error {
		s, err := l.Summary(ctx, subj)
		if errors.Is(err, jetstream.ErrMsgNotFound) {
			return nil // purged since the listing: no turn any more
		}
		if err != nil {
			return err
		}
		if s.TurnID == "" {
			return nil // not a turn's log
		}
		mu.Lock()
		defer mu.Unlock()
		out = append(out, s)
		return nil
	})
	if err != nil {
		return nil, err
	}
	Sort(out)
	return out, nil
}

// Sort orders turns newest first.
func Sort(turns []Turn) {
	slices.SortFunc(turns, func(a, b Turn) int {
		if c := b.Started.Compare(a.Started); c != 0 {
			return c
		}
		return strings.Compare(a.TurnID, b.TurnID)
	})
}

// Each calls fn, 16 at a time, with the subject of every log of session
// ("" for all) in the events streams.
func (l *Lister) Each(ctx context.Context, session string, fn func(ctx context.Context, subject string) error) error {
	layout := l.store.Layout()
	filter := layout.AllFilter()
	if session != "" {
		filter = layout.SessionFilter(session)
	}
	subjects, err := l.store.Subjects(ctx, filter)
	if err != nil {
		return fmt.Errorf("list turns: %w", err)
	}
	g, gctx := errgroup.WithContext(ctx)
	g.SetLimit(16)
	for subj := range subjects {
		g.Go(func() error { return fn(gctx, subj) })
	}
	return g.Wait()
}

// StreamOf is the events stream that holds the log of id, bound for
// reads (logstore.Store.ReadsOf).
func (l *Lister) StreamOf(id string) jetstream.Stream { return l.store.ReadsOf(id) }

// Store reads logs from the lister's stream.
func (l *Lister) Store() *logstore.Store { return l.store }

// Get summarizes one turn; ErrNoTurn when it has no log.
func (l *Lister) Get(ctx context.Context, turn string) (Turn, error) {
	last, _, ok, err := l.store.Last(ctx, turn)
	if err != nil {
		return Turn{}, err
	}
	if !ok {
		return Turn{}, fmt.Errorf("%w %q", ErrNoTurn, turn)
	}
	return l.Summary(ctx, l.store.Layout().Subject(last.SessionID, turn))
}

// Summary summarizes the log on subject. A log that is not a turn's (it
// does not start with turn.started) gives a Turn without a TurnID.
func (l *Lister) Summary(ctx context.Context, subject string) (Turn, error) {
	stream := l.StreamOf(bus.TurnOf(subject))
	lastMsg, err := stream.GetLastMsgForSubject(ctx, subject)
	if err != nil {
		return Turn{}, fmt.Errorf("last event of %s: %w", subject, err)
	}
	// Plain decoding: the orchestrator validated what it wrote, and schema
	// validation would be most of the listing's time (show and replay
	// validate every event).
	var last events.Envelope
	if err := plainDecode(lastMsg.Data, -1, &last); err != nil {
		return Turn{}, fmt.Errorf("last event of %s: %w", subject, err)
	}
	if last.Type.Workflow() {
		return Turn{}, nil // a workflow's log, not a turn's
	}
	if last.Type != events.TurnFinished {
		st, err := l.Fold(ctx, last.TurnID)
		if err != nil {
			return Turn{}, err
		}
		l.mu.Lock()
		l.folded++
		l.mu.Unlock()
		return Of(st), nil
	}
	var fin events.TurnFinishedData
	_ = json.Unmarshal(last.Data, &fin)
	s := Turn{TurnID: last.TurnID, SessionID: last.SessionID, Status: Finished, StopReason: fin.StopReason,
		Error: fin.Error, Steps: fin.Metrics.Steps, ToolCalls: fin.Metrics.ToolCalls, Started: last.Time,
		Last: last.Time, Events: last.Seq}
	if last.Seq == 1 {
		return s, nil // rejected: the log is this one event
	}
	firstMsg, err := stream.GetMsg(ctx, 1, jetstream.WithGetMsgSubject(subject))
	if err != nil {
		return Turn{}, fmt.Errorf("first event of %s: %w", subject, err)
	}
	var first events.Envelope
	if err := plainDecode(firstMsg.Data, 0, &first); err != nil {
		return Turn{}, fmt.Errorf("first event of %s: %w", subject, err)
	}
	var d events.TurnStartedData
	if first.Type == events.TurnStarted && json.Unmarshal(first.Data, &d) == nil {
		s.Agent, s.Model, s.Started, s.ForkedFrom = d.Agent, d.Model, first.Time, d.ForkedFrom
	}
	return s, nil
}

// plainDecode decodes the first (i = 0) or last (i = -1) event of a
// stored message, which may hold a decision's events.
func plainDecode(data []byte, i int, e *events.Envelope) error {
	parts, err := events.Split(data)
	if err != nil {
		return err
	}
	if i < 0 {
		i = len(parts) - 1
	}
	return json.Unmarshal(parts[i], e)
}

// Fold reads a turn's whole log and folds it.
func (l *Lister) Fold(ctx context.Context, turn string) (*fsm.State, error) {
	log, _, err := l.store.Read(ctx, turn)
	if err != nil {
		return nil, err
	}
	if len(log) == 0 {
		return nil, fmt.Errorf("%w %q", ErrNoTurn, turn)
	}
	st, err := fsm.Fold(log)
	if err != nil {
		return nil, fmt.Errorf("turn %s does not fold: %w", turn, err)
	}
	return st, nil
}
