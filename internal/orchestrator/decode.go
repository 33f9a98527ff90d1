package orchestrator

import (
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
// plainly valid is checked here in Go (plainToolResult), and anything else
// goes to the schema. Either way a result is accepted exactly when the
// schema accepts it and it decodes (a fuzz test holds the two to that).
func decodeToolResult(data []byte) (events.ToolResult, error) {
	if r, ok := plainToolResult(data); ok {
		return r, nil
	}
	var r events.ToolResult
	err := decode("tool_result", data, &r)
	return r, err
}

// Each field of a result, as a bit of a set.
const (
	fTurnID = 1 << iota
	fCallID
	fTool
	fOutput
	fAttempt
	fStep
	fKind
	fText
	fUsage
	fDurationMs
	fAttempts
	fInputTokens
	fOutputTokens
	fName
	fArguments
)

// plainToolResult decodes a result that the schema plainly accepts: an
// object whose keys are the schema's own, exactly as written there (encoding/json alone
// matches "TURN_ID" to turn_id, which the schema refuses), every
// required one present, no null (which encoding/json skips and the schema
// refuses), ids and numbers in range. false leaves the judgement to the
// schema.
func plainToolResult(data []byte) (events.ToolResult, bool) {
	var r events.ToolResult
	seen := 0
	if !events.EachField(data, func(key string, v []byte) bool {
		switch key {
		case "turn_id":
			seen |= fTurnID
		case "call_id":
			seen |= fCallID
		case "tool":
			seen |= fTool
		case "output":
			seen |= fOutput
		case "attempt":
			seen |= fAttempt
		case "is_error", "final", "duration_ms", "worker":
		default:
			return false
		}
		return string(v) != "null"
	}) || seen != fTurnID|fCallID|fTool|fOutput|fAttempt {
		return r, false
	}
	// The keys are the schema's, so encoding/json now checks the types.
	if json.Unmarshal(data, &r) != nil {
		return r, false
	}
	return r, events.ValidID(r.TurnID) && events.ValidID(r.CallID) && events.ValidID(r.Tool) &&
		r.Attempt >= 1 && r.DurationMs >= 0
}

// decodeModelResult reads a model runner's answer. Only orchestrators
// publish on jetloop.inbox.model (nats.conf), from typed values, so their
// answers are plainly valid and checked in Go (plainModelResult): the generic
// schema validator was a tenth of the orchestrator's CPU and a quarter of
// its allocations under load. Anything else, which no orchestrator writes,
// goes to the model_result schema, so an answer is accepted exactly when
// the schema accepts it and it decodes.
func decodeModelResult(data []byte) (events.ModelResult, error) {
	if r, ok := plainModelResult(data); ok {
		return r, nil
	}
	var r events.ModelResult
	err := decode("model_result", data, &r)
	return r, err
}

// plainModelResult decodes an answer the schema plainly accepts, as
// plainToolResult does a tool result, its usage and tool calls included.
// Of a key given twice the schema sees the last value and encoding/json
// merges both into one struct: the checks read the last, and require every
// field of a usage and a tool call, so that the merge is the last value.
func plainModelResult(data []byte) (events.ModelResult, bool) {
	var r events.ModelResult
	var usage, calls []byte
	seen := 0
	if !events.EachField(data, func(key string, v []byte) bool {
		switch key {
		case "turn_id":
			seen |= fTurnID
		case "step":
			seen |= fStep
		case "kind":
			seen |= fKind
		case "text":
			seen |= fText
		case "usage":
			seen |= fUsage
			usage = v
		case "duration_ms":
			seen |= fDurationMs
		case "attempts":
			seen |= fAttempts
		case "tool_calls":
			calls = v
		case "finish_reason", "error":
		default:
			return false
		}
		return string(v) != "null"
	}) || seen != fTurnID|fStep|fKind|fText|fUsage|fDurationMs|fAttempts {
		return r, false
	}
	if !plainObject(usage, fInputTokens|fOutputTokens, func(key string) int {
		switch key {
		case "input_tokens":
			return fInputTokens
		case "output_tokens":
			return fOutputTokens
		}
		return 0
	}) {
		return r, false
	}
	if calls != nil && !events.EachElement(calls, func(call []byte) bool {
		return plainObject(call, fCallID|fName|fArguments, func(key string) int {
			switch key {
			case "call_id":
				return fCallID
			case "name":
				return fName
			case "arguments":
				return fArguments
			}
			return 0
		})
	}) {
		return r, false
	}
	if json.Unmarshal(data, &r) != nil || !events.ValidID(r.TurnID) ||
		(r.Kind != events.ModelStep && r.Kind != events.ModelSummary) ||
		r.Step < 1 || r.DurationMs < 0 || r.Attempts < 1 || r.Usage.InputTokens < 0 || r.Usage.OutputTokens < 0 {
		return r, false
	}
	for _, c := range r.ToolCalls {
		if !events.ValidID(c.CallID) || len(c.Arguments) == 0 || c.Arguments[0] != '{' {
			return r, false
		}
	}
	return r, true
}

// plainObject reports whether data is an object with exactly the keys that
// bit names (each key's bit; 0 for a key not allowed), none of them null.
func plainObject(data []byte, want int, bit func(key string) int) bool {
	seen := 0
	return events.EachField(data, func(key string, v []byte) bool {
		b := bit(key)
		seen |= b
		return b != 0 && string(v) != "null"
	}) && seen == want
}
