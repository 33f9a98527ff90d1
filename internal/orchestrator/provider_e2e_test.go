package orchestrator_test

import (
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jetloop/jetloop/internal/orchestrator"

	"github.com/jetloop/jetloop/internal/events"
	"github.com/jetloop/jetloop/internal/model"
	"github.com/jetloop/jetloop/internal/model/modeltest"
	"github.com/nats-io/nats.go"
)

// provider is a remote provider under the end-to-end tests: how its requests
// show tool results, and how it writes an answer.
type provider struct {
	name   string
	stream func(modeltest.Answer) []byte
	// results returns the tool results of a request: call id → content.
	results func(body map[string]any) map[string]string
	make    func(srv *modeltest.Server) (model.Provider, error)
}

var remoteProviders = []provider{
	{name: "openai", stream: modeltest.OpenAIStream,
		results: func(body map[string]any) map[string]string {
			out := map[string]string{}
			for _, m := range list(body["messages"]) {
				if m["role"] == "tool" {
					out[fmt.Sprint(m["tool_call_id"])] = fmt.Sprint(m["content"])
				}
			}
			return out
		},
		make: func(srv *modeltest.Server) (model.Provider, error) {
			return model.NewOpenAI(model.WithBaseURL(srv.URL+"/v1"), model.WithAPIKey("sk-test"))
		}},
	{name: "anthropic", stream: modeltest.AnthropicStream,
		results: func(body map[string]any) map[string]string {
			out := map[string]string{}
			for _, m := range list(body["messages"]) {
				for _, b := range list(m["content"]) {
					if b["type"] == "tool_result" {
						var text []string
						for _, c := range list(b["content"]) {
							text = append(text, fmt.Sprint(c["text"]))
						}
						out[fmt.Sprint(b["tool_use_id"])] = strings.Join(text, "")
					}
				}
			}
			return out
		},
		make: func(srv *modeltest.Server) (model.Provider, error) {
			return model.NewAnthropic(model.WithBaseURL(srv.URL), model.WithAPIKey("sk-ant-test"))
		}},
}

func list(v any) []map[string]any {
	items, _ := v.([]any)
	var out []map[string]any
	for _, it := range items {
		if m, ok := it.(map[string]any); ok {
			out = append(out, m)
		}
	}
	return out
}

// The answers of the test server, chosen by the tool results a request
// carries: none → two calls at once; their two results → one more call;
// three results → the final text, which quotes the echo's result.
const (
	echoID   = "call_echo_0000000000000001"
	countID1 = "call_count_000000000000001"
	countID2 = "call_count_000000000000002"
)

func (p provider) answer(r modeltest.Request) modeltest.Answer {
	results := p.results(r.JSON())
	switch len(results) {
	case 0:
		return modeltest.Answer{Text: "Echoing and counting.", Input: 50, Output: 20, Calls: []modeltest.Call{
			{ID: echoID, Name: "echo", Arguments: `{"text":"hello from the worker"}`},
			{ID: countID1, Name: "count", Arguments: `{"n":1}`}}}
	case 2:
		return modeltest.Answer{Input: 90, Output: 10, Calls: []modeltest.Call{
			{ID: countID2, Name: "count", Arguments: `{"n":2}`}}}
	default:
		return modeltest.Answer{Text: "All done: " + results[echoID], Input: 120, Output: 8}
	}
}

// TestProvidersEndToEnd runs a three-step turn with parallel tool calls
// through the real orchestrator and tool worker against each provider's test
// server, with one 429 (Retry-After: 1) on the first call.
func TestProvidersEndToEnd(t *testing.T) {
	for _, p := range remoteProviders {
		t.Run(p.name, func(t *testing.T) {
			var (
				mu    sync.Mutex
				times []time.Time
			)
			srv := modeltest.New(t, func(r modeltest.Request, n int) modeltest.Reply {
				mu.Lock()
				times = append(times, time.Now())
				mu.Unlock()
				if n == 1 {
					return modeltest.Fail(http.StatusTooManyRequests,
						[]byte(`{"error": {"type": "rate_limit_error", "message": "slow down"}}`), "Retry-After", "1")
				}
				return modeltest.Stream(p.stream(p.answer(r)))
			})
			prov, err := p.make(srv)
			if err != nil {
				t.Fatal(err)
			}
			h := newHarness(t)
			h.worker()
			h.orchestrator(orchestrator.WithProvider(p.name, prov))

			turn := "t-e2e-" + p.name
			var (
				dmu    sync.Mutex
				deltas = map[int]string{}
			)
			sub, err := h.nc.Subscribe(events.DeltaSubject(turn), func(m *nats.Msg) {
				var d events.Delta
				if json.Unmarshal(m.Data, &d) == nil {
					dmu.Lock()
					deltas[d.Step] += d.Delta
					dmu.Unlock()
				}
			})
			if err != nil {
				t.Fatal(err)
			}
			defer sub.Unsubscribe()
			if err := h.nc.Flush(); err != nil {
				t.Fatal(err)
			}

			h.submit(events.Submit{TurnID: turn, Agent: "General", Model: p.name + "/test-model",
				Input: []events.Message{{Role: events.RoleUser, Content: "Echo, then count twice."}}})
			log, fin := h.finished(turn)
			if fin.StopReason != events.StopCompleted || fin.Output != "All done: hello from the worker" {
				t.Fatalf("finished %+v\n%s", fin, dump(log))
			}
			if m := fin.Metrics; m.Steps != 3 || m.ToolCalls != 3 || m.ModelCalls != 3 ||
				m.InputTokens != 50+90+120 || m.OutputTokens != 20+10+8 {
				t.Errorf("metrics %+v", m)
			}

			models := of[events.ModelCompletedData](t, log, events.ModelCompleted)
			if len(models) != 3 || models[0].Attempts != 2 || models[1].Attempts != 1 || models[2].Attempts != 1 {
				t.Fatalf("model calls %+v", models)
			}
			if got := models[0]; len(got.ToolCalls) != 2 || got.ToolCalls[0].CallID != echoID ||
				got.ToolCalls[1].CallID != countID1 || got.FinishReason != "tool_calls" {
				t.Errorf("first answer %+v", got)
			}
			done := of[events.ToolCompletedData](t, log, events.ToolCompleted)
			if len(done) != 3 {
				t.Fatalf("tool results %+v", done)
			}
			if h.calls.max() != 1 {
				t.Errorf("a call ran more than once: %v", h.calls.runs)
			}

			reqs := srv.Requests()
			if len(reqs) != 4 {
				t.Fatalf("%d requests, want 4 (one refused, three answered)", len(reqs))
			}
			mu.Lock()
			if gap := times[1].Sub(times[0]); gap < time.Second {
				t.Errorf("retried after %s: Retry-After asked for 1s", gap)
			}
			mu.Unlock()
			// The last request holds every result under its call's id, and
			// the model saw the tools the worker serves.
			last := p.results(reqs[3].JSON())
			if last[echoID] != "hello from the worker" || last[countID1] != "counted" || last[countID2] != "counted" {
				t.Errorf("results sent back %v", last)
			}
			if !strings.Contains(string(reqs[1].Body), `"name":"echo"`) || !strings.Contains(string(reqs[1].Body), `"name":"count"`) {
				t.Errorf("tools not offered: %s", reqs[1].Body)
			}

			h.waitFor("the final text's deltas", func() bool {
				dmu.Lock()
				defer dmu.Unlock()
				return deltas[3] == fin.Output
			})
		})
	}
}

