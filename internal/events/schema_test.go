package events_test

import (
	"bytes"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/jetloop/jetloop/internal/events"
	"github.com/jetloop/jetloop/schemas"
)

// messages maps every Go message type to its schema: the schemas in
// schemas/ are the source of truth, and these types must match them.
var messages = []struct {
	schema string
	typ    reflect.Type
}{
	{"submit", reflect.TypeFor[events.Submit]()},
	{"control", reflect.TypeFor[events.Control]()},
	{"tool_job", reflect.TypeFor[events.ToolJob]()},
	{"tool_result", reflect.TypeFor[events.ToolResult]()},
	{"tool_info", reflect.TypeFor[events.ToolInfo]()},
	{"delta", reflect.TypeFor[events.Delta]()},
	{"model_job", reflect.TypeFor[events.ModelJobRef]()},
	{"model_result", reflect.TypeFor[events.ModelResult]()},
	{"timer", reflect.TypeFor[events.Timer]()},
	{"hook_job", reflect.TypeFor[events.HookJob]()},
	{"hook_answer", reflect.TypeFor[events.HookAnswer]()},
	{"envelope", reflect.TypeFor[events.Envelope]()},
	{"event.turn.started", reflect.TypeFor[events.TurnStartedData]()},
	{"event.step.started", reflect.TypeFor[struct{}]()},
	{"event.model.completed", reflect.TypeFor[events.ModelCompletedData]()},
	{"event.tool.requested", reflect.TypeFor[events.ToolRequestedData]()},
	{"event.tool.completed", reflect.TypeFor[events.ToolCompletedData]()},
	{"event.turn.paused", reflect.TypeFor[events.TurnPausedData]()},
	{"event.turn.resumed", reflect.TypeFor[events.TurnResumedData]()},
	{"event.step.checked", reflect.TypeFor[events.StepCheckedData]()},
	{"event.turn.sentinel", reflect.TypeFor[events.TurnSentinelData]()},
	{"event.turn.compacted", reflect.TypeFor[events.TurnCompactedData]()},
	{"event.turn.finished", reflect.TypeFor[events.TurnFinishedData]()},
	{"workflow_submit", reflect.TypeFor[events.WorkflowSubmit]()},
	{"task_done", reflect.TypeFor[events.TaskDone]()},
	{"event.workflow.started", reflect.TypeFor[events.WorkflowStartedData]()},
	{"event.task.started", reflect.TypeFor[events.TaskStartedData]()},
	{"event.task.finished", reflect.TypeFor[events.TaskFinishedData]()},
	{"event.workflow.checkpointed", reflect.TypeFor[events.WorkflowCheckpointedData]()},
	{"event.workflow.gated", reflect.TypeFor[events.WorkflowGatedData]()},
	{"event.workflow.resumed", reflect.TypeFor[events.WorkflowResumedData]()},
	{"event.workflow.finished", reflect.TypeFor[events.WorkflowFinishedData]()},
}

// validatedElsewhere are the schemas without a type in this package.
var validatedElsewhere = map[string]string{
	"common": "shared $defs only; every other schema refers to it",
	"agent":  "AGENTS.md front matter: internal/agents",
	"script": "the scripted model: internal/model (its fixture is checked here too)",
}

// mustNotBeNil are the Go fields that encoding/json writes as null when nil
// (no omitempty) while their schema wants an array or object: code that
// produces these messages must never leave them nil.
var mustNotBeNil = []string{
	"Envelope.Data",
	"ModelCompletedData.ToolCalls",
	"Task.Input",
	"ToolCall.Arguments",
	"ToolInfo.Parameters",
	"ToolJob.Arguments",
	"ToolRequestedData.Arguments",
	"TurnStartedData.Input",
	"TurnStartedData.Tools",
	"WorkflowFinishedData.Tasks",
	"WorkflowStartedData.TaskList",
	"WorkflowSubmit.Tasks",
}

// requiredOmitempty are fields that a schema requires although Go omits
// their zero value: the code never produces that zero value there.
var requiredOmitempty = map[string]string{
	"Limits.Steps":    "turn.started always sets the effective step cap",
	"Limits.Budget":   "the effective budget defaults to 50",
	"Limits.DoomLoop": "the effective doom_loop defaults to 3",
}

func TestSchemasCompile(t *testing.T) {
	if err := schemas.Err(); err != nil {
		t.Fatal(err)
	}
}

func TestEverySchemaHasAType(t *testing.T) {
	names := schemas.Names()
	inTable := map[string]bool{}
	for _, m := range messages {
		if inTable[m.schema] {
			t.Errorf("schema %s is in the table twice", m.schema)
		}
		inTable[m.schema] = true
		if !slices.Contains(names, m.schema) {
			t.Errorf("%v: no schema %s", m.typ, m.schema)
		}
	}
	for name := range validatedElsewhere {
		if !slices.Contains(names, name) {
			t.Errorf("no schema %s", name)
		}
	}
	for _, name := range names {
		if !inTable[name] && validatedElsewhere[name] == "" {
			t.Errorf("schema %s has no Go type in the table and is not validated elsewhere", name)
		}
	}
}

