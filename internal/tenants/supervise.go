package tenants

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/jetloop/jetloop/internal/backoff"
)

// Supervisor serves every tenant of a tenants file, each through a
// connection of its own as one role's user: the orchestrator and the tool
// worker run one (--tenants) with what serves one tenant. A tenant is
// served as long as the file lists it (Watch); one whose server stops with
// an error is started again, without holding up the others.
type Supervisor struct {
	path, role string
	log        *slog.Logger
	serve      ServeFunc
	same       func(running, listed *Tenant) bool
	stopped    func(tenant string)
	reload     time.Duration
	retry      backoff.Policy
}

// ServeFunc serves one tenant until ctx ends, connecting with the seed at
// creds, and returns nil then. An error stops it: ErrNotProvisioned (the
// tenant's streams are not there yet) is waited out quietly, one that
// backoff.Permanent marks gives the tenant up, any other is logged and the
// tenant served again after a pause.
type ServeFunc func(ctx context.Context, t *Tenant, creds string) error

// SupervisorOption configures a Supervisor.
type SupervisorOption func(*Supervisor) error

// WithSame sets what says that a tenant still serves as the file lists it
// now; when it says no, the tenant is stopped and started again. The
// default compares the role's user and where its seed is: a new seed
// restarts the tenant.
func WithSame(same func(running, listed *Tenant) bool) SupervisorOption {
	return func(s *Supervisor) error { s.same = same; return nil }
}

// WithStopped sets what runs after a tenant's server returns, before it is
// started again and when the tenant stops being served: what the process
// counts of the tenant (its readiness) is dropped there.
func WithStopped(stopped func(tenant string)) SupervisorOption {
	return func(s *Supervisor) error { s.stopped = stopped; return nil }
}

// WithReload sets how often the file is read again (default Reload) and
// the pauses between a tenant's attempts (default 1 s doubling up to 30 s).
func WithReload(reload time.Duration, retry backoff.Policy) SupervisorOption {
	return func(s *Supervisor) error {
		if reload <= 0 || retry.First <= 0 {
			return fmt.Errorf("tenants: reload and pauses must be positive, got %s and %s", reload, retry.First)
		}
		s.reload, s.retry = reload, retry
		return nil
	}
}

// NewSupervisor returns a supervisor of the tenants file at path whose
// tenants serve connects as their user of role (Orchestrator, Toolworker).
func NewSupervisor(path, role string, log *slog.Logger, serve ServeFunc, opts ...SupervisorOption) (*Supervisor, error) {
	if serve == nil {
		return nil, errors.New("tenants: nil serve")
	}
	s := &Supervisor{path: path, role: role, log: log, serve: serve, stopped: func(string) {},
		reload: Reload, retry: backoff.Policy{First: time.Second, Max: 30 * time.Second}}
	s.same = func(a, b *Tenant) bool { return a.Users[s.role] == b.Users[s.role] && a.Keys == b.Keys }
	for _, opt := range opts {
		if err := opt(s); err != nil {
			return nil, err
		}
	}
	return s, nil
}

// Run serves the tenants until ctx ends, and returns once every tenant's
// server has returned. A file that cannot be read or parsed at the start
// is an error: a process would otherwise serve nothing, in silence.
func (s *Supervisor) Run(ctx context.Context) error {
	f, err := Load(s.path)
	if err != nil {
		return err
	}
	if len(f.Tenants) == 0 {
		return fmt.Errorf("tenants: %s lists no tenant", s.path)
	}
	Watch(ctx, s.path, s.reload, s.log, s.same, s.tenant)
	return nil
}

// tenant serves t until ctx ends, starting it again after an error.
func (s *Supervisor) tenant(ctx context.Context, t *Tenant) {
	log := s.log.With("tenant", t.Name)
	defer s.stopped(t.Name)
	creds := t.SeedPath(s.path, s.role)
	waiting := false
	err := s.retry.Do(ctx, func(int) error {
		err := s.serve(ctx, t, creds)
		if ctx.Err() != nil {
			return nil
		}
		s.stopped(t.Name)
		switch {
		case err == nil:
			err = errors.New("tenants: the tenant's server stopped")
		case errors.Is(err, ErrNotProvisioned):
			if !waiting { // said once: the operator knows what to run
				log.Warn(NotProvisioned(s.path, t.Name))
				waiting = true
			}
			return err
		}
		log.Error("cannot serve the tenant: trying again", "err", err)
		return err
	})
	if err != nil && ctx.Err() == nil {
		log.Error("cannot serve the tenant", "err", err)
	}
}
