package model

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"strings"
	"time"

	"github.com/jetloop/jetloop/internal/events"
)

// NoSummary answers a summary call of a script without a summary.
const NoSummary = "(no summary)"

// Scripted is the deterministic model of docs/protocol.md. It is a real provider:
// it streams, fails and is retried exactly like a remote one, and the same
// request always gets the same answer, call ids included.
type Scripted struct{}

// Call answers with the script's response for this attempt.
func (Scripted) Call(ctx context.Context, req Request, emit func(string)) (Response, error) {
	if req.Script == nil {
		return Response{}, &Error{Kind: BadRequest, Message: "model script needs a script"}
	}
	if req.Kind == events.ModelSummary {
		text := req.Script.Summary
		if text == "" {
			text = NoSummary
		}
		emit(text)
		return Response{Text: text, FinishReason: "stop", Usage: usage(req, text, 0)}, nil
	}
	index := req.ScriptIndex + max(req.Attempt, 1) - 1
	rs := req.Script.Responses
	switch {
	case index < len(rs):
	case req.Script.RepeatLast && len(rs) > 0:
		index = len(rs) - 1
	default:
		return Response{}, &Error{Kind: BadRequest,
			Message: fmt.Sprintf("the script ran out of responses (call %d of %d)", index+1, len(rs))}
	}
	r := rs[index]
	if err := stream(ctx, r.Text, time.Duration(r.DelayMs)*time.Millisecond, emit); err != nil {
		return Response{}, err
	}
	if r.Error != "" {
		return Response{}, &Error{Kind: r.Error, Message: fmt.Sprintf("scripted %s (response %d)", r.Error, index+1)}
	}
	resp := Response{Text: r.Text, FinishReason: "stop"}
	for j, c := range r.ToolCalls {
		args := c.Arguments
		if len(args) == 0 {
			args = json.RawMessage(`{}`)
		}
		resp.ToolCalls = append(resp.ToolCalls, events.ToolCall{
			CallID: callID(req.TurnID, req.Step, index, j), Name: c.Name, Arguments: args})
	}
	if len(resp.ToolCalls) > 0 {
		resp.FinishReason = "tool_calls"
	}
	resp.Usage = usage(req, r.Text, len(resp.ToolCalls))
	return resp, nil
}

// stream sends text as word deltas spread over delay, or as one delta when
// there is no delay, as a provider streaming tokens would.
func stream(ctx context.Context, text string, delay time.Duration, emit func(string)) error {
	if delay <= 0 {
		if text != "" {
			emit(text)
		}
		return ctx.Err()
	}
	words := strings.SplitAfter(text, " ")
	if text == "" {
		words = nil
	}
	// The first word goes out at once, as a provider's first token does;
	// the rest follow evenly and the answer comes when delay has passed.
	gap := delay / time.Duration(max(len(words), 1))
	t := time.NewTimer(gap)
	defer t.Stop()
	for i, w := range words {
		if i > 0 {
			select {
			case <-ctx.Done():
				return ctx.Err()
			case <-t.C:
			}
			t.Reset(gap)
		}
		emit(w)
	}
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}

// callID is deterministic, so a retried or replayed call asks for the same
// tool calls under the same ids.
func callID(turn string, step, index, position int) string {
	sum := sha256.Sum256(fmt.Appendf(nil, "%s/%d/%d/%d", turn, step, index, position))
	return "call_" + hex.EncodeToString(sum[:10])
}

// usage estimates tokens at four characters each, so metrics of scripted
// turns are not all zero.
func usage(req Request, text string, calls int) events.Usage {
	in := len(req.System) + len(req.Instruction)
	for _, m := range req.Messages {
		in += len(m.Content)
		for _, c := range m.ToolCalls {
			in += len(c.Name) + len(c.Arguments)
		}
	}
	return events.Usage{InputTokens: in/4 + 1, OutputTokens: len(text)/4 + 8*calls + 1}
}
