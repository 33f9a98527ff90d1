package cli

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/jetloop/jetloop/internal/events"
)

// A log with an illegal transition (a model answer with no step started)
// does not replay, and --verify reports it as it reports an edited decision:
// the event, and what today's machine writes there instead.
func TestReplayReportsAnIllegalTransition(t *testing.T) {
	log, err := readLogFile("testdata/completed.jsonl")
	if err != nil {
		t.Fatal(err)
	}
	if log[1].Type != events.StepStarted {
		t.Fatalf("seq 2 is %s", log[1].Type)
	}
	broken := append([]events.Envelope{log[0]}, log[2:]...)
	var buf bytes.Buffer
	for i := range broken {
		broken[i].Seq = i + 1
		line, _ := json.Marshal(broken[i])
		buf.Write(append(line, '\n'))
	}
	path := filepath.Join(t.TempDir(), "broken.jsonl")
	if err := os.WriteFile(path, buf.Bytes(), 0o644); err != nil {
		t.Fatal(err)
	}
	run := func(args ...string) (int, string, string) {
		var out, errOut bytes.Buffer
		code := Main(context.Background(), args, &out, &errOut)
		return code, out.String(), errOut.String()
	}
	code, _, errOut := run("replay", "--file", path)
	if code != ExitStopped || !strings.Contains(errOut, "illegal transition") || !strings.Contains(errOut, "seq 2") {
		t.Fatalf("replay: exit %d\n%s", code, errOut)
	}
	code, out, _ := run("replay", "--verify", "--file", path)
	if code != ExitStopped || !strings.Contains(out, "seq 2") || !strings.Contains(out, "recorded: model.completed") ||
		!strings.Contains(out, "derived:  step.started") {
		t.Fatalf("replay --verify: exit %d\n%s", code, out)
	}
	if code, out, _ := run("replay", "--verify", "--file", "testdata/completed.jsonl"); code != ExitOK || !strings.HasPrefix(out, "verified:") {
		t.Fatalf("replay --verify of the intact log: exit %d\n%s", code, out)
	}
}
