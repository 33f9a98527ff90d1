package tracing

import (
	"context"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"fmt"
	"math/rand/v2"
	"os"
	"strings"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracehttp"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"
)

// Header is the W3C trace-context header a tool job carries.
const Header = "traceparent"

// Tracer emits jetloop's spans. A nil *Tracer emits nothing: that is how
// tracing is off, at the cost of one comparison per call.
type Tracer struct {
	tp *sdktrace.TracerProvider
	tr trace.Tracer
}

// Enabled reports whether the environment asks for traces: the standard
// OTEL_EXPORTER_OTLP_ENDPOINT or OTEL_EXPORTER_OTLP_TRACES_ENDPOINT is set.
func Enabled(getenv func(string) string) bool {
	return getenv("OTEL_EXPORTER_OTLP_ENDPOINT") != "" || getenv("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT") != ""
}

// FromEnv returns a Tracer that exports over OTLP/HTTP as the standard
// OTEL_* variables say (endpoint, headers, timeout, sampler, batching,
// OTEL_SERVICE_NAME and OTEL_RESOURCE_ATTRIBUTES), with service as the
// service name unless they name one; nil when Enabled is false.
func FromEnv(ctx context.Context, service string) (*Tracer, error) {
	if !Enabled(os.Getenv) {
		return nil, nil
	}
	for _, k := range []string{"OTEL_EXPORTER_OTLP_TRACES_PROTOCOL", "OTEL_EXPORTER_OTLP_PROTOCOL"} {
		// gRPC would bring a second transport into every binary for what
		// every collector also takes over HTTP.
		if p := os.Getenv(k); p != "" && p != "http/protobuf" {
			return nil, fmt.Errorf("tracing: %s=%s: only http/protobuf is supported (the collector's port 4318)", k, p)
		}
	}
	exp, err := otlptracehttp.New(ctx)
	if err != nil {
		return nil, fmt.Errorf("tracing: OTLP exporter: %w", err)
	}
	res, err := resource.New(ctx,
		resource.WithAttributes(attribute.String("service.name", service)),
		resource.WithFromEnv(), resource.WithTelemetrySDK())
	if err != nil {
		return nil, fmt.Errorf("tracing: resource: %w", err)
	}
	tp := sdktrace.NewTracerProvider(sdktrace.WithBatcher(exp), sdktrace.WithResource(res),
		sdktrace.WithIDGenerator(ids{}))
	return &Tracer{tp: tp, tr: tp.Tracer("github.com/jetloop/jetloop")}, nil
}

// Shutdown exports the spans not yet sent and stops the tracer.
func (t *Tracer) Shutdown(ctx context.Context) error {
	if t == nil {
		return nil
	}
	return t.tp.Shutdown(ctx)
}

// TraceID is the trace of a turn: the first 16 bytes of the SHA-256 of its
// id, so every process that touches the turn, and one that takes it up
// after a crash, joins the same trace with nothing passed around. A
// subagent's turn is in the trace of the turn at the top of its chain.
func TraceID(turn string) trace.TraceID {
	sum := sha256.Sum256([]byte(turn))
	var id trace.TraceID
	copy(id[:], sum[:16])
	return id
}

// TurnSpanID is the id of a turn's invoke_agent span, known before the span
// is emitted (at the turn's end), so spans emitted earlier name it as their
// parent.
func TurnSpanID(turn string) trace.SpanID { return spanID("invoke_agent:" + turn) }

// CallSpanID is the id of the orchestrator's execute_tool span of a turn's
// call, the parent a tool worker's span (or a subagent's invoke_agent span)
// names. The turn is part of it: the turns of a chain of subagent calls
// share one trace, and call ids are unique only within a turn.
func CallSpanID(turn, call string) trace.SpanID { return spanID("execute_tool:" + turn + ":" + call) }

func spanID(s string) trace.SpanID {
	sum := sha256.Sum256([]byte(s))
	var id trace.SpanID
	copy(id[:], sum[:8])
	return id
}

// Traceparent is the W3C traceparent of a turn's call, in the trace of
// root (the turn at the top of its chain): its worker's span is a child of
// the orchestrator's execute_tool span of the call.
func Traceparent(root, turn, call string) string {
	tid, sid := TraceID(root), CallSpanID(turn, call)
	return "00-" + hex.EncodeToString(tid[:]) + "-" + hex.EncodeToString(sid[:]) + "-01"
}

// parent is a context whose remote parent is the span sid of root's trace.
func parent(root string, sid trace.SpanID) context.Context {
	return trace.ContextWithRemoteSpanContext(context.Background(), trace.NewSpanContext(trace.SpanContextConfig{
		TraceID: TraceID(root), SpanID: sid, TraceFlags: trace.FlagsSampled, Remote: true}))
}

// rootOf is the turn whose trace a turn's spans join: root, or the turn
// itself when no subagent call started it.
func rootOf(root, turn string) string {
	if root == "" {
		return turn
	}
	return root
}

