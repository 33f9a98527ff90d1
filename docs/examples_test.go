package docs

import (
	"os"
	"regexp"
	"testing"
)

// TestSubagentsExample: the agents file docs/agents.md shows under
// Subagents is examples/subagents/AGENTS.md, which make demo-subagents and
// the browser tests of its pages run.
func TestSubagentsExample(t *testing.T) {
	page, err := os.ReadFile("agents.md")
	if err != nil {
		t.Fatal(err)
	}
	file, err := os.ReadFile("../examples/subagents/AGENTS.md")
	if err != nil {
		t.Fatal(err)
	}
	m := regexp.MustCompile("(?s)\n## Subagents\n.*?```markdown\n(.*?)```\n").FindSubmatch(page)
	if m == nil {
		t.Fatal("docs/agents.md has no agents file under ## Subagents")
	}
	if string(m[1]) != string(file) {
		t.Errorf("docs/agents.md's example differs from examples/subagents/AGENTS.md:\n%s\n---\n%s", m[1], file)
	}
}
