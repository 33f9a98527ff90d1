// Package tracectx is the part of jetloop's tracing that a tool worker
// needs: the ids a turn's spans are known by, the traceparent a tool job
// carries, and the worker's execute_tool span. It uses only the
// OpenTelemetry API (trace, attribute, codes): the SDK and the OTLP
// exporter are internal/tracing's, linked by the commands that export.
package tracectx

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"strings"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"
)

// Header is the W3C trace-context header a tool job carries.
const Header = "traceparent"

// Scope is the instrumentation scope of jetloop's spans.
const Scope = "github.com/jetloop/jetloop"

// TraceID is the trace of a turn: the first 16 bytes of the SHA-256 of its
// id, so every process that touches the turn, and one that takes it up
// after a crash, joins the same trace with nothing passed around.
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
// root (the turn at the top of its chain of subagent calls): its worker's
// span is a child of the orchestrator's execute_tool span of the call.
func Traceparent(root, turn, call string) string {
	tid, sid := TraceID(root), CallSpanID(turn, call)
	return "00-" + hex.EncodeToString(tid[:]) + "-" + hex.EncodeToString(sid[:]) + "-01"
}

// Extract returns ctx with the remote span context a traceparent names, or
// ctx itself when the traceparent is not valid. It reads what
// propagation.TraceContext reads (which would link net/http into every
// tool worker): version 00 exactly, a later version with any extra fields,
// lower-case hex, the sampled and random flags.
func Extract(ctx context.Context, traceparent string) context.Context {
	h := traceparent
	var ver [1]byte
	if !part(ver[:], &h, 2) || ver[0] == 0xff {
		return ctx
	}
	var scc trace.SpanContextConfig
	if !part(scc.TraceID[:], &h, 32) || !part(scc.SpanID[:], &h, 16) {
		return ctx
	}
	var flags [1]byte
	if !part(flags[:], &h, 2) {
		return ctx
	}
	if ver[0] == 0 && (h != "" || flags[0] > 3) {
		return ctx // version 00 has no more fields and no other flags
	}
	scc.TraceFlags = trace.TraceFlags(flags[0]) & (trace.FlagsSampled | trace.FlagsRandom)
	scc.Remote = true
	sc := trace.NewSpanContext(scc)
	if !sc.IsValid() {
		return ctx
	}
	return trace.ContextWithRemoteSpanContext(ctx, sc)
}

// part decodes the next dash-separated field of *h, n lower-case hex
// digits, into dst, and moves *h past it.
func part(dst []byte, h *string, n int) bool {
	field, rest, _ := strings.Cut(*h, "-")
	*h = rest
	if len(field) != n {
		return false
	}
	for i := 0; i < n; i += 2 {
		hi, ok1 := nibble(field[i])
		lo, ok2 := nibble(field[i+1])
		if !ok1 || !ok2 {
			return false
		}
		dst[i/2] = hi<<4 | lo
	}
	return true
}

func nibble(c byte) (byte, bool) {
	switch {
	case '0' <= c && c <= '9':
		return c - '0', true
	case 'a' <= c && c <= 'f':
		return c - 'a' + 10, true
	}
	return 0, false
}

// ToolAttrs are the attributes of an execute_tool span.
func ToolAttrs(turn, call, name string) []attribute.KeyValue {
	return []attribute.KeyValue{
		attribute.String("gen_ai.operation.name", "execute_tool"),
		attribute.String("gen_ai.tool.name", name),
		attribute.String("gen_ai.tool.call.id", call),
		attribute.String("gen_ai.tool.type", "function"),
		attribute.String("jetloop.turn.id", turn),
	}
}

// StartRun starts a tool worker's execute_tool span of a call, a child of
// the span its job's traceparent names. A job without one (from an
// orchestrator that does not trace) names the same parent, derived from
// its ids.
func StartRun(tr trace.Tracer, traceparent, turn, call, tool, worker string, attempt int) trace.Span {
	if traceparent == "" {
		traceparent = Traceparent(turn, turn, call)
	}
	ctx := Extract(context.Background(), traceparent)
	attrs := append(ToolAttrs(turn, call, tool), attribute.String("jetloop.worker", worker), attribute.Int("jetloop.attempt", attempt))
	_, span := tr.Start(ctx, "execute_tool "+tool, trace.WithSpanKind(trace.SpanKindInternal), trace.WithAttributes(attrs...))
	return span
}

// EndRun ends a run's span with how the call ended.
func EndRun(span trace.Span, outcome string, isError bool) {
	span.SetAttributes(attribute.String("jetloop.outcome", outcome))
	if isError || (outcome != "ok" && outcome != "error") {
		span.SetAttributes(attribute.String("error.type", strings.ReplaceAll(outcome, " ", "_")))
		span.SetStatus(codes.Error, outcome)
	}
	span.End()
}
