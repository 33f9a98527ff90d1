package orchestrator_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/jetloop/jetloop/internal/bus"
	"github.com/jetloop/jetloop/internal/orchestrator"

	"github.com/jetloop/jetloop/internal/testkit"

	"github.com/jetloop/jetloop/internal/events"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// deadBySubject returns the dead letters kept so far, by their original
// subject, with their reasons.
func (h *harness) deadBySubject() map[string][]string {
	h.t.Helper()
	out := map[string][]string{}
	for _, m := range testkit.Stored(h.t, h.js, events.StreamDead) {
		key := m.Subject + " " + m.Header.Get("Jetloop-Subject")
		out[key] = append(out[key], m.Header.Get(events.HeaderError))
	}
	return out
}

// inboxLeft is the number of inputs still in the inbox.
func (h *harness) inboxLeft() uint64 {
	h.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	s, err := h.js.Stream(ctx, events.StreamInbox)
	if err != nil {
		h.t.Fatal(err)
	}
	info, err := s.Info(ctx)
	if err != nil {
		h.t.Fatal(err)
	}
	return info.State.Msgs
}

// TestPoisonInputsDoNotStallOtherTurns floods every shard with inputs that
// can never be handled — subjects of no kind, extra tokens, invalid JSON,
// results for calls a turn never made or naming another tool — and checks
// that an unrelated turn still finishes promptly, that every poison input
// is a dead letter on a subject the orchestrator may write
// (jetloop.dead.unknown for the malformed ones), and that none is retried.
func TestPoisonInputsDoNotStallOtherTurns(t *testing.T) {
	h := newHarness(t).start()
	h.submit(script("victim", "General", `{"responses":[{"tool_calls":[{"name":"echo","arguments":{"text":"x"}}]},{"text":"waiting"}]}`))
	h.finished("victim")
	// victim's step 1 called echo: its call id is known, its tool is echo.
	var callID string
	for _, c := range of[events.ToolRequestedData](t, h.events("victim"), events.ToolRequested) {
		callID = c.CallID
	}

	const each = 40 // per kind of poison: enough to land on every shard
	poison := 0
	send := func(subject string, data []byte) {
		h.publish(subject, data, "")
		poison++
	}
	for i := range each {
		turn := fmt.Sprintf("p%d", i)
		// Five tokens would name a partition: the inbox does not store
		// one published as such, which its publisher hears at once.
		if _, err := h.js.Publish(context.Background(), "jetloop.inbox.control."+turn+".extra", []byte(`{"action":"abort"}`)); err == nil {
			t.Fatal("the inbox stored a five-token subject")
		}
		send("jetloop.inbox.result."+turn+".x.y", []byte(`{}`))
		send("jetloop.inbox.nokind."+turn, []byte(`{}`))
		send("jetloop.inbox.result."+turn, []byte(`not json`))
		send(events.ControlSubject(turn), []byte(`{"action":"abort"}`)) // no such turn
	}
	// A result for a call the turn never requested, and one naming another
	// tool than its call's, for a finished turn and for a live one.
	live := "live"
	h.submit(script(live, "Gated", `{"responses":[{"tool_calls":[{"name":"echo","arguments":{"text":"y"}}]},{"text":"ok"}]}`))
	paused := h.waitType(live, events.TurnPaused)
	var p events.TurnPausedData
	_ = json.Unmarshal(paused.Data, &p)
	send(events.ResultSubject(live), mustJSON(events.ToolResult{TurnID: live, CallID: "never-asked", Tool: "echo", Output: "forged", Attempt: 1}))
	send(events.ResultSubject(live), mustJSON(events.ToolResult{TurnID: live, CallID: p.CallID, Tool: "write_file", Output: "forged", Final: true, Attempt: 1}))
	_ = callID

	began := time.Now()
	h.submit(script("bystander", "General", `{"responses":[{"tool_calls":[{"name":"echo","arguments":{"text":"z"}}]},{"text":"done"}]}`))
	_, fin := h.finished("bystander")
	took := time.Since(began)
	if fin.StopReason != events.StopCompleted {
		t.Fatalf("bystander finished %s", fin.StopReason)
	}
	// A liveness bound, not a benchmark: before the fix such a flood held a
	// 2-step turn 10 to 43 s; a loaded machine may take a few seconds.
	if took > 9*time.Second {
		t.Errorf("an unrelated turn took %s behind %d poison inputs", took, poison)
	}

	h.waitFor("every poison input to be a dead letter", func() bool {
		n := 0
		for _, reasons := range h.deadBySubject() {
			n += len(reasons)
		}
		return n >= poison && h.inboxLeft() == 0
	})
	dead := h.deadBySubject()
	for key, reasons := range dead {
		kind, subject, _ := strings.Cut(key, " ")
		switch {
		case strings.HasSuffix(subject, ".extra") || strings.Contains(subject, ".x.y") || strings.Contains(subject, ".nokind."):
			if kind != "jetloop.dead.unknown" {
				t.Errorf("%s went to %s, want jetloop.dead.unknown", subject, kind)
			}
		case kind == "jetloop.dead.unknown" || kind == "jetloop.dead.":
			t.Errorf("%s went to %s", subject, kind)
		}
		if len(reasons) != 1 && subject != events.ResultSubject(live) {
			t.Errorf("%s: %d dead letters, want 1 each: %q", subject, len(reasons), reasons)
		}
	}
	forged := dead["jetloop.dead.result "+events.ResultSubject(live)]
	if len(forged) != 2 || !strings.Contains(strings.Join(forged, "|"), "never requested") || !strings.Contains(strings.Join(forged, "|"), `a call of "echo"`) {
		t.Errorf("forged results: %q, want one never requested and one of another tool", forged)
	}
	// The paused turn was not moved by the forged final result.
	if last := h.last(live); last != events.TurnPaused {
		t.Errorf("the live turn's last event is %s after forged results, want turn.paused", last)
	}
	h.control(live, events.Control{Action: events.ActionAbort})
	h.finished(live)
}

