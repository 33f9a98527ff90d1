package model_test

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/jetloop/jetloop/internal/events"
	"github.com/jetloop/jetloop/internal/model"
	"github.com/jetloop/jetloop/internal/model/modeltest"
)

// Keys in no shape a pattern knows: only knowing them hides them.
const (
	openaiKey    = "k3y.for-the-l0cal-openai-server"
	anthropicKey = "anthr0pic-key-from-a-mounted-file"
	proxyToken   = "pr0xy-t0ken-nobody-configured"
)

// echo answers the way a careless server or proxy does: it repeats the key
// and the headers it got, in an error status or in an error event of a
// stream it began.
func echo(provider string, status int) func(modeltest.Request, int) modeltest.Reply {
	return func(r modeltest.Request, _ int) modeltest.Reply {
		key := r.Header.Get("X-Api-Key")
		if provider == "openai" {
			key = strings.TrimPrefix(r.Header.Get("Authorization"), "Bearer ")
		}
		said := fmt.Sprintf("Incorrect API key provided: %s. Got Authorization: %q, x-api-key: %q, Proxy-Authorization: Bearer %s; other key %s",
			key, r.Header.Get("Authorization"), r.Header.Get("X-Api-Key"), proxyToken, other(provider))
		body := []byte(fmt.Sprintf(`{"type":"error","error":{"type":"invalid_request_error","message":%q}}`, said))
		switch {
		case status == http.StatusInternalServerError:
			// Not JSON: the body is shown as it is, headers and all.
			var dump strings.Builder
			for k, v := range r.Header {
				fmt.Fprintf(&dump, "%s: %s\n", k, strings.Join(v, ", "))
			}
			return modeltest.Reply{Status: status, Header: http.Header{"Content-Type": {"text/plain"}}, Body: []byte(dump.String())}
		case status >= 400:
			return modeltest.Fail(status, body)
		case provider == "openai":
			return modeltest.Stream([]byte(fmt.Sprintf("data: {\"error\":{\"message\":%q,\"type\":\"server_error\"}}\n\n", said)))
		default:
			return modeltest.Stream([]byte(fmt.Sprintf("event: error\ndata: {\"type\":\"error\",\"error\":{\"type\":\"overloaded_error\",\"message\":%q}}\n\n", said)))
		}
	}
}

func other(provider string) string {
	if provider == "openai" {
		return anthropicKey
	}
	return openaiKey
}

// TestProviderErrorsShowNoKey: whatever a server echoes — the key, the
// Authorization or x-api-key header, the other provider's key, a bearer
// token of a proxy — the error a provider returns, which becomes
// model.completed's and turn.finished's error and a log line, shows none of
// it, and still says what went wrong.
func TestProviderErrorsShowNoKey(t *testing.T) {
	keyFile := filepath.Join(t.TempDir(), "anthropic-key")
	if err := os.WriteFile(keyFile, []byte(anthropicKey+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, provider := range []string{"openai", "anthropic"} {
		for _, status := range []int{http.StatusBadRequest, http.StatusUnauthorized, http.StatusInternalServerError, http.StatusOK} {
			srv := modeltest.New(t, echo(provider, status))
			ps, err := model.Providers(env(map[string]string{
				"OPENAI_BASE_URL":        srv.URL + "/v1",
				"OPENAI_API_KEY":         openaiKey,
				"ANTHROPIC_BASE_URL":     srv.URL,
				"ANTHROPIC_API_KEY_FILE": keyFile,
			}))
			if err != nil {
				t.Fatal(err)
			}
			_, err = ps[provider].Call(context.Background(), model.Request{TurnID: "t", Step: 1, Kind: events.ModelStep, Model: "m",
				Messages: []events.Message{{Role: events.RoleUser, Content: "hi"}}}, func(string) {})
			var me *model.Error
			if !errors.As(err, &me) {
				t.Fatalf("%s %d: %v is not a *model.Error", provider, status, err)
			}
			for _, secret := range []string{openaiKey, anthropicKey, proxyToken} {
				if strings.Contains(err.Error(), secret) || strings.Contains(me.Message, secret) {
					t.Errorf("%s %d: the error shows %q: %s", provider, status, secret, err)
				}
			}
			if !strings.Contains(me.Message, "[redacted]") {
				t.Errorf("%s %d: nothing was hidden, so the server's words were lost: %s", provider, status, err)
			}
			if status == http.StatusInternalServerError && me.Kind != model.ServerError ||
				status < 500 && status >= 400 && (me.Kind != model.BadRequest || !strings.Contains(me.Message, "Incorrect API key provided")) {
				t.Errorf("%s %d: scrubbing changed what the error says: %v", provider, status, err)
			}
			if len(srv.Requests()) == 0 {
				t.Fatalf("%s %d: no request reached the server", provider, status)
			}
		}
	}
}

// TestSecretsOption: a provider built on its own hides its key, the
// password of its base URL and what WithSecrets names, and lets the
// caller's context error through as itself.
func TestSecretsOption(t *testing.T) {
	const extra = "a-third-providers-key-42"
	srv := modeltest.New(t, func(r modeltest.Request, _ int) modeltest.Reply {
		return modeltest.Fail(http.StatusForbidden, []byte(`{"error":{"message":"denied for `+extra+` and hunter2 and `+openaiKey+`"}}`))
	})
	p, err := model.NewOpenAI(model.WithBaseURL("http://user:hunter2@"+strings.TrimPrefix(srv.URL, "http://")+"/v1"),
		model.WithAPIKey(openaiKey), model.WithSecrets(extra))
	if err != nil {
		t.Fatal(err)
	}
	_, err = p.Call(context.Background(), model.Request{TurnID: "t", Model: "m",
		Messages: []events.Message{{Role: events.RoleUser, Content: "x"}}}, func(string) {})
	if err == nil || strings.Contains(err.Error(), extra) || strings.Contains(err.Error(), "hunter2") ||
		strings.Contains(err.Error(), openaiKey) || !strings.Contains(err.Error(), "denied for") {
		t.Errorf("%v", err)
	}

	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := p.Call(ctx, model.Request{TurnID: "t", Model: "m"}, func(string) {}); err != context.Canceled {
		t.Errorf("a canceled call gave %v, want context.Canceled itself", err)
	}
}
