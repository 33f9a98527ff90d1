package model_test

import (
	"errors"
	"testing"

	"github.com/jetloop/jetloop/internal/model"
)

// TestSpecLeavesProvidersToTheCaller: any well-formed PROVIDER/NAME parses,
// so an orchestrator given a third provider (runtime.WithProvider) can serve
// it; only the syntax is refused, and nothing spells a script file other
// than script:PATH.
func TestSpecLeavesProvidersToTheCaller(t *testing.T) {
	for _, tc := range []struct{ in, provider, name string }{
		{"script", "script", ""},
		{"script:scripts/demo.yaml", "script", "scripts/demo.yaml"},
		{"openai/gpt-4.1-mini", "openai", "gpt-4.1-mini"},
		{"anthropic/claude-sonnet-4-5", "anthropic", "claude-sonnet-4-5"},
		{"mistral/large", "mistral", "large"},
		{"local_vllm-2/meta-llama/Llama-3.1-8B", "local_vllm-2", "meta-llama/Llama-3.1-8B"},
	} {
		p, n, err := model.Spec(tc.in)
		if err != nil || p != tc.provider || n != tc.name {
			t.Errorf("Spec(%q) = %q %q %v, want %q %q", tc.in, p, n, err, tc.provider, tc.name)
		}
	}
	for _, bad := range []string{"", "gpt-4", "openai/", "/gpt-4", "script:",
		"script/x.yaml", "script//etc/passwd", "a.b/m", "a b/m", "jetloop.>/m", "ü/m",
		"p" + string(make([]byte, 64)) + "/m"} {
		if p, n, err := model.Spec(bad); !errors.Is(err, model.ErrUnknownModel) {
			t.Errorf("Spec(%q) = %q %q %v, want ErrUnknownModel", bad, p, n, err)
		}
	}
}
