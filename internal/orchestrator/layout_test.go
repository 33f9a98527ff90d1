package orchestrator_test

import (
	"encoding/json"
	"fmt"
	"slices"
	"testing"

	"github.com/jetloop/jetloop/internal/events"
	"github.com/jetloop/jetloop/internal/testkit"
)

// TestSessionHistoryAcrossStreams: with the logs in four streams, a
// session's turns are in streams of their own, whose sequences do not
// compare; the next turn's history is still its finished turns in the
// order they finished. The first turn here writes more messages to its
// stream than the second does to its own, so ordering by where each log
// ends would put the second first.
func TestSessionHistoryAcrossStreams(t *testing.T) {
	h := newHarnessOn(t, testkit.Start(t), eventStreams(4))
	h.worker()
	h.orchestrator()
	layout := events.Layout{Streams: 4}
	// Three turn ids, each in a stream of its own.
	var ids []string
	streams := map[string]bool{}
	for i := 0; len(ids) < 3; i++ {
		id := fmt.Sprintf("t-hist-%d", i)
		if !streams[layout.Stream(id)] {
			streams[layout.Stream(id)] = true
			ids = append(ids, id)
		}
	}
	scripts := []string{threeSteps, `{"responses": [{"text": "short"}]}`, `{"responses": [{"text": "third"}]}`}
	for i, id := range ids {
		sub := script(id, "General", scripts[i])
		sub.SessionID = "s-hist"
		h.submit(sub)
		if _, fin := h.finished(id); fin.StopReason != events.StopCompleted {
			t.Fatalf("%s finished %+v", id, fin)
		}
	}
	log, _ := h.finished(ids[2])
	var started events.TurnStartedData
	if err := json.Unmarshal(log[0].Data, &started); err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(started.HistoryTurns, ids[:2]) {
		t.Fatalf("the third turn's history is %v, want %v", started.HistoryTurns, ids[:2])
	}
}
