package worker_test

import (
	"testing"

	"github.com/jetloop/jetloop/internal/metrics"
	"github.com/jetloop/jetloop/worker"
)

// The commands give a worker their Prometheus metrics as they are.
var _ worker.Metrics = (*metrics.Metrics)(nil)

// TestOutcomesAreTheMetricsLabels: a worker's outcomes are the values of the
// outcome label of jetloop_tool_calls_total (docs/operations.md, "Metrics").
func TestOutcomesAreTheMetricsLabels(t *testing.T) {
	for got, want := range map[string]string{
		worker.OutcomeOK: metrics.OK, worker.OutcomeError: metrics.Error, worker.OutcomeTimeout: metrics.Timeout,
		worker.OutcomeAborted: metrics.Aborted, worker.OutcomeHandedBack: metrics.HandedBack,
	} {
		if got != want {
			t.Errorf("outcome %q, metrics label %q", got, want)
		}
	}
}
