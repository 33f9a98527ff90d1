package model_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"net/http"
	"os"
	"path/filepath"
	"reflect"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/jetloop/jetloop/internal/events"
	"github.com/jetloop/jetloop/internal/model"
	"github.com/jetloop/jetloop/internal/model/modeltest"
)

var update = flag.Bool("update", false, "rewrite the golden request bodies in testdata")

// target is one provider under the conformance suite.
type target struct {
	name string
	// remote providers talk HTTP to a modeltest server; the scripted model
	// answers from the case's script.
	remote bool
	// start makes the provider, talking to srv when remote.
	start func(t *testing.T, srv *modeltest.Server) model.Provider
	// path is where a remote provider posts its requests.
	path string
}

var targets = []target{
	{name: "script", start: func(*testing.T, *modeltest.Server) model.Provider { return model.Scripted{} }},
	{name: "openai", remote: true, path: "/v1/chat/completions",
		start: func(t *testing.T, srv *modeltest.Server) model.Provider {
			p, err := model.NewOpenAI(model.WithBaseURL(srv.URL+"/v1"), model.WithAPIKey("sk-test-key"), model.WithTimeout(20*time.Second))
			if err != nil {
				t.Fatal(err)
			}
			return p
		}},
	{name: "anthropic", remote: true, path: "/v1/messages",
		start: func(t *testing.T, srv *modeltest.Server) model.Provider {
			p, err := model.NewAnthropic(model.WithBaseURL(srv.URL), model.WithAPIKey("sk-ant-test-key"), model.WithTimeout(20*time.Second))
			if err != nil {
				t.Fatal(err)
			}
			return p
		}},
}

// conformanceCase is one behaviour every provider shows alike. A remote
// provider's server replays testdata/<provider>/<fixture> byte for byte; the
// scripted model answers with script.
type conformanceCase struct {
	name    string
	fixture string
	status  int      // of an error answer, whose body is the fixture
	header  []string // of an error answer: name, value, …
	drop    bool     // cut the connection after the fixture
	script  string
	kind    events.ModelKind

	want Response
	// wantErr is the kind of a failed call; wantRetryAfter and wantMessage
	// are checked for remote providers (a script names no wait and speaks
	// for no server).
	wantErr        model.ErrorKind
	wantRetryAfter time.Duration
	wantMessage    string
	// usage is what a remote provider reports; the scripted model
	// estimates, so only a non-zero count is asked of it.
	usage events.Usage
	// deltas is how many text deltas a remote provider's stream holds.
	deltas int
}

// Response is what a successful case answers, call ids aside: a remote
// provider keeps its server's ids (ids), the scripted model makes its own.
type Response struct {
	text   string
	calls  []wantCall
	finish string
}

type wantCall struct{ id, name, args string }

