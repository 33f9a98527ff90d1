package tracectx_test

import (
	"context"
	"testing"

	"github.com/jetloop/jetloop/internal/tracectx"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"
)

// TestExtractAsPropagation: Extract takes every traceparent the standard
// propagator takes, to the same span context, and refuses what it refuses.
func TestExtractAsPropagation(t *testing.T) {
	valid := tracectx.Traceparent("turn-1", "turn-1", "call-1")
	for _, h := range []string{
		valid,
		"00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-00",
		"00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-03",
		"00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-04",   // reserved flag
		"00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01-x", // extra field in version 00
		"01-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-09-x", // a later version may add fields
		"ff-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
		"00-4BF92F3577B34DA6A3CE929D0E0E4736-00f067aa0ba902b7-01", // upper case
		"00-00000000000000000000000000000000-00f067aa0ba902b7-01", // zero trace id
		"00-4bf92f3577b34da6a3ce929d0e0e4736-0000000000000000-01", // zero span id
		"00-4bf92f3577b34da6a3ce929d0e0e473-00f067aa0ba902b7-01",  // short
		"0g-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
		"00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7",
		"", "-", "00", "garbage",
	} {
		want := trace.SpanContextFromContext(propagation.TraceContext{}.Extract(context.Background(), propagation.MapCarrier{"traceparent": h}))
		got := trace.SpanContextFromContext(tracectx.Extract(context.Background(), h))
		if !got.Equal(want) || got.IsRemote() != want.IsRemote() {
			t.Errorf("%q: got %v, the propagator %v", h, got, want)
		}
	}
	sc := trace.SpanContextFromContext(tracectx.Extract(context.Background(), valid))
	if sc.TraceID() != tracectx.TraceID("turn-1") || sc.SpanID() != tracectx.CallSpanID("turn-1", "call-1") || !sc.IsSampled() || !sc.IsRemote() {
		t.Fatalf("traceparent of a call: %v", sc)
	}
}
