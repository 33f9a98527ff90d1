package runtime

import (
	"bytes"
	"encoding/json"
	"fmt"

	"github.com/jetloop/jetloop/internal/events"
	"github.com/jetloop/jetloop/schemas"
)

func decode(schema string, data []byte, v any) error {
	if err := schemas.Validate(schema, data); err != nil {
		return &deadLetter{err.Error()}
	}
	if err := json.Unmarshal(data, v); err != nil {
		return &deadLetter{fmt.Sprintf("%s: %v", schema, err)}
	}
	return nil
}

// decodeToolResult reads a tool worker's answer. Workers are any processes,
// so the tool_result schema judges what they send; but the generic validator
// was a twentieth of the orchestrator's CPU under load, so a result that is
// plainly valid — an object, no unknown field, every required one, ids and
// numbers in range, no null anywhere — is checked here in Go, and anything
// else goes to the schema.
func decodeToolResult(data []byte) (events.ToolResult, error) {
	var p struct {
		TurnID     *string `json:"turn_id"`
		CallID     *string `json:"call_id"`
		Tool       *string `json:"tool"`
		Output     *string `json:"output"`
		IsError    bool    `json:"is_error"`
		Final      bool    `json:"final"`
		DurationMs int64   `json:"duration_ms"`
		Worker     string  `json:"worker"`
		Attempt    *int    `json:"attempt"`
	}
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	if t := bytes.TrimLeft(data, " \t\r\n"); len(t) > 0 && t[0] == '{' && !bytes.Contains(data, []byte("null")) &&
		dec.Decode(&p) == nil && !dec.More() &&
		p.TurnID != nil && p.CallID != nil && p.Tool != nil && p.Output != nil && p.Attempt != nil &&
		events.ValidID(*p.TurnID) && events.ValidID(*p.CallID) && events.ValidID(*p.Tool) &&
		*p.Attempt >= 1 && p.DurationMs >= 0 {
		return events.ToolResult{TurnID: *p.TurnID, CallID: *p.CallID, Tool: *p.Tool, Output: *p.Output,
			IsError: p.IsError, Final: p.Final, DurationMs: p.DurationMs, Worker: p.Worker, Attempt: *p.Attempt}, nil
	}
	var r events.ToolResult
	err := decode("tool_result", data, &r)
	return r, err
}

// decodeModelResult reads a model runner's answer and checks what the
// model_result schema guards: no unknown field, valid ids, a known kind, and
// tool calls whose ids can name jobs and whose arguments are objects. Only
// orchestrators publish on jetloop.inbox.model (nats.conf), from typed
// values, so the generic schema validator, a tenth of the orchestrator's CPU
// and a quarter of its allocations under load, is not run on them.
func decodeModelResult(data []byte) (events.ModelResult, error) {
	var r events.ModelResult
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&r); err != nil {
		return r, &deadLetter{"model_result: " + err.Error()}
	}
	switch {
	case !events.ValidID(r.TurnID):
		return r, &deadLetter{fmt.Sprintf("model_result: invalid turn id %q", r.TurnID)}
	case r.Kind != events.ModelStep && r.Kind != events.ModelSummary:
		return r, &deadLetter{fmt.Sprintf("model_result: unknown kind %q", r.Kind)}
	case r.Step < 0 || r.Attempts < 1 || r.DurationMs < 0:
		return r, &deadLetter{"model_result: negative step or duration, or no attempt"}
	}
	for _, c := range r.ToolCalls {
		if !events.ValidID(c.CallID) {
			return r, &deadLetter{fmt.Sprintf("model_result: invalid call id %q", c.CallID)}
		}
		if args := bytes.TrimSpace(c.Arguments); len(args) == 0 || args[0] != '{' {
			return r, &deadLetter{fmt.Sprintf("model_result: arguments of call %s are not an object", c.CallID)}
		}
	}
	return r, nil
}
