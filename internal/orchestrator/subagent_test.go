package orchestrator_test

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/jetloop/jetloop/internal/events"
	"github.com/jetloop/jetloop/internal/fsm"
	"github.com/jetloop/jetloop/internal/metrics"
	"github.com/jetloop/jetloop/internal/orchestrator"
	"github.com/jetloop/jetloop/internal/testkit"
)

// subagentAgents are the agents of the subagent tests. Children run their
// agent's own script file: a child's submission carries no script.
const subagentAgents = `---
name: Lead
model: script
tools: [agent:Researcher, agent:Slow]
---
Delegate.
---
name: Careful
model: script
tools: [agent:Researcher]
approval: [Researcher]
---
Delegates once approved.
---
name: Researcher
description: Finds facts
model: script:researcher.yaml
tools: []
---
Research.
---
name: Slow
model: script:slow.yaml
tools: [echo]
approval: [echo]
---
Echo, once approved.
---
name: Selfish
model: script
tools: [agent:Selfish]
---
Calls itself.
---
name: Ping
model: script:ping.yaml
tools: [agent:Pong]
---
Calls Pong.
---
name: Pong
model: script:pong.yaml
tools: [agent:Ping]
---
Calls Ping back.
---
name: D1
model: script:deep.yaml
tools: [agent:D2]
---
Level one.
---
name: D2
model: script:deep2.yaml
tools: [agent:D3]
---
Level two.
---
name: D3
model: script:deep3.yaml
tools: [agent:D4]
---
Level three.
---
name: D4
model: script:deep4.yaml
tools: [agent:D1]
---
Level four.
`

var subagentScripts = map[string]string{
	"researcher.yaml": "responses:\n  - text: \"found: 42\"\n    delay_ms: 1500\nrepeat_last: true\n",
	"slow.yaml":       "responses:\n  - tool_calls: [{name: echo, arguments: {text: hi}}]\n  - text: echoed\n",
	"ping.yaml":       "responses:\n  - tool_calls: [{name: Pong, arguments: {task: go}}]\n  - text: ping done\n",
	"pong.yaml":       "responses:\n  - tool_calls: [{name: Ping, arguments: {task: again}}]\n  - text: pong done\n",
	"deep.yaml":       "responses:\n  - tool_calls: [{name: D2, arguments: {task: down}}]\n  - text: d1 done\n",
	"deep2.yaml":      "responses:\n  - tool_calls: [{name: D3, arguments: {task: down}}]\n  - text: d2 done\n",
	"deep3.yaml":      "responses:\n  - tool_calls: [{name: D4, arguments: {task: down}}]\n  - text: d3 done\n",
	"deep4.yaml":      "responses:\n  - tool_calls: [{name: D1, arguments: {task: down}}]\n  - text: d4 done\n",
}

// newSubagentHarness is newHarness with the subagent tests' agents.
func newSubagentHarness(t *testing.T) *harness {
	t.Helper()
	return newHarnessServing(t, testkit.Start(t), nil, subagentAgents, subagentScripts)
}

// scriptCallID is the scripted model's id of a turn's call (model.callID).
func scriptCallID(turn string, step, index, position int) string {
	sum := sha256.Sum256(fmt.Appendf(nil, "%s/%d/%d/%d", turn, step, index, position))
	return "call_" + hex.EncodeToString(sum[:10])
}

// subagentCalls returns the completions of a log's subagent calls.
func subagentCalls(t *testing.T, log []events.Envelope) []events.ToolCompletedData {
	var out []events.ToolCompletedData
	for _, c := range of[events.ToolCompletedData](t, log, events.ToolCompleted) {
		if c.ChildTurnID != "" || strings.HasPrefix(c.Worker, "agent:") {
			out = append(out, c)
		}
	}
	return out
}

