package model_test

import (
	"context"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/jetloop/jetloop/internal/events"
	"github.com/jetloop/jetloop/internal/model"
)

func mustParse(t *testing.T, doc string) *model.Script {
	t.Helper()
	sc, err := model.ParseScript([]byte(doc))
	if err != nil {
		t.Fatal(err)
	}
	return sc
}

// call makes one attempt, collecting the deltas it streamed.
func call(t *testing.T, sc *model.Script, req model.Request) (model.Response, []string, error) {
	t.Helper()
	req.Script = sc
	if req.TurnID == "" {
		req.TurnID = "turn"
	}
	var deltas []string
	resp, err := model.Scripted{}.Call(context.Background(), req, func(d string) { deltas = append(deltas, d) })
	return resp, deltas, err
}

const yamlScript = `
responses:
  - text: "Reading the file."
    delay_ms: 20
    tool_calls:
      - {name: read_file, arguments: {path: main.go}}
      - {name: list_dir}
  - text: "Done: renamed."
summary: "Progress so far: renamed."
`

func TestYAMLAndJSONScriptsAreTheSame(t *testing.T) {
	fromYAML := mustParse(t, yamlScript)
	data, err := json.Marshal(fromYAML)
	if err != nil {
		t.Fatal(err)
	}
	fromJSON := mustParse(t, string(data))
	if !reflect.DeepEqual(fromYAML, fromJSON) {
		t.Errorf("yaml %+v\njson %+v", fromYAML, fromJSON)
	}
	if len(fromYAML.Responses) != 2 || fromYAML.Responses[0].DelayMs != 20 || fromYAML.Summary == "" {
		t.Errorf("parsed %+v", fromYAML)
	}
}

func TestBadScriptsAreRefused(t *testing.T) {
	for _, doc := range []string{
		``,
		`responses: nope`,
		`{"responses": [{"text": "x", "colour": "red"}]}`,
		`{"responses": [{"error": "on_fire"}]}`,
		`{"responses": [{"delay_ms": -1}]}`,
		`{"responses": [{"tool_calls": [{"arguments": {}}]}]}`,
		`{"repeat_last": true}`,
		"responses:\n  - text: [unclosed",
	} {
		if _, err := model.ParseScript([]byte(doc)); err == nil {
			t.Errorf("accepted %q", doc)
		}
	}
}

func TestResponsesInOrderWithDeterministicCallIDs(t *testing.T) {
	sc := mustParse(t, yamlScript)
	r1, deltas, err := call(t, sc, model.Request{Step: 1, Attempt: 1})
	if err != nil {
		t.Fatal(err)
	}
	if r1.Text != "Reading the file." || r1.FinishReason != "tool_calls" || len(r1.ToolCalls) != 2 {
		t.Fatalf("first answer %+v", r1)
	}
	if string(r1.ToolCalls[0].Arguments) != `{"path":"main.go"}` || string(r1.ToolCalls[1].Arguments) != `{}` {
		t.Errorf("arguments %s %s", r1.ToolCalls[0].Arguments, r1.ToolCalls[1].Arguments)
	}
	if len(deltas) < 2 || strings.Join(deltas, "") != r1.Text {
		t.Errorf("delay_ms must stream the text in pieces, got %q", deltas)
	}
	again, _, _ := call(t, sc, model.Request{Step: 1, Attempt: 1})
	if !reflect.DeepEqual(r1, again) {
		t.Error("the same call answered differently")
	}
	if r1.ToolCalls[0].CallID == r1.ToolCalls[1].CallID || !events.ValidID(r1.ToolCalls[0].CallID) {
		t.Errorf("call ids %q %q", r1.ToolCalls[0].CallID, r1.ToolCalls[1].CallID)
	}
	other, _, _ := call(t, sc, model.Request{TurnID: "other", Step: 1, Attempt: 1})
	if other.ToolCalls[0].CallID == r1.ToolCalls[0].CallID {
		t.Error("two turns share a call id")
	}
	r2, deltas, err := call(t, sc, model.Request{Step: 2, ScriptIndex: 1, Attempt: 1})
	if err != nil || r2.Text != "Done: renamed." || r2.FinishReason != "stop" || len(r2.ToolCalls) != 0 {
		t.Fatalf("second answer %+v %v", r2, err)
	}
	if len(deltas) != 1 {
		t.Errorf("without delay_ms the text is one delta, got %q", deltas)
	}
	if r2.Usage.InputTokens == 0 || r2.Usage.OutputTokens == 0 {
		t.Errorf("usage %+v", r2.Usage)
	}
	_, _, err = call(t, sc, model.Request{Step: 3, ScriptIndex: 2, Attempt: 1})
	var me *model.Error
	if !errors.As(err, &me) || me.Kind != model.BadRequest || me.Retryable() {
		t.Errorf("running out of responses: %v", err)
	}
}

func TestRepeatLastAndSummary(t *testing.T) {
	sc := mustParse(t, `{"responses":[{"text":"a"},{"text":"again","tool_calls":[{"name":"echo","arguments":{"text":"x"}}]}],"repeat_last":true}`)
	for i := 1; i < 6; i++ {
		r, _, err := call(t, sc, model.Request{Step: i + 1, ScriptIndex: i, Attempt: 1})
		if err != nil || r.Text != "again" {
			t.Fatalf("call %d: %+v %v", i, r, err)
		}
	}
	r, deltas, err := call(t, sc, model.Request{Kind: events.ModelSummary, ScriptIndex: 9, Attempt: 1})
	if err != nil || r.Text != model.NoSummary || len(r.ToolCalls) != 0 || len(deltas) != 1 {
		t.Errorf("summary without one: %+v %v", r, err)
	}
	sc.Summary = "so far so good"
	if r, _, _ := call(t, sc, model.Request{Kind: events.ModelSummary, Attempt: 1}); r.Text != "so far so good" {
		t.Errorf("summary %q", r.Text)
	}
}

