package orchestrator_test

import (
	"context"
	"encoding/json"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/jetloop/jetloop/internal/events"
	"github.com/jetloop/jetloop/internal/testkit"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

func TestCompletedAfterToolSteps(t *testing.T) {
	h := newHarness(t).start()
	h.submit(script("t-completed", "General", `{"responses": [
		{"text": "echoing", "tool_calls": [{"name": "echo", "arguments": {"text": "hi"}}]},
		{"text": "counting", "tool_calls": [{"name": "count", "arguments": {"n": 1}}]},
		{"text": "all done"}]}`))
	log, fin := h.finished("t-completed")
	if fin.StopReason != events.StopCompleted || fin.Output != "all done" {
		t.Fatalf("finished %+v", fin)
	}
	if m := fin.Metrics; m.Steps != 3 || m.ToolCalls != 2 || m.ModelCalls != 3 || m.InputTokens == 0 {
		t.Fatalf("metrics %+v", m)
	}
	done := of[events.ToolCompletedData](t, log, events.ToolCompleted)
	if len(done) != 2 || done[0].Output != "hi" || done[0].IsError || done[0].Worker == "" || done[0].Attempts != 1 {
		t.Fatalf("tool results %+v", done)
	}
	started := of[events.TurnStartedData](t, log, events.TurnStarted)[0]
	if started.History != 0 || !contains(started.Tools, "echo") || !contains(started.Tools, "ask_user") {
		t.Fatalf("turn.started %+v", started)
	}
}

func TestStepCapWritesSentinel(t *testing.T) {
	h := newHarness(t).start()
	h.submit(script("t-cap", "Capped", `{"responses": [
		{"tool_calls": [{"name": "count", "arguments": {"n": 1}}]},
		{"tool_calls": [{"name": "count", "arguments": {"n": 2}}]},
		{"text": "never asked"}], "summary": "Counted twice."}`))
	log, fin := h.finished("t-cap")
	if fin.StopReason != events.StopStepCap {
		t.Fatalf("stop reason %s", fin.StopReason)
	}
	sentinel := of[events.TurnSentinelData](t, log, events.TurnSentinel)
	if len(sentinel) != 1 || sentinel[0].Kind != events.SentinelCapHit ||
		sentinel[0].Text != "Step limit reached (2 steps)\n\nCounted twice." || fin.Output != sentinel[0].Text {
		t.Fatalf("sentinel %+v, output %q", sentinel, fin.Output)
	}
	if fin.Metrics.Steps != 2 || fin.Metrics.ModelCalls != 3 {
		t.Fatalf("metrics %+v", fin.Metrics)
	}
	tail := types(log[len(log)-3:])
	if strings.Join(tail, " ") != "step.checked turn.sentinel turn.finished" {
		t.Fatalf("ends with %v", tail)
	}
}

func TestBudgetRunsFirstCallsOnly(t *testing.T) {
	h := newHarness(t).start()
	sub := script("t-budget", "General", `{"responses": [
		{"tool_calls": [{"name": "count", "arguments": {"n": 1}}, {"name": "count", "arguments": {"n": 2}},
		                {"name": "count", "arguments": {"n": 3}}]},
		{"text": "never asked"}]}`)
	sub.Limits = &events.Limits{Budget: 2}
	h.submit(sub)
	log, fin := h.finished("t-budget")
	if fin.StopReason != events.StopBudget || fin.Metrics.ToolCalls != 2 {
		t.Fatalf("finished %+v", fin)
	}
	req := of[events.ToolRequestedData](t, log, events.ToolRequested)
	if len(req) != 2 || string(req[0].Arguments) != `{"n":1}` || string(req[1].Arguments) != `{"n":2}` {
		t.Fatalf("requested %+v", req)
	}
	if !strings.HasPrefix(fin.Output, "Tool budget exhausted (2 calls)") {
		t.Fatalf("output %q", fin.Output)
	}
}

func TestDoomLoopNeverRunsTheRepeatingCall(t *testing.T) {
	h := newHarness(t).start()
	h.submit(script("t-doom", "General", `{"responses": [
		{"tool_calls": [{"name": "count", "arguments": {"n": 7}}]}], "repeat_last": true}`))
	log, fin := h.finished("t-doom")
	if fin.StopReason != events.StopDoomLoop {
		t.Fatalf("stop reason %s", fin.StopReason)
	}
	if n := len(of[events.ToolCompletedData](t, log, events.ToolCompleted)); n != 2 {
		t.Fatalf("%d calls completed, want 2", n)
	}
	if got := h.calls.max(); got != 2 {
		t.Fatalf("the repeating call ran %d times, want 2", got)
	}
	if !strings.HasPrefix(fin.Output, "Stopped: the same tool call repeated 3 times (count)") {
		t.Fatalf("output %q", fin.Output)
	}
}

func TestTimeoutCancelsRunningCalls(t *testing.T) {
	h := newHarness(t).start()
	cancelled := make(chan struct{}, 1)
	sub, err := h.nc.Subscribe(events.CancelSubject("t-timeout"), func(*nats.Msg) { cancelled <- struct{}{} })
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Unsubscribe()
	s := script("t-timeout", "General", `{"responses": [{"tool_calls": [{"name": "sleep", "arguments": {"ms": 60000}}]}]}`)
	s.Limits = &events.Limits{TimeoutMs: 500}
	h.submit(s)
	log, fin := h.finished("t-timeout")
	if fin.StopReason != events.StopTimeout {
		t.Fatalf("stop reason %s\n%s", fin.StopReason, dump(log))
	}
	select {
	case <-cancelled:
	case <-time.After(10 * time.Second):
		t.Fatal("no cancel broadcast")
	}
}

func TestAbortStopsTheTurn(t *testing.T) {
	h := newHarness(t).start()
	h.submit(script("t-abort", "General", `{"responses": [{"tool_calls": [{"name": "sleep", "arguments": {"ms": 60000}}]}]}`))
	h.waitType("t-abort", events.ToolRequested)
	h.control("t-abort", events.Control{Action: events.ActionAbort, Reason: "user pressed stop"})
	_, fin := h.finished("t-abort")
	if fin.StopReason != events.StopAborted || fin.Error != "user pressed stop" {
		t.Fatalf("finished %+v", fin)
	}
}

func TestFinalToolEndsWithSynthesis(t *testing.T) {
	h := newHarness(t).start()
	h.submit(script("t-final", "Final", `{"responses": [
		{"tool_calls": [{"name": "echo", "arguments": {"text": "the answer"}}]}, {"text": "never asked"}]}`))
	log, fin := h.finished("t-final")
	if fin.StopReason != events.StopSynthesisDone || fin.Output != "the answer" {
		t.Fatalf("finished %+v", fin)
	}
	if done := of[events.ToolCompletedData](t, log, events.ToolCompleted); !done[0].Final {
		t.Fatalf("tool.completed not final: %+v", done[0])
	}
}

func TestModelErrorsRetryThenFail(t *testing.T) {
	h := newHarness(t).start()
	h.submit(script("t-retry", "General", `{"responses": [
		{"error": "rate_limited"}, {"error": "server_error"}, {"text": "third time lucky"}]}`))
	log, fin := h.finished("t-retry")
	if fin.StopReason != events.StopCompleted || fin.Output != "third time lucky" {
		t.Fatalf("finished %+v", fin)
	}
	if mc := of[events.ModelCompletedData](t, log, events.ModelCompleted); mc[0].Attempts != 3 {
		t.Fatalf("attempts %d", mc[0].Attempts)
	}

	h.submit(script("t-error", "General", `{"responses": [{"error": "bad_request"}]}`))
	log, fin = h.finished("t-error")
	if fin.StopReason != events.StopError || fin.Error == "" {
		t.Fatalf("finished %+v", fin)
	}
	checked := of[events.StepCheckedData](t, log, events.StepChecked)
	if len(checked) != 1 || checked[0].StopReason != events.StopError {
		t.Fatalf("checked %+v", checked)
	}

	h.submit(script("t-exhausted", "General", `{"responses": [
		{"error": "server_error"}, {"error": "server_error"}, {"error": "server_error"}, {"text": "too late"}]}`))
	_, fin = h.finished("t-exhausted")
	if fin.StopReason != events.StopError {
		t.Fatalf("finished %+v", fin)
	}
}

func TestRejectedSubmissionsAreDeadLettersAndServingGoesOn(t *testing.T) {
	h := newHarness(t).start()
	h.publish(events.SubjectSubmit, []byte(`{not json`), "")
	h.publish(events.SubjectSubmit, []byte(`{"turn_id": "bad id!"}`), "")
	h.submit(events.Submit{TurnID: "t-noagent", Agent: "Nobody", Model: "script"})
	h.submit(events.Submit{TurnID: "t-noscript", Agent: "General", Model: "script"})
	h.submit(events.Submit{TurnID: "t-noprovider", Agent: "General", Model: "acme/x"})

	for _, turn := range []string{"t-noagent", "t-noscript", "t-noprovider"} {
		log, fin := h.finished(turn)
		if len(log) != 1 || fin.StopReason != events.StopRejected || fin.Error == "" {
			t.Fatalf("%s: %d events, finished %+v", turn, len(log), fin)
		}
	}
	dead := h.deadLetters(5)
	payloads := map[string]string{}
	for _, d := range dead {
		if d.Subject != events.DeadSubject("submit") || d.Header.Get(events.HeaderError) == "" {
			t.Fatalf("dead letter %s %v", d.Subject, d.Header)
		}
		payloads[string(d.Data)] = d.Header.Get(events.HeaderError)
	}
	// Shards work in parallel: dead letters of different turns come in any
	// order, each with its payload exactly as it was sent.
	if reason, ok := payloads[`{not json`]; !ok || !strings.Contains(reason, "not valid JSON") {
		t.Fatalf("the invalid JSON's dead letter lost its payload or reason: %q", payloads)
	}
	if reason := payloads[`{"turn_id": "bad id!"}`]; !strings.Contains(reason, "does not match pattern") {
		t.Fatalf("the bad id's dead letter: %q", payloads)
	}

	// A turn id reused with another submission is a dead letter; the same
	// submission sent again is not.
	ok := script("t-ok", "General", `{"responses": [{"text": "fine"}]}`)
	h.submit(ok)
	h.finished("t-ok")
	data, _ := json.Marshal(ok)
	h.publish(events.SubjectSubmit, data, "")
	other := ok
	other.Agent = "Capped"
	data, _ = json.Marshal(other)
	h.publish(events.SubjectSubmit, data, "")
	dead = h.deadLetters(6)
	if !strings.Contains(dead[5].Header.Get(events.HeaderError), "already exists") {
		t.Fatalf("reused turn id: %q", dead[5].Header.Get(events.HeaderError))
	}
	if n := len(h.events("t-ok")); n != 5 {
		t.Fatalf("t-ok has %d events after re-sends, want 5", n)
	}
}

// TestBrokenModelResultsAreDeadLetters: a model result the schema refuses
// is a dead letter that says why.
func TestBrokenModelResultsAreDeadLetters(t *testing.T) {
	h := newHarness(t).start()
	h.submit(script("t-model", "General", `{"responses": [{"text": "fine"}]}`))
	h.finished("t-model")
	broken := map[string]string{
		`{"turn_id":"t-model","step":1,"kind":"step","text":"","usage":{"input_tokens":1,"output_tokens":1},"duration_ms":1,"attempts":1,"tool_calls":[{"call_id":"bad id!","name":"echo","arguments":{}}]}`: "/tool_calls/0/call_id",
		`{"turn_id":"t-model","step":1,"kind":"step","text":"","usage":{"input_tokens":1,"output_tokens":1},"duration_ms":1,"attempts":1,"tool_calls":[{"call_id":"c1","name":"echo","arguments":"x"}]}`:     "/tool_calls/0/arguments",
		`{"turn_id":"t-model","step":1,"kind":"step","text":"","usage":{"input_tokens":1,"output_tokens":1},"duration_ms":1,"attempts":1,"extra":true}`:                                                      "'extra' not allowed",
		`{"turn_id":"t-model","step":1,"kind":"later","text":"","usage":{"input_tokens":1,"output_tokens":1},"duration_ms":1,"attempts":1}`:                                                                  "/kind",
		`{"turn_id":"t-other","step":1,"kind":"step","text":"","usage":{"input_tokens":1,"output_tokens":1},"duration_ms":1,"attempts":1}`:                                                                   "sent to turn",
		`{"turn_id":"t-model","step":1,"kind":"step","text":"","usage":{"input_tokens":1,"output_tokens":1},"duration_ms":1,"attempts":0}`:                                                                   "/attempts",
	}
	for data := range broken {
		h.publish(events.ModelResultSubject("t-model"), []byte(data), "")
	}
	dead := h.deadLetters(len(broken))
	for _, d := range dead {
		want := broken[string(d.Data)]
		if d.Subject != events.DeadSubject("model") || !strings.Contains(d.Header.Get(events.HeaderError), want) {
			t.Errorf("dead letter on %s says %q, want %q", d.Subject, d.Header.Get(events.HeaderError), want)
		}
	}
}

// deadLetters waits for n dead letters and returns them in order.
func (h *harness) deadLetters(n int) []*jetstream.RawStreamMsg {
	h.t.Helper()
	var out []*jetstream.RawStreamMsg
	h.waitFor("dead letters", func() bool {
		out = testkit.Stored(h.t, h.js, events.StreamDead)
		return len(out) >= n
	})
	return out[:n]
}

func TestAskUserPausesUntilReply(t *testing.T) {
	h := newHarness(t).start()
	h.submit(script("t-ask", "Reader", `{"responses": [
		{"tool_calls": [{"name": "ask_user", "arguments": {"question": "Which API?"}}]},
		{"text": "using v2"}]}`))
	paused := h.waitType("t-ask", events.TurnPaused)
	var p events.TurnPausedData
	_ = json.Unmarshal(paused.Data, &p)
	if p.Kind != events.PauseInput || p.Question != "Which API?" {
		t.Fatalf("paused %+v", p)
	}
	h.control("t-ask", events.Control{Action: events.ActionReply, CallID: p.CallID, Answer: "v2"})
	log, fin := h.finished("t-ask")
	if fin.StopReason != events.StopCompleted {
		t.Fatalf("finished %+v", fin)
	}
	done := of[events.ToolCompletedData](t, log, events.ToolCompleted)
	if len(done) != 1 || done[0].Output != "v2" {
		t.Fatalf("answer %+v", done)
	}
}

func TestApprovalApproveAndDeny(t *testing.T) {
	h := newHarness(t).start()
	for _, approved := range []bool{true, false} {
		turn := "t-approve"
		if !approved {
			turn = "t-deny"
		}
		h.submit(script(turn, "Gated", `{"responses": [
			{"tool_calls": [{"name": "echo", "arguments": {"text": "ship it"}}]}, {"text": "ok"}]}`))
		paused := h.waitType(turn, events.TurnPaused)
		var p events.TurnPausedData
		_ = json.Unmarshal(paused.Data, &p)
		if p.Kind != events.PauseApproval || p.Tool != "echo" {
			t.Fatalf("paused %+v", p)
		}
		h.control(turn, events.Control{Action: events.ActionApprove, CallID: p.CallID, Approved: &approved, Note: "checked"})
		log, fin := h.finished(turn)
		done := of[events.ToolCompletedData](t, log, events.ToolCompleted)
		if fin.StopReason != events.StopCompleted || len(done) != 1 || done[0].IsError == approved {
			t.Fatalf("approved=%t: finished %+v, results %+v", approved, fin, done)
		}
		if approved && done[0].Output != "ship it" || !approved && !strings.Contains(done[0].Output, "denied") {
			t.Fatalf("approved=%t: output %q", approved, done[0].Output)
		}
	}
}

func TestTextOnlyTurnIgnoresToolCalls(t *testing.T) {
	h := newHarness(t).start()
	h.submit(script("t-text", "Text", `{"responses": [
		{"text": "just words", "tool_calls": [{"name": "echo", "arguments": {"text": "x"}}]}]}`))
	log, fin := h.finished("t-text")
	if fin.StopReason != events.StopCompleted || fin.Metrics.Steps != 1 || fin.Output != "just words" {
		t.Fatalf("finished %+v", fin)
	}
	if n := len(of[events.ToolRequestedData](t, log, events.ToolRequested)); n != 0 {
		t.Fatalf("%d calls requested in a text-only turn", n)
	}
	if tools := of[events.TurnStartedData](t, log, events.TurnStarted)[0].Tools; len(tools) != 0 {
		t.Fatalf("tools offered: %v", tools)
	}
}

func TestUnknownToolAndInvalidArgumentsGetErrorResults(t *testing.T) {
	h := newHarness(t).start()
	h.submit(script("t-refuse", "Reader", `{"responses": [
		{"tool_calls": [{"name": "write_file", "arguments": {"path": "x", "content": "y"}},
		                {"name": "echo", "arguments": {"txt": "typo"}}]},
		{"text": "corrected"}]}`))
	log, fin := h.finished("t-refuse")
	if fin.StopReason != events.StopCompleted {
		t.Fatalf("finished %+v", fin)
	}
	done := of[events.ToolCompletedData](t, log, events.ToolCompleted)
	if len(done) != 2 || !done[0].IsError || !done[1].IsError || done[0].Worker != "orchestrator" {
		t.Fatalf("results %+v", done)
	}
}

func TestSessionHistoryCarriesEarlierTurns(t *testing.T) {
	h := newHarness(t).start()
	first := script("t-first", "General", `{"responses": [
		{"tool_calls": [{"name": "echo", "arguments": {"text": "a"}}]}, {"text": "first answer"}]}`)
	first.SessionID = "s-1"
	h.submit(first)
	h.finished("t-first")
	second := script("t-second", "General", `{"responses": [{"text": "second answer"}]}`)
	second.SessionID = "s-1"
	h.submit(second)
	log, _ := h.finished("t-second")
	started := of[events.TurnStartedData](t, log, events.TurnStarted)[0]
	// user, assistant with a call, its result, the final answer.
	if started.History != 4 || len(started.HistoryTurns) != 1 || started.HistoryTurns[0] != "t-first" {
		t.Fatalf("history %d from %v", started.History, started.HistoryTurns)
	}
	if log[0].SessionID != "s-1" {
		t.Fatalf("session %q", log[0].SessionID)
	}
	// The two finished here: their transcripts and their order come from
	// what this process remembered of them, and must be what their logs say.
	third := script("t-third", "General", `{"responses": [{"text": "third answer"}]}`)
	third.SessionID = "s-1"
	h.submit(third)
	log, _ = h.finished("t-third")
	started = of[events.TurnStartedData](t, log, events.TurnStarted)[0]
	if started.History != 6 || !slices.Equal(started.HistoryTurns, []string{"t-first", "t-second"}) {
		t.Fatalf("history %d from %v", started.History, started.HistoryTurns)
	}
}

func TestParallelCallsOfAStepRunConcurrently(t *testing.T) {
	h := newHarness(t).start()
	// meet answers only when both calls are running at once; run one after
	// the other, the first would give up waiting for the second.
	h.submit(script("t-parallel", "General", `{"responses": [
		{"tool_calls": [{"name": "meet", "arguments": {"who": "a"}}, {"name": "meet", "arguments": {"who": "b"}}]},
		{"text": "met"}]}`))
	log, _ := h.finished("t-parallel")
	done := of[events.ToolCompletedData](t, log, events.ToolCompleted)
	if len(done) != 2 || done[0].IsError || done[1].IsError {
		t.Fatalf("calls did not run together: %+v", done)
	}
}

func types(log []events.Envelope) []string {
	out := make([]string, len(log))
	for i, e := range log {
		out[i] = string(e.Type)
	}
	return out
}

func contains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}

