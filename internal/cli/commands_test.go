package cli

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jetloop/jetloop/internal/events"
	"github.com/jetloop/jetloop/internal/timeline"
	"github.com/jetloop/jetloop/internal/turnlog"
)

const askScript = `responses:
  - {text: "asking", tool_calls: [{name: ask_user, arguments: {question: "which colour?"}}]}
  - {text: "blue it is"}
`

const gateScript = `responses:
  - {text: "echo needs a yes", tool_calls: [{name: echo, arguments: {text: hi}}]}
  - {text: "done"}
`

// rows parses turns --json.
func rows(t *testing.T, out string) map[string]Summary {
	t.Helper()
	got := map[string]Summary{}
	for _, line := range strings.Split(strings.TrimSpace(out), "\n") {
		if line == "" {
			continue
		}
		var s Summary
		if err := json.Unmarshal([]byte(line), &s); err != nil {
			t.Fatalf("%v: %s", err, line)
		}
		got[s.TurnID] = s
	}
	return got
}

// turns and show tell running, paused and finished turns apart, say what a
// paused one waits for, and filter by session, status and agent; reply,
// approve, deny and abort then move the paused turns on, and watch's exit
// status says how each ended.
func TestTurnsShowAndControl(t *testing.T) {
	e := newEnv(t)
	if out := e.mustRun(ExitOK, "turns"); out != "no turns\n" {
		t.Fatalf("turns on an empty server: %q", out)
	}
	cap := e.script("cap.yaml", capScript)
	ask := e.script("ask.yaml", askScript)
	gate := e.script("gate.yaml", gateScript)
	e.mustRun(ExitOK, "submit", "--watch", "--agent", "Wide", "--script", e.script("hi.yaml", "responses: [{text: hello}]\n"), "--turn", "done1", "hi")
	e.mustRun(ExitStopped, "submit", "--watch", "--agent", "Capped", "--script", cap, "--session", "s1", "--turn", "capped", "go")
	for _, turn := range []string{"ask1", "ask2"} {
		e.mustRun(ExitOK, "submit", "--agent", "Asker", "--script", ask, "--turn", turn, "paint it")
		e.waitType(turn, events.TurnPaused)
	}
	for _, turn := range []string{"gate1", "gate2"} {
		e.mustRun(ExitOK, "submit", "--agent", "Gated", "--script", gate, "--turn", turn, "say hi")
		e.waitType(turn, events.TurnPaused)
	}
	if err := Submit(t.Context(), e.nc, events.Submit{TurnID: "rej", Agent: "Nobody"}); err != nil {
		t.Fatal(err)
	}
	e.finished("rej")

	all := rows(t, e.mustRun(ExitOK, "turns", "--json"))
	if len(all) != 7 {
		t.Fatalf("turns --json: %d turns: %+v", len(all), all)
	}
	check := func(turn string, status turnlog.Status, reason events.StopReason, agent string, steps, calls int) {
		t.Helper()
		s := all[turn]
		if s.Status != status || s.StopReason != reason || s.Agent != agent || s.Steps != steps || s.ToolCalls != calls {
			t.Errorf("%s: %+v", turn, s)
		}
	}
	check("done1", StatusFinished, events.StopCompleted, "Wide", 1, 0)
	check("capped", StatusFinished, events.StopStepCap, "Capped", 3, 3)
	check("ask1", StatusPaused, "", "Asker", 1, 0)
	check("gate1", StatusPaused, "", "Gated", 1, 0)
	check("rej", StatusFinished, events.StopRejected, "Nobody", 0, 0) // from its dead submission
	if w := all["ask1"].Waiting; w == nil || w.Kind != events.PauseInput || w.Question != "which colour?" {
		t.Errorf("ask1 waits for %+v", w)
	}
	if w := all["gate1"].Waiting; w == nil || w.Kind != events.PauseApproval || w.Tool != "echo" {
		t.Errorf("gate1 waits for %+v", w)
	}
	if all["capped"].SessionID != "s1" || all["capped"].Started.IsZero() {
		t.Errorf("capped: %+v", all["capped"])
	}

	table := e.mustRun(ExitOK, "turns")
	for _, want := range []string{"TURN", `paused: asks "which colour?"`, `paused: approve echo {"text":"hi"}`, "finished: step_cap", "finished: rejected"} {
		if !strings.Contains(table, want) {
			t.Errorf("turns lacks %q:\n%s", want, table)
		}
	}
	for flags, want := range map[string][]string{
		"--status paused":   {"ask1", "ask2", "gate1", "gate2"},
		"--status step_cap": {"capped"},
		"--status finished": {"done1", "capped", "rej"},
		"--agent Gated":     {"gate1", "gate2"},
		"--session s1":      {"capped"},
	} {
		got := rows(t, e.mustRun(ExitOK, append(append([]string{"turns"}, strings.Fields(flags)...), "--json")...))
		if len(got) != len(want) {
			t.Errorf("turns %s: %d turns, want %v", flags, len(got), want)
		}
		for _, turn := range want {
			if _, ok := got[turn]; !ok {
				t.Errorf("turns %s lacks %s", flags, turn)
			}
		}
	}
	if code, _, _ := e.jetloop("turns", "--status", "sleeping"); code != ExitUsage {
		t.Errorf("turns --status sleeping: exit %d", code)
	}

	out := e.mustRun(ExitOK, "show", "ask1")
	callID := all["ask1"].Waiting.CallID
	for _, want := range []string{"status      paused", "a reply to call " + callID + ": which colour?", "jetloop reply ask1 " + callID + " TEXT", "input       user: paint it"} {
		if !strings.Contains(out, want) {
			t.Errorf("show ask1 lacks %q:\n%s", want, out)
		}
	}
	out = e.mustRun(ExitOK, "show", "capped")
	for _, want := range []string{"finished: step_cap", "limits      steps 3, budget 50", "steps 3 · tool calls 3 · model calls 4", "Step limit reached (3 steps)"} {
		if !strings.Contains(out, want) {
			t.Errorf("show capped lacks %q:\n%s", want, out)
		}
	}
	var shown Summary
	if err := json.Unmarshal([]byte(e.mustRun(ExitOK, "show", "--json", "rej")), &shown); err != nil {
		t.Fatal(err)
	}
	if shown.StopReason != events.StopRejected || !strings.Contains(shown.Error, "Nobody") {
		t.Errorf("show --json rej: %+v", shown)
	}
	if code, _, errOut := e.jetloop("show", "nope"); code != ExitFailed || !strings.Contains(errOut, `no turn "nope"`) {
		t.Errorf("show nope: %d %s", code, errOut)
	}

	// Control that cannot apply is refused before it is sent.
	for _, tc := range []struct{ args, want string }{
		{"abort nope", `no turn "nope"`},
		{"abort capped", `turn "capped" has finished (step_cap): nothing to abort`},
		{"reply ask1 call_other x", "waits for a reply to call " + callID},
		{"approve ask1 " + callID, "waits for a reply to call " + callID},
		{"reply gate1 " + all["gate1"].Waiting.CallID + " x", "waits for an approval of call " + all["gate1"].Waiting.CallID},
	} {
		if code, _, errOut := e.jetloop(strings.Fields(tc.args)...); code != ExitFailed || !strings.Contains(errOut, tc.want) {
			t.Errorf("%s: exit %d, %q; want exit %d and %q", tc.args, code, errOut, ExitFailed, tc.want)
		}
	}

	// Control: each paused turn moved on, and watch's exit status.
	e.mustRun(ExitOK, "reply", "ask1", callID, "blue")
	e.mustRun(ExitOK, "approve", "gate1", all["gate1"].Waiting.CallID)
	e.mustRun(ExitOK, "deny", "--note", "not now", "gate2", all["gate2"].Waiting.CallID)
	e.mustRun(ExitOK, "abort", "--reason", "changed my mind", "ask2")
	if code, _, _ := e.jetloop("reply", "ask1", "bad id!", "x"); code != ExitUsage {
		t.Errorf("reply with an invalid call id: exit %d", code)
	}
	e.mustRun(ExitOK, "watch", "ask1")
	if fin := e.finished("ask1"); fin.Output != "blue it is" {
		t.Errorf("ask1: %+v", fin)
	}
	e.mustRun(ExitOK, "watch", "gate1")
	e.mustRun(ExitOK, "watch", "gate2")
	e.mustRun(ExitStopped, "watch", "ask2")
	e.mustRun(ExitStopped, "watch", "capped")
	e.mustRun(ExitStopped, "watch", "rej")
	if fin := e.finished("ask2"); fin.StopReason != events.StopAborted || fin.Error != "changed my mind" {
		t.Errorf("ask2: %+v", fin)
	}
	gate1 := e.log("gate1")
	gate2 := e.log("gate2")
	if !hasResult(gate1, "hi", false) || !hasResult(gate2, "denied by the operator: not now", true) {
		t.Errorf("approve/deny results:\n%v\n%v", gate1, gate2)
	}
	out = e.mustRun(ExitOK, "watch", "gate2")
	if strings.Contains(out, "\033[") || !strings.Contains(out, "approved=false not now") {
		t.Errorf("watch to a pipe is plain text:\n%s", out)
	}
	if code, _, _ := e.jetloop("watch"); code != ExitUsage {
		t.Errorf("watch without a turn: exit %d", code)
	}
	var stderr bytes.Buffer
	if code := Main(context.Background(), []string{"watch", "--nats", "nats://127.0.0.1:1", "gate2"}, &bytes.Buffer{}, &stderr); code != ExitFailed {
		t.Errorf("watch without a server: exit %d (%s)", code, stderr.String())
	}
}

