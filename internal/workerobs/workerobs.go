// Package workerobs lets the binaries of this module give a public
// worker.Worker the process's metrics and tracer without putting internal
// types in the worker package's public API: the worker package fills Set in
// at init.
package workerobs

import (
	"github.com/jetloop/jetloop/internal/metrics"
	"github.com/jetloop/jetloop/internal/tracing"
)

// Set gives w (a *worker.Worker) metrics and a tracer; either may be nil.
// Call it before the worker runs.
var Set func(w any, m *metrics.Metrics, t *tracing.Tracer)
