package metrics

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"net"
	"net/http"
	"slices"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus/promhttp"
)

// Check says whether one part of the process is ready to work: nil when it
// is, else why not.
type Check func() error

type check struct {
	name string
	fn   Check
}

// AddCheck makes /readyz depend on fn, under name. Parts register before
// they start, so the process is not ready while they set up.
func (m *Metrics) AddCheck(name string, fn Check) {
	if m == nil {
		return
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	m.checks = append(m.checks, check{name, fn})
}

// DropTenant stops the process's readiness depending on a tenant it no
// longer serves. The tenant's series stay: Tenant(name) returns them again.
func (m *Metrics) DropTenant(name string) {
	if m == nil {
		return
	}
	m.mu.Lock()
	t := m.tenants[name]
	m.mu.Unlock()
	if t != nil {
		t.mu.Lock()
		t.checks = nil
		t.mu.Unlock()
	}
}

// Ready returns nil when every registered part is ready. A process with no
// part registered yet is not.
func (m *Metrics) Ready() error {
	m.mu.Lock()
	checks := slices.Clip(m.checks)
	for _, name := range slices.Sorted(maps.Keys(m.tenants)) {
		t := m.tenants[name]
		t.mu.Lock()
		for _, c := range t.checks {
			checks = append(checks, check{"tenant " + name + ": " + c.name, c.fn})
		}
		t.mu.Unlock()
	}
	m.mu.Unlock()
	if len(checks) == 0 {
		return errors.New("starting")
	}
	var errs []string
	for _, c := range checks {
		if err := c.fn(); err != nil {
			errs = append(errs, c.name+": "+err.Error())
		}
	}
	if len(errs) > 0 {
		return errors.New(strings.Join(errs, "; "))
	}
	return nil
}

// Handler serves /metrics (Prometheus text format), /healthz (the process
// runs: always 200) and /readyz (200 when Ready, else 503 with the reasons).
func (m *Metrics) Handler() http.Handler {
	mux := http.NewServeMux()
	mux.Handle("GET /metrics", promhttp.HandlerFor(m.reg, promhttp.HandlerOpts{}))
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) {
		fmt.Fprintln(w, "ok")
	})
	mux.HandleFunc("GET /readyz", func(w http.ResponseWriter, _ *http.Request) {
		if err := m.Ready(); err != nil {
			http.Error(w, "not ready: "+err.Error(), http.StatusServiceUnavailable)
			return
		}
		fmt.Fprintln(w, "ready")
	})
	return mux
}

// Server serves a process's metrics endpoints.
type Server struct {
	ln  net.Listener
	srv *http.Server
}

// Listen binds addr (HOST:PORT; port 0 picks a free one) for m's endpoints.
// It fails at once when the address is taken, so a process started with
// --metrics-addr never runs unobserved by mistake.
func (m *Metrics) Listen(addr string) (*Server, error) {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("metrics: listen on %s: %w", addr, err)
	}
	return &Server{ln: ln, srv: &http.Server{Handler: m.Handler(), ReadHeaderTimeout: 10 * time.Second}}, nil
}

// Addr is the address the server listens on.
func (s *Server) Addr() string { return s.ln.Addr().String() }

// Serve serves until ctx ends, then stops within a few seconds.
func (s *Server) Serve(ctx context.Context) error {
	stop := context.AfterFunc(ctx, func() {
		sctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
		defer cancel()
		_ = s.srv.Shutdown(sctx)
	})
	defer stop()
	if err := s.srv.Serve(s.ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
		return fmt.Errorf("metrics: serve: %w", err)
	}
	return nil
}
