package orchestrator_test

import (
	"bytes"
	"context"
	"encoding/hex"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/jetloop/jetloop/internal/orchestrator"

	"github.com/jetloop/jetloop/worker"

	"github.com/jetloop/jetloop/internal/events"
	"github.com/jetloop/jetloop/internal/tracing"
	coltracepb "go.opentelemetry.io/proto/otlp/collector/trace/v1"
	"google.golang.org/protobuf/proto"
)

// span is a received span, with what the test looks at.
type span struct {
	service, name, trace, id, parent string
	kind                             int32
	attrs                            map[string]any
	start, end                       uint64
}

// receiver is an OTLP/HTTP collector: it decodes every export request.
type receiver struct {
	mu    sync.Mutex
	spans []span
}

func (r *receiver) ServeHTTP(w http.ResponseWriter, req *http.Request) {
	body, err := io.ReadAll(req.Body)
	if err != nil || req.URL.Path != "/v1/traces" {
		http.Error(w, "bad request", http.StatusBadRequest)
		return
	}
	var export coltracepb.ExportTraceServiceRequest
	if err := proto.Unmarshal(body, &export); err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	r.mu.Lock()
	for _, rs := range export.GetResourceSpans() {
		service := ""
		for _, kv := range rs.GetResource().GetAttributes() {
			if kv.GetKey() == "service.name" {
				service = kv.GetValue().GetStringValue()
			}
		}
		for _, ss := range rs.GetScopeSpans() {
			for _, s := range ss.GetSpans() {
				attrs := map[string]any{}
				for _, kv := range s.GetAttributes() {
					v := kv.GetValue()
					switch {
					case v.GetArrayValue() != nil:
						var list []string
						for _, e := range v.GetArrayValue().GetValues() {
							list = append(list, e.GetStringValue())
						}
						attrs[kv.GetKey()] = list
					case v.GetStringValue() != "":
						attrs[kv.GetKey()] = v.GetStringValue()
					default:
						attrs[kv.GetKey()] = v.GetIntValue()
					}
				}
				r.spans = append(r.spans, span{service: service, name: s.GetName(), trace: hex.EncodeToString(s.GetTraceId()),
					id: hex.EncodeToString(s.GetSpanId()), parent: hex.EncodeToString(s.GetParentSpanId()),
					kind: int32(s.GetKind()), attrs: attrs, start: s.GetStartTimeUnixNano(), end: s.GetEndTimeUnixNano()})
			}
		}
	}
	r.mu.Unlock()
	out, _ := proto.Marshal(&coltracepb.ExportTraceServiceResponse{})
	w.Header().Set("Content-Type", "application/x-protobuf")
	_, _ = w.Write(out)
}

func (r *receiver) all() []span {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Clone(r.spans)
}

// collect starts an OTLP/HTTP collector for the test and points the
// tracers made after it at it, exporting each span at once.
func collect(t *testing.T) *receiver {
	rec := &receiver{}
	collector := httptest.NewServer(rec)
	t.Cleanup(collector.Close)
	t.Setenv("OTEL_EXPORTER_OTLP_ENDPOINT", collector.URL)
	t.Setenv("OTEL_BSP_SCHEDULE_DELAY", "10") // ms: spans go out at once
	return rec
}

// tracer is a process's tracer, as the commands make it from the
// environment; it is shut down when the test ends.
func tracer(t *testing.T, service string) *tracing.Tracer {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	tr, err := tracing.FromEnv(ctx, service)
	if err != nil || tr == nil {
		t.Fatalf("tracer %s: %v, %v", service, tr, err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_ = tr.Shutdown(ctx)
	})
	return tr
}