// TestInputThatKillsItsHandlerIsDeadLettered: an input whose every
// delivery ends with the process that took it (here: a crash hook that
// stops the orchestrator's shard, as a crash would) is delivered at most
// ten times, then kept as a dead letter with the reason, and leaves the
// inbox.
func TestInputThatKillsItsHandlerIsDeadLettered(t *testing.T) {
	h := newHarness(t)
	h.worker()
	// It dies with its decision whole in the log (a half-written one is
	// completed by the turn's next input, and this turn has none).
	h.orchestrator(orchestrator.WithAckWait(100*time.Millisecond), orchestrator.WithCrashHook(func(stage string) error {
		if stage == orchestrator.StagePartial {
			return nil
		}
		return fmt.Errorf("crash")
	}))
	h.submit(script("killer", "General", `{"responses":[{"text":"hi"}]}`))
	h.waitFor("the submission to be a dead letter", func() bool {
		for key, reasons := range h.deadBySubject() {
			if key == "jetloop.dead.submit "+events.SubjectSubmit && strings.Contains(reasons[0], fmt.Sprintf("delivered %d times", bus.InboxMaxDeliver)) {
				return true
			}
		}
		return false
	})
	h.waitFor("the inbox to be empty", func() bool { return h.inboxLeft() == 0 })
}