func TestEveryEventTypeHasASchema(t *testing.T) {
	for _, typ := range events.Types {
		name := events.DataSchema(typ)
		if name == "" {
			t.Errorf("%s: no data schema", typ)
			continue
		}
		if !slices.Contains(schemas.Names(), name) {
			t.Errorf("%s: schema %s does not exist", typ, name)
		}
		d, ok := events.NewData(typ)
		if !ok {
			t.Errorf("%s: no data type", typ)
			continue
		}
		got := reflect.TypeOf(d)
		if got.Kind() != reflect.Pointer {
			t.Errorf("%s: NewData returns %v, want a pointer", typ, got)
			continue
		}
		found := false
		for _, m := range messages {
			if m.schema == name {
				found = true
				if m.typ != got.Elem() {
					t.Errorf("%s: NewData makes %v, the table maps %s to %v", typ, got.Elem(), name, m.typ)
				}
			}
		}
		if !found {
			t.Errorf("%s: schema %s is not in the table", typ, name)
		}
	}
	if s := events.DataSchema("turn.exploded"); s != "" {
		t.Errorf("DataSchema of an unknown type = %q, want \"\"", s)
	}
	if d, ok := events.NewData("turn.exploded"); ok || d != nil {
		t.Errorf("NewData of an unknown type = %v, %v", d, ok)
	}
}

// variants are more valid documents, for the shapes one fixture per schema
// does not show.
var variants = []struct{ schema, doc string }{
	{"submit", `{"turn_id": "t1"}`},
	{"submit", `{"turn_id": "t1", "agent": "General", "input": [{"role": "user", "content": "hi"}], "limits": {"steps": 0}}`},
	{"submit", `{"turn_id": "t2", "forked_from": {"turn_id": "t1", "step": 2}, "input": [{"role": "user", "content": "try again"}]}`},
	{"control", `{"action": "abort", "reason": "user pressed stop"}`},
	{"control", `{"action": "abort"}`},
	{"control", `{"action": "approve", "call_id": "call_1", "approved": true}`},
	{"control", `{"action": "approve", "call_id": "call_1", "approved": false, "note": "not on main"}`},
	{"tool_result", `{"turn_id": "t1", "call_id": "c1", "tool": "echo", "output": "hi", "attempt": 1}`},
	{"tool_result", `{"turn_id": "t1", "call_id": "c1", "tool": "submit_answer", "output": "42", "is_error": false, "final": true, "duration_ms": 0, "worker": "", "attempt": 3}`},
	{"tool_info", `{"name": "echo", "description": "", "parameters": {"type": "object"}, "workers": 1}`},
	{"model_job", `{"turn_id": "t1", "session_id": "s1", "step": 5, "kind": "summary"}`},
	{"model_result", `{"turn_id": "t1", "step": 1, "kind": "step", "text": "", "usage": {"input_tokens": 0, "output_tokens": 0}, "duration_ms": 3, "attempts": 3, "error": "model: rate_limited: scripted rate_limited (response 1)"}`},
	{"timer", `{"turn_id": "t1", "kind": "turn_timeout", "at": "2026-11-22T10:00:00Z"}`},
	{"timer", `{"turn_id": "t1", "kind": "wake", "at": "2026-11-22T10:00:00Z"}`},
	{"envelope", `{"id": "e1", "type": "step.started", "turn_id": "t1", "session_id": "t1", "seq": 2, "step": 1, "time": "2026-11-22T10:00:00.000000001Z", "data": {}}`},
	{"envelope", `{"id": "e1", "type": "turn.finished", "turn_id": "t1", "session_id": "t1", "seq": 1, "step": 0, "time": "2026-11-22T10:00:00Z",
		"data": {"stop_reason": "rejected", "output": "", "error": "unknown agent \"Nobody\"", "metrics": {"steps": 0, "tool_calls": 0, "model_calls": 0, "input_tokens": 0, "output_tokens": 0, "duration_ms": 0}}}`},
	{"event.turn.started", `{"agent": "General", "model": "openai/gpt-4.1-mini", "input": [], "history": 0, "tools": [], "limits": {"steps": 0, "budget": 50, "doom_loop": 3}}`},
	{"event.turn.started", `{"agent": "General", "model": "anthropic/claude-sonnet-4", "input": [{"role": "user", "content": "go on"}], "history": 3, "tools": ["echo"], "limits": {"steps": 200, "budget": 1, "timeout_ms": 1, "doom_loop": 2}, "forked_from": {"turn_id": "t0", "step": 1}}`},
	{"event.turn.started", `{"agent": "Architect", "model": "openai/gpt-4.1-mini", "input": [{"role": "user", "content": "explain"}], "history": 0, "tools": ["read_file"], "limits": {"steps": 20, "budget": 50, "doom_loop": 3}, "compaction": {"keep_steps": 8}}`},
	{"event.model.completed", `{"text": "Done.", "tool_calls": [], "finish_reason": "stop", "usage": {"input_tokens": 10, "output_tokens": 2}, "duration_ms": 0}`},
	{"event.model.completed", `{"text": "", "tool_calls": [], "finish_reason": "error", "usage": {"input_tokens": 0, "output_tokens": 0}, "duration_ms": 15, "attempts": 3, "error": "model: bad_request: context too long"}`},
	{"event.model.completed", `{"text": "Done.", "tool_calls": [], "finish_reason": "stop", "usage": {"input_tokens": 10, "output_tokens": 2}, "duration_ms": 0, "attempts": 1, "messages": 6, "compacted": 0}`},
	{"event.model.completed", `{"text": "Done.", "tool_calls": [], "finish_reason": "stop", "usage": {"input_tokens": 10, "output_tokens": 2}, "duration_ms": 0, "attempts": 1, "messages": 4, "compacted": 8}`},
	{"event.tool.completed", `{"call_id": "c1", "name": "nope", "output": "unknown tool \"nope\"", "is_error": true, "final": false, "duration_ms": 0, "worker": "orchestrator", "attempts": 1}`},
	{"event.turn.paused", `{"call_id": "c1", "kind": "approval", "tool": "write_file", "arguments": {"path": "main.go", "content": "package main\n"}}`},
	{"event.turn.resumed", `{"call_id": "c1", "approved": true}`},
	{"event.turn.resumed", `{"call_id": "c1", "approved": false, "note": "not on main"}`},
	{"event.step.checked", `{"decision": "stop", "stop_reason": "completed"}`},
	{"event.turn.sentinel", `{"kind": "cap_hit", "reason": "budget", "text": "Tool budget exhausted (50 calls)"}`},
	{"event.turn.sentinel", `{"kind": "doom_loop", "reason": "doom_loop", "text": "Stopped: the same tool call repeated 3 times (read_file)\n\nRead main.go three times.", "usage": {"input_tokens": 1, "output_tokens": 1}}`},
	{"event.turn.finished", `{"stop_reason": "aborted", "output": "", "error": "user pressed stop", "metrics": {"steps": 1, "tool_calls": 0, "model_calls": 1, "input_tokens": 5, "output_tokens": 0, "duration_ms": 800}}`},
	{"event.turn.finished", `{"stop_reason": "error", "output": "", "error": "model: bad_request: no such model", "metrics": {"steps": 1, "tool_calls": 0, "model_calls": 1, "input_tokens": 0, "output_tokens": 0, "duration_ms": 20}}`},
	{"script", `{"responses": []}`},
}