func hasResult(log []events.Envelope, output string, isError bool) bool {
	for _, e := range log {
		if e.Type != events.ToolCompleted {
			continue
		}
		var d events.ToolCompletedData
		if json.Unmarshal(e.Data, &d) == nil && d.Output == output && d.IsError == isError {
			return true
		}
	}
	return false
}

// Colour goes to terminals only: --no-color and NO_COLOR turn it off.
// /dev/null is a character device, as a terminal is.
func TestColorOnlyOnATerminal(t *testing.T) {
	tty, err := os.OpenFile(os.DevNull, os.O_WRONLY, 0)
	if err != nil {
		t.Skip(err)
	}
	defer tty.Close()
	t.Setenv("NO_COLOR", "")
	if c := (&command{stdout: tty}); !c.color() {
		t.Fatal("no colour on a character device")
	}
	if c := (&command{stdout: tty, noColor: true}); c.color() {
		t.Fatal("colour despite --no-color")
	}
	if c := (&command{stdout: &bytes.Buffer{}}); c.color() {
		t.Fatal("colour into a buffer")
	}
	t.Setenv("NO_COLOR", "1")
	if c := (&command{stdout: tty}); c.color() {
		t.Fatal("colour despite NO_COLOR")
	}
	var out bytes.Buffer
	tr := timeline.NewTrace(&out, true)
	log, err := readLogFile("testdata/completed.jsonl")
	if err != nil {
		t.Fatal(err)
	}
	for _, ev := range log {
		if err := tr.Event(ev); err != nil {
			t.Fatal(err)
		}
	}
	if !strings.Contains(out.String(), "\033[1m") {
		t.Fatal("a colour trace has no escapes")
	}
}