// TestSizesCannotStickATurn runs the three turns that used to stick for
// ever on the server's 1 MiB max payload, and one whose result truly
// cannot be stored: each finishes within seconds, and the next turn of its
// session still works.
func TestSizesCannotStickATurn(t *testing.T) {
	h := newHarness(t)
	root := t.TempDir()
	line := strings.Repeat("x", 97) + "\n" // 98 bytes
	if err := os.WriteFile(filepath.Join(root, "big.txt"), []byte(strings.Repeat(line, 2000)), 0o644); err != nil {
		t.Fatal(err) // 196 KB, within read_file's 2000 lines
	}
	stopWorker := h.workerWith(root, nil)
	h.orchestrator()

	next := func(session, turn string) {
		t.Helper()
		sub := script(turn, "General", `{"responses":[{"text":"still here"}]}`)
		sub.SessionID = session
		h.submit(sub)
		if _, fin := h.finished(turn); fin.StopReason != events.StopCompleted {
			t.Fatalf("%s, the next turn of session %s: %s %s", turn, session, fin.StopReason, fin.Error)
		}
	}

	t.Run("a session history past 1 MiB", func(t *testing.T) {
		for i := range 3 {
			sub := script(fmt.Sprintf("hist%d", i), "General", `{"responses":[{"text":"noted"}]}`)
			sub.SessionID = "hist"
			sub.Input = []events.Message{{Role: events.RoleUser, Content: strings.Repeat("h", 500_000)}}
			h.submit(sub)
			if _, fin := h.finished(sub.TurnID); fin.StopReason != events.StopCompleted {
				t.Fatalf("turn %d: %s %s", i, fin.StopReason, fin.Error)
			}
		}
		next("hist", "hist-next")
	})

	t.Run("seven reads of 196 KB in one step", func(t *testing.T) {
		var calls []string
		for i := range 7 { // offsets differ: seven identical calls are a doom loop
			calls = append(calls, fmt.Sprintf(`{"name":"read_file","arguments":{"path":"big.txt","offset":%d}}`, i))
		}
		sub := script("reads", "General", `{"responses":[{"tool_calls":[`+strings.Join(calls, ",")+`]},{"text":"read them all"}]}`)
		h.submit(sub)
		log, fin := h.finished("reads")
		if fin.StopReason != events.StopCompleted {
			t.Fatalf("%s %s", fin.StopReason, fin.Error)
		}
		for _, c := range of[events.ToolCompletedData](t, log, events.ToolCompleted) {
			if c.IsError || len(c.Output) < 190_000 {
				t.Errorf("read %s: error %v, %d bytes", c.CallID, c.IsError, len(c.Output))
			}
		}
		next("reads", "reads-next")
	})

	t.Run("200 KB of <", func(t *testing.T) {
		text := strings.Repeat("<", 200_000)
		sub := script("angle", "General", `{"responses":[{"tool_calls":[{"name":"echo","arguments":{"text":"`+text+`"}}]},{"text":"echoed"}]}`)
		data, err := events.Marshal(sub) // json.Marshal would send 1.2 MB of \u003c
		if err != nil {
			t.Fatal(err)
		}
		h.publish(events.SubjectSubmit, data, sub.TurnID)
		log, fin := h.finished("angle")
		if fin.StopReason != events.StopCompleted {
			t.Fatalf("%s %s", fin.StopReason, fin.Error)
		}
		for _, c := range of[events.ToolCompletedData](t, log, events.ToolCompleted) {
			if c.Output != text {
				t.Errorf("echo output: %d bytes, want the 200,000 sent", len(c.Output))
			}
		}
		next("angle", "angle-next")
	})

	t.Run("a result that cannot be stored ends the turn with an error naming the size", func(t *testing.T) {
		// Any process may be a tool worker: one that sends a result as big
		// as a message can be, whose event cannot be.
		h.submit(script("huge", "Gated", `{"responses":[{"tool_calls":[{"name":"echo","arguments":{"text":"a"}}]},{"text":"never"}]}`))
		paused := h.waitType("huge", events.TurnPaused)
		var p events.TurnPausedData
		_ = json.Unmarshal(paused.Data, &p)
		stopWorker() // this result comes from elsewhere
		ok := true
		h.control("huge", events.Control{Action: events.ActionApprove, CallID: p.CallID, Approved: &ok})
		h.waitType("huge", events.TurnResumed)
		res := events.ToolResult{TurnID: "huge", CallID: p.CallID, Tool: "echo", Attempt: 1}
		res.Output = strings.Repeat("o", int(h.nc.MaxPayload())-len(mustJSON(res))-64)
		h.publish(events.ResultSubject("huge"), mustJSON(res), "result:"+p.CallID)
		_, fin := h.finished("huge")
		if fin.StopReason != events.StopError || !strings.Contains(fin.Error, "event tool.completed of") || !strings.Contains(fin.Error, "exceeds the server's max payload") {
			t.Fatalf("finished %s %q, want error naming the size", fin.StopReason, fin.Error)
		}
		next("huge", "huge-next")
	})
}

// fill writes with put until a stream bounded by its bytes (discard new)
// refuses a write for being full.
func fill(t *testing.T, what string, put func(i int) error) {
	t.Helper()
	for i := 0; i <= 10_000; i++ {
		if err := put(i); err != nil {
			if !strings.Contains(err.Error(), "maximum bytes exceeded") {
				t.Fatalf("filling %s: %v", what, err)
			}
			return
		}
	}
	t.Fatalf("%s never filled", what)
}