func fixture(t *testing.T, name string) []byte {
	t.Helper()
	data, err := os.ReadFile(filepath.Join("testdata", name+".json"))
	if err != nil {
		t.Fatal(err)
	}
	return data
}

// TestFixtures checks that each schema's fixture and variants validate and
// survive decode → encode → decode in their Go type unchanged.
func TestFixtures(t *testing.T) {
	for _, m := range messages {
		t.Run(m.schema, func(t *testing.T) {
			roundTrip(t, m.schema, m.typ, fixture(t, m.schema))
		})
	}
	t.Run("script", func(t *testing.T) {
		if err := schemas.Validate("script", fixture(t, "script")); err != nil {
			t.Error(err)
		}
	})
	for i, v := range variants {
		t.Run(v.schema+"/"+strconv.Itoa(i), func(t *testing.T) {
			if v.schema == "script" {
				if err := schemas.Validate("script", []byte(v.doc)); err != nil {
					t.Error(err)
				}
				return
			}
			roundTrip(t, v.schema, typeOf(t, v.schema), []byte(v.doc))
		})
	}
}

func typeOf(t *testing.T, schema string) reflect.Type {
	t.Helper()
	for _, m := range messages {
		if m.schema == schema {
			return m.typ
		}
	}
	t.Fatalf("no type for schema %s", schema)
	return nil
}

func roundTrip(t *testing.T, schema string, typ reflect.Type, doc []byte) {
	t.Helper()
	if err := schemas.Validate(schema, doc); err != nil {
		t.Fatalf("document: %v", err)
	}
	// Compacted, the raw fields (arguments, parameters, script) hold what
	// encoding/json writes back, so equality is not defeated by spacing.
	var compact bytes.Buffer
	if err := json.Compact(&compact, doc); err != nil {
		t.Fatal(err)
	}
	first := reflect.New(typ)
	dec := json.NewDecoder(bytes.NewReader(compact.Bytes()))
	dec.DisallowUnknownFields()
	if err := dec.Decode(first.Interface()); err != nil {
		t.Fatalf("decode into %v: %v", typ, err)
	}
	encoded, err := json.Marshal(first.Interface())
	if err != nil {
		t.Fatal(err)
	}
	if err := schemas.Validate(schema, encoded); err != nil {
		t.Fatalf("%v encodes to a document its schema rejects: %v\n%s", typ, err, encoded)
	}
	second := reflect.New(typ)
	if err := json.Unmarshal(encoded, second.Interface()); err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(first.Interface(), second.Interface()) {
		t.Errorf("round trip changed the %v:\n got %#v\nwant %#v", typ, second.Elem().Interface(), first.Elem().Interface())
	}
	if typ == reflect.TypeFor[events.Envelope]() {
		e, d, err := events.Decode(compact.Bytes())
		if err != nil {
			t.Fatalf("Decode: %v", err)
		}
		if !reflect.DeepEqual(e, first.Elem().Interface()) {
			t.Errorf("Decode envelope = %#v, want %#v", e, first.Elem().Interface())
		}
		want, _ := events.NewData(e.Type)
		if err := json.Unmarshal(e.Data, want); err != nil {
			t.Fatal(err)
		}
		if !reflect.DeepEqual(d, want) {
			t.Errorf("Decode data = %#v, want %#v", d, want)
		}
	}
}

