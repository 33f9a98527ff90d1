package orchestrator

import (
	"encoding/json"
	"errors"
	"os"
	"reflect"
	"testing"

	"github.com/jetloop/jetloop/internal/events"
	"github.com/jetloop/jetloop/schemas"
)

// The inbox's hand-written decoders are held to the schema and encoding/json:
// an input is accepted exactly when its schema accepts it and json.Unmarshal
// decodes it, and then with json.Unmarshal's value. make test runs each
// target for a few seconds (make fuzz); what a run finds stays in
// testdata/fuzz.

// sameAsSchema fails when a decoder's answer for data is not the schema's
// and encoding/json's.
func sameAsSchema[T any](t *testing.T, schema string, data []byte, got T, gerr error) {
	t.Helper()
	var want T
	werr := schemas.Validate(schema, data)
	if werr == nil {
		werr = json.Unmarshal(data, &want)
	}
	if (werr == nil) != (gerr == nil) {
		t.Fatalf("%s:\n schema and encoding/json: %v\n decoder: %v", data, werr, gerr)
	}
	if gerr != nil {
		var dl *deadLetter
		if !errors.As(gerr, &dl) {
			t.Fatalf("%s: %v is not a dead letter", data, gerr)
		}
		return
	}
	if !reflect.DeepEqual(want, got) {
		t.Fatalf("%s:\n json.Unmarshal %#v\n decoder        %#v", data, want, got)
	}
}

func fixture(t testing.TB, name string) []byte {
	data, err := os.ReadFile("../events/testdata/" + name)
	if err != nil {
		t.Fatal(err)
	}
	return data
}

// toolResultSeeds are tool results on and off the fast path.
var toolResultSeeds = []string{
	`{"turn_id":"t1","call_id":"c1","tool":"echo","output":"hi","attempt":1}`,
	` {"turn_id":"t1","call_id":"c1","tool":"echo","output":"","is_error":true,"final":true,"duration_ms":3,"worker":"w-1","attempt":2} `,
	`{"turn_id":"t1","call_id":"c1","tool":"echo","output":"null and \"quotes\" <&>","attempt":1}`,
	`{"TURN_ID":"t1","call_id":"c1","tool":"echo","output":"x","attempt":1}`,
	`{"turn_id":"t1","Call_Id":"c1","call_id":"c1","tool":"echo","output":"x","attempt":1}`,
	`{"turn_\u0069d":"t1","call_id":"c1","tool":"echo","output":"x","attempt":1}`,
	`{"turn_id":"t1","call_id":"c1","tool":"echo","output":"x","attempt":1}]`,
	`{"turn_id":"t1","call_id":"c1","tool":"echo","output":"x","attempt":1}}`,
	`{"turn_id":"t1","call_id":"c1","tool":"echo","output":"x","attempt":1} {}`,
	`{"turn_id":"t1","call_id":"c1","tool":"echo","output":"x","attempt":1,"attempt":null}`,
	`{"turn_id":"x y","turn_id":"t1","call_id":"c1","tool":"echo","output":"x","attempt":1}`,
	`{"turn_id":"t1","call_id":"c1","tool":"echo","attempt":1}`,
	`{"turn_id":"t1","call_id":"c1","tool":"echo","output":"x","attempt":1,"extra":1}`,
	`{"turn_id":"t1","call_id":"c1","tool":"echo","output":"x","attempt":1,"is_error":null}`,
	`{"turn_id":"t1","call_id":"c1","tool":"echo","output":"x","attempt":0}`,
	`{"turn_id":"t1","call_id":"c1","tool":"echo","output":"x","attempt":1.0}`,
	`{"turn_id":"t1","call_id":"c1","tool":"echo","output":"x","attempt":1e0}`,
	`{"turn_id":"t1","call_id":"c1","tool":"echo","output":"x","attempt":99999999999999999999}`,
	`{"turn_id":"t1","call_id":"c1","tool":"echo","output":"x","attempt":1,"duration_ms":-1}`,
	`{"turn_id":"t.1","call_id":"c1","tool":"echo","output":"x","attempt":1}`,
	`{"turn_id":"t1","call_id":"c1","tool":"a b","output":"x","attempt":1}`,
	`{"turn_id":"t1","call_id":"c1","tool":"echo","output":7,"attempt":1}`,
	`{"turn_id":"t1","call_id":"c1","tool":"echo","output":"\xff\u00e9\ud800","attempt":1}`,
	"{\"turn_id\":\"t1\",\"call_id\":\"c1\",\"tool\":\"echo\",\"output\":\"\xff<\",\"attempt\":1}",
	"{\"turn_id\":\"t1\xff\",\"call_id\":\"c1\",\"tool\":\"echo\",\"output\":\"\",\"attempt\":1}",
	`[]`, `null`, ``, `{}`, `"x"`,
}

