package orchestrator_test

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/jetloop/jetloop/internal/agents"
	"github.com/jetloop/jetloop/internal/events"
	"github.com/jetloop/jetloop/internal/fsm"
	"github.com/jetloop/jetloop/internal/orchestrator"
)

const summarizeAgents = `---
name: Long
model: script
tools: [echo]
compaction: {agent: Summarizer, over_tokens: 500, keep_steps: 1}
---
Works long.
---
name: Summarizer
description: Summarizes a long turn's older steps
model: script:summarizer.yaml
tools: []
---
Summarize.
`

const summarizerScript = "responses:\n  - text: \"SUMMARY: echoed the first texts.\"\nrepeat_last: true\n"

// newSummarizeHarness is newHarness with the agents of summarizeAgents.
func newSummarizeHarness(t *testing.T) *harness {
	t.Helper()
	h := newHarness(t)
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "summarizer.yaml"), []byte(summarizerScript), 0o644); err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(dir, "AGENTS.md")
	if err := os.WriteFile(path, []byte(summarizeAgents), 0o644); err != nil {
		t.Fatal(err)
	}
	set, _, err := agents.Load(path)
	if err != nil {
		t.Fatal(err)
	}
	h.Agents = set
	return h
}

// longTurn is a turn of Long: five steps, each of an echo that adds some
// 200 tokens (its arguments and its output), then the answer.
func longTurn(id string) events.Submit {
	long := strings.Repeat("x", 400)
	var steps []string
	for i := 1; i <= 5; i++ {
		steps = append(steps, `{"text": "step `+string(rune('0'+i))+`", "tool_calls": [{"name": "echo", "arguments": {"text": "`+string(rune('0'+i))+long+`"}}]}`)
	}
	return script(id, "Long", `{"responses": [`+strings.Join(steps, ",")+`, {"text": "all done"}]}`)
}

// TestCrashAtEveryStageCompaction kills the orchestrator at each stage of
// the inputs around a summarizing compaction (the step that passes the
// threshold, the summary's turn, its end told to the parent): the summary's
// turn starts once, the compaction is recorded once, and the log verifies.
func TestCrashAtEveryStageCompaction(t *testing.T) {
	for _, stage := range []string{orchestrator.StagePartial, orchestrator.StageAppended, orchestrator.StagePublished} {
		for n := 8; n <= 14; n++ {
			t.Run(fmt.Sprintf("%s/input-%d", stage, n), func(t *testing.T) {
				h := newSummarizeHarness(t)
				h.worker()
				crashed, kill := h.orchestratorCrashing(stage, n)
				turn := fmt.Sprintf("long-crash-%s-%d", stage, n)
				h.submit(longTurn(turn))
				h.waitFor("the crash or the end", func() bool { return closed(crashed) || h.last(turn) == events.TurnFinished })
				if !closed(crashed) {
					t.Skipf("fewer than %d inputs reach stage %s", n, stage)
				}
				kill()
				h.orchestrator()
				log, fin := h.finished(turn)
				cs := of[events.TurnCompactedData](t, log, events.TurnCompacted)
				if fin.StopReason != events.StopCompleted || len(cs) != 1 || cs[0].Error != "" {
					t.Fatalf("finished %+v, compactions %+v\n%s", fin, cs, dump(log))
				}
				clog, _ := h.finished(cs[0].ChildTurnID)
				if got := len(of[events.TurnStartedData](t, clog, events.TurnStarted)); got != 1 {
					t.Fatalf("the summary's turn started %d times", got)
				}
				if n, err := fsm.Verify(log); err != nil {
					t.Fatalf("verify after %d decisions: %v", n, err)
				}
			})
		}
	}
}

// TestSummarizingCompaction runs a long scripted turn whose agent compacts
// by an agent past 500 input tokens, through the real orchestrator: it
// compacts once, by a child turn of Summarizer whose task is the transcript
// of the older steps; turn.compacted records its summary; the model calls
// after it are sent the summary instead of those steps (and the steps after
// them whole); and the log verifies without a model.
func TestSummarizingCompaction(t *testing.T) {
	h := newSummarizeHarness(t)
	rec := &recorder{sent: map[string][]events.Message{}}
	h.worker()
	h.orchestrator(orchestrator.WithProvider("script", rec))
	h.submit(longTurn("long-1"))
	log, fin := h.finished("long-1")
	if fin.StopReason != events.StopCompleted || fin.Output != "all done" {
		t.Fatalf("finished %+v\n%s", fin, dump(log))
	}
	compactions := of[events.TurnCompactedData](t, log, events.TurnCompacted)
	if len(compactions) != 1 {
		t.Fatalf("%d compactions, want 1\n%s", len(compactions), dump(log))
	}
	c := compactions[0]
	// The first model call past the threshold, and the step it ends.
	models := of[events.ModelCompletedData](t, log, events.ModelCompleted)
	past := 0
	for i, m := range models {
		if m.Usage.InputTokens > 500 {
			past = i + 1
			break
		}
	}
	if past == 0 || c.ThroughStep != past-1 || c.Error != "" || c.Summary != "SUMMARY: echoed the first texts." ||
		c.ChildTurnID != fsm.CompactChildID("long-1", past-1) {
		t.Fatalf("compaction %+v; the threshold was passed at step %d", c, past)
	}
	t.Logf("compacted through step %d of %d; the threshold passed at step %d", c.ThroughStep, fin.Metrics.Steps, past)
	// Written between the step that passed it and the next one.
	for i, e := range log {
		if e.Type == events.TurnCompacted && (log[i-1].Type != events.StepChecked || log[i-1].Step != past || log[i+1].Type != events.StepStarted) {
			t.Fatalf("turn.compacted at seq %d, after %s (step %d), before %s", e.Seq, log[i-1].Type, log[i-1].Step, log[i+1].Type)
		}
	}

	// The child: a Summarizer turn whose task is the older steps.
	clog, cfin := h.finished(c.ChildTurnID)
	st := of[events.TurnStartedData](t, clog, events.TurnStarted)[0]
	if cfin.StopReason != events.StopCompleted || st.Agent != "Summarizer" || st.Parent == nil || st.Parent.TurnID != "long-1" ||
		st.Parent.CallID != fsm.CompactCallID(c.ThroughStep) {
		t.Fatalf("summary turn: %+v %+v", st, cfin)
	}
	task := st.Input[0].Content
	for i := 1; i <= 5; i++ {
		mark := "step " + string(rune('0'+i))
		if in := strings.Contains(task, mark); in != (i <= c.ThroughStep) {
			t.Errorf("the summary's task has %q: %v (through step %d)", mark, in, c.ThroughStep)
		}
	}

	// What the model was sent: before, every step; after, the summary in
	// place of the steps it covers, the later steps whole.
	for step := 1; step <= fin.Metrics.Steps; step++ {
		sent := rec.messages("long-1", step)
		all := dump2(sent)
		hasSummary := strings.Contains(all, c.Summary)
		if hasSummary != (step > past) {
			t.Errorf("step %d: summary sent %v", step, hasSummary)
		}
		for i := 1; i < step; i++ {
			mark := `"step ` + string(rune('0'+i))
			if want := step <= past || i > c.ThroughStep; strings.Contains(all, mark) != want {
				t.Errorf("step %d: step %d's answer sent %v, want %v:\n%s", step, i, !want, want, all)
			}
		}
	}
	if n, err := fsm.Verify(log); err != nil {
		t.Fatalf("verify after %d decisions: %v", n, err)
	}
}