// TestEventsDecode wraps each event fixture in an envelope: Decode returns
// its data in the type's struct.
func TestEventsDecode(t *testing.T) {
	for i, typ := range events.Types {
		name := events.DataSchema(typ)
		var data bytes.Buffer
		if err := json.Compact(&data, fixture(t, name)); err != nil {
			t.Fatal(err)
		}
		in := events.Envelope{ID: "0193" + strconv.Itoa(i), Type: typ, TurnID: "t1", SessionID: "s1",
			Seq: i + 1, Step: 1, Time: time.Date(2026, 11, 22, 10, 0, 0, 123456789, time.UTC), Data: data.Bytes()}
		raw, err := json.Marshal(in)
		if err != nil {
			t.Fatal(err)
		}
		e, d, err := events.Decode(raw)
		if err != nil {
			t.Errorf("%s: %v", typ, err)
			continue
		}
		if !reflect.DeepEqual(e, in) {
			t.Errorf("%s: envelope %#v, want %#v", typ, e, in)
		}
		want, _ := events.NewData(typ)
		if err := json.Unmarshal(data.Bytes(), want); err != nil {
			t.Fatal(err)
		}
		if reflect.TypeOf(d) != reflect.TypeOf(want) || !reflect.DeepEqual(d, want) {
			t.Errorf("%s: data %#v, want %#v", typ, d, want)
		}
	}
}

func TestDecodeRejectsUnknownTypes(t *testing.T) {
	doc := []byte(`{"id": "e1", "type": "turn.exploded", "turn_id": "t1", "session_id": "t1", "seq": 1, "step": 0, "time": "2026-11-22T10:00:00Z", "data": {}}`)
	_, _, err := events.Decode(doc)
	if !errors.Is(err, events.ErrUnknownType) {
		t.Fatalf("Decode of an unknown type: %v, want ErrUnknownType", err)
	}
	if !strings.Contains(err.Error(), `"turn.exploded"`) {
		t.Errorf("the error does not name the type: %v", err)
	}
	if err := events.ValidateEvent(doc); !errors.Is(err, events.ErrUnknownType) {
		t.Errorf("ValidateEvent of an unknown type: %v", err)
	}
	for _, doc := range []string{`{"id": "e1", "data": {}}`, `{"type": 7}`, `[]`, `not json`} {
		if _, _, err := events.Decode([]byte(doc)); err == nil {
			t.Errorf("Decode(%s) succeeded", doc)
		}
	}
}

func TestValidateEvent(t *testing.T) {
	at := time.Date(2026, 11, 22, 10, 0, 0, 0, time.UTC)
	event := func(typ events.Type, data any) []byte {
		t.Helper()
		raw, err := json.Marshal(data)
		if err != nil {
			t.Fatal(err)
		}
		doc, err := json.Marshal(events.Envelope{ID: "01935c3f-02b7-7d13-8a4e-9c0f1e2d3b4a", Type: typ,
			TurnID: "t1", SessionID: "s1", Seq: 9, Step: 3, Time: at, Data: raw})
		if err != nil {
			t.Fatal(err)
		}
		return doc
	}
	finished := event(events.TurnFinished, events.TurnFinishedData{StopReason: events.StopStepCap,
		Output: "Step limit reached (3 steps)", Metrics: events.Metrics{Steps: 3, ToolCalls: 5, ModelCalls: 4,
			InputTokens: 900, OutputTokens: 80, DurationMs: 4200}})
	if err := events.ValidateEvent(finished); err != nil {
		t.Errorf("a real turn.finished: %v", err)
	}
	rejected := event(events.TurnFinished, events.TurnFinishedData{StopReason: events.StopRejected, Error: "schema submit: /: missing property turn_id"})
	if err := events.ValidateEvent(rejected); err != nil {
		t.Errorf("a real rejection: %v", err)
	}
	if err := events.ValidateEvent(event(events.StepStarted, struct{}{})); err != nil {
		t.Errorf("a real step.started: %v", err)
	}

	// The data must be its own type's.
	err := events.ValidateEvent(event(events.TurnFinished, events.StepCheckedData{Decision: events.DecisionContinue}))
	if err == nil || !strings.Contains(err.Error(), "schema event.turn.finished") {
		t.Errorf("turn.finished with step.checked data: %v, want an error naming event.turn.finished", err)
	}
	// A nil slice is null, which no array schema accepts.
	err = events.ValidateEvent(event(events.ModelCompleted, events.ModelCompletedData{Text: "hi", FinishReason: "stop"}))
	if err == nil || !strings.Contains(err.Error(), "/tool_calls") {
		t.Errorf("model.completed with nil tool_calls: %v, want an error at /tool_calls", err)
	}
	// The zero time is an instant like another; a local time is not UTC.
	doc, _ := json.Marshal(events.Envelope{ID: "e1", Type: events.StepStarted, TurnID: "t1", SessionID: "t1",
		Seq: 1, Step: 1, Time: at.In(time.FixedZone("CEST", 2*3600)), Data: json.RawMessage(`{}`)})
	if err := events.ValidateEvent(doc); err == nil || !strings.Contains(err.Error(), "schema envelope") {
		t.Errorf("an event at a non-UTC time: %v, want an error naming envelope", err)
	}
}