// TestProviderSummaryEndToEnd: a turn capped at two steps ends with the
// tool-less summary call, which offers no tools and ends with the
// instruction; its answer is the sentinel's summary.
func TestProviderSummaryEndToEnd(t *testing.T) {
	for _, p := range remoteProviders {
		t.Run(p.name, func(t *testing.T) {
			srv := modeltest.New(t, func(r modeltest.Request, n int) modeltest.Reply {
				if _, tools := r.JSON()["tools"]; !tools {
					return modeltest.Stream(p.stream(modeltest.Answer{Text: "Counted twice; nothing remains.", Input: 7, Output: 7}))
				}
				return modeltest.Stream(p.stream(modeltest.Answer{Input: 5, Output: 5, Calls: []modeltest.Call{
					{ID: fmt.Sprintf("call_step_%016d", n), Name: "count", Arguments: fmt.Sprintf(`{"n":%d}`, n)}}}))
			})
			prov, err := p.make(srv)
			if err != nil {
				t.Fatal(err)
			}
			h := newHarness(t)
			h.worker()
			h.orchestrator(orchestrator.WithProvider(p.name, prov))
			turn := "t-summary-" + p.name
			h.submit(events.Submit{TurnID: turn, Agent: "Capped", Model: p.name + "/test-model",
				Input: []events.Message{{Role: events.RoleUser, Content: "Count forever."}}})
			log, fin := h.finished(turn)
			if fin.StopReason != events.StopStepCap || fin.Output != "Step limit reached (2 steps)\n\nCounted twice; nothing remains." {
				t.Fatalf("finished %+v\n%s", fin, dump(log))
			}
			reqs := srv.Requests()
			if len(reqs) != 3 {
				t.Fatalf("%d requests, want 3", len(reqs))
			}
			last := string(reqs[2].Body)
			if strings.Contains(last, `"tools"`) || !strings.Contains(last, "You cannot call tools any more") ||
				!strings.Contains(last, "call_step_0000000000000002") {
				t.Errorf("summary request %s", last)
			}
		})
	}
}

// TestProviderAbortStopsTheStream: aborting a turn while its model answer
// streams closes the HTTP stream at once (the server sees its client go),
// rather than letting the call run to its end or its timeout.
func TestProviderAbortStopsTheStream(t *testing.T) {
	for _, p := range remoteProviders {
		t.Run(p.name, func(t *testing.T) {
			full := p.stream(modeltest.Answer{Text: "a long answer that never ends because the model keeps talking"})
			var received, gone atomic.Bool
			srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				w.Header().Set("Content-Type", "text/event-stream")
				w.WriteHeader(http.StatusOK)
				_, _ = w.Write(full[:len(full)/2])
				w.(http.Flusher).Flush()
				received.Store(true)
				<-r.Context().Done() // the rest never comes: only the client can end this
				gone.Store(true)
			}))
			t.Cleanup(srv.Close)
			prov, err := p.make(&modeltest.Server{Server: srv})
			if err != nil {
				t.Fatal(err)
			}
			h := newHarness(t)
			h.worker()
			h.orchestrator(orchestrator.WithProvider(p.name, prov))
			turn := "t-abort-stream-" + p.name
			h.submit(events.Submit{TurnID: turn, Agent: "General", Model: p.name + "/test-model",
				Input: []events.Message{{Role: events.RoleUser, Content: "Talk."}}})
			h.waitFor("the answer to stream", received.Load)
			h.control(turn, events.Control{Action: events.ActionAbort, Reason: "user pressed stop"})
			if _, fin := h.finished(turn); fin.StopReason != events.StopAborted {
				t.Fatalf("finished %+v", fin)
			}
			h.waitFor("the provider's stream to be closed", gone.Load)
		})
	}
}