func FuzzDecodeToolResult(f *testing.F) {
	f.Add(fixture(f, "tool_result.json"))
	for _, s := range toolResultSeeds {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		r, err := decodeToolResult(data)
		sameAsSchema(t, "tool_result", data, r, err)
	})
}

// modelResultSeeds are model answers on and off the fast path.
var modelResultSeeds = []string{
	`{"turn_id":"t1","step":1,"kind":"step","text":"hi","usage":{"input_tokens":1,"output_tokens":2},"duration_ms":3,"attempts":1}`,
	`{"turn_id":"t1","step":2,"kind":"summary","text":"","tool_calls":[],"finish_reason":"stop","usage":{"input_tokens":0,"output_tokens":0},"duration_ms":0,"attempts":3,"error":"boom <&>"}`,
	`{"turn_id":"t1","step":1,"kind":"step","text":"","tool_calls":[{"call_id":"c1","name":"echo","arguments":{"text":null}},{"call_id":"c2","name":"","arguments":{}}],"usage":{"input_tokens":1,"output_tokens":2},"duration_ms":3,"attempts":1}`,
	`{"TURN_ID":"t1","step":1,"kind":"step","text":"hi","usage":{"input_tokens":1,"output_tokens":2},"duration_ms":3,"attempts":1}`,
	`{"turn_id":"t1","step":1,"kind":"step","text":"hi","usage":{"INPUT_TOKENS":1,"output_tokens":2},"duration_ms":3,"attempts":1}`,
	`{"turn_id":"t1","step":1,"kind":"step","text":"hi","usage":{"output_tokens":2},"duration_ms":3,"attempts":1}`,
	`{"turn_id":"t1","step":1,"kind":"step","text":"hi","usage":{"input_tokens":1,"output_tokens":2,"x":0},"duration_ms":3,"attempts":1}`,
	`{"turn_id":"t1","step":1,"kind":"step","text":"hi","usage":{"input_tokens":1,"output_tokens":2},"usage":{"input_tokens":1},"duration_ms":3,"attempts":1}`,
	`{"turn_id":"t1","step":1,"kind":"step","text":"hi","usage":{"input_tokens":-1,"output_tokens":2},"duration_ms":3,"attempts":1}`,
	`{"turn_id":"t1","step":0,"kind":"step","text":"hi","usage":{"input_tokens":1,"output_tokens":2},"duration_ms":3,"attempts":1}`,
	`{"turn_id":"t1","step":1,"kind":"other","text":"hi","usage":{"input_tokens":1,"output_tokens":2},"duration_ms":3,"attempts":1}`,
	`{"turn_id":"t1","step":1,"kind":"step","usage":{"input_tokens":1,"output_tokens":2},"duration_ms":3,"attempts":1}`,
	`{"turn_id":"t1","step":1,"kind":"step","text":"hi","usage":{"input_tokens":1,"output_tokens":2},"duration_ms":3,"attempts":1} x`,
	`{"turn_id":"t1","step":1,"kind":"step","text":"hi","usage":{"input_tokens":1,"output_tokens":2},"duration_ms":3,"attempts":1}]`,
	`{"turn_id":"t1","step":1,"kind":"step","text":"hi","tool_calls":null,"usage":{"input_tokens":1,"output_tokens":2},"duration_ms":3,"attempts":1}`,
	`{"turn_id":"t1","step":1,"kind":"step","text":"hi","tool_calls":[{"call_id":"c1","name":"echo","arguments":[]}],"usage":{"input_tokens":1,"output_tokens":2},"duration_ms":3,"attempts":1}`,
	`{"turn_id":"t1","step":1,"kind":"step","text":"hi","tool_calls":[{"call_id":"c1","name":"echo"}],"usage":{"input_tokens":1,"output_tokens":2},"duration_ms":3,"attempts":1}`,
	`{"turn_id":"t1","step":1,"kind":"step","text":"hi","tool_calls":[{"call_id":"c 1","name":"echo","arguments":{}}],"usage":{"input_tokens":1,"output_tokens":2},"duration_ms":3,"attempts":1}`,
	`{"turn_id":"t1","step":1,"kind":"step","text":"hi","tool_calls":[{"call_id":"c1","name":"echo","arguments":{},"Name":"x"}],"usage":{"input_tokens":1,"output_tokens":2},"duration_ms":3,"attempts":1}`,
	`{"turn_id":"t1","step":1,"kind":"step","text":"hi","tool_calls":[{"call_id":"c1","name":"a","arguments":{"a":1}},{"call_id":"c2","name":"b","arguments":{}}],"tool_calls":[{"call_id":"c3"}],"usage":{"input_tokens":1,"output_tokens":2},"duration_ms":3,"attempts":1}`,
	`{"turn_id":"t1","step":1.0,"kind":"step","text":"hi","usage":{"input_tokens":1,"output_tokens":2},"duration_ms":3,"attempts":1}`,
	`[]`, `null`, ``, `{}`,
}

