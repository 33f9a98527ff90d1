// Package modeltest runs local HTTP servers that answer like model providers,
// for the tests of the model package and of the runtime: a server records
// every request and answers with bytes chosen by the test, as a provider
// would send them (a server-sent-event stream, an error, a stream cut off).
package modeltest

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
)

// Request is one request a server received.
type Request struct {
	// Context ends when the client goes away.
	Context context.Context
	Method  string
	Path    string
	Header  http.Header
	Body    []byte
}

// JSON decodes the request's body.
func (r Request) JSON() map[string]any {
	var m map[string]any
	_ = json.Unmarshal(r.Body, &m)
	return m
}

// Reply is what a server sends back.
type Reply struct {
	// Status defaults to 200.
	Status int
	Header http.Header
	// Body is sent as it is, flushed as it goes.
	Body []byte
	// Drop cuts the connection after Body, without ending the response
	// properly, as a crashed server or a broken network does.
	Drop bool
}

// Stream is a 200 reply carrying a server-sent-event stream.
func Stream(body []byte) Reply {
	return Reply{Header: http.Header{"Content-Type": {"text/event-stream"}}, Body: body}
}

// Fail is an error reply with a JSON body and extra headers ("Retry-After",
// "7").
func Fail(status int, body []byte, header ...string) Reply {
	h := http.Header{"Content-Type": {"application/json"}}
	for i := 0; i+1 < len(header); i += 2 {
		h.Set(header[i], header[i+1])
	}
	return Reply{Status: status, Header: h, Body: body}
}

// Server is a local provider. Its URL has no path: an OpenAI-compatible base
// URL is URL+"/v1", an Anthropic one URL itself.
type Server struct {
	*httptest.Server
	mu       sync.Mutex
	requests []Request
}

// New starts a server that answers each request with answer(request, n),
// n counting requests from 1. It stops when the test ends.
func New(t testing.TB, answer func(r Request, n int) Reply) *Server {
	t.Helper()
	s := &Server{}
	s.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		req := Request{Context: r.Context(), Method: r.Method, Path: r.URL.Path, Header: r.Header.Clone(), Body: body}
		s.mu.Lock()
		s.requests = append(s.requests, req)
		n := len(s.requests)
		s.mu.Unlock()
		reply := answer(req, n)
		for k, v := range reply.Header {
			w.Header()[k] = v
		}
		w.WriteHeader(max(reply.Status, http.StatusOK))
		_, _ = w.Write(reply.Body)
		if f, ok := w.(http.Flusher); ok {
			f.Flush()
		}
		if reply.Drop {
			// net/http closes the connection without the final chunk.
			panic(http.ErrAbortHandler)
		}
	}))
	t.Cleanup(s.Close)
	return s
}

// Requests returns the requests received so far.
func (s *Server) Requests() []Request {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]Request(nil), s.requests...)
}

// Call is one tool call of an Answer.
type Call struct {
	ID, Name, Arguments string
}

// Answer is a model's answer, written by OpenAIStream or AnthropicStream in
// the provider's streaming format.
type Answer struct {
	Text  string
	Calls []Call
	// Input and Output are the usage the stream reports.
	Input, Output int
}

// OpenAIStream writes an answer as a chat completions stream: text a word a
// chunk, each call's arguments in pieces of five bytes, the finish reason,
// a usage chunk and [DONE].
func OpenAIStream(a Answer) []byte {
	var b strings.Builder
	chunk := func(choices any, usage any) {
		data, _ := json.Marshal(map[string]any{"id": "chatcmpl-test", "object": "chat.completion.chunk",
			"created": 1763900000, "model": "test-model", "choices": choices, "usage": usage})
		fmt.Fprintf(&b, "data: %s\n\n", data)
	}
	delta := func(d map[string]any, finish any) []any {
		return []any{map[string]any{"index": 0, "delta": d, "finish_reason": finish}}
	}
	chunk(delta(map[string]any{"role": "assistant", "content": ""}, nil), nil)
	for _, w := range words(a.Text) {
		chunk(delta(map[string]any{"content": w}, nil), nil)
	}
	for i, c := range a.Calls {
		chunk(delta(map[string]any{"tool_calls": []any{map[string]any{"index": i, "id": c.ID, "type": "function",
			"function": map[string]any{"name": c.Name, "arguments": ""}}}}, nil), nil)
		for _, p := range pieces(c.Arguments, 5) {
			chunk(delta(map[string]any{"tool_calls": []any{map[string]any{"index": i,
				"function": map[string]any{"arguments": p}}}}, nil), nil)
		}
	}
	finish := "stop"
	if len(a.Calls) > 0 {
		finish = "tool_calls"
	}
	chunk(delta(map[string]any{}, finish), nil)
	chunk([]any{}, map[string]any{"prompt_tokens": a.Input, "completion_tokens": a.Output,
		"total_tokens": a.Input + a.Output})
	b.WriteString("data: [DONE]\n\n")
	return []byte(b.String())
}

// AnthropicStream writes an answer as a Messages stream: message_start with
// the input usage, a text block a word a delta, a tool_use block per call
// with its input in pieces of five bytes, message_delta with the stop
// reason and output usage, message_stop.
func AnthropicStream(a Answer) []byte {
	var b strings.Builder
	event := func(typ string, data map[string]any) {
		data["type"] = typ
		out, _ := json.Marshal(data)
		fmt.Fprintf(&b, "event: %s\ndata: %s\n\n", typ, out)
	}
	event("message_start", map[string]any{"message": map[string]any{"id": "msg_test", "type": "message",
		"role": "assistant", "content": []any{}, "model": "test-model", "stop_reason": nil, "stop_sequence": nil,
		"usage": map[string]any{"input_tokens": a.Input, "output_tokens": 1}}})
	index := 0
	if a.Text != "" {
		event("content_block_start", map[string]any{"index": index, "content_block": map[string]any{"type": "text", "text": ""}})
		for _, w := range words(a.Text) {
			event("content_block_delta", map[string]any{"index": index, "delta": map[string]any{"type": "text_delta", "text": w}})
		}
		event("content_block_stop", map[string]any{"index": index})
		index++
	}
	for _, c := range a.Calls {
		event("content_block_start", map[string]any{"index": index, "content_block": map[string]any{
			"type": "tool_use", "id": c.ID, "name": c.Name, "input": map[string]any{}}})
		for _, p := range pieces(c.Arguments, 5) {
			event("content_block_delta", map[string]any{"index": index, "delta": map[string]any{"type": "input_json_delta", "partial_json": p}})
		}
		event("content_block_stop", map[string]any{"index": index})
		index++
	}
	stop := "end_turn"
	if len(a.Calls) > 0 {
		stop = "tool_use"
	}
	event("message_delta", map[string]any{"delta": map[string]any{"stop_reason": stop, "stop_sequence": nil},
		"usage": map[string]any{"output_tokens": a.Output}})
	event("message_stop", map[string]any{})
	return []byte(b.String())
}

func words(s string) []string {
	if s == "" {
		return nil
	}
	return strings.SplitAfter(s, " ")
}

func pieces(s string, n int) []string {
	var out []string
	for len(s) > n {
		out = append(out, s[:n])
		s = s[n:]
	}
	if s != "" {
		out = append(out, s)
	}
	return out
}