// TestSubagentParallelChildren: a parent whose step calls one agent twice
// runs two children at once, each a turn of its own with its parent named,
// and gets both answers as its calls' results.
func TestSubagentParallelChildren(t *testing.T) {
	m := metrics.New()
	base := serveMetrics(t, m)
	h := newSubagentHarness(t)
	h.worker()
	h.orchestrator(orchestrator.WithMetrics(m))
	h.submit(script("lead-1", "Lead", `{"responses":[
		{"tool_calls":[{"name":"Researcher","arguments":{"task":"find a"}},{"name":"Researcher","arguments":{"task":"find b"}}]},
		{"text":"both found"}]}`))
	log, fin := h.finished("lead-1")
	if fin.StopReason != events.StopCompleted || fin.Output != "both found" {
		t.Fatalf("parent: %+v\n%s", fin, dump(log))
	}
	reqs := of[events.ToolRequestedData](t, log, events.ToolRequested)
	done := subagentCalls(t, log)
	if len(reqs) != 2 || len(done) != 2 {
		t.Fatalf("want 2 subagent calls, got %d requested, %d completed\n%s", len(reqs), len(done), dump(log))
	}
	byCall := map[string]events.ToolCompletedData{}
	for _, c := range done {
		byCall[c.CallID] = c
	}
	var started, ended []time.Time
	for i, r := range reqs {
		child := fsm.ChildTurnID("lead-1", r.CallID)
		if r.ChildTurnID != child || !strings.HasPrefix(child, "sub-") || len(child) != 30 {
			t.Fatalf("call %s names child %q, want %q", r.CallID, r.ChildTurnID, child)
		}
		c := byCall[r.CallID]
		if c.ChildTurnID != child || c.Worker != "agent:Researcher" || c.IsError || c.Output != "found: 42" {
			t.Fatalf("result of call %s: %+v", r.CallID, c)
		}
		clog, cfin := h.finished(child)
		if cfin.StopReason != events.StopCompleted {
			t.Fatalf("child %s: %+v", child, cfin)
		}
		st := of[events.TurnStartedData](t, clog, events.TurnStarted)[0]
		if p := st.Parent; p == nil || p.TurnID != "lead-1" || p.CallID != r.CallID || p.Depth != 1 {
			t.Fatalf("child %s parent %+v", child, st.Parent)
		}
		if clog[0].SessionID != child || st.Agent != "Researcher" || st.Input[0].Content != []string{"find a", "find b"}[i] {
			t.Fatalf("child %s: session %s agent %s input %+v", child, clog[0].SessionID, st.Agent, st.Input)
		}
		started, ended = append(started, clog[0].Time), append(ended, clog[len(clog)-1].Time)
	}
	// Each child's model answers after 1.5 s: run one after the other,
	// the second would start after the first ended.
	if !started[1].Before(ended[0]) || !started[0].Before(ended[1]) {
		t.Fatalf("children ran one after the other: started %v, ended %v", started, ended)
	}
	if n, err := fsm.Verify(log); err != nil {
		t.Fatalf("verify the parent (%d decisions): %v", n, err)
	}
	if got := scrape(t, base)[`jetloop_tool_calls_total{outcome="ok",tool="agent:Researcher"}`]; got != 2 {
		t.Fatalf("subagent calls counted %v times, want 2", got)
	}

	// A fork after the step that ran the children has their results in
	// its history, as recorded: it starts no child.
	h.submit(events.Submit{TurnID: "lead-1-fork", ForkedFrom: &events.ForkedFrom{TurnID: "lead-1", Step: 1}})
	flog, ffin := h.finished("lead-1-fork")
	if ffin.StopReason != events.StopCompleted || ffin.Output != "both found" || len(of[events.ToolRequestedData](t, flog, events.ToolRequested)) != 0 {
		t.Fatalf("fork: %+v\n%s", ffin, dump(flog))
	}
	st := of[events.TurnStartedData](t, flog, events.TurnStarted)[0]
	if st.History != 4 { // the input, the answer with two calls, two results
		t.Fatalf("fork history %d", st.History)
	}
}

