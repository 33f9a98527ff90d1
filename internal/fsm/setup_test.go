package fsm

import (
	"encoding/json"
	"reflect"
	"testing"
	"time"

	"github.com/jetloop/jetloop/internal/events"
)

// TestSetupRoundTrips: what Start sets up is what turn.started records and
// what State reads back, every field of it: a field added to Setup and not
// to the event fails here.
func TestSetupRoundTrips(t *testing.T) {
	c := Setup{Agent: "A", Model: "script", System: "be brief",
		Limits: Limits{Steps: 3, Budget: 4, Timeout: time.Minute, DoomLoop: 2},
		Tools:  []events.ToolSpec{{Name: "echo", Description: "echoes"}}, Approval: []string{"echo"}, FinalTools: []string{"done"},
		Script: json.RawMessage(`{"responses":[]}`), Digest: "d1", Metadata: map[string]string{"k": "v"},
		ForkedFrom: &events.ForkedFrom{TurnID: "t0", Step: 1}, Workflow: &events.WorkflowRef{WorkflowID: "w", Task: 2},
		Parent: &events.ParentRef{TurnID: "p", CallID: "c", Depth: 1}, KeepSteps: 5, Summarizer: "Summarizer", OverTokens: 7, ScriptIndex: 6, HistoryTurns: []string{"t0"}}
	v := reflect.ValueOf(c)
	for i := range v.NumField() {
		if v.Field(i).IsZero() {
			t.Fatalf("the sample leaves %s zero: set it, so the round trip covers it", v.Type().Field(i).Name)
		}
	}
	data, err := json.Marshal(c.started(nil, 0))
	if err != nil {
		t.Fatal(err)
	}
	var d events.TurnStartedData
	if err := json.Unmarshal(data, &d); err != nil {
		t.Fatal(err)
	}
	if got := setupOf(d); !reflect.DeepEqual(got, c) {
		t.Errorf("read back\n%+v\nwant\n%+v", got, c)
	}
}