func FuzzDecodeModelResult(f *testing.F) {
	f.Add(fixture(f, "model_result.json"))
	for _, s := range modelResultSeeds {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		r, err := decodeModelResult(data)
		sameAsSchema(t, "model_result", data, r, err)
	})
}

// The fast paths take what workers and model runners send, or they are
// only a slower way to the schema.
func TestPlainResultsSkipTheSchema(t *testing.T) {
	for _, in := range []string{toolResultSeeds[0], toolResultSeeds[1], toolResultSeeds[2], string(fixture(t, "tool_result.json"))} {
		if _, ok := plainToolResult([]byte(in)); !ok {
			t.Errorf("%s: off the fast path", in)
		}
	}
	for _, in := range []string{modelResultSeeds[0], modelResultSeeds[1], modelResultSeeds[2], string(fixture(t, "model_result.json"))} {
		if _, ok := plainModelResult([]byte(in)); !ok {
			t.Errorf("%s: off the fast path", in)
		}
	}
	// The keys encoding/json matches without case, which the schemas refuse.
	if _, ok := plainToolResult([]byte(toolResultSeeds[3])); ok {
		t.Errorf("%s: on the fast path", toolResultSeeds[3])
	}
	if _, err := decodeToolResult([]byte(toolResultSeeds[3])); err == nil {
		t.Errorf("%s: accepted", toolResultSeeds[3])
	}
	if _, err := decodeModelResult([]byte(modelResultSeeds[3])); err == nil {
		t.Errorf("%s: accepted", modelResultSeeds[3])
	}
}

// TestResultDecodersMatchTheSchema runs the seeds in every test run.
func TestResultDecodersMatchTheSchema(t *testing.T) {
	for _, s := range toolResultSeeds {
		r, err := decodeToolResult([]byte(s))
		sameAsSchema(t, "tool_result", []byte(s), r, err)
	}
	for _, s := range modelResultSeeds {
		r, err := decodeModelResult([]byte(s))
		sameAsSchema(t, "model_result", []byte(s), r, err)
	}
}

// BenchmarkDecodeResult compares each fast path with the schema path it
// stands in for, on a typical result.
func BenchmarkDecodeResult(b *testing.B) {
	tool, err := json.Marshal(events.ToolResult{TurnID: "01935c3e-8f2a-7c41-9b6e-3d2f1a0b4c5d", CallID: "call_3f9a1c2e7b4d5a6f8e0b",
		Tool: "read_file", Output: string(fixture(b, "submit.json")), DurationMs: 12, Worker: "host-1234", Attempt: 1})
	if err != nil {
		b.Fatal(err)
	}
	model := fixture(b, "model_result.json")
	for _, c := range []struct {
		name string
		fn   func() error
	}{
		{"tool/fast", func() error { _, err := decodeToolResult(tool); return err }},
		{"tool/schema", func() error { var r events.ToolResult; return decode("tool_result", tool, &r) }},
		{"model/fast", func() error { _, err := decodeModelResult(model); return err }},
		{"model/schema", func() error { var r events.ModelResult; return decode("model_result", model, &r) }},
	} {
		b.Run(c.name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				if err := c.fn(); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
