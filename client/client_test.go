package client_test

import (
	"context"
	"encoding/json"
	"errors"
	"slices"
	"testing"
	"time"

	"github.com/jetloop/jetloop/client"
	"github.com/jetloop/jetloop/internal/events"
	"github.com/jetloop/jetloop/internal/testkit"
	"github.com/nats-io/nats.go"
)

func newClient(t *testing.T) (*client.Client, context.Context) {
	t.Helper()
	nc, err := nats.Connect(natsURL)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	c, err := client.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	t.Cleanup(cancel)
	return c, ctx
}

// paused submits a turn of agent and returns it once it waits.
func paused(t *testing.T, c *client.Client, ctx context.Context, agent string) (string, client.Waiting) {
	t.Helper()
	id, err := c.Submit(ctx, client.TurnRequest{Agent: agent, Input: client.Text("go")})
	if err != nil {
		t.Fatal(err)
	}
	for ev, err := range c.Watch(ctx, id) {
		if err != nil {
			t.Fatal(err)
		}
		if _, ok := ev.(client.TurnPaused); ok {
			break
		}
	}
	turn, err := c.Turn(ctx, id)
	if err != nil {
		t.Fatal(err)
	}
	if turn.Status != client.StatusPaused || turn.Waiting == nil {
		t.Fatalf("turn %s: %+v", id, turn)
	}
	return id, *turn.Waiting
}

// Every event type of docs/protocol.md has its Go type, and a log decodes into
// them in order with the envelope's fields.
func TestEventsAreTyped(t *testing.T) {
	c, ctx := newClient(t)
	id, wait := paused(t, c, ctx, "Asker")
	if wait.Kind != client.PauseInput || wait.Question != "Which colour?" {
		t.Fatalf("waiting %+v", wait)
	}
	if err := c.Reply(ctx, id, wait.CallID, "red"); err != nil {
		t.Fatal(err)
	}
	res, err := c.Wait(ctx, id)
	if err != nil || !res.Succeeded() || res.Output != "Blue it is." || res.TurnID != id || res.Metrics.Steps != 2 {
		t.Fatalf("result %+v, %v", res, err)
	}
	log, err := c.Events(ctx, id)
	if err != nil {
		t.Fatal(err)
	}
	seen := map[client.EventType]bool{}
	for i, ev := range log {
		info := ev.Info()
		if info.Seq != i+1 || info.TurnID != id || info.SessionID != id || info.ID == "" || info.Time.IsZero() {
			t.Errorf("event %d: %+v", i, info)
		}
		seen[info.Type] = true
		switch e := ev.(type) {
		case client.TurnStarted:
			if e.Agent != "Asker" || !slices.Contains(e.Tools, "ask_user") {
				t.Errorf("turn.started %+v", e)
			}
		case client.ToolCompleted:
			if e.Name != "ask_user" || e.Output != "red" {
				t.Errorf("tool.completed %+v", e)
			}
		case client.TurnFinished:
			if e.StopReason != client.StopCompleted {
				t.Errorf("turn.finished %+v", e)
			}
		}
	}
	for _, typ := range []client.EventType{client.TypeTurnStarted, client.TypeStepStarted, client.TypeModelCompleted,
		client.TypeToolRequested, client.TypeTurnPaused, client.TypeTurnResumed, client.TypeToolCompleted,
		client.TypeStepChecked, client.TypeTurnFinished} {
		if !seen[typ] {
			t.Errorf("no %s in the log", typ)
		}
	}
	// Watch from the first event yields the same log.
	var watched []client.Event
	for ev, err := range c.Watch(ctx, id) {
		if err != nil {
			t.Fatal(err)
		}
		watched = append(watched, ev)
	}
	if len(watched) != len(log) {
		t.Fatalf("watch yielded %d events, the log has %d", len(watched), len(log))
	}
}

