package cli

import (
	"encoding/json"
	"reflect"
	"strings"
	"testing"

	"github.com/jetloop/jetloop/internal/events"
)

// capScript calls echo with new text in each step, so a three-step turn
// hits its step cap.
const capScript = `responses:
  - {text: "one", tool_calls: [{name: echo, arguments: {text: a}}]}
  - {text: "two", tool_calls: [{name: echo, arguments: {text: b}}]}
  - {text: "three", tool_calls: [{name: echo, arguments: {text: c}}]}
summary: "echoed a, b and c"
`

// The fork test: a turn that hit its step cap, forked from step 2
// with another agent whose script finishes, completes; the fork's model call
// carries exactly the original's conversation up to step 2, which is what
// the original's own step 3 was given.
func TestForkOfACappedTurnFinishes(t *testing.T) {
	e := newEnv(t)
	jobs := e.recordModelJobs()
	orig := strings.TrimSpace(e.mustRun(ExitStopped, "submit", "--watch", "--agent", "Capped",
		"--script", e.script("cap.yaml", capScript), "--session", "s1", "--turn", "orig", "echo three things"))
	if !strings.HasPrefix(orig, "orig\n") {
		t.Fatalf("submit printed %q", orig)
	}
	if fin := e.finished("orig"); fin.StopReason != events.StopStepCap {
		t.Fatalf("original stopped with %s", fin.StopReason)
	}

	done := e.script("done.yaml", "responses:\n  - {text: \"finished after two steps\"}\n")
	out := e.mustRun(ExitOK, "fork", "--from-step", "2", "--agent", "Wide", "--script", done, "--turn", "fork1", "--watch", "orig")
	if !strings.HasPrefix(out, "fork1\n") || !strings.Contains(out, "finished after two steps") {
		t.Fatalf("fork printed:\n%s", out)
	}
	fin := e.finished("fork1")
	if fin.StopReason != events.StopCompleted || fin.Output != "finished after two steps" {
		t.Fatalf("fork finished %+v", fin)
	}

	log := e.log("fork1")
	var started events.TurnStartedData
	if err := json.Unmarshal(log[0].Data, &started); err != nil {
		t.Fatal(err)
	}
	if started.ForkedFrom == nil || *started.ForkedFrom != (events.ForkedFrom{TurnID: "orig", Step: 2}) {
		t.Fatalf("forked_from = %+v", started.ForkedFrom)
	}
	if started.Agent != "Wide" || started.History != 5 || len(started.Input) != 0 || log[0].SessionID != "s1" {
		t.Fatalf("turn.started: agent %s, history %d, input %v, session %s", started.Agent, started.History, started.Input, log[0].SessionID)
	}

	got := jobs.of("fork1")[1].Messages
	want := jobs.of("orig")[3].Messages
	if len(want) != 5 {
		t.Fatalf("the original's step 3 was given %d messages", len(want))
	}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("the fork's model call got\n%+v\nwant the original's conversation up to step 2\n%+v", got, want)
	}
	roles := []events.Role{events.RoleUser, events.RoleAssistant, events.RoleTool, events.RoleAssistant, events.RoleTool}
	for i, m := range got {
		if m.Role != roles[i] {
			t.Fatalf("message %d is %s, want %s: %+v", i, m.Role, roles[i], got)
		}
	}
	if got[0].Content != "echo three things" || got[2].Content != "a" || got[4].Content != "b" {
		t.Fatalf("history: %+v", got)
	}

	// A fork of the fork carries both: the original up to step 2, then the
	// fork's step 1.
	again := e.script("again.yaml", "responses:\n  - {text: \"and again\"}\n")
	e.mustRun(ExitOK, "fork", "--from-step", "1", "--script", again, "--turn", "fork2", "--watch", "fork1", "once more")
	nested := jobs.of("fork2")[1].Messages
	if len(nested) != 7 || !reflect.DeepEqual(nested[:5], want) || nested[5].Content != "finished after two steps" ||
		nested[6].Content != "once more" {
		t.Fatalf("the fork of the fork got %+v", nested)
	}
}

