// Package tracing emits jetloop's OpenTelemetry spans, following the GenAI
// semantic conventions, over OTLP/HTTP when the standard
// OTEL_EXPORTER_OTLP_ENDPOINT (or OTEL_EXPORTER_OTLP_TRACES_ENDPOINT) is
// set; a nil *Tracer, the default, emits nothing.
//
// A turn is one trace whose id is derived from the turn id, so every
// process that works on the turn — the orchestrator that started it, one
// that resumed it after a crash, the tool workers — joins the same trace
// without passing anything around but a traceparent on each tool job:
//
//	invoke_agent <agent>          the turn, turn.started → turn.finished
//	├── chat <model>              one per model call attempt
//	└── execute_tool <tool>       one per call, tool.requested → tool.completed
//	    └── execute_tool <tool>   the tool worker's run of it (traceparent)
//
// Processes may die at any point, so the spans of the turn and of its calls
// are emitted when they end, from the times in the log, with ids derived
// from the turn and call ids: the children emitted earlier already name
// them as parents.
package tracing