// The client's set of event types is docs/protocol.md's: a type the log may
// hold that the client cannot type would break every Watch.
func TestEveryEventTypeDecodes(t *testing.T) {
	for _, typ := range slices.Concat(events.Types, events.WorkflowTypes) {
		d, _ := events.NewData(typ)
		data, err := json.Marshal(d)
		if err != nil {
			t.Fatal(err)
		}
		ev, err := client.ExportFromEnvelope(events.Envelope{Type: typ, Seq: 1, Data: data})
		if err != nil {
			t.Errorf("%s: %v", typ, err)
			continue
		}
		if ev.Info().Type != typ {
			t.Errorf("%s decoded as %s", typ, ev.Info().Type)
		}
	}
}

// Control that cannot move a turn is refused before it is sent, with an
// error that says why.
func TestControlSaysWhatIsWrong(t *testing.T) {
	c, ctx := newClient(t)
	if err := c.Abort(ctx, "no-such-turn", "x"); !errors.Is(err, client.ErrTurnNotFound) {
		t.Errorf("abort of no turn: %v", err)
	}
	done, err := c.Submit(ctx, client.TurnRequest{Agent: "Greeter", Input: client.Text("hi")})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.Wait(ctx, done); err != nil {
		t.Fatal(err)
	}
	if err := c.Abort(ctx, done, "x"); !errors.Is(err, client.ErrTurnFinished) {
		t.Errorf("abort of a finished turn: %v", err)
	}
	if err := c.Reply(ctx, done, "call", "x"); !errors.Is(err, client.ErrTurnFinished) {
		t.Errorf("reply to a finished turn: %v", err)
	}

	asked, wait := paused(t, c, ctx, "Asker")
	if err := c.Reply(ctx, asked, "another-call", "x"); !errors.Is(err, client.ErrNotWaiting) {
		t.Errorf("reply to another call: %v", err)
	}
	if err := c.Approve(ctx, asked, wait.CallID, ""); !errors.Is(err, client.ErrNotWaiting) {
		t.Errorf("approval of a question: %v", err)
	}
	if err := c.Abort(ctx, asked, "changed my mind"); err != nil {
		t.Fatal(err)
	}
	if res, err := c.Wait(ctx, asked); err != nil || res.StopReason != client.StopAborted {
		t.Errorf("aborted turn: %+v, %v", res, err)
	}

	gated, wait := paused(t, c, ctx, "Gated")
	if wait.Kind != client.PauseApproval || wait.Tool != "echo" {
		t.Fatalf("waiting %+v", wait)
	}
	if err := c.Reply(ctx, gated, wait.CallID, "x"); !errors.Is(err, client.ErrNotWaiting) {
		t.Errorf("reply to an approval: %v", err)
	}
	if err := c.Deny(ctx, gated, wait.CallID, "not now"); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Wait(ctx, gated); err != nil {
		t.Fatal(err)
	}
	log, err := c.Events(ctx, gated)
	if err != nil {
		t.Fatal(err)
	}
	for _, ev := range log {
		if e, ok := ev.(client.ToolCompleted); ok && (!e.IsError || e.Name != "echo") {
			t.Errorf("a denied call completed as %+v", e)
		}
	}
}

// An approved call runs on the worker.
func TestApproveRunsTheCall(t *testing.T) {
	c, ctx := newClient(t)
	id, wait := paused(t, c, ctx, "Gated")
	if err := c.Approve(ctx, id, wait.CallID, "go ahead"); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Wait(ctx, id); err != nil {
		t.Fatal(err)
	}
	log, err := c.Events(ctx, id)
	if err != nil {
		t.Fatal(err)
	}
	ran := false
	for _, ev := range log {
		if e, ok := ev.(client.ToolCompleted); ok {
			ran = !e.IsError && e.Worker == "echoer" && e.Output == `{"text":"hi"}`
		}
	}
	if !ran {
		t.Errorf("the approved call did not run: %+v", log)
	}
}

