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
	"time"

	"github.com/jetloop/jetloop/internal/events"
	"github.com/jetloop/jetloop/internal/model"
	"github.com/jetloop/jetloop/internal/model/modeltest"
	"github.com/jetloop/jetloop/internal/testkit"
)

func TestRetryAfter(t *testing.T) {
	now := time.Date(2026, 11, 23, 10, 0, 0, 0, time.UTC)
	for _, c := range []struct {
		header http.Header
		want   time.Duration
	}{
		{http.Header{"Retry-After": {"7"}}, 7 * time.Second},
		{http.Header{"Retry-After": {"1.5"}}, 1500 * time.Millisecond},
		{http.Header{"Retry-After": {"Mon, 23 Nov 2026 10:00:30 GMT"}}, 30 * time.Second},
		{http.Header{"Retry-After": {"Mon, 23 Nov 2026 09:00:00 GMT"}}, 0},
		{http.Header{"Retry-After-Ms": {"250"}, "Retry-After": {"7"}}, 250 * time.Millisecond},
		{http.Header{"Retry-After": {"soon"}}, 0},
		{http.Header{}, 0},
	} {
		if got := model.RetryAfter(c.header, now); got != c.want {
			t.Errorf("%v: %s, want %s", c.header, got, c.want)
		}
	}
}

// env is an environment for model.Providers.
func env(vars map[string]string) func(string) string {
	return func(k string) string { return vars[k] }
}

func TestUnconfiguredProvidersSayWhatToSet(t *testing.T) {
	ps, err := model.Providers(env(nil))
	if err != nil {
		t.Fatal(err)
	}
	for name, variable := range map[string]string{"openai": "OPENAI_API_KEY", "anthropic": "ANTHROPIC_API_KEY"} {
		p, ok := ps[name]
		if !ok || model.Configured(p) {
			t.Fatalf("%s: present %v, configured %v", name, ok, ok && model.Configured(p))
		}
		_, err := p.Call(context.Background(), model.Request{Model: "x"}, func(string) {})
		var me *model.Error
		if !errors.As(err, &me) || me.Kind != model.BadRequest ||
			!strings.Contains(me.Message, "provider "+name+" is not configured: set "+variable) {
			t.Errorf("%s: %v", name, err)
		}
	}
	if !model.Configured(ps["script"]) {
		t.Error("the scripted model is always there")
	}
}

// TestProvidersFromEnvironment points both providers at local servers: a
// base URL alone (a local server) sends a placeholder key, a key file is
// read, and the configured max tokens reach the request.
func TestProvidersFromEnvironment(t *testing.T) {
	oa := modeltest.New(t, func(modeltest.Request, int) modeltest.Reply {
		return modeltest.Stream(modeltest.OpenAIStream(modeltest.Answer{Text: "hi there"}))
	})
	an := modeltest.New(t, func(modeltest.Request, int) modeltest.Reply {
		return modeltest.Stream(modeltest.AnthropicStream(modeltest.Answer{Text: "hi there"}))
	})
	keyFile := filepath.Join(t.TempDir(), "key")
	if err := os.WriteFile(keyFile, []byte("sk-ant-from-file\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	ps, err := model.Providers(env(map[string]string{
		"OPENAI_BASE_URL":        oa.URL + "/v1",
		"ANTHROPIC_BASE_URL":     an.URL,
		"ANTHROPIC_API_KEY_FILE": keyFile,
		"ANTHROPIC_MAX_TOKENS":   "512",
	}))
	if err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"openai", "anthropic"} {
		resp, err := ps[name].Call(context.Background(), model.Request{TurnID: "t", Step: 1, Kind: events.ModelStep, Model: "m",
			Messages: []events.Message{{Role: events.RoleUser, Content: "hello"}}}, func(string) {})
		if err != nil || resp.Text != "hi there" {
			t.Fatalf("%s: %+v, %v", name, resp, err)
		}
	}
	if got := oa.Requests()[0].Header.Get("Authorization"); got != "Bearer no-key" {
		t.Errorf("openai without a key sent %q", got)
	}
	req := an.Requests()[0]
	if got := req.Header.Get("X-Api-Key"); got != "sk-ant-from-file" {
		t.Errorf("anthropic sent key %q, want the file's", got)
	}
	if got := req.JSON()["max_tokens"]; got != 512.0 {
		t.Errorf("max_tokens %v", got)
	}

	if _, err := model.Providers(env(map[string]string{"OPENAI_API_KEY_FILE": filepath.Join(t.TempDir(), "missing")})); err == nil {
		t.Error("a missing key file was accepted")
	}
	if _, err := model.Providers(env(map[string]string{"OPENAI_BASE_URL": "localhost:11434"})); err == nil {
		t.Error("a base URL without a scheme was accepted")
	}
}

