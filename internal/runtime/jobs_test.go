package runtime

import (
	"bytes"
	"encoding/json"
	"fmt"
	"reflect"
	"testing"

	"github.com/jetloop/jetloop/internal/events"
	"github.com/jetloop/jetloop/internal/fsm"
)

// TestEncodeJobMatchesMarshal: a model job spliced from a turn's cached
// message encodings is byte for byte the job json.Marshal gives, step after
// step, when the history changes under the cache, and when compaction
// rewrites the conversation.
func TestEncodeJobMatchesMarshal(t *testing.T) {
	hist := []events.Message{{Role: events.RoleUser, Content: "earlier <turn> & \"quotes\""}, {Role: events.RoleAssistant, Content: "ok"}}
	st := &fsm.State{TurnID: "t1", SessionID: "s1", Phase: fsm.PhaseStream, Model: "script", System: `say "messages":null`,
		Limits: fsm.Limits{Steps: 10}, Script: json.RawMessage(`{"responses":[]}`), History: hist,
		Tools:    []events.ToolSpec{{Name: "echo", Parameters: json.RawMessage(`{"type":"object"}`)}},
		Messages: []events.Message{{Role: events.RoleUser, Content: "hi\n"}}}
	conv := &conversation{}
	check := func(st *fsm.State) {
		t.Helper()
		jobs := fsm.Jobs(st)
		if len(jobs) != 1 || jobs[0].Model == nil {
			t.Fatalf("jobs %+v, want one model job", jobs)
		}
		want, err := json.Marshal(jobs[0].Model)
		if err != nil {
			t.Fatal(err)
		}
		got, err := encodeJob(conv, st, jobs[0])
		if err != nil || !bytes.Equal(got, want) {
			t.Fatalf("step %d:\n got %s (%v)\nwant %s", st.Step, got, err, want)
		}
	}
	for step := range 5 {
		st.Step = step
		check(st)
		st.Messages = append(st.Messages,
			events.Message{Role: events.RoleAssistant, ToolCalls: []events.ToolCall{{CallID: fmt.Sprint("c", step), Name: "echo", Arguments: json.RawMessage(`{"text":"x"}`)}}},
			events.Message{Role: events.RoleTool, CallID: fmt.Sprint("c", step), Name: "echo", Content: `{"text":"x"}`, IsError: step%2 == 0})
	}
	if len(conv.msgs) != len(hist)+1+2*4 {
		t.Fatalf("%d messages kept, want %d: each encoded once", len(conv.msgs), len(hist)+9)
	}
	// Other tools and script (another state): encoded afresh.
	st.Tools = []events.ToolSpec{{Name: "other", Description: "<b>"}}
	st.Script = json.RawMessage(`{"responses":[{"text":"x"}]}`)
	check(st)
	st.Limits.Steps, st.Script = 0, nil // no tools offered, no script
	check(st)
	st.Limits.Steps = 10
	// Another history (the turn loaded again): the cache starts over.
	st.History = []events.Message{{Role: events.RoleUser, Content: "other"}}
	check(st)
	st.History = nil
	check(st)
	// Compaction: the conversation sent is not the messages kept.
	st.KeepSteps = 1
	check(st)
	// No cache at all, and tool jobs.
	conv = nil
	st.KeepSteps = 0
	check(st)
	tool := fsm.Job{ID: "tool:c1", Tool: &events.ToolJob{TurnID: "t1", CallID: "c1", Tool: "echo", Arguments: json.RawMessage(`{}`)}}
	want, _ := json.Marshal(tool.Tool)
	if got, err := encodeJob(&conversation{}, st, tool); err != nil || !bytes.Equal(got, want) {
		t.Fatalf("tool job %s (%v), want %s", got, err, want)
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

// TestDecodeJobMatchesUnmarshal: a model runner reads a job field by field
// into what json.Unmarshal gives, and leaves anything unusual to it.
func TestDecodeJobMatchesUnmarshal(t *testing.T) {
	st := &fsm.State{TurnID: "t1", SessionID: "s1", Phase: fsm.PhaseStream, Model: "script", System: "be brief",
		Limits: fsm.Limits{Steps: 10}, Script: json.RawMessage(`{"responses":[{"text":"hi"}]}`), ScriptIndex: 2, Step: 3,
		Tools:    []events.ToolSpec{{Name: "echo", Parameters: json.RawMessage(`{"type":"object"}`), TimeoutMs: 5}},
		Messages: []events.Message{{Role: events.RoleUser, Content: "hi \"there\"\n"}, {Role: events.RoleAssistant, ToolCalls: []events.ToolCall{{CallID: "c1", Name: "echo", Arguments: json.RawMessage(`{"a":1}`)}}}}}
	job, err := encodeJob(&conversation{}, st, fsm.Jobs(st)[0])
	if err != nil {
		t.Fatal(err)
	}
	r := &modelRunners{}
	for _, in := range []string{
		string(job), string(job), // the second time from the kept tools and script
		`{"turn_id":"t1","session_id":"s1","step":1,"kind":"summary","model":"m","messages":null,"tools":null,"script":null,"script_index":0,"instruction":"sum up","attempt":2,"not_before":"2026-01-02T03:04:05Z"}`,
		`{"Turn_ID":"t1","session_id":"s1","kind":"step","model":"m","messages":[]}`,
		`{"turn_id":"t1","session_id":"s1","kind":"step","model":"m","messages":[],"extra":{"x":[1]}}`,
		`{"turn_id":"t1","session_id":"s1","kind":"step","model":"m","step":"1"}`,
		`{"turn_id":"t1","session_id":"s1","kind":"step","model":"m","messages":[{"role":}]}`,
		`{"turn_id":"t1","session_id":"s1","kind":"nope","model":"m"}`,
		`[]`, `{}`, ``,
	} {
		var want events.ModelJob
		werr := json.Unmarshal([]byte(in), &want)
		got, gerr := r.decodeJob([]byte(in))
		if werr != nil {
			if gerr == nil {
				t.Errorf("%s: decoded, but json.Unmarshal fails: %v", in, werr)
			}
			continue
		}
		if verr := checkModelJob(want); (verr == nil) != (gerr == nil) {
			t.Errorf("%s: error %v, want %v", in, gerr, verr)
		}
		if gerr == nil && !reflect.DeepEqual(got, want) {
			t.Errorf("%s:\n got %+v\nwant %+v", in, got, want)
		}
	}
}