// Turns filters by session, status and agent; Turn describes one.
func TestTurnsFilter(t *testing.T) {
	c, ctx := newClient(t)
	session := client.NewID()
	var ids []string
	for range 2 {
		id, err := c.Submit(ctx, client.TurnRequest{SessionID: session, Agent: "Greeter", Input: client.Text("hi")})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := c.Wait(ctx, id); err != nil {
			t.Fatal(err)
		}
		ids = append(ids, id)
	}
	got, err := c.Turns(ctx, client.TurnFilter{SessionID: session})
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 2 || got[0].TurnID != ids[1] || got[1].TurnID != ids[0] || got[0].Status != client.StatusFinished ||
		got[0].StopReason != client.StopCompleted || got[0].Agent != "Greeter" {
		t.Fatalf("turns of the session: %+v", got)
	}
	if got, err := c.Turns(ctx, client.TurnFilter{SessionID: session, Status: client.StatusPaused}); err != nil || len(got) != 0 {
		t.Fatalf("paused turns of the session: %+v, %v", got, err)
	}
	if got, err := c.Turns(ctx, client.TurnFilter{Agent: "Greeter", StopReason: client.StopCompleted}); err != nil || len(got) < 2 {
		t.Fatalf("Greeter's completed turns: %+v, %v", got, err)
	}
	if _, err := c.Turn(ctx, "no-such-turn"); !errors.Is(err, client.ErrTurnNotFound) {
		t.Fatalf("Turn of no turn: %v", err)
	}
	if _, err := c.Events(ctx, "no-such-turn"); !errors.Is(err, client.ErrTurnNotFound) {
		t.Fatalf("Events of no turn: %v", err)
	}
}

// Watch FromNow skips what the log holds; Watch of a turn that never comes
// ends with its context.
func TestWatchFromNowAndCancel(t *testing.T) {
	nc, err := nats.Connect(natsURL)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	c, err := client.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	t.Cleanup(cancel)
	id, wait := paused(t, c, ctx, "Asker")
	subs := nc.NumSubscriptions()
	first := make(chan client.Event, 1)
	errs := make(chan error, 1)
	go func() {
		for ev, err := range c.Watch(ctx, id, client.FromNow()) {
			if err != nil {
				errs <- err
				return
			}
			select {
			case first <- ev:
			default:
			}
		}
		errs <- nil
	}()
	// Reply once the watch has begun (it subscribes to the log once it
	// knows where it starts), or FromNow would rightly see nothing of a
	// turn that finished before it.
	testkit.WaitFor(t, "the watch to begin", func() bool { return nc.NumSubscriptions() > subs })
	if err := c.Reply(ctx, id, wait.CallID, "green"); err != nil {
		t.Fatal(err)
	}
	if err := <-errs; err != nil {
		t.Fatal(err)
	}
	if ev := <-first; ev.Info().Type != client.TypeTurnResumed {
		t.Errorf("FromNow began with %+v", ev.Info())
	}

	short, cancel := context.WithTimeout(ctx, 200*time.Millisecond)
	defer cancel()
	for ev, err := range c.Watch(short, "never-submitted") {
		if ev != nil || !errors.Is(err, context.DeadlineExceeded) {
			t.Errorf("watch of no turn: %v, %v", ev, err)
		}
	}
	if _, err := c.Wait(short, "never-submitted"); !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("wait for no turn: %v", err)
	}
}

// A submission that fails the schema is refused before it is sent.
func TestSubmitChecksTheSchema(t *testing.T) {
	c, ctx := newClient(t)
	if _, err := c.Submit(ctx, client.TurnRequest{TurnID: "bad id!", Input: client.Text("hi")}); err == nil {
		t.Error("a bad turn id was submitted")
	}
	if _, err := c.Submit(ctx, client.TurnRequest{Input: []client.Message{{Role: "robot", Content: "hi"}}}); err == nil {
		t.Error("a bad role was submitted")
	}
	for _, err := range c.Watch(ctx, "bad id!") {
		if err == nil {
			t.Error("watched a bad id")
		}
	}
}