// answer makes one call of provider against a server answering with reply.
func answer(t *testing.T, provider string, req model.Request, reply func(modeltest.Request, int) modeltest.Reply, opts ...model.Option) (model.Response, error) {
	t.Helper()
	p := newProvider(t, provider, modeltest.New(t, reply), opts...)
	if req.TurnID == "" {
		req = model.Request{TurnID: "turn-9", Step: 2, Kind: events.ModelStep, Model: "m", Attempt: 1,
			Messages: []events.Message{{Role: events.RoleUser, Content: "go"}}}
	}
	return p.Call(context.Background(), req, func(string) {})
}

func newProvider(t *testing.T, provider string, srv *modeltest.Server, opts ...model.Option) model.Provider {
	t.Helper()
	var p model.Provider
	var err error
	switch provider {
	case "openai":
		p, err = model.NewOpenAI(append([]model.Option{model.WithBaseURL(srv.URL + "/v1")}, opts...)...)
	default:
		p, err = model.NewAnthropic(append([]model.Option{model.WithBaseURL(srv.URL)}, opts...)...)
	}
	if err != nil {
		t.Fatal(err)
	}
	return p
}

func stream(provider string, a modeltest.Answer) func(modeltest.Request, int) modeltest.Reply {
	return func(modeltest.Request, int) modeltest.Reply {
		if provider == "openai" {
			return modeltest.Stream(modeltest.OpenAIStream(a))
		}
		return modeltest.Stream(modeltest.AnthropicStream(a))
	}
}

// TestCallIDsAreSafe: an id that is missing, too short to be unique beyond
// its turn, or already used in the conversation is replaced by one derived
// from the turn, so no two calls share a job id.
func TestCallIDsAreSafe(t *testing.T) {
	req := model.Request{TurnID: "turn-9", Step: 2, Kind: events.ModelStep, Model: "m", Attempt: 1,
		Messages: []events.Message{{Role: events.RoleUser, Content: "go"},
			{Role: events.RoleAssistant, ToolCalls: []events.ToolCall{{CallID: "call_0123456789abcdef", Name: "echo", Arguments: []byte(`{}`)}}},
			{Role: events.RoleTool, CallID: "call_0123456789abcdef", Content: "ok"}}}
	for _, provider := range []string{"openai", "anthropic"} {
		resp, err := answer(t, provider, req, stream(provider, modeltest.Answer{Calls: []modeltest.Call{
			{ID: "call_0", Name: "echo", Arguments: `{"text":"a"}`},
			{ID: "call_0123456789abcdef", Name: "echo", Arguments: `{"text":"b"}`},
			{ID: "call:bad/id-but-long-enough", Name: "echo", Arguments: `{"text":"c"}`},
			{ID: "call_fedcba9876543210", Name: "echo", Arguments: ``},
		}}))
		if err != nil {
			t.Fatalf("%s: %v", provider, err)
		}
		ids := map[string]bool{"call_0123456789abcdef": true}
		for i, c := range resp.ToolCalls {
			if ids[c.CallID] || c.CallID == "call_0" || strings.ContainsAny(c.CallID, ":/") {
				t.Errorf("%s: call %d kept id %q", provider, i, c.CallID)
			}
			ids[c.CallID] = true
		}
		if last := resp.ToolCalls[3]; last.CallID != "call_fedcba9876543210" || string(last.Arguments) != `{}` {
			t.Errorf("%s: a good id was replaced or empty arguments not made {}: %+v", provider, last)
		}
	}
}

func TestBadArgumentsAreRetried(t *testing.T) {
	for _, provider := range []string{"openai", "anthropic"} {
		_, err := answer(t, provider, model.Request{}, stream(provider, modeltest.Answer{Calls: []modeltest.Call{
			{ID: "call_0123456789abcdef", Name: "echo", Arguments: `{"text": "unterminated`}}}))
		var me *model.Error
		if !errors.As(err, &me) || me.Kind != model.ServerError || !strings.Contains(me.Message, "not a JSON object") {
			t.Errorf("%s: %v", provider, err)
		}
	}
}

// TestErrorInsideStream: a failure the server reports after the stream began
// (Anthropic's overloaded error event, an OpenAI error chunk) is retryable.
func TestErrorInsideStream(t *testing.T) {
	body, err := os.ReadFile(filepath.Join("testdata", "anthropic", "overloaded.sse"))
	if err != nil {
		t.Fatal(err)
	}
	_, err = answer(t, "anthropic", model.Request{}, func(modeltest.Request, int) modeltest.Reply { return modeltest.Stream(body) })
	var me *model.Error
	if !errors.As(err, &me) || me.Kind != model.Unavailable || !strings.Contains(me.Message, "Overloaded") {
		t.Errorf("anthropic: %v", err)
	}
	_, err = answer(t, "openai", model.Request{}, func(modeltest.Request, int) modeltest.Reply {
		return modeltest.Stream([]byte("data: {\"error\":{\"message\":\"The model is overloaded\",\"type\":\"server_error\"}}\n\n"))
	})
	if !errors.As(err, &me) || me.Kind != model.ServerError || !strings.Contains(me.Message, "overloaded") {
		t.Errorf("openai: %v", err)
	}
}

