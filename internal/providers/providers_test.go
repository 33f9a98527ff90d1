package providers

import (
	"bytes"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/jetloop/jetloop/internal/agents"
)

// TestOptions: the configured providers are announced without their
// keys, and agents that name an unconfigured one are warned about.
func TestOptions(t *testing.T) {
	path := filepath.Join(t.TempDir(), "AGENTS.md")
	doc := "---\nname: A\nmodel: openai/gpt-4.1-mini\n---\nA.\n---\nname: B\nmodel: anthropic/claude-sonnet-4-5\n---\nB.\n" +
		"---\nname: C\nmodel: mistral/large\n---\nC.\n"
	if err := os.WriteFile(path, []byte(doc), 0o644); err != nil {
		t.Fatal(err)
	}
	set, _, err := agents.Load(path)
	if err != nil {
		t.Fatal(err)
	}
	var out bytes.Buffer
	log := slog.New(slog.NewTextHandler(&out, nil))
	env := map[string]string{"OPENAI_API_KEY": "sk-very-secret"}
	opts, err := Options(func(k string) string { return env[k] }, set, log)
	if err != nil {
		t.Fatal(err)
	}
	if len(opts) != 3 {
		t.Errorf("%d options, want script, openai and anthropic", len(opts))
	}
	text := out.String()
	if strings.Contains(text, "sk-very-secret") {
		t.Errorf("the key was logged:\n%s", text)
	}
	if !strings.Contains(text, "provider=openai") || strings.Contains(text, "provider=anthropic") {
		t.Errorf("configured providers:\n%s", text)
	}
	if !strings.Contains(text, "not configured") || !strings.Contains(text, "B (anthropic/claude-sonnet-4-5)") ||
		!strings.Contains(text, "C (mistral/large)") || strings.Contains(text, "A (openai") {
		t.Errorf("warning about unconfigured agents:\n%s", text)
	}
}
