package timeline

import (
	"encoding/json"
	"testing"

	"github.com/jetloop/jetloop/internal/events"
)

// TestGateLinesSayWhoDecided: the workflow trace's line for a gate names
// who decided: the rules, a person's approval or a hook.
func TestGateLinesSayWhoDecided(t *testing.T) {
	for by, want := range map[string]string{
		"audit":               "after task 1: stop by audit (disk full)",
		events.GateByRules:    "after task 1: stop by rules (disk full)",
		events.GateByApproval: "after task 1: stop by approval (disk full)",
	} {
		data, err := json.Marshal(events.WorkflowGatedData{Task: 2, Decision: events.GateStop, Reason: "disk full", By: by})
		if err != nil {
			t.Fatal(err)
		}
		if got := WorkflowDetail(events.Envelope{Type: events.WorkflowGated, Data: data}); got != want {
			t.Errorf("by %s: %q, want %q", by, got, want)
		}
	}
}
