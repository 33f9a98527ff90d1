package tools

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	"github.com/jetloop/jetloop/internal/events"
	"github.com/jetloop/jetloop/internal/output"
	"github.com/jetloop/jetloop/worker"
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
type Result = worker.Result

// MaxOutput bounds a result's output: the worker cuts what is longer.
const MaxOutput = output.Max

// noteRoom is kept free under MaxOutput for the truncation note and a
// tool's own last line (an exit status).
const noteRoom = output.NoteRoom

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

// Register serves tools with w, each under its spec's name, with its
// description, schema and timeout.
func Register(w *worker.Worker, ts ...Tool) error {
	for _, t := range ts {
		s := t.Spec()
		var opts []worker.ToolOption
		if s.TimeoutMs > 0 {
			opts = append(opts, worker.WithTimeout(time.Duration(s.TimeoutMs)*time.Millisecond))
		}
		call := func(ctx context.Context, c worker.Call) (worker.Result, error) { return t.Call(ctx, c.Arguments) }
		if err := w.Handle(s.Name, s.Description, s.Parameters, call, opts...); err != nil {
			return err
		}
	}
	return nil
}