// TestFullJobsStreamEndsTheTurn: a jobs stream at its bound (discard new)
// fails the turn that cannot publish its job, with an error that says so,
// instead of a retry for ever; once the stream has room again, turns run.
func TestFullJobsStreamEndsTheTurn(t *testing.T) {
	h := newHarness(t)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	s, err := h.js.Stream(ctx, events.StreamJobs)
	if err != nil {
		t.Fatal(err)
	}
	cfg := s.CachedInfo().Config
	cfg.MaxBytes = 64 << 10
	if _, err := h.js.UpdateStream(ctx, cfg); err != nil {
		t.Fatal(err)
	}
	// Jobs of a tool nobody serves fill it, to the last byte a small job
	// could take.
	for _, size := range []int{8 << 10, 16} {
		fill(t, "the jobs stream", func(i int) error {
			_, err := h.js.Publish(ctx, events.ToolSubject("nobody"), []byte(strings.Repeat("j", size)), jetstream.WithMsgID(fmt.Sprint("fill", size, "-", i)))
			return err
		})
	}
	h.start()
	// A model call of a turn owned here needs no job; its tool call does.
	h.submit(script("full", "General", `{"responses":[{"tool_calls":[{"name":"echo","arguments":{"text":"x"}}]},{"text":"hi"}]}`))
	_, fin := h.finished("full")
	if fin.StopReason != events.StopError || !strings.Contains(fin.Error, "maximum bytes exceeded") {
		t.Fatalf("finished %s %q, want error saying the stream is full", fin.StopReason, fin.Error)
	}
	if err := s.Purge(ctx, jetstream.WithPurgeSubject(events.ToolSubject("nobody"))); err != nil {
		t.Fatal(err)
	}
	h.submit(script("after", "General", `{"responses":[{"text":"hi"}]}`))
	if _, fin := h.finished("after"); fin.StopReason != events.StopCompleted {
		t.Fatalf("after room was made: %s %s", fin.StopReason, fin.Error)
	}
}

// TestStoredCopiesAreNotInputs: a reader cannot turn a stored message into
// an input by pointing a consumer's delivery subject (or a read's reply
// subject) at the inbox: the server checks neither against permissions.
// Here a forged result, first kept as a dead letter, arrives on a paused
// turn's result subject as a consumer would deliver it, headers and all; and
// a direct get, which would send the payload raw and without headers, is not
// served on JETLOOP_DEAD at all.
func TestStoredCopiesAreNotInputs(t *testing.T) {
	h := newHarness(t).start()
	h.submit(script("target", "Gated", `{"responses":[{"tool_calls":[{"name":"echo","arguments":{"text":"y"}}]},{"text":"ok"}]}`))
	paused := h.waitType("target", events.TurnPaused)
	var p events.TurnPausedData
	_ = json.Unmarshal(paused.Data, &p)
	forged := mustJSON(events.ToolResult{TurnID: "target", CallID: p.CallID, Tool: "echo", Output: "forged", Final: true, Attempt: 1})
	h.publish("jetloop.inbox.result.target.x.y", forged, "") // becomes a dead letter, payload and all
	h.waitFor("the forged result to be a dead letter", func() bool { return len(h.deadBySubject()) == 1 })

	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	// What a consumer on JETLOOP_DEAD whose delivery subject is the turn's
	// result subject delivers: the dead letter, headers and all.
	dead, err := h.js.Stream(ctx, events.StreamDead)
	if err != nil {
		t.Fatal(err)
	}
	stored, err := dead.GetMsg(ctx, 1)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := h.js.PublishMsg(ctx, &nats.Msg{Subject: events.ResultSubject("target"), Data: stored.Data, Header: stored.Header}); err != nil {
		t.Fatal(err)
	}
	msg, err := h.nc.RequestWithContext(ctx, "$JS.API.DIRECT.GET."+events.StreamDead, []byte(`{"seq":1,"no_hdr":true}`))
	if err == nil {
		t.Fatalf("a direct get of a dead letter was answered: %q", msg.Data)
	}
	h.waitFor("the delivered copy to be a dead letter too", func() bool {
		for key, reasons := range h.deadBySubject() {
			if strings.HasSuffix(key, events.ResultSubject("target")) && strings.Contains(reasons[0], "copied out of a stream") {
				return true
			}
		}
		return false
	})
	if last := h.last("target"); last != events.TurnPaused {
		t.Fatalf("the paused turn moved on a copied result: last event %s", last)
	}
	h.control("target", events.Control{Action: events.ActionAbort})
	h.finished("target")
}

