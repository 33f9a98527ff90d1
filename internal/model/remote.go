package model

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net/http"
	"net/url"
	"os"
	"regexp"
	"strconv"
	"strings"
	"time"

	"github.com/jetloop/jetloop/internal/events"
)

// DefaultTimeout bounds one attempt of a remote model call, from the request
// to the last byte of the stream, when no WithTimeout says otherwise.
const DefaultTimeout = 10 * time.Minute

// DefaultAnthropicMaxTokens is the max_tokens of an Anthropic request, which
// the Messages API requires, when no WithMaxTokens says otherwise.
const DefaultAnthropicMaxTokens = 4096

// noKey is sent as the key of a server that needs none (a local Ollama, vLLM
// or llama.cpp server), because the SDKs want one.
const noKey = "no-key"

// config is what the options of a remote provider set.
type config struct {
	baseURL   string
	apiKey    string
	maxTokens int64
	timeout   time.Duration
	client    *http.Client
	// secrets are what the provider's errors must not show besides its
	// own key; scrub hides them all.
	secrets []string
	scrub   *scrubber
}

// Option configures a remote provider (OpenAI or Anthropic).
type Option func(*config) error

// WithBaseURL sets the API's base URL: for OpenAI-compatible servers it
// includes /v1 ("http://localhost:11434/v1"), for Anthropic it does not.
func WithBaseURL(url string) Option {
	return func(c *config) error {
		if !strings.HasPrefix(url, "http://") && !strings.HasPrefix(url, "https://") {
			shown := url
			if at := strings.LastIndex(shown, "@"); at >= 0 {
				shown = "…" + shown[at:] // what precedes @ may be a password
			}
			return fmt.Errorf("model: base URL %q: want http:// or https://", shown)
		}
		c.baseURL = url
		return nil
	}
}

// WithAPIKey sets the key sent with every request. It is never logged.
func WithAPIKey(key string) Option {
	return func(c *config) error {
		c.apiKey = strings.TrimSpace(key)
		return nil
	}
}

// WithSecrets names more strings the provider's errors must never show,
// such as the keys of the other providers: a server that echoes what it was
// sent could otherwise put them in an event every client reads. The
// provider's own key (WithAPIKey), a password in its base URL and anything
// shaped like a bearer token or a key header are always hidden.
func WithSecrets(secrets ...string) Option {
	return func(c *config) error {
		c.secrets = append(c.secrets, secrets...)
		return nil
	}
}

// WithMaxTokens caps the tokens of one answer: max_tokens for Anthropic
// (default DefaultAnthropicMaxTokens), max_completion_tokens for OpenAI
// (default: the server's).
func WithMaxTokens(n int) Option {
	return func(c *config) error {
		if n < 1 {
			return fmt.Errorf("model: max tokens must be ≥ 1, got %d", n)
		}
		c.maxTokens = int64(n)
		return nil
	}
}

// WithTimeout bounds one attempt of a call (default DefaultTimeout). An
// attempt that runs out of time fails as Unavailable and is retried.
func WithTimeout(d time.Duration) Option {
	return func(c *config) error {
		if d <= 0 {
			return fmt.Errorf("model: timeout must be > 0, got %s", d)
		}
		c.timeout = d
		return nil
	}
}

// WithHTTPClient sets the HTTP client the SDK uses.
func WithHTTPClient(client *http.Client) Option {
	return func(c *config) error {
		c.client = client
		return nil
	}
}

func newConfig(opts []Option) (config, error) {
	c := config{timeout: DefaultTimeout}
	for _, opt := range opts {
		if err := opt(&c); err != nil {
			return config{}, err
		}
	}
	if c.apiKey == "" {
		c.apiKey = noKey
	}
	secrets := append([]string{c.apiKey}, c.secrets...)
	if u, err := url.Parse(c.baseURL); err == nil && u.User != nil {
		if pw, ok := u.User.Password(); ok {
			secrets = append(secrets, pw)
		}
	}
	c.scrub = newScrubber(secrets...)
	return c, nil
}