var cases = []conformanceCase{
	{name: "plain text", fixture: "text.sse",
		script: `{"responses": [{"text": "Hello, world."}]}`,
		want:   Response{text: "Hello, world.", finish: "stop"}, usage: events.Usage{InputTokens: 21, OutputTokens: 4}, deltas: 4},
	{name: "usage chunk", fixture: "usage.sse",
		script: `{"responses": [{"text": "ok"}]}`,
		want:   Response{text: "ok", finish: "stop"}, usage: events.Usage{InputTokens: 1234, OutputTokens: 56}, deltas: 1},
	{name: "one tool call", fixture: "tool_call.sse",
		script: `{"responses": [{"tool_calls": [{"name": "read_file", "arguments": {"path": "main.go"}}]}]}`,
		want: Response{finish: "tool_calls", calls: []wantCall{
			{id: "call_DdmO9pD3xa9XTPNJ32zg2hcA|toolu_01T1x1fJ34qAmk2tNTrN7Up6", name: "read_file", args: `{"path":"main.go"}`}}},
		usage: events.Usage{InputTokens: 80, OutputTokens: 17}},
	{name: "parallel tool calls", fixture: "parallel_calls.sse",
		script: `{"responses": [{"text": "Reading both.", "tool_calls": [
			{"name": "read_file", "arguments": {"path": "main.go"}}, {"name": "list_dir", "arguments": {"path": "."}}]}]}`,
		want: Response{text: "Reading both.", finish: "tool_calls", calls: []wantCall{
			{id: "call_8DLWvHuxTtNU9Y8aRklBb2Ru|toolu_01A09q90qw90lq917835lq9", name: "read_file", args: `{"path": "main.go"}`},
			{id: "call_q2Gx1iDmrzXY5J7rL4s0Fz7N|toolu_01B7sJ3kRz9Ff8tQ2mWc5hXn", name: "list_dir", args: `{"path": "."}`}}},
		usage: events.Usage{InputTokens: 95, OutputTokens: 40}, deltas: 3},
	{name: "arguments split across many chunks", fixture: "split_arguments.sse",
		script: `{"responses": [{"tool_calls": [{"name": "read_file", "arguments": {"path": "internal/model/openai.go", "offset": 10, "limit": 20}}]}]}`,
		want: Response{finish: "tool_calls", calls: []wantCall{
			{id: "call_Zk3nW0bP5sQ8vT1xY4aC7dEf|toolu_01Zk3nW0bP5sQ8vT1xY4aC7d", name: "read_file",
				args: `{"path":"internal/model/openai.go","offset":10,"limit":20}`}}},
		usage: events.Usage{InputTokens: 80, OutputTokens: 30}},
	{name: "429 with Retry-After", fixture: "error_429.json", status: 429, header: []string{"Retry-After", "7"},
		script:  `{"responses": [{"error": "rate_limited"}]}`,
		wantErr: model.RateLimited, wantRetryAfter: 7 * time.Second, wantMessage: "rate limit"},
	{name: "500", fixture: "error_500.json", status: 500,
		script:  `{"responses": [{"error": "server_error"}]}`,
		wantErr: model.ServerError, wantMessage: "rror"},
	{name: "400", fixture: "error_400.json", status: 400,
		script:  `{"responses": [{"error": "bad_request"}]}`,
		wantErr: model.BadRequest, wantMessage: "tool_"},
	{name: "connection dropped mid-stream", fixture: "dropped.sse", drop: true,
		wantErr: model.Unavailable, wantMessage: "unexpected eof"},
	{name: "stream ended without a finish", fixture: "unfinished.sse",
		wantErr: model.Unavailable, wantMessage: "before the answer was finished"},
	{name: "token limit", fixture: "length.sse",
		want: Response{text: "The answer is cut", finish: "length"}, usage: events.Usage{InputTokens: 10, OutputTokens: 4}, deltas: 1},
}

// TestConformance runs every case against every provider.
func TestConformance(t *testing.T) {
	for _, tg := range targets {
		for _, c := range cases {
			t.Run(tg.name+"/"+c.name, func(t *testing.T) {
				if !tg.remote && c.script == "" {
					// A script has no connection to cut, no unfinished stream and
					// no token limit; the runner's cancelled context stands for a
					// cut in the runtime's tests.
					t.Skip("no scripted equivalent: the scripted model has no transport")
				}
				runCase(t, tg, c)
			})
		}
	}
}

