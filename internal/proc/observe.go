package proc

import (
	"context"
	"log/slog"
	"time"

	"github.com/jetloop/jetloop/internal/metrics"
	"github.com/jetloop/jetloop/internal/tracing"
)

// MetricsAddrUsage is the help of every process's --metrics-addr.
const MetricsAddrUsage = "serve /metrics, /healthz and /readyz on HOST:PORT (off when empty)"

// StartMetrics serves a process's metrics on addr until stop is called;
// with addr empty, metrics are off: m is nil and stop does nothing. The
// endpoints outlive a graceful stop's drain, so /healthz answers until the
// process exits.
func StartMetrics(addr string, log *slog.Logger) (m *metrics.Metrics, stop func(), err error) {
	return startMetrics(addr, log, metrics.New)
}

// StartTenantsMetrics is StartMetrics for a process that serves several
// tenants: each tenant's metrics are m.Tenant(name)'s.
func StartTenantsMetrics(addr string, log *slog.Logger) (m *metrics.Metrics, stop func(), err error) {
	return startMetrics(addr, log, metrics.NewTenants)
}

func startMetrics(addr string, log *slog.Logger, newMetrics func() *metrics.Metrics) (m *metrics.Metrics, stop func(), err error) {
	if addr == "" {
		return nil, func() {}, nil
	}
	m = newMetrics()
	srv, err := m.Listen(addr)
	if err != nil {
		return nil, nil, err
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		if err := srv.Serve(ctx); err != nil {
			log.Error("metrics endpoint stopped", "err", err)
		}
	}()
	log.Info("serving metrics", "url", "http://"+srv.Addr()+"/metrics")
	return m, func() { cancel(); <-done }, nil
}

// StartTracing returns the tracer the OTEL_* environment asks for (nil
// when it asks for none) and the stop that exports what is left.
func StartTracing(ctx context.Context, service string, log *slog.Logger) (t *tracing.Tracer, stop func(), err error) {
	t, err = tracing.FromEnv(ctx, service)
	if err != nil || t == nil {
		return nil, func() {}, err
	}
	log.Info("exporting traces over OTLP/HTTP")
	return t, func() {
		sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		if err := t.Shutdown(sctx); err != nil {
			log.Warn("could not export the last spans", "err", err)
		}
	}, nil
}