// del marks a property to remove in an invalid document.
type deleted struct{}

var del = deleted{}

// invalid are documents each schema must reject: a fixture with one change.
var invalid = []struct {
	schema, what, path string
	value              any
}{
	{"submit", "missing turn_id", "/turn_id", del},
	{"submit", "bad id", "/turn_id", "turn 1"},
	{"submit", "id too long", "/session_id", strings.Repeat("a", 65)},
	{"submit", "extra property", "/colour", "red"},
	{"submit", "unknown role", "/input/0/role", "system"},
	{"submit", "extra message property", "/input/0/tokens", 3},
	{"submit", "negative steps", "/limits/steps", -1},
	{"submit", "doom_loop below 2", "/limits/doom_loop", 1},
	{"submit", "budget 0", "/limits/budget", 0},
	{"submit", "unknown limit", "/limits/max_tokens", 10},
	{"submit", "metadata not a string", "/metadata/ticket", 42},
	{"submit", "script not an object", "/script", "responses: []"},
	{"submit", "empty model", "/model", ""},
	{"control", "unknown action", "/action", "pause"},
	{"control", "reply without answer", "/answer", del},
	{"control", "empty answer", "/answer", ""},
	{"control", "bad call id", "/call_id", "call.1"},
	{"control", "approved on a reply", "/approved", true},
	{"control", "missing action", "/action", del},
	{"tool_job", "missing deadline", "/deadline", del},
	{"tool_job", "not a time", "/deadline", "2026-11-22 10:00:00"},
	{"tool_job", "not UTC", "/deadline", "2026-11-22T10:00:00+02:00"},
	{"tool_job", "bad tool name", "/tool", "read.file"},
	{"tool_job", "step 0", "/step", 0},
	{"tool_job", "arguments not an object", "/arguments", []any{}},
	{"tool_job", "extra property", "/priority", 1},
	{"hook_job", "missing checkpoint", "/checkpoint", del},
	{"hook_job", "task 0", "/task", 0},
	{"hook_job", "last not a boolean", "/last", "no"},
	{"hook_job", "extra result property", "/task_result/tokens", 3},
	{"hook_job", "workflow id too long", "/workflow_id", strings.Repeat("w", 57)},
	{"hook_answer", "unknown decision", "/decision", "maybe"},
	{"hook_answer", "bad hook name", "/hook", "cost.guard"},
	{"hook_answer", "missing reason", "/reason", del},
	{"hook_answer", "extra property", "/score", 1},
	{"workflow_submit", "a reserved hook name", "/policy/hooks", []any{"audit", "rules"}},
	{"workflow_submit", "a hook named twice", "/policy/hooks", []any{"audit", "audit"}},
	{"workflow_submit", "a hook name not a token", "/policy/hooks", []any{"jobs.>"}},
	{"workflow_submit", "unknown on_hook_timeout", "/policy/on_hook_timeout", "ignore"},
	{"tool_result", "missing output", "/output", del},
	{"tool_result", "attempt 0", "/attempt", 0},
	{"tool_result", "missing tool", "/tool", del},
	{"tool_result", "bad turn id", "/turn_id", ""},
	{"tool_result", "extra property", "/stdout", "x"},
	{"tool_info", "bad name", "/name", "fs.read"},
	{"tool_info", "parameters not an object", "/parameters", "object"},
	{"tool_info", "parameters not a JSON Schema", "/parameters/type", 42},
	{"tool_info", "missing workers", "/workers", del},
	{"tool_info", "negative timeout", "/timeout_ms", -1},
	{"delta", "missing delta", "/delta", del},
	{"delta", "step 0", "/step", 0},
	{"delta", "extra property", "/index", 1},
	{"model_job", "unknown kind", "/kind", "chat"},
	{"model_job", "a conversation", "/messages", []any{}},
	{"model_job", "missing step", "/step", del},
	{"model_job", "attempt 0", "/attempt", 0},
	{"model_job", "not_before not UTC", "/not_before", "2026-11-22T10:58:02.25+01:00"},
	{"model_result", "attempts 0", "/attempts", 0},
	{"model_result", "missing usage", "/usage", del},
	{"model_result", "tool call without call_id", "/tool_calls/0/call_id", del},
	{"model_result", "negative tokens", "/usage/input_tokens", -1},
	{"timer", "call_deadline without call_id", "/call_id", del},
	{"timer", "unknown kind", "/kind", "step_deadline"},
	{"timer", "turn_timeout with call_id", "/kind", "turn_timeout"},
	{"envelope", "unknown type", "/type", "turn.exploded"},
	{"envelope", "seq 0", "/seq", 0},
	{"envelope", "missing data", "/data", del},
	{"envelope", "data not an object", "/data", []any{}},
	{"envelope", "data of the wrong shape", "/data/attempts", 0},
	{"envelope", "bad time", "/time", "yesterday"},
	{"envelope", "extra property", "/source", "orchestrator-1"},
	{"event.turn.started", "missing tools", "/tools", del},
	{"event.turn.started", "missing history", "/history", del},
	{"event.turn.started", "limits without budget", "/limits/budget", del},
	{"event.turn.started", "steps over the ceiling", "/limits/steps", 201},
	{"event.turn.started", "bad tool name", "/tools/0", "read file"},
	{"event.turn.started", "extra property", "/temperature", 0.2},
	{"event.turn.started", "compaction keeping no step", "/compaction", map[string]any{"keep_steps": 0}},
	{"event.turn.started", "compaction without keep_steps", "/compaction", map[string]any{}},
	{"event.step.started", "extra property", "/step", 1},
	{"event.model.completed", "null tool_calls", "/tool_calls", nil},
	{"event.model.completed", "missing usage", "/usage", del},
	{"event.model.completed", "messages without compacted", "/messages", 4},
	{"event.model.completed", "compacted without messages", "/compacted", 2},
	{"event.model.completed", "arguments not an object", "/tool_calls/0/arguments", "{\"path\": \"main.go\"}"},
	{"event.tool.requested", "null arguments", "/arguments", nil},
	{"event.tool.requested", "bad call id", "/call_id", "call 1"},
	{"event.tool.completed", "missing worker", "/worker", del},
	{"event.tool.completed", "attempts 0", "/attempts", 0},
	{"event.tool.completed", "missing final", "/final", del},
	{"event.turn.paused", "unknown kind", "/kind", "review"},
	{"event.turn.paused", "input without question", "/question", del},
	{"event.turn.paused", "approval without tool", "/kind", "approval"},
	{"event.turn.resumed", "answer and approved", "/approved", true},
	{"event.turn.resumed", "neither answer nor approved", "/answer", del},
	{"event.step.checked", "unknown decision", "/decision", "maybe"},
	{"event.step.checked", "continue with a stop reason", "/stop_reason", "completed"},
	{"event.step.checked", "stop without a stop reason", "/decision", "stop"},
	{"event.turn.sentinel", "kind and reason disagree", "/kind", "doom_loop"},
	{"event.turn.compacted", "through no step", "/through_step", 0},
	{"event.turn.compacted", "child not an id", "/child_turn_id", "sub-a b"},
	{"event.turn.sentinel", "reason not a limit", "/reason", "timeout"},
	{"event.turn.sentinel", "text without its cause line", "/text", "Progress so far: read main.go."},
	{"event.turn.sentinel", "unknown kind", "/kind", "loop"},
	{"event.turn.finished", "unknown stop reason", "/stop_reason", "cancelled"},
	{"event.turn.finished", "rejected without error", "/stop_reason", "rejected"},
	{"event.turn.finished", "metrics without duration", "/metrics/duration_ms", del},
	{"event.turn.finished", "missing output", "/output", del},
	{"script", "unknown error", "/responses/1/error", "on_fire"},
	{"script", "extra response property", "/responses/0/colour", "red"},
	{"script", "negative delay", "/responses/0/delay_ms", -1},
	{"script", "call without name", "/responses/0/tool_calls/0/name", del},
	{"script", "arguments not an object", "/responses/0/tool_calls/0/arguments", "path=main.go"},
	{"script", "missing responses", "/responses", del},
	{"script", "extra property", "/model", "gpt"},
	{"workflow_submit", "no tasks", "/tasks", []any{}},
	{"workflow_submit", "id without room for a task suffix", "/workflow_id", strings.Repeat("w", 57)},
	{"workflow_submit", "task without input", "/tasks/0/input", del},
	{"workflow_submit", "max_tasks over the ceiling", "/limits/max_tasks", 1001},
	{"workflow_submit", "unknown failure policy", "/policy/on_task_failure", "retry"},
	{"task_done", "missing finished", "/finished", del},
	{"task_done", "task 0", "/task", 0},
	{"event.workflow.started", "missing task list", "/task_list", del},
	{"event.task.started", "missing turn id", "/turn_id", del},
	{"event.task.finished", "missing metrics", "/metrics", del},
	{"event.workflow.checkpointed", "metrics without tasks", "/metrics/tasks", del},
	{"event.workflow.gated", "unknown decision", "/decision", "maybe"},
	{"event.workflow.resumed", "missing approved", "/approved", del},
	{"event.workflow.finished", "a turn's stop reason", "/stop_reason", "step_cap"},
}

