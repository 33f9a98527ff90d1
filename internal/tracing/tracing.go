package tracing

import (
	"context"
	"encoding/binary"
	"fmt"
	"math/rand/v2"
	"os"
	"time"

	"github.com/jetloop/jetloop/internal/tracectx"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracehttp"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"
)

// Header is the W3C trace-context header a tool job carries.
const Header = tracectx.Header

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
	return &Tracer{tp: tp, tr: tp.Tracer(tracectx.Scope)}, nil
}

// Provider is the tracer's provider, for a public worker's options; nil
// when t is.
func (t *Tracer) Provider() trace.TracerProvider {
	if t == nil {
		return nil
	}
	return t.tp
}

// Shutdown exports the spans not yet sent and stops the tracer.
func (t *Tracer) Shutdown(ctx context.Context) error {
	if t == nil {
		return nil
	}
	return t.tp.Shutdown(ctx)
}

// TraceID is the trace of a turn (see tracectx.TraceID). A subagent's
// turn is in the trace of the turn at the top of its chain.
func TraceID(turn string) trace.TraceID { return tracectx.TraceID(turn) }

// TurnSpanID is the id of a turn's invoke_agent span (see tracectx).
func TurnSpanID(turn string) trace.SpanID { return tracectx.TurnSpanID(turn) }

// CallSpanID is the id of the orchestrator's execute_tool span of a turn's
// call (see tracectx).
func CallSpanID(turn, call string) trace.SpanID { return tracectx.CallSpanID(turn, call) }

// Traceparent is the W3C traceparent of a turn's call in the trace of root,
// the turn at the top of its chain (see tracectx).
func Traceparent(root, turn, call string) string { return tracectx.Traceparent(root, turn, call) }

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
	return tracectx.ToolAttrs(turn, call, name)
}

// Run is a tool call running in a tool worker.
type Run struct {
	span trace.Span
}

// StartRun starts the worker's execute_tool span of a call (see
// tracectx.StartRun).
func (t *Tracer) StartRun(traceparent, turn, call, tool, worker string, attempt int) *Run {
	if t == nil {
		return nil
	}
	return &Run{span: tracectx.StartRun(t.tr, traceparent, turn, call, tool, worker, attempt)}
}

// End ends the run's span with how the call ended.
func (r *Run) End(outcome string, isError bool) {
	if r == nil {
		return
	}
	tracectx.EndRun(r.span, outcome, isError)
}
