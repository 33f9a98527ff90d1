// Package providers turns the environment's model provider settings into
// orchestrator options: what the orchestrator binary and jetloop's demo and
// dev stacks share, without the orchestrator linking the CLI.
package providers

import (
	"log/slog"
	"net/url"
	"sort"

	"github.com/jetloop/jetloop/internal/orchestrator"

	"github.com/jetloop/jetloop/internal/agents"
	"github.com/jetloop/jetloop/internal/model"
)

// Options registers the model providers the environment configures
// (model.Providers: OPENAI_BASE_URL, OPENAI_API_KEY, ANTHROPIC_BASE_URL,
// ANTHROPIC_API_KEY, …) with an orchestrator. It says which are configured,
// never with their keys, and warns about agents whose model names a provider
// that is not: their turns would fail at the first model call.
func Options(getenv func(string) string, set *agents.Set, log *slog.Logger) ([]orchestrator.Option, error) {
	ps, err := model.Providers(getenv)
	if err != nil {
		return nil, err
	}
	names := make([]string, 0, len(ps))
	for name := range ps {
		names = append(names, name)
	}
	sort.Strings(names)
	var opts []orchestrator.Option
	for _, name := range names {
		p := ps[name]
		opts = append(opts, orchestrator.WithProvider(name, p))
		if name == "script" {
			continue
		}
		if model.Configured(p) {
			log.Info("model provider configured", "provider", name, "base_url", baseURL(getenv, name))
		}
	}
	if set != nil {
		var idle []string
		for _, name := range set.Names() {
			a, _ := set.Get(name)
			// A provider the environment does not know (model.Spec takes
			// any prefix) is as idle as one it knows without a key.
			provider, _, err := model.Spec(a.Model)
			if p, ok := ps[provider]; err == nil && (!ok || !model.Configured(p)) {
				idle = append(idle, name+" ("+a.Model+")")
			}
		}
		if len(idle) > 0 {
			log.Warn("these agents name a model provider that is not configured: their turns fail unless a submission names another model",
				"agents", idle)
		}
	}
	return opts, nil
}

func baseURL(getenv func(string) string, provider string) string {
	v := map[string]string{"openai": "OPENAI_BASE_URL", "anthropic": "ANTHROPIC_BASE_URL"}[provider]
	if u := getenv(v); u != "" {
		if parsed, err := url.Parse(u); err == nil {
			return parsed.Redacted() // a password in the URL is a key too
		}
		return "(unparsable)"
	}
	return "default"
}