func TestInvalidDocuments(t *testing.T) {
	covered := map[string]bool{}
	for _, tt := range invalid {
		covered[tt.schema] = true
		t.Run(tt.schema+"/"+tt.what, func(t *testing.T) {
			var doc any
			if err := json.Unmarshal(fixture(t, tt.schema), &doc); err != nil {
				t.Fatal(err)
			}
			doc = edit(t, doc, tt.path, tt.value)
			data, err := json.Marshal(doc)
			if err != nil {
				t.Fatal(err)
			}
			err = schemas.Validate(tt.schema, data)
			if err == nil {
				t.Fatalf("accepted: %s", data)
			}
			if !strings.Contains(err.Error(), "schema "+tt.schema+":") {
				t.Errorf("the error does not name the schema: %v", err)
			}
			var se *schemas.Error
			if !errors.As(err, &se) || se.Schema != tt.schema {
				t.Errorf("error %v is not a *schemas.Error for %s", err, tt.schema)
			}
			// Inside an event, the error names the data's schema.
			if typ, ok := strings.CutPrefix(tt.schema, "event."); ok {
				env, _ := json.Marshal(events.Envelope{ID: "e1", Type: events.Type(typ), TurnID: "t1",
					SessionID: "t1", Seq: 1, Step: 1, Time: time.Date(2026, 11, 22, 10, 0, 0, 0, time.UTC), Data: data})
				if err := events.ValidateEvent(env); err == nil || !strings.Contains(err.Error(), "schema "+tt.schema+":") {
					t.Errorf("ValidateEvent: %v, want an error naming %s", err, tt.schema)
				}
			}
		})
	}
	for _, name := range schemas.Names() {
		if name != "common" && name != "agent" && !covered[name] {
			t.Errorf("no invalid document for schema %s", name)
		}
	}
}

