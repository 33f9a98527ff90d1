package main

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"

	"github.com/jetloop/jetloop/internal/bus"
	"github.com/jetloop/jetloop/internal/metrics"
	"github.com/jetloop/jetloop/internal/tenants"
	"github.com/jetloop/jetloop/internal/tools"
)

// serveTenants serves every tenant of the tenants file at path as a shared
// pool (tenants.Supervisor): a worker per tenant, each through a connection
// of its own to the tenant's account as its toolworker user, so that a
// job, a result or a cancel of one tenant can never reach another's. Each
// has its own concurrency (a tenant's calls never wait for another's
// slots) and its file tools confined to root/<tenant>, so what one
// tenant's calls write the others' cannot read.
//
// A file that cannot be used at start is a bad configuration (exit 2).
func serveTenants(ctx context.Context, log *slog.Logger, path, root string, auth bus.Auth, m *metrics.Metrics,
	toolsIn func(root string) ([]tools.Tool, error),
	serve func(ctx context.Context, log *slog.Logger, auth bus.Auth, m *metrics.Metrics, served []tools.Tool) int) int {
	worker := func(ctx context.Context, t *tenants.Tenant, creds string) error {
		dir := filepath.Join(root, t.Name)
		if err := os.MkdirAll(dir, 0o755); err != nil {
			return fmt.Errorf("make the tenant's root: %w", err)
		}
		served, err := toolsIn(dir)
		if err != nil {
			return fmt.Errorf("bad configuration for the tenant: %w", err)
		}
		a := auth
		a.Creds, a.User, a.Password, a.PasswordFile = creds, "", "", ""
		switch code := serve(ctx, log.With("tenant", t.Name), a, m.Tenant(t.Name), served); {
		case ctx.Err() != nil:
			return nil
		case code == exitNotProvisioned:
			return tenants.ErrNotProvisioned
		default:
			return fmt.Errorf("the tenant's worker stopped (exit %d)", code)
		}
	}
	s, err := tenants.NewSupervisor(path, tenants.Toolworker, log, worker, tenants.WithStopped(m.DropTenant))
	if err == nil {
		err = s.Run(ctx)
	}
	if err != nil {
		log.Error("bad tenants file", "err", err)
		return 2
	}
	return 0
}

// exitNotProvisioned is what serve returns for a tenant whose streams are
// not there yet.
const exitNotProvisioned = -1