func runCase(t *testing.T, tg target, c conformanceCase) {
	var srv *modeltest.Server
	req := model.Request{TurnID: "turn-1", Step: 1, Kind: events.ModelStep, Model: "test-model",
		System: "You are terse.", Attempt: 1,
		Messages: []events.Message{{Role: events.RoleUser, Content: "Look at main.go"}},
		Tools:    []events.ToolSpec{readFile, listDir}}
	if tg.remote {
		body, err := os.ReadFile(filepath.Join("testdata", tg.name, c.fixture))
		if err != nil {
			t.Fatal(err)
		}
		srv = modeltest.New(t, func(modeltest.Request, int) modeltest.Reply {
			if c.status != 0 {
				return modeltest.Fail(c.status, body, c.header...)
			}
			r := modeltest.Stream(body)
			r.Drop = c.drop
			return r
		})
	} else {
		sc, err := model.ParseScript([]byte(c.script))
		if err != nil {
			t.Fatal(err)
		}
		req.Script = sc
	}
	p := tg.start(t, srv)
	var deltas []string
	resp, err := p.Call(context.Background(), req, func(d string) { deltas = append(deltas, d) })

	if tg.remote {
		reqs := srv.Requests()
		if len(reqs) != 1 {
			t.Fatalf("%d requests, want 1: a provider must not retry by itself", len(reqs))
		}
		if reqs[0].Method != http.MethodPost || reqs[0].Path != tg.path {
			t.Errorf("request %s %s, want POST %s", reqs[0].Method, reqs[0].Path, tg.path)
		}
	}
	if c.wantErr != "" {
		var me *model.Error
		if !errors.As(err, &me) {
			t.Fatalf("error %v (%T), want a *model.Error of kind %s; response %+v", err, err, c.wantErr, resp)
		}
		if me.Kind != c.wantErr {
			t.Fatalf("error kind %s (%v), want %s", me.Kind, me, c.wantErr)
		}
		if !reflect.DeepEqual(resp, model.Response{}) {
			t.Errorf("a failed call answered %+v: a cut answer must never pass for a whole one", resp)
		}
		if tg.remote {
			if me.RetryAfter != c.wantRetryAfter {
				t.Errorf("retry after %s, want %s", me.RetryAfter, c.wantRetryAfter)
			}
			if !strings.Contains(strings.ToLower(me.Message), c.wantMessage) || !strings.Contains(me.Message, tg.name) {
				t.Errorf("message %q should name %s and hold the provider's words %q", me.Message, tg.name, c.wantMessage)
			}
			if strings.Contains(me.Error(), "test-key") {
				t.Errorf("the error shows the key: %v", me)
			}
		}
		return
	}
	if err != nil {
		t.Fatalf("call failed: %v", err)
	}
	if resp.Text != c.want.text || resp.FinishReason != c.want.finish {
		t.Errorf("text %q finish %q, want %q %q", resp.Text, resp.FinishReason, c.want.text, c.want.finish)
	}
	if got := strings.Join(deltas, ""); got != resp.Text {
		t.Errorf("streamed %q, answered %q", got, resp.Text)
	}
	if tg.remote && len(deltas) != c.deltas {
		t.Errorf("streamed %d deltas, want %d: text goes out as it arrives", len(deltas), c.deltas)
	}
	if len(resp.ToolCalls) != len(c.want.calls) {
		t.Fatalf("tool calls %+v, want %+v", resp.ToolCalls, c.want.calls)
	}
	ids := map[string]bool{}
	for i, got := range resp.ToolCalls {
		want := c.want.calls[i]
		if got.Name != want.name || !sameJSON(got.Arguments, []byte(want.args)) {
			t.Errorf("call %d: %s %s, want %s %s", i, got.Name, got.Arguments, want.name, want.args)
		}
		if !regexp.MustCompile(`^[A-Za-z0-9_-]{1,64}$`).MatchString(got.CallID) || ids[got.CallID] {
			t.Errorf("call %d: id %q is not a valid, unique id", i, got.CallID)
		}
		ids[got.CallID] = true
		if tg.remote && !strings.Contains(want.id, got.CallID) {
			t.Errorf("call %d: id %q, want the server's (%s)", i, got.CallID, want.id)
		}
	}
	switch {
	case tg.remote && resp.Usage != c.usage:
		t.Errorf("usage %+v, want %+v", resp.Usage, c.usage)
	case !tg.remote && (resp.Usage.InputTokens == 0 || resp.Usage.OutputTokens == 0):
		t.Errorf("usage %+v, want counts", resp.Usage)
	}
}

var (
	readFile = events.ToolSpec{Name: "read_file", Description: "Reads a file.",
		Parameters: json.RawMessage(`{"type":"object","properties":{"path":{"type":"string"},"offset":{"type":"integer"}},"required":["path"],"additionalProperties":false}`)}
	listDir = events.ToolSpec{Name: "list_dir", Description: "Lists a directory.",
		Parameters: json.RawMessage(`{"type":"object","properties":{"path":{"type":"string"}},"required":["path"]}`)}
)