// TestTimeoutAndCancel: an attempt that outlives its timeout is Unavailable
// (retried); one whose caller gives up returns the caller's error, which
// the runner tells from a failure.
func TestTimeoutAndCancel(t *testing.T) {
	hang := func(r modeltest.Request, _ int) modeltest.Reply {
		<-r.Context.Done() // the server answers nothing until the client gives up
		return modeltest.Reply{}
	}
	for _, provider := range []string{"openai", "anthropic"} {
		_, err := answer(t, provider, model.Request{}, hang, model.WithTimeout(50*time.Millisecond))
		var me *model.Error
		if !errors.As(err, &me) || me.Kind != model.Unavailable || !strings.Contains(me.Message, "within 50ms") {
			t.Errorf("%s: timeout gave %v", provider, err)
		}

		srv := modeltest.New(t, hang)
		p := newProvider(t, provider, srv)
		ctx, cancel := context.WithCancel(context.Background())
		called := make(chan error, 1)
		go func() {
			_, err := p.Call(ctx, model.Request{TurnID: "t", Model: "m", Messages: []events.Message{{Role: events.RoleUser, Content: "x"}}}, func(string) {})
			called <- err
		}()
		testkit.WaitFor(t, "the "+provider+" call to reach the server", func() bool { return len(srv.Requests()) > 0 })
		cancel()
		if err := <-called; !errors.Is(err, context.Canceled) {
			t.Errorf("%s: cancel gave %v", provider, err)
		}
	}
}

