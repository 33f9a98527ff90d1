package tools

import (
	"context"
	"encoding/json"
	"fmt"

	"github.com/jetloop/jetloop/internal/events"
)

// Tool is one tool a worker serves.
type Tool interface {
	// Spec names the tool and describes it and its arguments (a JSON
	// Schema) to models.
	Spec() events.ToolSpec
	// Call runs the tool. An error becomes an error result the model sees;
	// a call cut short by its context is not answered at all.
	Call(ctx context.Context, args json.RawMessage) (Result, error)
}

// Result is what a call returns to the model.
type Result struct {
	Output  string
	IsError bool
	// Final marks the output as the turn's answer (synthesis_done).
	Final bool
}

// MaxOutput bounds a result's output: a model cannot use more, and a result
// must fit in one NATS message.
const MaxOutput = 256 << 10

// truncate cuts output to MaxOutput bytes and says how much it dropped.
func truncate(s string) string {
	if len(s) <= MaxOutput {
		return s
	}
	cut := MaxOutput
	for cut > 0 && !validStart(s[cut]) {
		cut-- // do not split a UTF-8 sequence
	}
	return s[:cut] + fmt.Sprintf("\n… [output truncated: %d more bytes]", len(s)-cut)
}

func validStart(b byte) bool { return b&0xC0 != 0x80 }

// fn is a tool made of a spec and a function with typed arguments.
type fn[A any] struct {
	spec events.ToolSpec
	call func(ctx context.Context, args A) (Result, error)
}

func (f fn[A]) Spec() events.ToolSpec { return f.spec }

func (f fn[A]) Call(ctx context.Context, raw json.RawMessage) (Result, error) {
	var args A
	if len(raw) > 0 {
		if err := json.Unmarshal(raw, &args); err != nil {
			return Result{}, fmt.Errorf("arguments: %w", err)
		}
	}
	return f.call(ctx, args)
}
