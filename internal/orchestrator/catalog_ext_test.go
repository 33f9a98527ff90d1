package orchestrator_test

import (
	"maps"
	"slices"
	"testing"

	"github.com/jetloop/jetloop/internal/bus"
	"github.com/jetloop/jetloop/internal/events"
)

// TestANewOrchestratorWaitsForTheWorkersTools: an orchestrator that starts
// while the registry shows no worker's tool — a cluster's fault emptied
// it, or the workers start after it — may only not have heard from the
// workers yet. It holds back a submission whose agent calls workers' tools,
// for up to the registry's TTL, rather than start the turn with none of
// them (every call refused as "not available in this turn"): when the
// worker comes, the turn is offered its tool and runs it.
func TestANewOrchestratorWaitsForTheWorkersTools(t *testing.T) {
	h := newHarness(t)
	h.orchestrator()
	turn := "t-cold-catalog"
	h.submit(script(turn, "General", threeSteps))
	h.waitFor("the submission to be taken and held back", func() bool {
		inbox, err := h.js.Consumer(t.Context(), events.StreamInbox, bus.InboxConsumer)
		if err != nil {
			return false
		}
		info, err := inbox.Info(t.Context())
		return err == nil && info.Delivered.Consumer >= 1 && info.NumAckPending == 1
	})
	if got := h.last(turn); got != "" {
		t.Fatalf("the turn started (%s) with no worker's tool in the registry", got)
	}
	h.worker()
	_, fin := h.finished(turn)
	if fin.StopReason != events.StopCompleted || fin.Metrics.ToolCalls != 3 {
		t.Fatalf("finished %+v", fin)
	}
	h.calls.mu.Lock()
	defer h.calls.mu.Unlock()
	if len(h.calls.runs) != 3 || slices.Max(slices.Collect(maps.Values(h.calls.runs))) != 1 {
		t.Fatalf("the worker ran %v, want each of the three calls once", h.calls.runs)
	}
}
