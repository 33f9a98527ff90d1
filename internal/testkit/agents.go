package testkit

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/jetloop/jetloop/internal/agents"
)

// Agents loads the agents md defines (AGENTS.md, docs/agents.md), written
// with files (their scripts, by name) into a directory of the test's.
func Agents(t testing.TB, md string, files map[string]string) *agents.Set {
	t.Helper()
	dir := t.TempDir()
	for name, text := range files {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	path := filepath.Join(dir, "AGENTS.md")
	if err := os.WriteFile(path, []byte(md), 0o644); err != nil {
		t.Fatal(err)
	}
	return LoadAgents(t, path)
}

// LoadAgents loads the agents file at path.
func LoadAgents(t testing.TB, path string) *agents.Set {
	t.Helper()
	set, _, err := agents.Load(path)
	if err != nil {
		t.Fatal(err)
	}
	return set
}