// Anyone may write the tools bucket: only well-formed entries, under their
// own name, from a live worker, are offered to a turn.
func TestOnlyValidLiveToolsAreOffered(t *testing.T) {
	h := newHarness(t)
	h.worker()
	ctx := context.Background()
	kv, err := h.js.KeyValue(ctx, events.BucketTools)
	if err != nil {
		t.Fatal(err)
	}
	for key, value := range map[string]string{
		"garbage":   `{not json`,
		"alias":     `{"name":"echo2","description":"","parameters":{"type":"object"},"workers":1}`,
		"idle":      `{"name":"idle","description":"","parameters":{"type":"object"},"workers":0}`,
		"untyped":   `{"name":"untyped","parameters":{"type":"object"},"workers":1}`,
		"shipshape": `{"name":"shipshape","description":"ok","parameters":{"type":"object"},"workers":1}`,
	} {
		if _, err := kv.Put(ctx, key, []byte(value)); err != nil {
			t.Fatal(err)
		}
	}
	h.orchestrator()
	h.submit(script("t-offered", "General", `{"responses": [{"text": "hi"}]}`))
	log, _ := h.finished("t-offered")
	tools := of[events.TurnStartedData](t, log, events.TurnStarted)[0].Tools
	for _, bad := range []string{"garbage", "alias", "echo2", "idle", "untyped"} {
		if contains(tools, bad) {
			t.Errorf("offered %s: %v", bad, tools)
		}
	}
	if !contains(tools, "shipshape") || !contains(tools, "echo") {
		t.Errorf("tools offered %v", tools)
	}
}
