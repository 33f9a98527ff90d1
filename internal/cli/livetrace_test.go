package cli

import (
	"strings"
	"testing"
)

// streamScript streams each step's text word by word, as a provider does.
const streamScript = `responses:
  - {text: "Let me look around: a -> b", delay_ms: 300, tool_calls: [{name: echo, arguments: {text: "a -> b"}}]}
  - {text: "All done here now", delay_ms: 300}
`

// TestLiveTraceMissesNothing: submit --watch shows the text of every step
// from its first word, watch started in the middle of a step shows that
// step's text whole, each exactly once, and replay shows it too.
func TestLiveTraceMissesNothing(t *testing.T) {
	e := newEnv(t)
	script := e.script("stream.yaml", streamScript)
	once := func(what, out string) {
		t.Helper()
		for _, text := range []string{"▸ Let me look around: a -> b\n", "▸ All done here now\n"} {
			if n := strings.Count(out, text); n != 1 {
				t.Fatalf("%s shows %q %d times:\n%s", what, text, n, out)
			}
		}
		if strings.Contains(out, `\u003e`) {
			t.Fatalf("%s escapes >:\n%s", what, out)
		}
	}
	once("submit --watch", e.mustRun(ExitOK, "submit", "--watch", "--agent", "Wide", "--script", script, "--turn", "live", "look"))

	e.mustRun(ExitOK, "submit", "--agent", "Wide", "--script", script, "--turn", "joined", "look")
	once("watch", e.mustRun(ExitOK, "watch", "joined"))

	once("replay", e.mustRun(ExitOK, "replay", "live"))

	// The state after a step is JSON as jetloop writes it: snake_case.
	at := e.mustRun(ExitOK, "replay", "--at", "1", "live")
	if !strings.Contains(at, `"turn_id": "live"`) || strings.Contains(at, `"TurnID"`) || strings.Contains(at, `"Step"`) {
		t.Fatalf("replay --at 1:\n%s", at)
	}
}