// TestTraceOfATurn runs a turn with tracing on in the orchestrator and the
// tool worker, each with a tracer of its own as if in its own process, and
// checks the tree they export: one trace whose id comes from the turn id,
// the turn's invoke_agent span at the root, a chat span per model call and
// an execute_tool span per call under it, and the worker's execute_tool span
// under the orchestrator's.
func TestTraceOfATurn(t *testing.T) {
	rec := collect(t)
	orchTracer := tracer(t, "jetloop-orchestrator")
	workerTracer := tracer(t, "jetloop-toolworker")

	h := newHarness(t)
	h.workerWith(t.TempDir(), []worker.Option{worker.WithTracerProvider(workerTracer.Provider())})
	h.orchestrator(orchestrator.WithTracer(orchTracer))
	h.submit(script("traced", "General", `{"responses": [
		{"text": "Echoing.", "tool_calls": [{"name": "echo", "arguments": {"text": "hi"}}]},
		{"text": "done"}]}`))
	log, fin := h.finished("traced")
	if fin.StopReason != events.StopCompleted {
		t.Fatalf("stop reason %s", fin.StopReason)
	}
	models := of[events.ModelCompletedData](t, log, events.ModelCompleted)
	calls := of[events.ToolCompletedData](t, log, events.ToolCompleted)
	if len(models) != 2 || len(calls) != 1 {
		t.Fatalf("%d model calls, %d tool calls", len(models), len(calls))
	}
	call := calls[0].CallID

	// 1 turn + 2 chats + the orchestrator's and the worker's execute_tool.
	var spans []span
	h.waitFor("five spans", func() bool { spans = rec.all(); return len(spans) >= 5 })
	byName := map[string][]span{}
	for _, s := range spans {
		byName[s.name] = append(byName[s.name], s)
	}
	trace := tracing.TraceID("traced")
	turnSpan := tracing.TurnSpanID("traced")
	for _, s := range spans {
		if s.trace != hex.EncodeToString(trace[:]) {
			t.Errorf("span %s is in trace %s, want the turn's %x", s.name, s.trace, trace)
		}
	}

	turns := byName["invoke_agent General"]
	if len(turns) != 1 {
		t.Fatalf("invoke_agent spans: %+v", turns)
	}
	turn := turns[0]
	if turn.id != hex.EncodeToString(turnSpan[:]) || turn.parent != "" || turn.service != "jetloop-orchestrator" {
		t.Errorf("turn span %+v", turn)
	}
	wantAttrs(t, turn, map[string]any{"gen_ai.operation.name": "invoke_agent", "gen_ai.agent.name": "General",
		"jetloop.stop_reason": "completed", "gen_ai.usage.input_tokens": int64(fin.Metrics.InputTokens),
		"gen_ai.usage.output_tokens": int64(fin.Metrics.OutputTokens)})
	if turn.start != uint64(log[0].Time.UnixNano()) || turn.end != uint64(log[len(log)-1].Time.UnixNano()) {
		t.Errorf("turn span from %d to %d, want turn.started to turn.finished", turn.start, turn.end)
	}

	chats := byName["chat script"]
	if len(chats) != 2 {
		t.Fatalf("chat spans: %+v", chats)
	}
	for _, c := range chats {
		if c.parent != turn.id || c.kind != 3 { // SPAN_KIND_CLIENT
			t.Errorf("chat span %+v: want a client span under the turn's", c)
		}
		step := c.attrs["jetloop.step"].(int64)
		m := models[step-1]
		wantAttrs(t, c, map[string]any{"gen_ai.operation.name": "chat", "gen_ai.request.model": "script",
			"gen_ai.provider.name":      "script",
			"gen_ai.usage.input_tokens": int64(m.Usage.InputTokens), "gen_ai.usage.output_tokens": int64(m.Usage.OutputTokens),
			"gen_ai.response.finish_reasons": []string{m.FinishReason}})
	}

	tools := byName["execute_tool echo"]
	if len(tools) != 2 {
		t.Fatalf("execute_tool spans: %+v", tools)
	}
	slices.SortFunc(tools, func(a, b span) int { return bytes.Compare([]byte(a.service), []byte(b.service)) })
	orch, worker := tools[0], tools[1]
	callSpan := tracing.CallSpanID("traced", call)
	if orch.service != "jetloop-orchestrator" || orch.parent != turn.id || orch.id != hex.EncodeToString(callSpan[:]) {
		t.Errorf("orchestrator's execute_tool span %+v: want under the turn's, with the call's id", orch)
	}
	if worker.service != "jetloop-toolworker" || worker.parent != orch.id {
		t.Errorf("worker's execute_tool span %+v: want under the orchestrator's (%s)", worker, orch.id)
	}
	for _, s := range tools {
		wantAttrs(t, s, map[string]any{"gen_ai.operation.name": "execute_tool", "gen_ai.tool.name": "echo", "gen_ai.tool.call.id": call})
	}
}

func wantAttrs(t *testing.T, s span, want map[string]any) {
	t.Helper()
	for k, v := range want {
		got, ok := s.attrs[k]
		if !ok {
			t.Errorf("span %s: no %s", s.name, k)
			continue
		}
		if l, isList := v.([]string); isList {
			if !slices.Equal(got.([]string), l) {
				t.Errorf("span %s: %s = %v, want %v", s.name, k, got, v)
			}
			continue
		}
		if got != v {
			t.Errorf("span %s: %s = %v (%T), want %v (%T)", s.name, k, got, got, v, v)
		}
	}
}