// conversation is a session's worth of messages: a step with two calls, one
// of which failed, an answer, and a new question.
var conversation = []events.Message{
	{Role: events.RoleUser, Content: "Look at main.go and the directory"},
	{Role: events.RoleAssistant, Content: "Reading both.", ToolCalls: []events.ToolCall{
		{CallID: "call_aaaaaaaaaaaaaaaa1", Name: "read_file", Arguments: json.RawMessage(`{"path":"main.go"}`)},
		{CallID: "call_bbbbbbbbbbbbbbbb2", Name: "list_dir", Arguments: json.RawMessage(`{"path":"nope"}`)}}},
	{Role: events.RoleTool, CallID: "call_aaaaaaaaaaaaaaaa1", Name: "read_file", Content: "package main"},
	{Role: events.RoleTool, CallID: "call_bbbbbbbbbbbbbbbb2", Name: "list_dir", Content: "no such directory", IsError: true},
	{Role: events.RoleAssistant, ToolCalls: []events.ToolCall{
		{CallID: "call_cccccccccccccccc3", Name: "list_dir", Arguments: json.RawMessage(`{"path":"."}`)}}},
	{Role: events.RoleTool, CallID: "call_cccccccccccccccc3", Name: "list_dir", Content: ""},
	{Role: events.RoleAssistant, Content: "main.go holds package main."},
	{Role: events.RoleUser, Content: "And now?"},
}

// TestRequestBodies checks what each remote provider sends, against golden
// request bodies: a step call with the conversation and its tools, a summary
// call with no tools and the instruction last, and a text-only call.
func TestRequestBodies(t *testing.T) {
	calls := []struct {
		name string
		req  model.Request
	}{
		{"step", model.Request{Kind: events.ModelStep, Tools: []events.ToolSpec{readFile, listDir}}},
		{"summary", model.Request{Kind: events.ModelSummary, Tools: []events.ToolSpec{readFile, listDir},
			Instruction: "You cannot call tools any more: the turn has stopped (Step limit reached (2 steps)). Summarize."}},
		{"text_only", model.Request{Kind: events.ModelStep}},
	}
	for _, tg := range targets {
		if !tg.remote {
			continue
		}
		for _, c := range calls {
			t.Run(tg.name+"/"+c.name, func(t *testing.T) {
				body, _ := os.ReadFile(filepath.Join("testdata", tg.name, "text.sse"))
				srv := modeltest.New(t, func(modeltest.Request, int) modeltest.Reply { return modeltest.Stream(body) })
				req := c.req
				req.TurnID, req.Step, req.Attempt, req.Model = "turn-1", 3, 1, "test-model"
				req.System, req.Messages = "You are terse.", conversation
				if _, err := tg.start(t, srv).Call(context.Background(), req, func(string) {}); err != nil {
					t.Fatal(err)
				}
				got := srv.Requests()[0]
				checkHeaders(t, tg.name, got.Header)
				golden(t, filepath.Join("testdata", tg.name, "request_"+c.name+".json"), got.Body)
				m := got.JSON()
				_, hasTools := m["tools"]
				if hasTools != (c.name == "step") {
					t.Errorf("tools offered: %v, want %v", hasTools, c.name == "step")
				}
				if m["stream"] != true {
					t.Errorf("stream = %v", m["stream"])
				}
				if c.name == "summary" && !strings.Contains(string(got.Body), "You cannot call tools any more") {
					t.Error("the summary call lacks its instruction")
				}
			})
		}
	}
}

func checkHeaders(t *testing.T, provider string, h http.Header) {
	t.Helper()
	switch provider {
	case "openai":
		if h.Get("Authorization") != "Bearer sk-test-key" {
			t.Errorf("authorization %q", h.Get("Authorization"))
		}
	case "anthropic":
		if h.Get("X-Api-Key") != "sk-ant-test-key" || h.Get("Anthropic-Version") == "" {
			t.Errorf("x-api-key %q, anthropic-version %q", h.Get("X-Api-Key"), h.Get("Anthropic-Version"))
		}
	}
}

// golden compares a JSON body with a file, ignoring formatting; -update
// rewrites the file.
func golden(t *testing.T, path string, got []byte) {
	t.Helper()
	var pretty bytes.Buffer
	if err := json.Indent(&pretty, got, "", "  "); err != nil {
		t.Fatalf("the body is not JSON: %v\n%s", err, got)
	}
	pretty.WriteByte('\n')
	if *update {
		if err := os.WriteFile(path, pretty.Bytes(), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("%v (run with -update to write it)", err)
	}
	if !sameJSON(got, want) {
		t.Errorf("request body differs from %s:\n%s", path, pretty.Bytes())
	}
}

func sameJSON(a, b []byte) bool {
	var x, y any
	if json.Unmarshal(a, &x) != nil || json.Unmarshal(b, &y) != nil {
		return false
	}
	return reflect.DeepEqual(x, y)
}
