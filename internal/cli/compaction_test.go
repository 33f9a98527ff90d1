package cli

import (
	"context"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/jetloop/jetloop/internal/events"
)

const summarizingAgents = `---
name: Long
model: script
tools: [echo]
compaction: {agent: Summarizer, over_tokens: 500, keep_steps: 1}
---
Works long.
---
name: Summarizer
model: script:summarizer.yaml
tools: []
---
Summarize.
`

// TestWatchAndVerifySummarizingCompaction runs a long scripted turn whose
// agent compacts by an agent: jetloop watch prints the summary's turn
// indented above turn.compacted, and replay --verify re-derives the turn
// from its log alone, no model called.
func TestWatchAndVerifySummarizingCompaction(t *testing.T) {
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "summarizer.yaml"), []byte("responses:\n  - text: \"SUMMARY of the early steps\"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(dir, "AGENTS.md")
	if err := os.WriteFile(path, []byte(summarizingAgents), 0o644); err != nil {
		t.Fatal(err)
	}
	e := newEnvServing(t, path, "")
	long := strings.Repeat("x", 400)
	var steps []string
	for i := 1; i <= 5; i++ {
		// Each call its own: the same call three times is a doom loop.
		steps = append(steps, `{"text": "step", "tool_calls": [{"name": "echo", "arguments": {"text": "`+strconv.Itoa(i)+long+`"}}]}`)
	}
	const id = "long-cli"
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := Submit(ctx, e.nc, events.Submit{TurnID: id, Agent: "Long", Model: "script",
		Script: []byte(`{"responses": [` + strings.Join(steps, ",") + `, {"text": "all done"}]}`),
		Input:  []events.Message{{Role: events.RoleUser, Content: "go"}}}); err != nil {
		t.Fatal(err)
	}
	e.waitType(id, events.TurnFinished)
	count := func() int {
		e.calls.mu.Lock()
		defer e.calls.mu.Unlock()
		n := 0
		for _, jobs := range e.calls.jobs {
			n += len(jobs)
		}
		return n
	}
	calls := count()

	out := e.mustRun(ExitOK, "watch", id)
	at := strings.Index(out, "turn.compacted")
	child := strings.Index(out, "│ turn sub-")
	if at < 0 || child < 0 || child > at || !strings.Contains(out[at:], "summarized by turn sub-") ||
		!strings.Contains(out[child:at], "agent Summarizer") {
		t.Fatalf("watch does not print the summary's turn above turn.compacted:\n%s", out)
	}
	if got := e.mustRun(ExitOK, "replay", "--verify", id); !strings.HasPrefix(got, "verified: ") {
		t.Fatalf("replay --verify: %s", got)
	}
	page := filepath.Join(t.TempDir(), "long.html")
	e.mustRun(ExitOK, "replay", "--html", page, id)
	html, err := os.ReadFile(page)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(html), `"compactions":[{"at_ms":`) || !strings.Contains(string(html), "SUMMARY of the early steps") {
		t.Errorf("the page does not mark the compaction")
	}
	if count() != calls {
		t.Fatalf("watch or replay called a model: %d calls, then %d", calls, count())
	}
}
