package schemas_test

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/jetloop/jetloop/schemas"
)

func TestErrorsNameTheLocationAndTheReason(t *testing.T) {
	err := schemas.Validate("submit", []byte(`{"turn_id":"bad id!"}`))
	if err == nil || !strings.Contains(err.Error(), "/turn_id: 'bad id!' does not match pattern") {
		t.Errorf("a bad id behind a $ref: %v", err)
	}
	params := json.RawMessage(`{"type":"object","properties":{"text":{"type":"string"}},"required":["text"]}`)
	for args, want := range map[string]string{
		`{"text":7}`: "/text: got number, want string",
		`{}`:         "missing property 'text'",
		`[1]`:        "arguments must be a JSON object",
		`{`:          "not valid JSON",
	} {
		if err := schemas.ValidateArgs(params, json.RawMessage(args)); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("ValidateArgs(%s) = %v, want %q", args, err, want)
		}
	}
	if err := schemas.ValidateArgs(params, json.RawMessage(`{"text":"ok"}`)); err != nil {
		t.Errorf("valid arguments refused: %v", err)
	}
	if err := schemas.CheckParameters(json.RawMessage(`{"type":"nonsense"}`)); err == nil {
		t.Error("a broken parameters schema compiled")
	}
}
