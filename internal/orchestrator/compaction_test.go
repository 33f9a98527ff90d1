package orchestrator_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"sync"
	"testing"

	"github.com/jetloop/jetloop/internal/orchestrator"

	"github.com/jetloop/jetloop/internal/agents"
	"github.com/jetloop/jetloop/internal/events"
	"github.com/jetloop/jetloop/internal/fsm"
	"github.com/jetloop/jetloop/internal/model"
)

// recorder is the scripted model, remembering the messages each model call
// was sent: what a real provider would receive.
type recorder struct {
	model.Scripted
	mu   sync.Mutex
	sent map[string][]events.Message // by turn/step
}

func (r *recorder) Call(ctx context.Context, req model.Request, emit func(string)) (model.Response, error) {
	r.mu.Lock()
	r.sent[fmt.Sprintf("%s/%d", req.TurnID, req.Step)] = append([]events.Message(nil), req.Messages...)
	r.mu.Unlock()
	return r.Scripted.Call(ctx, req, emit)
}

func (r *recorder) messages(turn string, step int) []events.Message {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.sent[fmt.Sprintf("%s/%d", turn, step)]
}

const compactAgents = `---
name: Compact
model: script
compaction: {keep_steps: 2}
---
Keeps two steps.
`

// TestCompactionBoundsWhatTheModelIsSent runs two turns of one session with
// an agent that keeps two steps, through the real orchestrator and tool
// worker, and checks the counts model.completed records against what the
// model was really sent.
func TestCompactionBoundsWhatTheModelIsSent(t *testing.T) {
	h := newHarness(t)
	path := filepath.Join(t.TempDir(), "AGENTS.md")
	if err := os.WriteFile(path, []byte(compactAgents), 0o644); err != nil {
		t.Fatal(err)
	}
	set, _, err := agents.Load(path)
	if err != nil {
		t.Fatal(err)
	}
	h.Agents = set
	rec := &recorder{sent: map[string][]events.Message{}}
	h.worker()
	h.orchestrator(orchestrator.WithProvider("script", rec))

	first := script("t-compact-1", "Compact", `{"responses": [
		{"text": "one", "tool_calls": [{"name": "echo", "arguments": {"text": "1"}}]},
		{"text": "two", "tool_calls": [{"name": "echo", "arguments": {"text": "2"}}]},
		{"text": "three", "tool_calls": [{"name": "echo", "arguments": {"text": "3"}}, {"name": "echo", "arguments": {"text": "3b"}}]},
		{"text": "four", "tool_calls": [{"name": "echo", "arguments": {"text": "4"}}]},
		{"text": "all done"}]}`)
	first.SessionID = "s-compact"
	h.submit(first)
	log1, fin := h.finished("t-compact-1")
	if fin.StopReason != events.StopCompleted || fin.Metrics.Steps != 5 {
		t.Fatalf("first turn finished %+v", fin)
	}
	started := of[events.TurnStartedData](t, log1, events.TurnStarted)[0]
	if started.Compaction == nil || started.Compaction.KeepSteps != 2 {
		t.Fatalf("turn.started compaction %+v, want keep_steps 2", started.Compaction)
	}
	// Step n sends the input and the steps before it, the last two of them
	// whole: step 3 had two calls, so it is one assistant message and two
	// results (in the order they completed), kept or dropped together.
	checkCounts(t, rec, "t-compact-1", log1, [][2]int{{1, 0}, {3, 0}, {5, 0}, {7, 2}, {7, 4}})
	last := rec.messages("t-compact-1", 5)
	if len(last) != 7 || last[0].Content != "go" || last[1].Content != fmt.Sprintf(fsm.CompactionNote, 4) ||
		last[2].Content != "three" || len(last[2].ToolCalls) != 2 || last[3].Content+last[4].Content != "33b" && last[3].Content+last[4].Content != "3b3" ||
		last[5].Content != "four" || last[6].CallID != last[5].ToolCalls[0].CallID {
		t.Fatalf("step 5 was sent:\n%s", dump2(last))
	}

	second := script("t-compact-2", "Compact", `{"responses": [
		{"text": "again", "tool_calls": [{"name": "echo", "arguments": {"text": "5"}}]},
		{"text": "done again"}]}`)
	second.SessionID = "s-compact"
	second.Input[0].Content = "and now?"
	h.submit(second)
	log2, fin := h.finished("t-compact-2")
	if fin.StopReason != events.StopCompleted {
		t.Fatalf("second turn finished %+v", fin)
	}
	// The history is the first turn's 11 messages; the new question is
	// sent at once, then travels with the step it prompted.
	checkCounts(t, rec, "t-compact-2", log2, [][2]int{{6, 7}, {6, 9}})
	if got := rec.messages("t-compact-2", 2); got[0].Content != "go" || got[2].Content != "all done" || got[3].Content != "and now?" {
		t.Fatalf("turn 2 step 2 was sent:\n%s", dump2(got))
	}

	// With the first turn's transcript, Verify re-derives the counts of the
	// second turn as well (testkit.CheckLogs, run when the test ends, takes
	// them from the log).
	st, err := fsm.Fold(log1)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := fsm.Verify(log2, fsm.WithHistory(st.Transcript())); err != nil {
		t.Fatalf("turn 2 does not verify with its history: %v", err)
	}
}

// checkCounts checks each step's model.completed counts, {messages,
// compacted}, and that the model was sent exactly that many messages.
func checkCounts(t *testing.T, rec *recorder, turn string, log []events.Envelope, want [][2]int) {
	t.Helper()
	var got [][2]int
	for _, e := range log {
		if e.Type != events.ModelCompleted {
			continue
		}
		d := of[events.ModelCompletedData](t, []events.Envelope{e}, events.ModelCompleted)[0]
		if d.Messages == nil || d.Compacted == nil {
			t.Fatalf("%s step %d: model.completed without counts: %s", turn, e.Step, e.Data)
		}
		got = append(got, [2]int{*d.Messages, *d.Compacted})
		if sent := rec.messages(turn, e.Step); len(sent) != *d.Messages {
			t.Errorf("%s step %d: model.completed says %d messages, the model was sent %d:\n%s",
				turn, e.Step, *d.Messages, len(sent), dump2(sent))
		}
	}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("%s: {messages, compacted} per step %v, want %v", turn, got, want)
	}
}

func dump2(msgs []events.Message) string {
	var out []byte
	for _, m := range msgs {
		out = append(append(out, mustJSON(m)...), '\n')
	}
	return string(out)
}
