package main

import (
	"context"
	"errors"
	"log/slog"
	"os"
	"path/filepath"
	"time"

	"github.com/jetloop/jetloop/internal/backoff"
	"github.com/jetloop/jetloop/internal/bus"
	"github.com/jetloop/jetloop/internal/metrics"
	"github.com/jetloop/jetloop/internal/tenants"
	"github.com/jetloop/jetloop/internal/tools"
)

// serveTenants serves every tenant of the tenants file at path as a shared
// pool: a worker per tenant, each through a connection of its own to the
// tenant's account as its toolworker user, so that a job, a result or a
// cancel of one tenant can never reach another's. Each has its own
// concurrency (a tenant's calls never wait for another's slots) and its
// file tools confined to root/<tenant>, so what one tenant's calls write
// the others' cannot read. The file is read again as the orchestrator
// reads it (tenants.Watch): a tenant added is served within
// tenants.Reload, one removed stops being, without a restart.
//
// A file that cannot be used at start is a bad configuration (exit 2); a
// tenant's worker that stops with an error is started again, without
// holding up the others.
func serveTenants(ctx context.Context, log *slog.Logger, path, root string, auth bus.Auth, m *metrics.Metrics,
	toolsIn func(root string) ([]tools.Tool, error),
	serve func(ctx context.Context, log *slog.Logger, auth bus.Auth, m *metrics.Metrics, served []tools.Tool) int) int {
	f, err := tenants.Load(path)
	if err != nil {
		log.Error("bad tenants file", "err", err)
		return 2
	}
	if len(f.Tenants) == 0 {
		log.Error("the tenants file lists no tenant", "path", path)
		return 2
	}
	tenants.Watch(ctx, path, tenants.Reload, log, sameWorker, func(ctx context.Context, t *tenants.Tenant) {
		serveTenant(ctx, log.With("tenant", t.Name), path, root, auth, m, t, toolsIn, serve)
	})
	return 0
}

// sameWorker reports whether a tenant's worker still serves as listed: a
// new toolworker user (a new seed beside the file) restarts it.
func sameWorker(a, b *tenants.Tenant) bool {
	return a.Users[tenants.Toolworker] == b.Users[tenants.Toolworker]
}

// serveTenant runs one tenant's worker until ctx ends, starting it again
// after an error: a tenant just added may not be reachable yet (its
// account wired by the server's next reload).
func serveTenant(ctx context.Context, log *slog.Logger, path, root string, auth bus.Auth, m *metrics.Metrics, t *tenants.Tenant,
	toolsIn func(root string) ([]tools.Tool, error),
	serve func(ctx context.Context, log *slog.Logger, auth bus.Auth, m *metrics.Metrics, served []tools.Tool) int) {
	// A tenant no longer served stops counting in the process's readiness.
	defer m.DropTenant(t.Name)
	dir := filepath.Join(root, t.Name)
	a := auth
	a.Creds = tenants.SeedPath(path, t.Name, tenants.Toolworker)
	a.User, a.Password, a.PasswordFile = "", "", ""
	retry := backoff.Policy{First: time.Second, Max: 30 * time.Second}
	waiting := false
	_ = retry.Do(ctx, func(int) error {
		if err := os.MkdirAll(dir, 0o755); err != nil {
			log.Error("cannot make the tenant's root: trying again", "root", dir, "err", err)
			return err
		}
		served, err := toolsIn(dir)
		if err != nil {
			log.Error("bad configuration for the tenant: trying again", "err", err)
			return err
		}
		// A worker started again replaces the readiness of the one before.
		m.DropTenant(t.Name)
		code := serve(ctx, log, a, m.Tenant(t.Name), served)
		switch {
		case ctx.Err() != nil:
		case code == exitNotProvisioned:
			if !waiting { // said once: the operator knows what to run
				log.Warn(tenants.NotProvisioned(path, t.Name))
				waiting = true
			}
			return errStopped
		default:
			log.Error("the tenant's worker stopped: trying again", "exit", code)
			return errStopped
		}
		return nil
	})
}

// exitNotProvisioned is what serve returns for a tenant whose streams are
// not there yet.
const exitNotProvisioned = -1

// errStopped is a tenant's worker that stopped with an error.
var errStopped = errors.New("toolworker: the tenant's worker stopped")
