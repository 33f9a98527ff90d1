package tracing_test

import (
	"context"
	"testing"

	"github.com/jetloop/jetloop/internal/tracing"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"
)

func TestIDsComeFromTheTurn(t *testing.T) {
	if tracing.TraceID("a") != tracing.TraceID("a") || tracing.TraceID("a") == tracing.TraceID("b") {
		t.Error("a turn's trace id must be the same in every process and differ between turns")
	}
	if !tracing.TraceID("a").IsValid() || !tracing.TurnSpanID("a").IsValid() || !tracing.CallSpanID("t", "c").IsValid() {
		t.Error("invalid id")
	}
	if tracing.TurnSpanID("x") == tracing.CallSpanID("x", "x") {
		t.Error("a turn and a call of the same id share a span id")
	}
	// The turns of a chain of subagent calls share a trace: calls of the
	// same id in two turns are two spans.
	if tracing.CallSpanID("a", "c") == tracing.CallSpanID("b", "c") {
		t.Error("calls of the same id in two turns share a span id")
	}
	// A traceparent any W3C propagator reads names the call's span.
	ctx := propagation.TraceContext{}.Extract(context.Background(),
		propagation.MapCarrier{"traceparent": tracing.Traceparent("root-1", "turn-1", "call-1")})
	sc := trace.SpanContextFromContext(ctx)
	if sc.TraceID() != tracing.TraceID("root-1") || sc.SpanID() != tracing.CallSpanID("turn-1", "call-1") || !sc.IsSampled() || !sc.IsRemote() {
		t.Errorf("traceparent read back as %+v", sc)
	}
}

func TestOffWithoutAnEndpoint(t *testing.T) {
	t.Setenv("OTEL_EXPORTER_OTLP_ENDPOINT", "")
	t.Setenv("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "")
	tr, err := tracing.FromEnv(context.Background(), "x")
	if tr != nil || err != nil {
		t.Fatalf("FromEnv = %v, %v; want nil, nil", tr, err)
	}
	// A nil tracer emits nothing and does not fail.
	tr.Turn(tracing.Turn{TurnID: "t"})
	tr.Chat(tracing.Chat{TurnID: "t"})
	tr.Tool(tracing.Tool{TurnID: "t"})
	tr.StartRun("", "t", "c", "echo", "w", 1).End("ok", false)
	if err := tr.Shutdown(context.Background()); err != nil {
		t.Fatal(err)
	}
}

func TestGRPCIsRefused(t *testing.T) {
	t.Setenv("OTEL_EXPORTER_OTLP_ENDPOINT", "http://127.0.0.1:4317")
	t.Setenv("OTEL_EXPORTER_OTLP_PROTOCOL", "grpc")
	if _, err := tracing.FromEnv(context.Background(), "x"); err == nil {
		t.Fatal("grpc accepted, though only http/protobuf is exported")
	}
}