// A fork that cannot start is refused like any bad submission: the command
// says so before sending, and a forked submission sent anyway becomes a dead
// letter and a rejected turn.
func TestForkRefusals(t *testing.T) {
	e := newEnv(t)
	e.mustRun(ExitStopped, "submit", "--watch", "--agent", "Capped", "--script", e.script("cap.yaml", capScript), "--turn", "orig", "go")
	if _, _, errOut := e.jetloop("fork", "--from-step", "4", "orig"); !strings.Contains(errOut, "3 complete step(s)") {
		t.Fatalf("fork from step 4 of 3: %q", errOut)
	}
	if code, _, errOut := e.jetloop("fork", "--from-step", "1", "nope"); code != ExitFailed || !strings.Contains(errOut, `no turn "nope"`) {
		t.Fatalf("fork of an unknown turn: %d %q", code, errOut)
	}
	if code, _, _ := e.jetloop("fork", "orig"); code != ExitUsage {
		t.Fatalf("fork without --from-step: exit %d", code)
	}
	for turn, sub := range map[string]events.Submit{
		"f-unknown": {TurnID: "f-unknown", ForkedFrom: &events.ForkedFrom{TurnID: "nope", Step: 1}},
		"f-step":    {TurnID: "f-step", ForkedFrom: &events.ForkedFrom{TurnID: "orig", Step: 9}},
		"f-agent":   {TurnID: "f-agent", Agent: "Nobody", ForkedFrom: &events.ForkedFrom{TurnID: "orig", Step: 1}},
	} {
		if err := Submit(t.Context(), e.nc, sub); err != nil {
			t.Fatal(err)
		}
		fin := e.finished(turn)
		if fin.StopReason != events.StopRejected || fin.Error == "" {
			t.Fatalf("%s: %+v", turn, fin)
		}
		t.Logf("%s: %s", turn, fin.Error)
	}
	out := e.mustRun(ExitOK, "dead")
	for _, turn := range []string{"f-unknown", "f-step", "f-agent"} {
		if !strings.Contains(out, turn) {
			t.Fatalf("dead letters lack %s:\n%s", turn, out)
		}
	}
}

// A fork's history is not in its log: an orchestrator that did not start the
// fork rebuilds it from the original's log, and the fork's later model calls
// get the same conversation.
func TestForkResumesOnAnotherOrchestrator(t *testing.T) {
	e := newEnv(t)
	jobs := e.recordModelJobs()
	e.mustRun(ExitStopped, "submit", "--watch", "--agent", "Capped", "--script", e.script("cap.yaml", capScript), "--turn", "orig", "go")
	gated := e.script("gated.yaml", `responses:
  - {text: "write it", tool_calls: [{name: echo, arguments: {text: z}}]}
  - {text: "all done"}
`)
	e.mustRun(ExitOK, "fork", "--from-step", "1", "--agent", "Gated", "--script", gated, "--turn", "fork2", "orig", "and now z")
	paused := e.waitType("fork2", events.TurnPaused)
	var p events.TurnPausedData
	if err := json.Unmarshal(paused.Data, &p); err != nil {
		t.Fatal(err)
	}
	e.stopO()
	e.orchestrator()
	e.mustRun(ExitOK, "approve", "--note", "fine", "fork2", p.CallID)
	if fin := e.finished("fork2"); fin.StopReason != events.StopCompleted {
		t.Fatalf("fork finished %+v", fin)
	}
	steps := jobs.of("fork2")
	first, second := steps[1].Messages, steps[2].Messages
	// The original's input and step 1, then the fork's input.
	if len(first) != 4 || first[3].Content != "and now z" || first[2].Content != "a" {
		t.Fatalf("step 1 messages: %+v", first)
	}
	if len(second) != 6 || !reflect.DeepEqual(second[:4], first) || second[5].Content != "z" {
		t.Fatalf("step 2 messages after the restart: %+v", second)
	}
}

// A fork that keeps the original's script goes on with the responses the
// original would have had after the fork's step, so trying a step again
// does not replay the whole script from its start.
func TestForkGoesOnWithTheOriginalsScript(t *testing.T) {
	e := newEnv(t)
	script := e.script("four.yaml", `responses:
  - {text: "one", tool_calls: [{name: echo, arguments: {text: a}}]}
  - {text: "two", tool_calls: [{name: echo, arguments: {text: b}}]}
  - {text: "three", tool_calls: [{name: echo, arguments: {text: c}}]}
  - {text: "done"}
`)
	// The 4-response script is capped at 3 steps: the last answer is never asked for.
	e.mustRun(ExitStopped, "submit", "--watch", "--agent", "Capped", "--script", script, "--turn", "orig", "go")
	e.mustRun(ExitOK, "fork", "--from-step", "2", "--turn", "fork1", "--watch", "orig")
	log := e.log("fork1")
	var texts []string
	for _, ev := range log {
		if ev.Type == events.ModelCompleted {
			var d events.ModelCompletedData
			if err := json.Unmarshal(ev.Data, &d); err != nil {
				t.Fatal(err)
			}
			texts = append(texts, d.Text)
		}
	}
	if !reflect.DeepEqual(texts, []string{"three", "done"}) {
		t.Fatalf("the fork's model answered %q, want the original's script from its step 3 on", texts)
	}
	var started events.TurnStartedData
	if err := json.Unmarshal(log[0].Data, &started); err != nil || started.ScriptIndex != 2 {
		t.Fatalf("turn.started script_index %d (%v), want 2", started.ScriptIndex, err)
	}
}
