package tools

import (
	"bytes"
	"log/slog"
	"testing"
)

// A server's stderr without newlines costs bounded memory: the pending line
// is logged and dropped once it outgrows the kept tail.
func TestStderrLogIsBoundedWithoutNewlines(t *testing.T) {
	w := &stderrLog{log: slog.New(slog.DiscardHandler)}
	chunk := bytes.Repeat([]byte("\r50% ▕████▏"), 1000)
	for range 100 {
		if _, err := w.Write(chunk); err != nil {
			t.Fatal(err)
		}
	}
	if len(w.line) > mcpStderrTail || len(w.tail) > mcpStderrTail {
		t.Errorf("kept %d bytes of a pending line and %d of tail", len(w.line), len(w.tail))
	}
}