// TestFullServerStore fills the server's whole file store, the case where
// nothing can be written at all: not the turn's next event, not its end, not
// a dead letter. A submission is refused to the client at once, with the
// server's reason. An input already in the inbox is retried a bounded
// number of times, then kept until its dead letter can be written; once an
// operator makes room, it is a dead letter saying why, and retrying it from
// there finishes its turn.
func TestFullServerStore(t *testing.T) {
	const bound = 256 << 10
	p := bus.DefaultProvision(1 << 20)
	p.MaxBytes = bound        // the inbox, jobs and dead letters reserve this much each
	p.WorkersMaxBytes = bound // and the workers' bucket
	srv := testkit.StartWith(t, t.TempDir(), -1, 4*bound+(2<<20))
	h := newHarnessOn(t, srv, &p)
	h.worker()
	stop := h.orchestrator()
	h.submit(script("waiting", "Reader", `{"responses": [
		{"tool_calls": [{"name": "ask_user", "arguments": {"question": "Which API?"}}]},
		{"text": "using v2"}]}`))
	var paused events.TurnPausedData
	_ = json.Unmarshal(h.waitType("waiting", events.TurnPaused).Data, &paused)

	// The answer is in the inbox before the store fills, and no
	// orchestrator has taken it yet.
	stop()
	h.control("waiting", events.Control{Action: events.ActionReply, CallID: paused.CallID, Answer: "v2"})
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	// Something else on the server takes the room that is left.
	filler, err := h.js.CreateStream(ctx, jetstream.StreamConfig{Name: "FILLER", Subjects: []string{"filler"}})
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; ; i++ {
		_, err := h.js.Publish(ctx, "filler", make([]byte, 64<<10))
		if err != nil {
			if !strings.Contains(err.Error(), "insufficient resources") {
				t.Fatalf("filling the store: %v", err)
			}
			break
		}
		if i > 1000 {
			t.Fatal("the store never filled")
		}
	}
	_, err = h.js.Publish(ctx, events.SubjectSubmit, []byte(`{"turn_id":"refused"}`), jetstream.WithMsgID("refused"))
	var apiErr *jetstream.APIError
	if !errors.As(err, &apiErr) || !strings.Contains(apiErr.Description, "insufficient resources") {
		t.Fatalf("a submission to a full server: %v, want the server's insufficient resources", err)
	}

	h.orchestrator()
	inbox, err := h.js.Consumer(ctx, events.StreamInbox, bus.PartitionConsumer(bus.Partition("waiting")))
	if err != nil {
		t.Fatal(err)
	}
	// Its deliveries run out; nothing is delivered again after that.
	h.waitFor("the answer's deliveries to run out", func() bool {
		info, err := inbox.Info(ctx)
		return err == nil && info.NumAckPending == 0 && info.NumPending == 0 && h.inboxLeft() == 1
	})
	info, _ := inbox.Info(ctx)
	delivered := info.Delivered.Consumer
	if h.last("waiting") != events.TurnPaused {
		t.Fatalf("the turn moved on a full store: %s", h.last("waiting"))
	}

	if err := filler.Purge(ctx); err != nil {
		t.Fatal(err)
	}
	var reason string
	h.waitFor("the kept answer to become a dead letter", func() bool {
		for key, reasons := range h.deadBySubject() {
			if strings.HasSuffix(key, " "+events.ControlSubject("waiting")) {
				reason = reasons[0]
				return true
			}
		}
		return false
	})
	if !strings.Contains(reason, "insufficient resources") {
		t.Fatalf("dead letter says %q, want the full store named", reason)
	}
	// The input leaves the inbox after its dead letter is written, not
	// with it.
	h.waitFor("the dead-lettered answer to leave the inbox", func() bool { return h.inboxLeft() == 0 })
	if info, _ := inbox.Info(ctx); info.Delivered.Consumer != delivered {
		t.Fatalf("delivered %d times after its deliveries ran out", info.Delivered.Consumer-delivered)
	}

	// Retried from the dead letters (as `jetloop dead retry` does), the
	// answer finishes its turn.
	h.control("waiting", events.Control{Action: events.ActionReply, CallID: paused.CallID, Answer: "v2"})
	if _, fin := h.finished("waiting"); fin.StopReason != events.StopCompleted {
		t.Fatalf("finished %s %s", fin.StopReason, fin.Error)
	}
}

// TestJunkInTheLogDoesNotStopTheOrchestrator: a message in the events stream
// that is no event (only an admin could write one there) is skipped, with a
// warning, when timers are re-armed at start; the orchestrator serves.
func TestJunkInTheLogDoesNotStopTheOrchestrator(t *testing.T) {
	h := newHarness(t)
	h.publish("jetloop.events.junk.junk", []byte{0, 1, 2}, "")
	h.start()
	h.submit(script("after-junk", "General", `{"responses":[{"text":"hi"}]}`))
	if _, fin := h.finished("after-junk"); fin.StopReason != events.StopCompleted {
		t.Fatalf("finished %s %s", fin.StopReason, fin.Error)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	s, err := h.js.Stream(ctx, events.StreamEvents)
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Purge(ctx, jetstream.WithPurgeSubject("jetloop.events.junk.junk")); err != nil {
		t.Fatal(err)
	}
}