func TestSimulatedErrorsAndRetries(t *testing.T) {
	sc := mustParse(t, `{"responses":[{"error":"rate_limited"},{"error":"server_error"},{"text":"ok"},{"error":"bad_request"}]}`)
	for attempt, want := range []model.ErrorKind{model.RateLimited, model.ServerError} {
		_, _, err := call(t, sc, model.Request{Step: 1, Attempt: attempt + 1})
		var me *model.Error
		if !errors.As(err, &me) || me.Kind != want || !me.Retryable() {
			t.Errorf("attempt %d: %v", attempt+1, err)
		}
	}
	if r, _, err := call(t, sc, model.Request{Step: 1, Attempt: 3}); err != nil || r.Text != "ok" {
		t.Errorf("third attempt: %+v %v", r, err)
	}
	_, _, err := call(t, sc, model.Request{Step: 2, ScriptIndex: 3, Attempt: 1})
	var me *model.Error
	if !errors.As(err, &me) || me.Retryable() {
		t.Errorf("bad_request: %v", err)
	}
}

func TestAStreamingCallStopsWhenCancelled(t *testing.T) {
	sc := mustParse(t, `{"responses":[{"text":"a long answer","delay_ms":600000}]}`)
	ctx, cancel := context.WithCancel(context.Background())
	var deltas int
	_, err := model.Scripted{}.Call(ctx, model.Request{Script: sc, Attempt: 1}, func(string) { deltas++; cancel() })
	if !errors.Is(err, context.Canceled) {
		t.Errorf("err = %v", err)
	}
}

func TestLoadScriptAndSpec(t *testing.T) {
	path := filepath.Join(t.TempDir(), "s.yaml")
	if err := os.WriteFile(path, []byte(yamlScript), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := model.LoadScript(path); err != nil {
		t.Fatal(err)
	}
	if _, err := model.LoadScript(path + ".missing"); err == nil {
		t.Error("a missing file loaded")
	}
	demo, err := model.LoadScript("../../data/scripts/demo.yaml")
	if err != nil || len(demo.Responses) != 4 {
		t.Errorf("the demo script: %v", err)
	}
	for _, tc := range []struct{ in, provider, name string }{
		{"script", "script", ""},
		{"script:scripts/demo.yaml", "script", "scripts/demo.yaml"},
		{"openai/gpt-4.1-mini", "openai", "gpt-4.1-mini"},
		{"anthropic/claude-sonnet-4-5", "anthropic", "claude-sonnet-4-5"},
	} {
		p, n, err := model.Spec(tc.in)
		if err != nil || p != tc.provider || n != tc.name {
			t.Errorf("Spec(%q) = %q %q %v", tc.in, p, n, err)
		}
	}
	for _, bad := range []string{"", "gpt-4", "openai/", "script:"} {
		if _, _, err := model.Spec(bad); !errors.Is(err, model.ErrUnknownModel) {
			t.Errorf("Spec(%q) = %v", bad, err)
		}
	}
}

// TestScriptErrorsSayWhereWithoutQuoting: a YAML syntax error carries its
// line apart from its message, so that a caller may say where a document
// is broken without quoting it.
func TestScriptErrorsSayWhereWithoutQuoting(t *testing.T) {
	for _, tc := range []struct {
		doc  string
		line int
	}{
		{"responses:\n  - text: fine\n password: [hunter2\n", 2},
		{`{"password": "hunter2"}`, 0},
		{"responses: nope", 0},
		{"", 0},
	} {
		_, err := model.ParseScript([]byte(tc.doc))
		var se *model.ScriptError
		if !errors.As(err, &se) {
			t.Fatalf("ParseScript(%q) = %v, want a *ScriptError", tc.doc, err)
		}
		if se.Line != tc.line {
			t.Errorf("ParseScript(%q): line %d, want %d (%v)", tc.doc, se.Line, tc.line, err)
		}
	}
}

// TestLoadScriptReadsAtMostTheLimit: a file one byte over the limit is
// refused, not read whole.
func TestLoadScriptReadsAtMostTheLimit(t *testing.T) {
	dir := t.TempDir()
	head := "responses:\n  - text: \"at the limit\"\n#"
	for name, size := range map[string]int{"limit.yaml": model.MaxScriptSize, "over.yaml": model.MaxScriptSize + 1} {
		doc := head + strings.Repeat("x", size-len(head)-1) + "\n"
		if err := os.WriteFile(filepath.Join(dir, name), []byte(doc), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	if sc, err := model.LoadScript(filepath.Join(dir, "limit.yaml")); err != nil || sc.Responses[0].Text != "at the limit" {
		t.Errorf("a script of exactly the limit: %v", err)
	}
	if _, err := model.LoadScript(filepath.Join(dir, "over.yaml")); err == nil || !strings.Contains(err.Error(), "larger than") {
		t.Errorf("a script over the limit: %v", err)
	}
}
