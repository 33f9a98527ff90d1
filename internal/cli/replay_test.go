package cli

import (
	"bytes"
	"flag"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/jetloop/jetloop/internal/events"
	"github.com/jetloop/jetloop/internal/fsm"
	"github.com/jetloop/jetloop/internal/timeline"
)

var update = flag.Bool("update", false, "rewrite the golden files: the traces in testdata, docs/cli.md")

// TestGoldenReplays replays real logs, recorded from turns of a jetloop dev
// stack (one per way a turn can end, and a paused one), through today's
// machine: each must verify and print exactly its golden trace. Run with
// -update after a deliberate change to the trace.
func TestGoldenReplays(t *testing.T) {
	logs, err := filepath.Glob("testdata/*.jsonl")
	if err != nil || len(logs) < 6 {
		t.Fatalf("recorded logs: %v %v", logs, err)
	}
	for _, path := range logs {
		name := strings.TrimSuffix(filepath.Base(path), ".jsonl")
		t.Run(name, func(t *testing.T) {
			log, err := readLogFile(path)
			if err != nil {
				t.Fatal(err)
			}
			if err := events.CheckLog(log); err != nil {
				t.Fatal(err)
			}
			if _, err := fsm.Verify(log); err != nil {
				t.Fatalf("the recorded log no longer verifies: %v", err)
			}
			var out bytes.Buffer
			tr := timeline.NewTrace(&out, false)
			for _, e := range log {
				if err := tr.Event(e); err != nil {
					t.Fatal(err)
				}
			}
			golden := strings.TrimSuffix(path, ".jsonl") + ".trace"
			if *update {
				if err := os.WriteFile(golden, out.Bytes(), 0o644); err != nil {
					t.Fatal(err)
				}
			}
			want, err := os.ReadFile(golden)
			if err != nil {
				t.Fatal(err)
			}
			if out.String() != string(want) {
				t.Fatalf("trace differs from %s\n got:\n%s\nwant:\n%s", golden, out.String(), want)
			}
		})
	}
}
