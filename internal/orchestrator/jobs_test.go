package orchestrator

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/jetloop/jetloop/internal/events"
	"github.com/jetloop/jetloop/internal/fsm"
	"github.com/jetloop/jetloop/schemas"
)

// TestEncodeJob: a tool job goes on the wire whole, a model job as a
// reference to its call that matches the model_job schema, however long the
// conversation: no conversation is ever one message.
func TestEncodeJob(t *testing.T) {
	big := strings.Repeat("<history> & more ", 100_000) // 1.7 MB
	st := &fsm.State{TurnID: "t1", SessionID: "s1", Phase: fsm.PhaseStream, Step: 3, History: []events.Message{{Role: events.RoleUser, Content: big}}, Messages: []events.Message{{Role: events.RoleUser, Content: "hi"}}, Setup: fsm.Setup{Model: "script", Limits: fsm.Limits{Steps: 10}, Script: json.RawMessage(`{"responses":[]}`)}}
	jobs := fsm.Jobs(st)
	if len(jobs) != 1 || jobs[0].Model == nil {
		t.Fatalf("jobs %+v, want one model job", jobs)
	}
	data, err := encodeJob(jobs[0])
	if err != nil {
		t.Fatal(err)
	}
	if err := schemas.Validate("model_job", data); err != nil || len(data) > 200 {
		t.Fatalf("model job %s (%d bytes): %v", data, len(data), err)
	}
	ref, err := decodeModelJobRef(data)
	if err != nil || modelJobID(ref) != jobs[0].ID {
		t.Fatalf("decoded %+v (%v): id %s, want %s", ref, err, modelJobID(ref), jobs[0].ID)
	}
	tool := fsm.Job{ID: "tool:t1:c1", Tool: &events.ToolJob{TurnID: "t1", SessionID: "s1", Step: 1, CallID: "c1", Tool: "echo",
		Arguments: json.RawMessage(`{"text":"<b>&"}`), Deadline: time.Now().UTC()}}
	got, err := encodeJob(tool)
	if err != nil || !bytes.Contains(got, []byte(`"<b>&"`)) {
		t.Fatalf("tool job %s (%v): want its arguments unescaped", got, err)
	}
	if err := schemas.Validate("tool_job", got); err != nil {
		t.Fatal(err)
	}
}

// TestDecodeToolResultMatchesSchema: the Go check of a worker's result
// accepts and rejects what the tool_result schema does, and reads the same
// result.
func TestDecodeToolResultMatchesSchema(t *testing.T) {
	for _, in := range []string{
		`{"turn_id":"t1","call_id":"c1","tool":"echo","output":"hi","attempt":1}`,
		` {"turn_id":"t1","call_id":"c1","tool":"echo","output":"","is_error":true,"final":true,"duration_ms":3,"worker":"w-1","attempt":2} `,
		`{"turn_id":"t1","call_id":"c1","tool":"echo","output":"null and \"quotes\"","attempt":1}`,
		`{"turn_id":"t1","call_id":"c1","tool":"echo","attempt":1}`,
		`{"turn_id":"t1","call_id":"c1","tool":"echo","output":"x","attempt":1,"extra":1}`,
		`{"turn_id":"t1","call_id":"c1","tool":"echo","output":"x","attempt":1,"is_error":null}`,
		`{"turn_id":"t1","call_id":"c1","tool":"echo","output":"x","attempt":0}`,
		`{"turn_id":"t1","call_id":"c1","tool":"echo","output":"x","attempt":1.0}`,
		`{"turn_id":"t1","call_id":"c1","tool":"echo","output":"x","attempt":1,"duration_ms":-1}`,
		`{"turn_id":"t.1","call_id":"c1","tool":"echo","output":"x","attempt":1}`,
		`{"turn_id":"t1","call_id":"c1","tool":"a b","output":"x","attempt":1}`,
		`{"turn_id":"t1","call_id":"c1","tool":"echo","output":7,"attempt":1}`,
		`{"turn_id":"t1","call_id":"c1","tool":"echo","output":"x","attempt":1} {}`,
		`[]`, `null`, ``,
	} {
		var want events.ToolResult
		werr := decode("tool_result", []byte(in), &want)
		got, gerr := decodeToolResult([]byte(in))
		if (werr == nil) != (gerr == nil) || (werr == nil && got != want) {
			t.Errorf("%s:\n schema %+v %v\n     go %+v %v", in, want, werr, got, gerr)
		}
	}
}

// TestDecodeModelJobRef: a model job is read as strictly as its schema.
func TestDecodeModelJobRef(t *testing.T) {
	for in, ok := range map[string]bool{
		`{"turn_id":"t1","session_id":"s1","step":1,"kind":"step"}`:                                                    true,
		`{"turn_id":"t1","session_id":"s1","step":1,"kind":"summary","attempt":2,"not_before":"2026-01-02T03:04:05Z"}`: true,
		`{"Turn_ID":"t1","session_id":"s1","step":1,"kind":"step"}`:                                                    false,
		`{"turn_id":"t1","session_id":"s1","step":1,"kind":"step","messages":[]}`:                                      false,
		`{"turn_id":"t.1","session_id":"s1","step":1,"kind":"step"}`:                                                   false,
		`{"turn_id":"t1","session_id":"s1","step":1,"kind":"chat"}`:                                                    false,
		`{"turn_id":"t1","session_id":"s1","step":1,"kind":"step","attempt":0}`:                                        false,
		`[]`: false, `{}`: false, ``: false,
	} {
		if _, err := decodeModelJobRef([]byte(in)); (err == nil) != ok {
			t.Errorf("%s: error %v, want ok %v", in, err, ok)
		}
	}
}