// Providers builds every provider jetloop knows from the environment read by
// env (os.Getenv in the binaries): "script" always; "openai" from
// OPENAI_BASE_URL (including /v1) and OPENAI_API_KEY or OPENAI_API_KEY_FILE;
// "anthropic" from ANTHROPIC_BASE_URL (without /v1) and ANTHROPIC_API_KEY or
// ANTHROPIC_API_KEY_FILE; OPENAI_MAX_TOKENS and ANTHROPIC_MAX_TOKENS cap an
// answer's tokens. A provider with neither a key nor a base URL is not
// configured: it is there, and every call to it fails at once saying which
// variable to set. A base URL without a key is a local server that needs
// none. opts apply to both remote providers.
//
// Every provider's errors are scrubbed of every provider's key, as a
// misrouted key (an OpenAI-compatible proxy in front of both) is echoed by
// the server that got it.
func Providers(env func(string) string, opts ...Option) (map[string]Provider, error) {
	ps := map[string]Provider{"script": Scripted{}}
	remotes := []struct {
		name   string
		prefix string
		make   func(...Option) (Provider, error)
		key    string
	}{
		{name: "openai", prefix: "OPENAI", make: func(o ...Option) (Provider, error) { return NewOpenAI(o...) }},
		{name: "anthropic", prefix: "ANTHROPIC", make: func(o ...Option) (Provider, error) { return NewAnthropic(o...) }},
	}
	var keys []string
	for i, r := range remotes {
		key := env(r.prefix + "_API_KEY")
		if file := strings.TrimSpace(env(r.prefix + "_API_KEY_FILE")); file != "" && key == "" {
			data, err := readKeyFile(file)
			if err != nil {
				return nil, fmt.Errorf("model: %s_API_KEY_FILE: %w", r.prefix, err)
			}
			key = data
		}
		remotes[i].key = key
		keys = append(keys, key)
	}
	for _, r := range remotes {
		base := strings.TrimSpace(env(r.prefix + "_BASE_URL"))
		key := r.key
		if base == "" && strings.TrimSpace(key) == "" {
			ps[r.name] = unconfigured{provider: r.name, variable: r.prefix + "_API_KEY", base: r.prefix + "_BASE_URL"}
			continue
		}
		o := append([]Option{WithAPIKey(key), WithSecrets(keys...)}, opts...)
		if base != "" {
			o = append(o, WithBaseURL(base))
		}
		if s := strings.TrimSpace(env(r.prefix + "_MAX_TOKENS")); s != "" {
			n, err := strconv.Atoi(s)
			if err != nil {
				return nil, fmt.Errorf("model: %s_MAX_TOKENS: %w", r.prefix, err)
			}
			o = append(o, WithMaxTokens(n))
		}
		p, err := r.make(o...)
		if err != nil {
			return nil, fmt.Errorf("model: %s: %w", r.name, err)
		}
		ps[r.name] = p
	}
	return ps, nil
}

// Configured reports whether p can make calls: false for a provider that
// Providers found no configuration for.
func Configured(p Provider) bool {
	_, ok := p.(unconfigured)
	return !ok
}

// readKeyFile reads a key kept in a file (a mounted secret), without the
// line break editors leave at its end.
func readKeyFile(path string) (string, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		// Not the path: a key set where its file's name belongs would be
		// logged with the error.
		var pe *fs.PathError
		if errors.As(err, &pe) {
			err = pe.Err
		}
		return "", fmt.Errorf("cannot read the file it names: %w", err)
	}
	key := strings.TrimSpace(string(data))
	if key == "" {
		return "", fmt.Errorf("%s is empty", path)
	}
	return key, nil
}

// unconfigured stands for a provider without configuration, so that a turn
// naming it fails with a message that says what to do.
type unconfigured struct{ provider, variable, base string }

func (u unconfigured) Call(context.Context, Request, func(string)) (Response, error) {
	return Response{}, &Error{Kind: BadRequest, Message: fmt.Sprintf(
		"provider %s is not configured: set %s (or %s for a server that needs no key)", u.provider, u.variable, u.base)}
}

// finishReason maps a provider's reason to the vocabulary of the scripted
// model: stop, tool_calls, length, content_filter. An answer with tool calls
// is tool_calls whatever the server said, as some OpenAI-compatible servers
// say stop.
func finishReason(reason string, calls int) string {
	switch reason {
	case "end_turn", "stop_sequence", "stop", "pause_turn":
		reason = "stop"
	case "tool_use", "tool_calls", "function_call":
		reason = "tool_calls"
	case "max_tokens", "length", "model_context_window_exceeded":
		reason = "length"
	case "refusal", "content_filter":
		reason = "content_filter"
	}
	if calls > 0 && reason == "stop" {
		return "tool_calls"
	}
	return reason
}

var validID = regexp.MustCompile(`^[A-Za-z0-9_-]{1,64}$`)

// callIDs gives each call of an answer an id jetloop can use: the provider's
// own when it is a valid id, long enough to be unique beyond this turn (it
// names the call's job, deduplicated across turns) and not used before in
// the conversation; else one derived from the turn, the step, the attempt
// and the call's position, as some servers send none or number calls from 0
// in every answer.
func callIDs(req Request, calls []events.ToolCall) {
	seen := map[string]bool{}
	for _, m := range req.Messages {
		for _, c := range m.ToolCalls {
			seen[c.CallID] = true
		}
	}
	for i := range calls {
		id := calls[i].CallID
		if !validID.MatchString(id) || len(id) < 16 || seen[id] {
			id = callID(req.TurnID, req.Step, max(req.Attempt, 1)-1, i)
		}
		seen[id] = true
		calls[i].CallID = id
	}
}

