package tools

import (
	"context"
	"encoding/json"
	"fmt"
	"unicode/utf8"

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

// maxEncodedOutput bounds an output once written as a JSON string. Text
// takes about its own size, but a control character or a byte that is not
// UTF-8 takes six (\u001b, \ufffd): MaxOutput bytes of a binary file would
// make a result larger than a NATS message (1 MiB by default), which no
// retry could ever publish.
const maxEncodedOutput = 2 * MaxOutput

// truncate cuts output to at most MaxOutput bytes, and to at most
// maxEncodedOutput bytes once encoded as JSON, the note included, and says
// how much it dropped. Keeping the note inside the caps makes truncate
// idempotent: the worker applies it again to every result a tool returns.
func truncate(s string) string {
	// What fits is kept whole, a note of an earlier cut included: the
	// room kept for the note is taken only from what is cut.
	if len(s) <= MaxOutput && encodedCut(s, maxEncodedOutput) == len(s) {
		return s
	}
	cut := min(encodedCut(s, maxEncodedOutput-noteRoom), cutAt(s, MaxOutput-noteRoom))
	return s[:cut] + truncated(int64(len(s)-cut))
}

// encodedCut returns the length of the longest prefix of s, cut between
// characters, that encoding/json writes in at most limit bytes (HTML
// escaping off).
func encodedCut(s string, limit int) int {
	size := 0
	for i := 0; i < len(s); {
		r, width := utf8.DecodeRuneInString(s[i:])
		switch {
		case r == utf8.RuneError && width == 1, r == '\u2028', r == '\u2029':
			size += 6
		case r == '"', r == '\\', r == '\n', r == '\r', r == '\t', r == '\b', r == '\f':
			size += 2
		case r < 0x20:
			size += 6
		default:
			size += width
		}
		if size > limit {
			return i
		}
		i += width
	}
	return len(s)
}

// noteRoom is kept free under MaxOutput for the truncation note and a
// tool's own last line (an exit status).
const noteRoom = 256

// truncated is the explicit marker of a cut output.
func truncated(dropped int64) string {
	return fmt.Sprintf("\n… [output truncated: %d more bytes]", dropped)
}

// cutAt returns n, or less so as not to split a UTF-8 sequence.
func cutAt(s string, n int) int {
	if n >= len(s) {
		return len(s)
	}
	for n > 0 && !validStart(s[n]) {
		n--
	}
	return n
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