// TestSubagentSquatter: a client that submits a turn under the id a call's
// child will have, before the call, gets that turn rejected, and the call
// fails with an error result that says so; a forged child of a call that
// runs is rejected too, and never becomes the child.
func TestSubagentSquatter(t *testing.T) {
	h := newSubagentHarness(t).start()
	call := scriptCallID("lead-sq", 1, 0, 0)
	child := fsm.ChildTurnID("lead-sq", call)
	squat := events.Submit{TurnID: child, Agent: "Researcher", Input: []events.Message{{Role: events.RoleUser, Content: "mine"}},
		Parent: &events.ParentRef{TurnID: "lead-sq", CallID: call, Depth: 1}}
	h.submit(squat)
	_, sfin := h.finished(child)
	if sfin.StopReason != events.StopRejected || !strings.Contains(sfin.Error, "not a subagent's turn the orchestrator submitted") {
		t.Fatalf("squatter: %+v", sfin)
	}
	h.submit(script("lead-sq", "Lead", `{"responses":[
		{"tool_calls":[{"name":"Researcher","arguments":{"task":"find"}}]},
		{"text":"gave up"}]}`))
	log, fin := h.finished("lead-sq")
	if fin.StopReason != events.StopCompleted {
		t.Fatalf("parent: %+v\n%s", fin, dump(log))
	}
	done := subagentCalls(t, log)
	if len(done) != 1 || !done[0].IsError || done[0].ChildTurnID != child ||
		!strings.Contains(done[0].Output, "was rejected") || !strings.Contains(done[0].Output, "not a subagent's turn the orchestrator submitted") {
		t.Fatalf("the call's result must say its child's id was taken: %+v", done)
	}
	if clog := h.events(child); len(clog) != 1 {
		t.Fatalf("the squatted id must stay a rejection, not start:\n%s", dump(clog))
	}
}

// TestSubagentRefusals: an agent that calls itself, an agent that calls its
// ancestor, and a call past depth 3 each get an error result saying why,
// and their turns go on.
func TestSubagentRefusals(t *testing.T) {
	h := newSubagentHarness(t).start()
	h.submit(script("selfish", "Selfish", `{"responses":[
		{"tool_calls":[{"name":"Selfish","arguments":{"task":"again"}}]},{"text":"ok"}]}`))
	h.submit(events.Submit{TurnID: "ping", Agent: "Ping", Input: []events.Message{{Role: events.RoleUser, Content: "go"}}})
	h.submit(events.Submit{TurnID: "deep", Agent: "D1", Input: []events.Message{{Role: events.RoleUser, Content: "go"}}})

	log, fin := h.finished("selfish")
	done := subagentCalls(t, log)
	res := of[events.ToolCompletedData](t, log, events.ToolCompleted)
	if fin.StopReason != events.StopCompleted || len(done) != 0 || len(res) != 1 || !res[0].IsError ||
		!strings.Contains(res[0].Output, "cannot start itself") {
		t.Fatalf("self call: %+v %+v", fin, res)
	}

	log, fin = h.finished("ping")
	pong := subagentCalls(t, log)
	if fin.StopReason != events.StopCompleted || len(pong) != 1 || pong[0].IsError || pong[0].Output != "pong done" {
		t.Fatalf("ping: %+v %+v", fin, pong)
	}
	plog, _ := h.finished(pong[0].ChildTurnID)
	back := subagentCalls(t, plog)
	if len(back) != 1 || !back[0].IsError || !strings.Contains(back[0].Output, "cannot start itself or an ancestor (this call's chain: Ping > Pong)") {
		t.Fatalf("Pong calling its parent's agent: %+v", back)
	}

	// D1 > D2 > D3 > D4: D4 is at depth 3 and starts no child.
	turn, depth := "deep", 0
	for depth < 3 {
		log, fin := h.finished(turn)
		calls := subagentCalls(t, log)
		if fin.StopReason != events.StopCompleted || len(calls) != 1 || calls[0].IsError {
			t.Fatalf("depth %d: %+v %+v", depth, fin, calls)
		}
		turn, depth = calls[0].ChildTurnID, depth+1
		st := of[events.TurnStartedData](t, h.events(turn), events.TurnStarted)[0]
		if st.Parent == nil || st.Parent.Depth != depth {
			t.Fatalf("depth %d: parent %+v", depth, st.Parent)
		}
	}
	log, fin = h.finished(turn)
	res = of[events.ToolCompletedData](t, log, events.ToolCompleted)
	if fin.StopReason != events.StopCompleted || len(res) != 1 || !res[0].IsError || !strings.Contains(res[0].Output, "depth 3") {
		t.Fatalf("depth 3 call: %+v %+v", fin, res)
	}
}