// TestTraceOfSubagents runs a chain of subagent calls four turns deep
// (D1 > D2 > D3 > D4) with tracing on, and checks that every span of every
// turn is in the trace of the turn at the top, and that each child's
// invoke_agent span is a child of the execute_tool span of the call that
// ran it, under the turn that made that call.
func TestTraceOfSubagents(t *testing.T) {
	rec := collect(t)
	tr := tracer(t, "jetloop-orchestrator")

	h := newSubagentHarness(t)
	h.worker()
	h.orchestrator(orchestrator.WithTracer(tr))
	h.submit(events.Submit{TurnID: "deep-traced", Agent: "D1", Input: []events.Message{{Role: events.RoleUser, Content: "go"}}})

	type link struct{ turn, call, child string }
	var chain []link
	for turn := "deep-traced"; ; {
		log, fin := h.finished(turn)
		if fin.StopReason != events.StopCompleted {
			t.Fatalf("%s: %+v", turn, fin)
		}
		calls := subagentCalls(t, log)
		if len(calls) == 0 {
			break
		}
		chain = append(chain, link{turn, calls[0].CallID, calls[0].ChildTurnID})
		turn = calls[0].ChildTurnID
	}
	if len(chain) != 3 {
		t.Fatalf("chain %+v, want three calls", chain)
	}
	// Four turns, each with two chats; three subagent calls and D4's
	// refused call, each an execute_tool span.
	var spans []span
	h.waitFor("the chain's spans", func() bool {
		spans = rec.all()
		n := 0
		for _, s := range spans {
			if s.attrs["gen_ai.operation.name"] == "invoke_agent" {
				n++
			}
		}
		return n == 4 && len(spans) >= 4+8+4
	})
	trace := tracing.TraceID("deep-traced")
	byID := map[string]span{}
	for _, s := range spans {
		if s.trace != hex.EncodeToString(trace[:]) {
			t.Errorf("span %s of turn %v is in trace %s, want the top turn's %x", s.name, s.attrs["jetloop.turn.id"], s.trace, trace)
		}
		byID[s.id] = s
	}
	top := tracing.TurnSpanID("deep-traced")
	if s := byID[hex.EncodeToString(top[:])]; s.name != "invoke_agent D1" || s.parent != "" {
		t.Errorf("top turn's span %+v, want a root", s)
	}
	for i, l := range chain {
		callID, childID := tracing.CallSpanID(l.turn, l.call), tracing.TurnSpanID(l.child)
		turnID := tracing.TurnSpanID(l.turn)
		call, child := byID[hex.EncodeToString(callID[:])], byID[hex.EncodeToString(childID[:])]
		if call.name != fmt.Sprintf("execute_tool D%d", i+2) || call.parent != hex.EncodeToString(turnID[:]) {
			t.Errorf("call %s of %s: span %+v, want under its turn's", l.call, l.turn, call)
		}
		if child.name != fmt.Sprintf("invoke_agent D%d", i+2) || child.parent != call.id {
			t.Errorf("child %s: span %+v, want under the execute_tool span %s of its call", l.child, child, call.id)
		}
		wantAttrs(t, child, map[string]any{"jetloop.turn.id": l.child, "jetloop.parent.turn.id": l.turn, "jetloop.parent.call.id": l.call})
	}
	for _, s := range spans {
		if s.attrs["gen_ai.operation.name"] != "chat" {
			continue
		}
		want := tracing.TurnSpanID(s.attrs["jetloop.turn.id"].(string))
		if s.parent != hex.EncodeToString(want[:]) {
			t.Errorf("chat span %+v: want under its turn's", s)
		}
	}
}

// TestTraceOfACompaction: a summarizing compaction's turn, which no call
// runs, is in its parent's trace, its invoke_agent span a child of the
// parent turn's.
func TestTraceOfACompaction(t *testing.T) {
	rec := collect(t)
	tr := tracer(t, "jetloop-orchestrator")
	h := newSummarizeHarness(t)
	h.worker()
	h.orchestrator(orchestrator.WithTracer(tr))
	h.submit(longTurn("long-traced"))
	log, _ := h.finished("long-traced")
	cs := of[events.TurnCompactedData](t, log, events.TurnCompacted)
	if len(cs) != 1 {
		t.Fatalf("%d compactions", len(cs))
	}
	want := tracing.TurnSpanID(cs[0].ChildTurnID)
	var child span
	h.waitFor("the summary turn's span", func() bool {
		for _, s := range rec.all() {
			if s.id == hex.EncodeToString(want[:]) {
				child = s
				return true
			}
		}
		return false
	})
	trace, parent := tracing.TraceID("long-traced"), tracing.TurnSpanID("long-traced")
	if child.name != "invoke_agent Summarizer" || child.trace != hex.EncodeToString(trace[:]) || child.parent != hex.EncodeToString(parent[:]) {
		t.Fatalf("the summary turn's span %+v: want under the turn %x in its trace", child, parent)
	}
}
