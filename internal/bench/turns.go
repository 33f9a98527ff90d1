package bench

import (
	"context"
	"encoding/json"
	"fmt"
	"sync"
	"time"

	"github.com/jetloop/jetloop/internal/bus"

	"github.com/jetloop/jetloop/internal/events"
	"github.com/jetloop/jetloop/internal/model"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// script is a turn of k steps: k-1 steps that each call echo once, with
// arguments unique to the turn and step (so no doom loop, and the tool's time
// can be found again), then an answer without tool calls. delay is the
// model's time per call.
func script(turn string, k int, delay time.Duration) *model.Script {
	sc := &model.Script{}
	for i := 1; i < k; i++ {
		args, _ := json.Marshal(map[string]string{"text": echoText(turn, i)})
		sc.Responses = append(sc.Responses, model.ScriptResponse{DelayMs: int(delay.Milliseconds()),
			ToolCalls: []model.ScriptCall{{Name: "echo", Arguments: args}}})
	}
	sc.Responses = append(sc.Responses, model.ScriptResponse{Text: "done", DelayMs: int(delay.Milliseconds())})
	return sc
}

func echoText(turn string, step int) string { return fmt.Sprintf("%s/%d", turn, step) }

// askScript is a turn that asks the user a question in its first step and
// so pauses until a reply.
func askScript() *model.Script {
	return &model.Script{Responses: []model.ScriptResponse{
		{ToolCalls: []model.ScriptCall{{Name: "ask_user", Arguments: json.RawMessage(`{"question":"Which file should I change?"}`)}}},
		{Text: "done"},
	}}
}

func submission(turn string, sc *model.Script) ([]byte, error) {
	raw, err := json.Marshal(sc)
	if err != nil {
		return nil, err
	}
	return json.Marshal(events.Submit{TurnID: turn, Agent: "Bench", Model: "script", Script: raw,
		Input: []events.Message{{Role: events.RoleUser, Content: "Echo a few things, then answer."}}})
}

func submit(ctx context.Context, js jetstream.JetStream, turn string, sc *model.Script) error {
	data, err := submission(turn, sc)
	if err != nil {
		return err
	}
	if _, err := js.Publish(ctx, events.SubjectSubmit, data, jetstream.WithMsgID(turn)); err != nil {
		return fmt.Errorf("bench: submit %s: %w", turn, err)
	}
	return nil
}

// seen is what the watcher knows of one turn.
type seen struct {
	steps    int
	after    time.Time // when its first event after the mark arrived
	paused   bool
	finished bool
	stop     events.StopReason
}

// watcher follows every event appended to any turn or workflow through a
// core NATS subscription: it costs the server one more delivery per event,
// nothing more, and tells the bench when turns pause, progress and finish.
type watcher struct {
	sub *nats.Subscription

	mu       sync.Mutex
	turns    map[string]*seen
	finished int
	paused   int
	onFinish func(turn string, s seen)
	changed  chan struct{}
	mark     time.Time
}

// setMark makes the watcher note each turn's first event from now on.
func (w *watcher) setMark(t time.Time) {
	w.mu.Lock()
	w.mark = t
	w.mu.Unlock()
}

func watch(nc *nats.Conn) (*watcher, error) {
	w := &watcher{turns: map[string]*seen{}, changed: make(chan struct{}, 1)}
	sub, err := nc.Subscribe("jetloop.events.>", w.event)
	if err != nil {
		return nil, fmt.Errorf("bench: watch events: %w", err)
	}
	_ = sub.SetPendingLimits(-1, -1)
	w.sub = sub
	// The subscription must be known to the server before any turn starts.
	if err := nc.Flush(); err != nil {
		return nil, err
	}
	return w, nil
}

func (w *watcher) stop() { _ = w.sub.Unsubscribe() }

func (w *watcher) event(m *nats.Msg) {
	now := time.Now()
	turn := bus.TurnOf(m.Subject)
	// The header names a message's (last) event's type: a message that
	// holds a decision's events is read for the types of the others.
	types := []events.Type{events.Type(m.Header.Get(events.HeaderType))}
	if m.Header.Get(events.HeaderEvents) != "" {
		types = types[:0]
		_ = events.Each(m.Data, func(e events.Envelope) error { types = append(types, e.Type); return nil })
	}
	// A workflow's log ends with workflow.finished, whose stop_reason is
	// where a turn's is.
	var fin events.TurnFinishedData
	if typ := types[len(types)-1]; typ == events.TurnFinished || typ == events.WorkflowFinished {
		if e, err := events.LastOf(m.Data); err == nil {
			_ = json.Unmarshal(e.Data, &fin)
		}
	}
	w.mu.Lock()
	s := w.turns[turn]
	if s == nil {
		s = &seen{}
		w.turns[turn] = s
	}
	if !w.mark.IsZero() && s.after.IsZero() {
		s.after = now
	}
	var done func(string, seen)
	for _, typ := range types {
		done = w.take(s, typ, fin, done)
	}
	copied := *s
	w.mu.Unlock()
	if done != nil {
		done(turn, copied)
	}
	select {
	case w.changed <- struct{}{}:
	default:
	}
}

// take counts one event of type typ of turn s; w.mu is held. It returns
// the function to call once the turn is done (done, unless this event
// finished it).
func (w *watcher) take(s *seen, typ events.Type, fin events.TurnFinishedData, done func(string, seen)) func(string, seen) {
	switch typ {
	case events.StepStarted:
		s.steps++
	case events.TurnPaused:
		if !s.paused {
			s.paused = true
			w.paused++
		}
	case events.TurnFinished, events.WorkflowFinished:
		if !s.finished {
			s.finished = true
			s.stop = fin.StopReason
			w.finished++
			done = w.onFinish
		}
	}
	return done
}

// until waits for cond, checked after each event, for at most limit.
func (w *watcher) until(ctx context.Context, limit time.Duration, what string, cond func() bool) error {
	t := time.NewTimer(limit)
	defer t.Stop()
	for {
		w.mu.Lock()
		ok := cond()
		w.mu.Unlock()
		if ok {
			return nil
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-t.C:
			return fmt.Errorf("bench: timed out after %s waiting for %s", limit, what)
		case <-w.changed:
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// snapshot copies what is known of the turns.
func (w *watcher) snapshot() map[string]seen {
	w.mu.Lock()
	defer w.mu.Unlock()
	out := make(map[string]seen, len(w.turns))
	for k, v := range w.turns {
		out[k] = *v
	}
	return out
}