// arguments checks a call's assembled arguments: a JSON object, or nothing
// (a call without arguments).
func arguments(raw string, name, finish string) (json.RawMessage, error) {
	s := strings.TrimSpace(raw)
	if s == "" {
		return json.RawMessage(`{}`), nil
	}
	var obj map[string]json.RawMessage
	if err := json.Unmarshal([]byte(s), &obj); err != nil || obj == nil {
		if finish == "length" {
			return nil, &Error{Kind: BadRequest, Message: fmt.Sprintf(
				"the answer reached its token limit inside the arguments of tool call %q; raise the max tokens", name)}
		}
		// A sampled answer may come out well formed next time.
		return nil, &Error{Kind: ServerError, Message: fmt.Sprintf(
			"the arguments of tool call %q are not a JSON object: %.200q", name, s)}
	}
	return json.RawMessage(s), nil
}

// schemaMap decodes a tool's parameters for the SDKs, which want a map; a
// tool without parameters takes an empty object.
func schemaMap(params json.RawMessage) map[string]any {
	m := map[string]any{}
	if len(params) > 0 {
		_ = json.Unmarshal(params, &m) // a served tool's parameters passed the tool_info schema
	}
	if len(m) == 0 {
		m = map[string]any{"type": "object", "properties": map[string]any{}}
	}
	return m
}

// failure turns what went wrong in one attempt into the error the runner
// acts on. ctx is the caller's: when it has ended, its error is returned as
// it is, because the runner tells an abort from a stop by it. res is the
// HTTP response the SDK got, nil when there was none.
func failure(ctx context.Context, provider string, timeout time.Duration, res *http.Response, err error) error {
	if ctx.Err() != nil {
		return ctx.Err()
	}
	if res != nil && res.StatusCode >= 400 {
		return statusError(provider, res)
	}
	if errors.Is(err, context.DeadlineExceeded) {
		return &Error{Kind: Unavailable, Message: fmt.Sprintf("%s: no complete answer within %s", provider, timeout)}
	}
	// A refused connection, a reset, a stream cut off mid-way: the same
	// request may well succeed on another attempt.
	return &Error{Kind: Unavailable, Message: fmt.Sprintf("%s: %v", provider, err)}
}

// statusError classifies an HTTP error answer: 429 is a rate limit, 408 a
// timeout, 409 and 5xx server trouble (all retried, after Retry-After when
// the server names one); every other status is final.
func statusError(provider string, res *http.Response) *Error {
	msg := fmt.Sprintf("%s: %d %s: %s", provider, res.StatusCode, http.StatusText(res.StatusCode), errorMessage(res))
	if res.StatusCode == http.StatusNotFound && res.Request != nil {
		// Most often a base URL with /v1 where it does not belong, or
		// without it where it does; the model's name is the other cause.
		msg += fmt.Sprintf(" (POST %s: OPENAI_BASE_URL includes /v1, ANTHROPIC_BASE_URL does not; is the model name right?)", res.Request.URL.Redacted())
	}
	e := &Error{Kind: BadRequest, Message: msg}
	switch code := res.StatusCode; {
	case code == http.StatusTooManyRequests:
		e.Kind = RateLimited
	case code == http.StatusRequestTimeout:
		e.Kind = Unavailable
	case code == http.StatusConflict || code >= 500:
		e.Kind = ServerError
	}
	if e.Retryable() {
		e.RetryAfter = RetryAfter(res.Header, time.Now())
	}
	return e
}

// errorMessage is the provider's own words from an error answer, in any of
// the shapes OpenAI, Anthropic, vLLM and Ollama use.
func errorMessage(res *http.Response) string {
	if res.Body == nil {
		return "no message"
	}
	data, _ := io.ReadAll(io.LimitReader(res.Body, 64<<10))
	var body struct {
		Error   json.RawMessage `json:"error"`
		Message string          `json:"message"`
		Detail  any             `json:"detail"`
	}
	if json.Unmarshal(data, &body) == nil {
		var nested struct {
			Message string `json:"message"`
		}
		var plain string
		switch {
		case json.Unmarshal(body.Error, &nested) == nil && nested.Message != "":
			return nested.Message
		case json.Unmarshal(body.Error, &plain) == nil && plain != "":
			return plain
		case body.Message != "":
			return body.Message
		case body.Detail != nil:
			return fmt.Sprint(body.Detail)
		}
	}
	text := strings.TrimSpace(string(data))
	if text == "" {
		return "no message"
	}
	if len(text) > 500 {
		text = text[:500] + "…"
	}
	return text
}

// RetryAfter reads the wait a server asks for: retry-after-ms (OpenAI's
// milliseconds), else Retry-After in seconds or as an HTTP date. It is 0 when
// the server names none.
func RetryAfter(h http.Header, now time.Time) time.Duration {
	if v := strings.TrimSpace(h.Get("Retry-After-Ms")); v != "" {
		if ms, err := strconv.ParseFloat(v, 64); err == nil && ms > 0 {
			return time.Duration(ms * float64(time.Millisecond))
		}
	}
	v := strings.TrimSpace(h.Get("Retry-After"))
	if v == "" {
		return 0
	}
	if s, err := strconv.ParseFloat(v, 64); err == nil {
		return max(time.Duration(s*float64(time.Second)), 0)
	}
	if t, err := http.ParseTime(v); err == nil {
		return max(t.Sub(now), 0)
	}
	return 0
}