// edit sets (or, with del, removes) the value at a JSON pointer of doc.
func edit(t *testing.T, doc any, path string, value any) any {
	t.Helper()
	keys := strings.Split(strings.TrimPrefix(path, "/"), "/")
	parent := doc
	for _, k := range keys[:len(keys)-1] {
		switch p := parent.(type) {
		case map[string]any:
			parent = p[k]
		case []any:
			i, err := strconv.Atoi(k)
			if err != nil || i >= len(p) {
				t.Fatalf("%s: no element %s", path, k)
			}
			parent = p[i]
		default:
			t.Fatalf("%s: cannot descend into %T", path, parent)
		}
	}
	last := keys[len(keys)-1]
	switch p := parent.(type) {
	case map[string]any:
		if _, ok := value.(deleted); ok {
			if _, ok := p[last]; !ok {
				t.Fatalf("%s: nothing to delete", path)
			}
			delete(p, last)
		} else {
			p[last] = value
		}
	case []any:
		i, err := strconv.Atoi(last)
		if err != nil || i >= len(p) {
			t.Fatalf("%s: no element %s", path, last)
		}
		p[i] = value
	default:
		t.Fatalf("%s: cannot edit in %T", path, parent)
	}
	return doc
}

// TestTypesMatchSchemas walks each Go type beside its schema, field by
// field: the same property names at every level, compatible JSON types, the
// required properties written even when zero, and every field that can
// encode as null listed in mustNotBeNil.
func TestTypesMatchSchemas(t *testing.T) {
	w := &walker{t: t, docs: loadSchemas(t), nilable: map[string]bool{}}
	for _, m := range messages {
		file := m.schema + ".schema.json"
		w.check(m.schema, m.typ, []loc{{file, w.docs[file]}})
	}
	var got []string
	for f := range w.nilable {
		got = append(got, f)
	}
	sort.Strings(got)
	if !slices.Equal(got, mustNotBeNil) {
		t.Errorf("fields that encode nil as null where the schema wants a value:\n got %q\nwant %q\n(update mustNotBeNil and the producers that set them)", got, mustNotBeNil)
	}
}

func loadSchemas(t *testing.T) map[string]map[string]any {
	t.Helper()
	dir := filepath.Join("..", "..", "schemas")
	files, err := filepath.Glob(filepath.Join(dir, "*.schema.json"))
	if err != nil || len(files) == 0 {
		t.Fatalf("no schemas in %s: %v", dir, err)
	}
	docs := map[string]map[string]any{}
	for _, f := range files {
		data, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		var doc map[string]any
		if err := json.Unmarshal(data, &doc); err != nil {
			t.Fatalf("%s: %v", f, err)
		}
		docs[filepath.Base(f)] = doc
	}
	return docs
}

// loc is a subschema and the file its relative references resolve in.
type loc struct {
	file string
	node map[string]any
}

// shape is what a set of subschemas says about one value, merged across
// $ref, allOf, oneOf, anyOf and if/then/else branches.
type shape struct {
	types      map[string]bool
	props      map[string][]loc
	required   map[string]bool // unconditionally
	items      []loc
	additional []loc
}

type walker struct {
	t       *testing.T
	docs    map[string]map[string]any
	nilable map[string]bool
}

func (w *walker) shape(locs []loc) shape {
	s := shape{types: map[string]bool{}, props: map[string][]loc{}, required: map[string]bool{}}
	for _, l := range locs {
		w.collect(&s, l, false)
	}
	return s
}