// TestOpenAIWholeCallsWithoutIndex: servers that send each call whole in one
// chunk without an index (all 0) still give separate calls, and a finish
// reason of stop with calls is reported as tool_calls.
func TestOpenAIWholeCallsWithoutIndex(t *testing.T) {
	sse := `data: {"id":"c","object":"chat.completion.chunk","created":1,"model":"qwen3","choices":[{"index":0,"delta":{"role":"assistant","content":"","tool_calls":[{"id":"call_aaaaaaaaaaaaaaaaaaaa","type":"function","function":{"name":"echo","arguments":"{\"text\":\"a\"}"}}]},"finish_reason":null}]}

data: {"id":"c","object":"chat.completion.chunk","created":1,"model":"qwen3","choices":[{"index":0,"delta":{"tool_calls":[{"id":"call_bbbbbbbbbbbbbbbbbbbb","type":"function","function":{"name":"echo","arguments":"{\"text\":\"b\"}"}}]},"finish_reason":null}]}

data: {"id":"c","object":"chat.completion.chunk","created":1,"model":"qwen3","choices":[{"index":0,"delta":{},"finish_reason":"stop"}]}

data: [DONE]

`
	resp, err := answer(t, "openai", model.Request{}, func(modeltest.Request, int) modeltest.Reply {
		return modeltest.Stream([]byte(sse))
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(resp.ToolCalls) != 2 || string(resp.ToolCalls[0].Arguments) != `{"text":"a"}` ||
		string(resp.ToolCalls[1].Arguments) != `{"text":"b"}` || resp.FinishReason != "tool_calls" {
		t.Errorf("%+v", resp)
	}
}

// TestWrongBaseURLSaysSo: a base URL with /v1 where it does not belong gets
// a 404 whose error says where the request went and what to check.
func TestWrongBaseURLSaysSo(t *testing.T) {
	srv := modeltest.New(t, func(r modeltest.Request, _ int) modeltest.Reply {
		if r.Path != "/v1/messages" {
			return modeltest.Fail(http.StatusNotFound, []byte(`{"type":"error","error":{"type":"not_found_error","message":"Not found"}}`))
		}
		return modeltest.Stream(modeltest.AnthropicStream(modeltest.Answer{Text: "ok"}))
	})
	p, err := model.NewAnthropic(model.WithBaseURL(srv.URL + "/v1"))
	if err != nil {
		t.Fatal(err)
	}
	_, err = p.Call(context.Background(), model.Request{TurnID: "t", Model: "m",
		Messages: []events.Message{{Role: events.RoleUser, Content: "x"}}}, func(string) {})
	var me *model.Error
	if !errors.As(err, &me) || me.Kind != model.BadRequest || !strings.Contains(me.Message, "/v1/v1/messages") ||
		!strings.Contains(me.Message, "ANTHROPIC_BASE_URL does not") {
		t.Errorf("%v", err)
	}
}

// TestAnthropicSendsNoBlankText: the Messages API refuses a text block that
// holds only whitespace ("text content blocks must contain non-whitespace
// text"), a final 400 that would fail every later call of the session. A
// model's "\n\n" before its tool calls, a blank tool output or a blank
// system prompt must therefore not become such a block.
func TestAnthropicSendsNoBlankText(t *testing.T) {
	srv := modeltest.New(t, stream("anthropic", modeltest.Answer{Text: "ok"}))
	req := model.Request{TurnID: "turn-9", Step: 3, Kind: events.ModelStep, Model: "m", Attempt: 1, System: " \n",
		Messages: []events.Message{
			{Role: events.RoleUser, Content: "Echo"},
			{Role: events.RoleAssistant, Content: "\n\n", ToolCalls: []events.ToolCall{
				{CallID: "call_0123456789abcdef", Name: "echo", Arguments: []byte(`{"text":" "}`)}}},
			{Role: events.RoleTool, CallID: "call_0123456789abcdef", Name: "echo", Content: " \n"},
			{Role: events.RoleAssistant, Content: " "},
			{Role: events.RoleUser, Content: "\t"},
			{Role: events.RoleUser, Content: "Again"},
		}}
	if _, err := newProvider(t, "anthropic", srv).Call(context.Background(), req, func(string) {}); err != nil {
		t.Fatal(err)
	}
	body := srv.Requests()[0].JSON()
	var blank []string
	var walk func(path string, v any)
	walk = func(path string, v any) {
		switch v := v.(type) {
		case map[string]any:
			if text, ok := v["text"].(string); ok && v["type"] == "text" && strings.TrimSpace(text) == "" {
				blank = append(blank, path)
			}
			for k, x := range v {
				walk(path+"."+k, x)
			}
		case []any:
			for i, x := range v {
				walk(fmt.Sprintf("%s[%d]", path, i), x)
			}
		}
	}
	walk("", body)
	if len(blank) > 0 {
		t.Errorf("blank text blocks at %v in %s", blank, srv.Requests()[0].Body)
	}
	msgs, _ := body["messages"].([]any)
	roles := ""
	for _, m := range msgs {
		roles += fmt.Sprint(m.(map[string]any)["role"]) + " "
	}
	// The tool call and its result stay; the blank answer and question go,
	// and the user messages around them join.
	if roles != "user assistant user " {
		t.Errorf("roles %q in %s", roles, srv.Requests()[0].Body)
	}
}

// TestOpenAIFailedFinishIsAFailedAttempt: OpenAI-compatible servers end an
// answer they could not finish with finish_reason "error" (OpenRouter,
// vLLM) or "abort" (vLLM, when the engine drops the request): the text so
// far is cut short and must not pass for the whole answer.
func TestOpenAIFailedFinishIsAFailedAttempt(t *testing.T) {
	for _, reason := range []string{"error", "abort"} {
		sse := `data: {"id":"c","object":"chat.completion.chunk","created":1,"model":"m","choices":[{"index":0,"delta":{"role":"assistant","content":"The answer is"},"finish_reason":null}]}

data: {"id":"c","object":"chat.completion.chunk","created":1,"model":"m","choices":[{"index":0,"delta":{},"finish_reason":"` + reason + `"}]}

data: [DONE]

`
		resp, err := answer(t, "openai", model.Request{}, func(modeltest.Request, int) modeltest.Reply {
			return modeltest.Stream([]byte(sse))
		})
		var me *model.Error
		if !errors.As(err, &me) || !me.Retryable() || !strings.Contains(me.Message, reason) {
			t.Errorf("finish_reason %s: %+v, %v", reason, resp, err)
		}
	}
}

// TestConfigurationErrorsShowNoKey: a key put where a file name or a URL
// belongs (ANTHROPIC_API_KEY_FILE=sk-…, a scheme-less base URL with a
// password) makes a configuration error, which the binaries log: the error
// must not repeat the key.
func TestConfigurationErrorsShowNoKey(t *testing.T) {
	for _, vars := range []map[string]string{
		{"ANTHROPIC_API_KEY_FILE": "sk-ant-api03-secret"},
		{"OPENAI_BASE_URL": "user:sk-secret@proxy.example.com/v1"},
	} {
		_, err := model.Providers(env(vars))
		if err == nil {
			t.Fatalf("%v accepted", vars)
		}
		if strings.Contains(err.Error(), "secret") {
			t.Errorf("the error shows the key: %v", err)
		}
	}
}
