package orchestrator_test

import (
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

// TestSummarizingCompaction runs a long scripted turn whose agent compacts
// by an agent past 500 input tokens, through the real orchestrator: it
// compacts once, by a child turn of Summarizer whose task is the transcript
// of the older steps; turn.compacted records its summary; the model calls
// after it are sent the summary instead of those steps (and the steps after
// them whole); and the log verifies without a model.
func TestSummarizingCompaction(t *testing.T) {
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
	h.set = set
	rec := &recorder{sent: map[string][]events.Message{}}
	h.worker()
	h.orchestrator(orchestrator.WithProvider("script", rec))

	// Each echo adds some 200 tokens (its arguments and its output).
	long := strings.Repeat("x", 400)
	var steps []string
	for i := 1; i <= 5; i++ {
		steps = append(steps, `{"text": "step `+string(rune('0'+i))+`", "tool_calls": [{"name": "echo", "arguments": {"text": "`+string(rune('0'+i))+long+`"}}]}`)
	}
	h.submit(script("long-1", "Long", `{"responses": [`+strings.Join(steps, ",")+`, {"text": "all done"}]}`))
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
