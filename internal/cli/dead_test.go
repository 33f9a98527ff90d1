package cli

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/jetloop/jetloop/internal/deadletter"
	"github.com/jetloop/jetloop/internal/events"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// A submission naming an unknown agent is a dead letter and a rejected turn;
// dead lists and shows it, a retry of it unchanged fails the same way, and
// a retry with the fixed payload runs the turn under its own id.
func TestDeadListShowRetry(t *testing.T) {
	e := newEnv(t)
	bad := events.Submit{TurnID: "bad1", Agent: "Nobody", Model: "script",
		Script: json.RawMessage(`{"responses":[{"text":"hello"}]}`),
		Input:  []events.Message{{Role: events.RoleUser, Content: "hi"}}}
	if err := Submit(t.Context(), e.nc, bad); err != nil {
		t.Fatal(err)
	}
	if fin := e.finished("bad1"); fin.StopReason != events.StopRejected {
		t.Fatalf("bad1: %+v", fin)
	}
	// A reply to a turn that does not exist is a dead letter too (jetloop
	// reply refuses to send it; another client may not).
	if _, err := e.js.Publish(t.Context(), events.ControlSubject("ghost"),
		[]byte(`{"action":"reply","call_id":"call-x","answer":"yes"}`), jetstream.WithMsgID("control:ghost:1")); err != nil {
		t.Fatal(err)
	}

	var list string
	e.waitFor("two dead letters", func() bool {
		list = e.mustRun(ExitOK, "dead")
		return strings.Count(list, "\n") == 3
	})
	lines := strings.Split(strings.TrimSpace(list), "\n")
	if !strings.HasPrefix(lines[0], "SEQ") || !strings.Contains(lines[1], "submit") || !strings.Contains(lines[1], "bad1") ||
		!strings.Contains(lines[1], `unknown agent "Nobody"`) || !strings.Contains(lines[2], "jetloop.inbox.control.ghost") ||
		!strings.Contains(lines[2], `no turn "ghost"`) {
		t.Fatalf("dead:\n%s", list)
	}
	var letters []deadletter.Letter
	for _, line := range strings.Split(strings.TrimSpace(e.mustRun(ExitOK, "dead", "--json")), "\n") {
		var l deadletter.Letter
		if err := json.Unmarshal([]byte(line), &l); err != nil {
			t.Fatal(err)
		}
		letters = append(letters, l)
	}
	if len(letters) != 2 || letters[0].Kind != "submit" || letters[0].Subject != events.SubjectSubmit || letters[0].Turn != "bad1" ||
		letters[1].Kind != "control" || letters[1].Turn != "ghost" {
		t.Fatalf("dead --json: %+v", letters)
	}
	seq := func(l deadletter.Letter) string { return strconv.FormatUint(l.Seq, 10) }
	control := seq(letters[1])

	show := e.mustRun(ExitOK, "dead", "show", seq(letters[0]))
	for _, want := range []string{"Jetloop-Error: unknown agent", "Jetloop-Subject: jetloop.inbox.submit", `"agent": "Nobody"`} {
		if !strings.Contains(show, want) {
			t.Fatalf("dead show lacks %q:\n%s", want, show)
		}
	}

	// Unchanged, it fails again: a new dead letter replaces the old one.
	e.mustRun(ExitOK, "dead", "retry", seq(letters[0]))
	e.waitFor("the retried submission dead again", func() bool {
		out := e.mustRun(ExitOK, "dead", "--json")
		return strings.Count(out, "\n") == 2 && !strings.Contains(out, `"seq":`+seq(letters[0])+",")
	})
	if code, _, _ := e.jetloop("dead", "show", seq(letters[0])); code != ExitFailed {
		t.Fatalf("a retried dead letter is still there")
	}

	// Fixed, it runs: the rejection gives way to the turn.
	bad.Agent = "Wide"
	fixed := filepath.Join(e.dir, "fixed.json")
	data, _ := json.Marshal(bad)
	if err := os.WriteFile(fixed, data, 0o644); err != nil {
		t.Fatal(err)
	}
	letters = nil
	for _, line := range strings.Split(strings.TrimSpace(e.mustRun(ExitOK, "dead", "--json")), "\n") {
		var l deadletter.Letter
		_ = json.Unmarshal([]byte(line), &l)
		if l.Kind == "submit" {
			letters = append(letters, l)
		}
	}
	if len(letters) != 1 {
		t.Fatalf("submit dead letters: %+v", letters)
	}
	out := e.mustRun(ExitOK, "dead", "retry", "--file", fixed, seq(letters[0]))
	if !strings.Contains(out, "jetloop watch bad1") {
		t.Fatalf("retry printed %q", out)
	}
	e.waitFor("the fixed turn to start", func() bool { l := e.tryLog("bad1"); return len(l) > 0 && l[0].Type == events.TurnStarted })
	fin := e.finished("bad1")
	if fin.StopReason != events.StopCompleted || fin.Output != "hello" {
		t.Fatalf("the fixed turn finished %+v", fin)
	}
	if out := e.mustRun(ExitOK, "dead"); strings.Contains(out, "submit") {
		t.Fatalf("the retried dead letter is still listed:\n%s", out)
	}

	// A payload that would fail its schema again is refused here, and the
	// dead letter stays.
	if err := os.WriteFile(fixed, []byte(`{"action": "explode"}`), 0o644); err != nil {
		t.Fatal(err)
	}
	if code, _, errOut := e.jetloop("dead", "retry", "--file", fixed, control); code != ExitFailed || !strings.Contains(errOut, "would fail again") {
		t.Fatalf("retry of a broken payload: %d %s", code, errOut)
	}
	e.mustRun(ExitOK, "dead", "show", control)
}

