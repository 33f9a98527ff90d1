package turnlog_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/jetloop/jetloop/internal/bus"
	"github.com/jetloop/jetloop/internal/events"
	"github.com/jetloop/jetloop/internal/fsm"
	"github.com/jetloop/jetloop/internal/testkit"
	"github.com/jetloop/jetloop/internal/turnlog"
	"github.com/nats-io/nats.go/jetstream"
)

// logs writes turn logs as the orchestrator does: the machine decides, the
// store appends its events.
type logs struct {
	t     *testing.T
	js    jetstream.JetStream
	store *bus.Store
	now   time.Time
	ids   int
}

func newLogs(t *testing.T) *logs {
	srv := testkit.Start(t)
	_, js := srv.Connect(t)
	ctx := t.Context()
	if err := bus.EnsureStreams(ctx, js); err != nil {
		t.Fatal(err)
	}
	store, err := bus.NewStore(ctx, js)
	if err != nil {
		t.Fatal(err)
	}
	return &logs{t: t, js: js, store: store, now: time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)}
}

// turn is one turn's state and the sequence of its last message.
type turn struct {
	st  *fsm.State
	seq uint64
}

// do decides in on tn and appends what the machine decided.
func (l *logs) do(tn *turn, in fsm.Input) {
	l.t.Helper()
	l.now = l.now.Add(time.Second)
	d, err := fsm.Decide(tn.st, in, fsm.Env{Now: l.now, NewID: func() string { l.ids++; return fmt.Sprintf("e%d", l.ids) }})
	if err != nil {
		l.t.Fatal(err)
	}
	if tn.seq, err = l.store.Append(l.t.Context(), tn.seq, d.Events); err != nil {
		l.t.Fatal(err)
	}
	tn.st = d.State
}

// start begins a turn of agent General with ask_user offered.
func (l *logs) start(id, session string) *turn {
	l.t.Helper()
	tn := &turn{st: fsm.New(id)}
	l.do(tn, fsm.Start{TurnID: id, SessionID: session, Input: []events.Message{{Role: events.RoleUser, Content: "hi"}},
		Setup: fsm.Setup{Agent: "General", Model: "script", Tools: []events.ToolSpec{fsm.AskUserSpec},
			Limits: fsm.Limits{Steps: 5, Budget: fsm.DefaultBudget, DoomLoop: fsm.DefaultDoomLoop}}})
	return tn
}

func answer(step int, text string, calls ...events.ToolCall) fsm.ModelAnswer {
	return fsm.ModelAnswer{Step: step, Kind: events.ModelStep, Text: text, ToolCalls: calls, Attempts: 1}
}

// TestListerDescribesTurns: a finished turn, one paused on a question and
// one running are listed as such, newest first, and only the two
// unfinished are read whole and folded.
func TestListerDescribesTurns(t *testing.T) {
	l := newLogs(t)
	done := l.start("done", "s1")
	l.do(done, answer(1, "hello"))
	asking := l.start("asking", "s1")
	l.do(asking, answer(1, "", events.ToolCall{CallID: "c1", Name: fsm.AskUser, Arguments: json.RawMessage(`{"question":"why?"}`)}))
	l.start("running", "s2")

	ctx := t.Context()
	lister, err := turnlog.NewLister(ctx, l.js)
	if err != nil {
		t.Fatal(err)
	}
	turns, err := lister.List(ctx, "")
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, tn := range turns {
		s := fmt.Sprintf("%s %s %s/%s steps=%d", tn.TurnID, tn.Status, tn.Agent, tn.Model, tn.Steps)
		if tn.StopReason != "" {
			s += " " + string(tn.StopReason)
		}
		if w := tn.Waiting; w != nil {
			s += fmt.Sprintf(" waits for %s %s %q", w.Kind, w.CallID, w.Question)
		}
		got = append(got, s)
	}
	want := []string{
		"running running General/script steps=1",
		`asking paused General/script steps=1 waits for input c1 "why?"`,
		"done finished General/script steps=1 completed",
	}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("List:\n%q\nwant\n%q", got, want)
	}
	if n := lister.Folded(); n != 2 {
		t.Errorf("folded %d turns, want the 2 unfinished ones", n)
	}
	if s2, err := lister.List(ctx, "s2"); err != nil || len(s2) != 1 || s2[0].TurnID != "running" {
		t.Errorf("List of session s2: %v, %v", s2, err)
	}
	if _, err := lister.Get(ctx, "nobody"); !errors.Is(err, turnlog.ErrNoTurn) {
		t.Errorf("Get of a turn without a log: %v", err)
	}
	if tn, err := lister.Get(ctx, "done"); err != nil || tn.Status != turnlog.Finished || tn.Started.IsZero() {
		t.Errorf("Get done: %+v, %v", tn, err)
	}
}

// TestFollow: a log is followed from its first event or its last, and as it
// grows.
func TestFollow(t *testing.T) {
	l := newLogs(t)
	done := l.start("done", "s1")
	l.do(done, answer(1, "hello"))
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()

	var types []events.Type
	for e, err := range turnlog.Follow(ctx, l.js, events.OneStream, "done", turnlog.FromFirst) {
		if err != nil {
			t.Fatal(err)
		}
		types = append(types, e.Type)
		if e.Type == events.TurnFinished {
			break
		}
	}
	if len(types) != done.st.Seq || types[0] != events.TurnStarted {
		t.Errorf("from the first: %v, want the log's %d events from turn.started", types, done.st.Seq)
	}
	for e, err := range turnlog.Follow(ctx, l.js, events.OneStream, "done", turnlog.FromLast) {
		if err != nil || e.Type != events.TurnFinished || e.Seq != done.st.Seq {
			t.Errorf("from the last: %s seq %d, %v", e.Type, e.Seq, err)
		}
		break
	}

	// A log not written yet is waited for.
	first := make(chan events.Type, 1)
	go func() {
		for e, err := range turnlog.Follow(ctx, l.js, events.OneStream, "later", turnlog.FromFirst) {
			if err == nil {
				first <- e.Type
			}
			return
		}
	}()
	l.start("later", "s1")
	if typ := <-first; typ != events.TurnStarted {
		t.Errorf("a log followed before it was written begins with %s", typ)
	}

	// A log that grows while it is followed.
	growing := l.start("growing", "s1")
	next := make(chan events.Envelope)
	go func() {
		defer close(next)
		for e, err := range turnlog.Follow(ctx, l.js, events.OneStream, "growing", turnlog.FromFirst) {
			if err != nil {
				return
			}
			next <- e
			if e.Type == events.TurnFinished {
				return
			}
		}
	}()
	for e := range next {
		if e.Seq == growing.st.Seq && growing.st.Phase != fsm.PhaseDone {
			l.do(growing, answer(1, "later")) // written once the reader has caught up
		}
		if e.Type == events.TurnFinished {
			return
		}
	}
	t.Fatal("the growing log's turn.finished never came")
}