func (w *walker) collect(s *shape, l loc, conditional bool) {
	n := l.node
	if typ, ok := n["type"].(string); ok {
		s.types[typ] = true
	}
	values, _ := n["enum"].([]any)
	if c, ok := n["const"]; ok {
		values = append(values, c)
	}
	for _, v := range values {
		s.types[jsonType(v)] = true
	}
	if props, ok := n["properties"].(map[string]any); ok {
		for k, v := range props {
			s.props[k] = append(s.props[k], loc{l.file, v.(map[string]any)})
		}
	}
	if req, ok := n["required"].([]any); ok && !conditional {
		for _, k := range req {
			s.required[k.(string)] = true
		}
	}
	if items, ok := n["items"].(map[string]any); ok {
		s.items = append(s.items, loc{l.file, items})
	}
	if add, ok := n["additionalProperties"].(map[string]any); ok {
		s.additional = append(s.additional, loc{l.file, add})
	}
	if ref, ok := n["$ref"].(string); ok {
		if target, ok := w.resolve(l.file, ref); ok {
			w.collect(s, target, conditional)
		}
	}
	for _, key := range []string{"allOf", "oneOf", "anyOf"} {
		branches, _ := n[key].([]any)
		for _, b := range branches {
			w.collect(s, loc{l.file, b.(map[string]any)}, conditional || key != "allOf")
		}
	}
	for _, key := range []string{"then", "else"} {
		if b, ok := n[key].(map[string]any); ok {
			w.collect(s, loc{l.file, b}, true)
		}
	}
}

// resolve follows a reference between jetloop's schemas; the JSON Schema
// meta-schema is not followed.
func (w *walker) resolve(file, ref string) (loc, bool) {
	target, frag, _ := strings.Cut(ref, "#")
	if strings.Contains(target, "://") {
		return loc{}, false
	}
	if target == "" {
		target = file
	}
	node, ok := w.docs[target]
	if !ok {
		w.t.Errorf("%s: $ref %s: no such file", file, ref)
		return loc{}, false
	}
	for _, k := range strings.Split(strings.TrimPrefix(frag, "/"), "/") {
		if k == "" {
			continue
		}
		next, ok := node[k].(map[string]any)
		if !ok {
			w.t.Errorf("%s: $ref %s does not resolve", file, ref)
			return loc{}, false
		}
		node = next
	}
	return loc{target, node}, true
}

func jsonType(v any) string {
	switch v.(type) {
	case string:
		return "string"
	case bool:
		return "boolean"
	case float64:
		return "number"
	case nil:
		return "null"
	}
	return "object"
}

var (
	rawType  = reflect.TypeFor[json.RawMessage]()
	timeType = reflect.TypeFor[time.Time]()
)

func (w *walker) check(path string, typ reflect.Type, locs []loc) {
	if len(locs) == 0 {
		w.t.Errorf("%s: the schema does not describe this %v", path, typ)
		return
	}
	s := w.shape(locs)
	want := ""
	switch {
	case typ == rawType && strings.HasSuffix(path, "[]/input") && s.types["string"] && s.types["array"] && len(s.types) == 2:
		return // a task's input: a text or a list of messages (Task.Messages reads both)
	case typ == rawType:
		want = "object" // every other raw field is an object: arguments, parameters, script, data
	case typ == timeType:
		want = "string"
	default:
		switch typ.Kind() {
		case reflect.Pointer:
			w.check(path, typ.Elem(), locs)
			return
		case reflect.String:
			want = "string"
		case reflect.Int, reflect.Int64:
			want = "integer"
		case reflect.Bool:
			want = "boolean"
		case reflect.Slice:
			want = "array"
		case reflect.Map, reflect.Struct:
			want = "object"
		default:
			w.t.Errorf("%s: no JSON type for %v", path, typ)
			return
		}
	}
	if len(s.types) != 1 || !s.types[want] {
		w.t.Errorf("%s: Go %v is JSON %s, the schema says %v", path, typ, want, keys(s.types))
		return
	}
	switch {
	case typ == rawType || typ == timeType:
	case typ.Kind() == reflect.Slice:
		w.check(path+"[]", typ.Elem(), s.items)
	case typ.Kind() == reflect.Map:
		w.check(path+"{}", typ.Elem(), s.additional)
	case typ.Kind() == reflect.Struct:
		w.fields(path, typ, s)
	}
}

func (w *walker) fields(path string, typ reflect.Type, s shape) {
	seen := map[string]bool{}
	for i := range typ.NumField() {
		f := typ.Field(i)
		name, opts, _ := strings.Cut(f.Tag.Get("json"), ",")
		if !f.IsExported() || name == "-" {
			continue
		}
		if name == "" {
			name = f.Name
		}
		seen[name] = true
		at := path + "/" + name
		goName := typ.Name() + "." + f.Name
		omitempty := slices.ContainsFunc(strings.Split(opts, ","), func(o string) bool {
			return o == "omitempty" || o == "omitzero"
		})
		locs, ok := s.props[name]
		if !ok {
			w.t.Errorf("%s: Go field %s is not in the schema", at, goName)
			continue
		}
		if s.required[name] && omitempty && requiredOmitempty[goName] == "" {
			w.t.Errorf("%s: required, but %s omits its zero value", at, goName)
		}
		switch f.Type.Kind() {
		case reflect.Slice, reflect.Map, reflect.Pointer:
			if !omitempty && !w.shape(locs).types["null"] {
				w.nilable[goName] = true
			}
		}
		w.check(at, f.Type, locs)
	}
	for name := range s.props {
		if !seen[name] {
			w.t.Errorf("%s/%s: in the schema, but %v has no such field", path, name, typ)
		}
	}
}

func keys(m map[string]bool) []string {
	var out []string
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}