// ids makes the ids a context asks for (see withIDs), random ones otherwise.
type ids struct{}

type wantIDs struct{}

type wanted struct {
	trace trace.TraceID
	span  trace.SpanID
}

// withIDs asks that the span started with ctx have these ids: the trace id
// is used only by a span without a parent.
func withIDs(ctx context.Context, tid trace.TraceID, sid trace.SpanID) context.Context {
	return context.WithValue(ctx, wantIDs{}, wanted{tid, sid})
}

func (ids) NewIDs(ctx context.Context) (trace.TraceID, trace.SpanID) {
	if w, ok := ctx.Value(wantIDs{}).(wanted); ok {
		return w.trace, w.span
	}
	var tid trace.TraceID
	for !tid.IsValid() {
		binary.NativeEndian.PutUint64(tid[:8], rand.Uint64())
		binary.NativeEndian.PutUint64(tid[8:], rand.Uint64())
	}
	return tid, randomSpanID()
}

func (ids) NewSpanID(ctx context.Context, _ trace.TraceID) trace.SpanID {
	if w, ok := ctx.Value(wantIDs{}).(wanted); ok {
		return w.span
	}
	return randomSpanID()
}

func randomSpanID() trace.SpanID {
	var sid trace.SpanID
	for !sid.IsValid() {
		binary.NativeEndian.PutUint64(sid[:], rand.Uint64())
	}
	return sid
}

// Turn is a finished turn, as its invoke_agent span shows it.
type Turn struct {
	TurnID, SessionID, Agent, Model string
	// Root, ParentTurn and ParentCall are set on a subagent's turn: the
	// turn at the top of its chain, whose trace it joins, and the call
	// whose execute_tool span is its span's parent (ParentCall empty: the
	// parent turn's span is).
	Root, ParentTurn, ParentCall string
	Start, End                   time.Time
	StopReason, Error            string
	Steps, ToolCalls, ModelCalls int
	InputTokens, OutputTokens    int
}

// Turn emits a turn's invoke_agent span, from turn.started to
// turn.finished. It is emitted at the end by whichever orchestrator
// finished the turn, with the ids every other span of the turn expects.
func (t *Tracer) Turn(x Turn) {
	if t == nil {
		return
	}
	name := "invoke_agent"
	if x.Agent != "" {
		name += " " + x.Agent
	}
	start := x.Start
	if start.IsZero() {
		start = x.End // a rejected submission: no turn.started
	}
	root := rootOf(x.Root, x.TurnID)
	ctx, opts := context.Background(), []trace.SpanStartOption{trace.WithNewRoot()}
	switch {
	case x.ParentTurn != "" && x.ParentCall != "":
		// A subagent's turn: a child of the call that runs it.
		ctx, opts = parent(root, CallSpanID(x.ParentTurn, x.ParentCall)), nil
	case x.ParentTurn != "":
		// A turn no call runs (a summarizing compaction's): a child of
		// the turn that started it.
		ctx, opts = parent(root, TurnSpanID(x.ParentTurn)), nil
	}
	ctx = withIDs(ctx, TraceID(root), TurnSpanID(x.TurnID))
	opts = append(opts, trace.WithTimestamp(start), trace.WithSpanKind(trace.SpanKindInternal),
		trace.WithAttributes(
			attribute.String("gen_ai.operation.name", "invoke_agent"),
			attribute.String("gen_ai.agent.name", x.Agent),
			attribute.String("gen_ai.request.model", x.Model),
			attribute.String("gen_ai.conversation.id", x.SessionID),
			attribute.Int("gen_ai.usage.input_tokens", x.InputTokens),
			attribute.Int("gen_ai.usage.output_tokens", x.OutputTokens),
			attribute.String("jetloop.turn.id", x.TurnID),
			attribute.String("jetloop.stop_reason", x.StopReason),
			attribute.Int("jetloop.steps", x.Steps),
			attribute.Int("jetloop.tool_calls", x.ToolCalls),
			attribute.Int("jetloop.model_calls", x.ModelCalls),
		))
	_, span := t.tr.Start(ctx, name, opts...)
	if x.ParentTurn != "" {
		span.SetAttributes(attribute.String("jetloop.parent.turn.id", x.ParentTurn),
			attribute.String("jetloop.parent.call.id", x.ParentCall))
	}
	if x.StopReason == "error" || x.StopReason == "rejected" {
		span.SetAttributes(attribute.String("error.type", x.StopReason))
		span.SetStatus(codes.Error, x.Error)
	}
	span.End(trace.WithTimestamp(x.End))
}

// Chat is one model call attempt.
type Chat struct {
	TurnID, Root        string // Root as in Turn
	Step, Attempt       int
	Provider, Model     string // Model as the provider knows it
	Start, End          time.Time
	FinishReason        string
	InputTokens         int
	OutputTokens        int
	Outcome, Error      string // Error is "" unless the attempt failed
	ErrorType           string
	SessionID, TurnKind string
}