// TestSubagentAbort: aborting a parent whose child waits for an approval
// ends both aborted.
func TestSubagentAbort(t *testing.T) {
	h := newSubagentHarness(t).start()
	h.submit(script("lead-ab", "Lead", `{"responses":[
		{"tool_calls":[{"name":"Slow","arguments":{"task":"echo"}}]},{"text":"never"}]}`))
	req := h.waitType("lead-ab", events.ToolRequested)
	var r events.ToolRequestedData
	if err := json.Unmarshal(req.Data, &r); err != nil || r.ChildTurnID == "" {
		t.Fatalf("tool.requested: %s %v", req.Data, err)
	}
	h.waitType(r.ChildTurnID, events.TurnPaused)
	h.control("lead-ab", events.Control{Action: events.ActionAbort, Reason: "enough"})
	_, fin := h.finished("lead-ab")
	_, cfin := h.finished(r.ChildTurnID)
	if fin.StopReason != events.StopAborted || cfin.StopReason != events.StopAborted || !strings.Contains(cfin.Error, "lead-ab") {
		t.Fatalf("parent %+v, child %+v", fin, cfin)
	}
}

// TestCrashAtEveryStageSubagent is TestCrashAtEveryStage with a parent
// whose step runs a subagent: whichever input of the parent's or the
// child's the orchestrator dies on, at whichever stage, a fresh one
// finishes both, the child started once and its result applied once (the
// logs' invariants, checked when the test ends, hold each call to one
// result and each turn to one start).
func TestCrashAtEveryStageSubagent(t *testing.T) {
	for _, stage := range []string{orchestrator.StagePartial, orchestrator.StageAppended, orchestrator.StagePublished} {
		for n := 1; n <= 6; n++ {
			// Every other input with the logs in four streams, where a
			// parent's and its child's logs are mostly in different ones.
			streams := 1 + 3*(n%2)
			t.Run(fmt.Sprintf("%s/input-%d/streams-%d", stage, n, streams), func(t *testing.T) {
				h := newHarnessServing(t, testkit.Start(t), eventStreams(streams), subagentAgents, subagentScripts)
				h.worker()
				crashed, kill := h.orchestratorCrashing(stage, n)
				turn := fmt.Sprintf("lead-crash-%s-%d", stage, n)
				h.submit(script(turn, "Lead", `{"responses":[
					{"tool_calls":[{"name":"Researcher","arguments":{"task":"find"}}]},{"text":"done"}]}`))
				h.waitFor("the crash or the end", func() bool { return closed(crashed) || h.last(turn) == events.TurnFinished })
				if !closed(crashed) {
					t.Skipf("the turn has fewer than %d inputs that reach stage %s", n, stage)
				}
				kill()
				h.orchestrator()
				log, fin := h.finished(turn)
				done := subagentCalls(t, log)
				if fin.StopReason != events.StopCompleted || len(done) != 1 || done[0].Output != "found: 42" {
					t.Fatalf("finished %+v, calls %+v\n%s", fin, done, dump(log))
				}
				clog, _ := h.finished(done[0].ChildTurnID)
				if got := len(of[events.TurnStartedData](t, clog, events.TurnStarted)); got != 1 {
					t.Fatalf("the child started %d times", got)
				}
			})
		}
	}
}

// TestSubagentApproval: a subagent call in approval waits for the approve
// before its child is submitted.
func TestSubagentApproval(t *testing.T) {
	h := newSubagentHarness(t).start()
	h.submit(script("careful", "Careful", `{"responses":[
		{"tool_calls":[{"name":"Researcher","arguments":{"task":"find"}}]},{"text":"done"}]}`))
	paused := h.waitType("careful", events.TurnPaused)
	var p events.TurnPausedData
	if err := json.Unmarshal(paused.Data, &p); err != nil || p.Kind != events.PauseApproval {
		t.Fatalf("paused %s", paused.Data)
	}
	child := fsm.ChildTurnID("careful", p.CallID)
	if h.last(child) != "" {
		t.Fatal("the child started before its call was approved")
	}
	yes := true
	h.control("careful", events.Control{Action: events.ActionApprove, CallID: p.CallID, Approved: &yes})
	log, fin := h.finished("careful")
	done := subagentCalls(t, log)
	if fin.StopReason != events.StopCompleted || len(done) != 1 || done[0].Output != "found: 42" || done[0].ChildTurnID != child {
		t.Fatalf("finished %+v, calls %+v", fin, done)
	}
}