// A turn whose model is still answering is running; abort stops it, and
// watch exits 1.
func TestRunningTurnAborted(t *testing.T) {
	e := newEnv(t)
	slow := e.script("slow.yaml", "responses:\n  - {text: \"thinking very slowly\", delay_ms: 20000}\n")
	e.mustRun(ExitOK, "submit", "--agent", "Wide", "--script", slow, "--turn", "slow1", "think")
	e.waitType("slow1", events.StepStarted)
	got := rows(t, e.mustRun(ExitOK, "turns", "--status", "running", "--json"))
	if s, ok := got["slow1"]; !ok || len(got) != 1 || s.Steps != 1 || s.Agent != "Wide" {
		t.Fatalf("running turns: %+v", got)
	}
	if out := e.mustRun(ExitOK, "show", "slow1"); !strings.Contains(out, "status      running") {
		t.Fatalf("show slow1:\n%s", out)
	}
	e.mustRun(ExitOK, "abort", "slow1")
	out := e.mustRun(ExitStopped, "watch", "slow1")
	if !strings.Contains(out, "finished: aborted") {
		t.Fatalf("watch slow1:\n%s", out)
	}
	if got := rows(t, e.mustRun(ExitOK, "turns", "--status", "aborted", "--json")); len(got) != 1 {
		t.Fatalf("aborted turns: %+v", got)
	}
}

// signalWriter keeps what is written and closes wrote on the first write.
type signalWriter struct {
	mu    sync.Mutex
	buf   bytes.Buffer
	once  sync.Once
	wrote chan struct{}
}

func (w *signalWriter) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	defer w.once.Do(func() { close(w.wrote) })
	return w.buf.Write(p)
}

// watch --wait of a turn with no events says what it waits for, then
// follows the turn once it is submitted.
func TestWatchWaitsForATurnToStart(t *testing.T) {
	e := newEnv(t)
	stderr := &signalWriter{wrote: make(chan struct{})}
	var stdout bytes.Buffer
	code := make(chan int, 1)
	go func() {
		code <- Main(t.Context(), []string{"watch", "--wait", "--nats", e.srv.ClientURL(), "later"}, &stdout, stderr)
	}()
	select {
	case <-stderr.wrote:
	case c := <-code:
		t.Fatalf("watch exited %d before the turn started", c)
	case <-time.After(time.Minute):
		t.Fatal("watch said nothing about a turn without events")
	}
	if got := stderr.buf.String(); !strings.Contains(got, `turn "later" has no events yet; waiting for it to start`) {
		t.Fatalf("watch said %q", got)
	}
	e.mustRun(ExitOK, "submit", "--agent", "Wide", "--script", e.script("hi.yaml", "responses:\n  - {text: \"hi\"}\n"), "--turn", "later", "go")
	if c := <-code; c != ExitOK || !strings.Contains(stdout.String(), "finished: completed") {
		t.Fatalf("watch exited %d:\n%s", c, stdout.String())
	}
}