// A dead letter is re-sent only as what a client may send, to the inbox
// subject it was taken from: a tool worker's jetloop.dead.job letter, whose
// headers are the worker's own, is never re-sent, whatever subject it
// names; nor is a letter whose subject disagrees with its kind, nor one of
// an input only a worker, a model or the orchestrator sends. A paused turn
// that letters point at stays paused until its own reply comes.
func TestDeadRetryOnlyWhatAClientMaySend(t *testing.T) {
	e := newEnv(t)
	submitScript(t, e.js, "held", "Asker", askJSON)
	var p events.TurnPausedData
	if err := json.Unmarshal(e.waitType("held", events.TurnPaused).Data, &p); err != nil {
		t.Fatal(err)
	}
	log := e.log("held")
	forged, _ := json.Marshal(events.Envelope{Type: events.TurnFinished, TurnID: "held", SessionID: log[0].SessionID, Seq: len(log) + 1,
		Data: json.RawMessage(`{"stop_reason":"completed","output":"forged"}`)})
	reply, _ := json.Marshal(events.Control{Action: events.ActionReply, CallID: p.CallID, Answer: "the worker's"})
	plant := func(kind, subject string, data []byte) string {
		t.Helper()
		m := &nats.Msg{Subject: events.DeadSubject(kind), Data: data, Header: nats.Header{}}
		m.Header.Set("Jetloop-Subject", subject)
		m.Header.Set(events.HeaderError, "planted")
		ack, err := e.js.PublishMsg(t.Context(), m)
		if err != nil {
			t.Fatal(err)
		}
		return strconv.FormatUint(ack.Sequence, 10)
	}
	result, _ := json.Marshal(events.ToolResult{TurnID: "held", CallID: p.CallID, Tool: "ask_user", Output: "x"})
	for _, tc := range []struct {
		what, seq, says string
	}{
		{"a worker's letter naming a turn's log", plant("job", events.EventsSubject(log[0].SessionID, "held"), forged), "tool worker's"},
		{"a worker's letter naming a turn's control", plant("job", events.ControlSubject("held"), reply), "tool worker's"},
		{"a control letter naming a turn's log", plant("control", events.EventsSubject(log[0].SessionID, "held"), reply), "was not taken from"},
		{"a submit letter naming a control", plant("submit", events.ControlSubject("held"), reply), "was not taken from"},
		{"a control letter naming no turn", plant("control", "jetloop.inbox.control.*", reply), "was not taken from"},
		{"a result", plant("result", events.ResultSubject("held"), result), "only what a client may send"},
	} {
		code, _, errOut := e.jetloop("dead", "retry", tc.seq)
		if code != ExitFailed || !strings.Contains(errOut, tc.says) {
			t.Errorf("dead retry of %s: exit %d %q, want a refusal saying %q", tc.what, code, errOut, tc.says)
		}
		e.mustRun(ExitOK, "dead", "show", tc.seq)
	}
	// The turn's own reply is the first input it takes after its pause.
	e.mustRun(ExitOK, "reply", "held", p.CallID, "blue")
	if fin := e.finished("held"); fin.StopReason != events.StopCompleted || fin.Output != "blue it is" {
		t.Fatalf("held finished %+v", fin)
	}
	for _, ev := range e.log("held") {
		if ev.Type == events.TurnResumed && !strings.Contains(string(ev.Data), "blue") {
			t.Fatalf("resumed by another answer: %s", ev.Data)
		}
	}
}