// Chat emits a model call's chat span, a child of its turn's span.
func (t *Tracer) Chat(x Chat) {
	if t == nil {
		return
	}
	model := x.Model
	if model == "" {
		model = x.Provider
	}
	_, span := t.tr.Start(parent(rootOf(x.Root, x.TurnID), TurnSpanID(x.TurnID)), "chat "+model,
		trace.WithTimestamp(x.Start), trace.WithSpanKind(trace.SpanKindClient),
		trace.WithAttributes(
			attribute.String("gen_ai.operation.name", "chat"),
			attribute.String("gen_ai.provider.name", x.Provider),
			attribute.String("gen_ai.request.model", model),
			attribute.String("gen_ai.conversation.id", x.SessionID),
			attribute.String("jetloop.turn.id", x.TurnID),
			attribute.Int("jetloop.step", x.Step),
			attribute.Int("jetloop.attempt", x.Attempt),
			attribute.String("jetloop.outcome", x.Outcome),
		))
	if x.TurnKind != "" {
		span.SetAttributes(attribute.String("jetloop.model_call.kind", x.TurnKind))
	}
	if x.Error == "" {
		span.SetAttributes(
			attribute.Int("gen_ai.usage.input_tokens", x.InputTokens),
			attribute.Int("gen_ai.usage.output_tokens", x.OutputTokens))
		if x.FinishReason != "" {
			span.SetAttributes(attribute.StringSlice("gen_ai.response.finish_reasons", []string{x.FinishReason}))
		}
	} else {
		span.SetAttributes(attribute.String("error.type", x.ErrorType))
		span.SetStatus(codes.Error, x.Error)
	}
	span.End(trace.WithTimestamp(x.End))
}

// Tool is one tool call as the orchestrator saw it: from tool.requested to
// tool.completed, queueing, approval and the worker's run included.
type Tool struct {
	TurnID, CallID string
	Root           string // as in Turn
	Name           string // the name the model gave
	Label          string // Name if the turn was offered it, else "other": span names stay few
	Start, End     time.Time
	IsError        bool
	Worker         string
	Attempts       int
}

// Tool emits a call's execute_tool span, a child of its turn's span, with
// the id the worker's span names as its parent.
func (t *Tracer) Tool(x Tool) {
	if t == nil {
		return
	}
	root := rootOf(x.Root, x.TurnID)
	ctx := withIDs(parent(root, TurnSpanID(x.TurnID)), TraceID(root), CallSpanID(x.TurnID, x.CallID))
	_, span := t.tr.Start(ctx, "execute_tool "+x.Label, trace.WithTimestamp(x.Start), trace.WithSpanKind(trace.SpanKindInternal),
		trace.WithAttributes(toolAttrs(x.TurnID, x.CallID, x.Name)...))
	span.SetAttributes(attribute.String("jetloop.worker", x.Worker), attribute.Int("jetloop.attempts", x.Attempts))
	if x.IsError {
		span.SetAttributes(attribute.String("error.type", "tool_error"))
		span.SetStatus(codes.Error, "the tool answered with an error")
	}
	span.End(trace.WithTimestamp(x.End))
}

func toolAttrs(turn, call, name string) []attribute.KeyValue {
	return []attribute.KeyValue{
		attribute.String("gen_ai.operation.name", "execute_tool"),
		attribute.String("gen_ai.tool.name", name),
		attribute.String("gen_ai.tool.call.id", call),
		attribute.String("gen_ai.tool.type", "function"),
		attribute.String("jetloop.turn.id", turn),
	}
}

// Run is a tool call running in a tool worker.
type Run struct {
	span trace.Span
}

// StartRun starts the worker's execute_tool span of a call, a child of the
// span its job's traceparent names. A job without one (from an orchestrator
// that does not trace) names the same parent, derived from its ids.
func (t *Tracer) StartRun(traceparent, turn, call, tool, worker string, attempt int) *Run {
	if t == nil {
		return nil
	}
	if traceparent == "" {
		traceparent = Traceparent(turn, turn, call)
	}
	ctx := propagation.TraceContext{}.Extract(context.Background(), propagation.MapCarrier{Header: traceparent})
	attrs := append(toolAttrs(turn, call, tool), attribute.String("jetloop.worker", worker), attribute.Int("jetloop.attempt", attempt))
	_, span := t.tr.Start(ctx, "execute_tool "+tool, trace.WithSpanKind(trace.SpanKindInternal), trace.WithAttributes(attrs...))
	return &Run{span: span}
}

// End ends the run's span with how the call ended.
func (r *Run) End(outcome string, isError bool) {
	if r == nil {
		return
	}
	r.span.SetAttributes(attribute.String("jetloop.outcome", outcome))
	if isError || (outcome != "ok" && outcome != "error") {
		r.span.SetAttributes(attribute.String("error.type", strings.ReplaceAll(outcome, " ", "_")))
		r.span.SetStatus(codes.Error, outcome)
	}
	r.span.End()
}
