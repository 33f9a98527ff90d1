package main

import (
	"context"
	"log/slog"
	"os"
	"path/filepath"
	"sync"

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
// the others' cannot read. The tenants are those of the file at start: a
// tenant added later is served after a restart.
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
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var wg sync.WaitGroup
	codes := make([]int, len(f.Tenants))
	for i, t := range f.Tenants {
		dir := filepath.Join(root, t.Name)
		if err := os.MkdirAll(dir, 0o755); err != nil {
			log.Error("cannot make a tenant's root", "tenant", t.Name, "err", err)
			return 1
		}
		served, err := toolsIn(dir)
		if err != nil {
			log.Error("bad configuration", "tenant", t.Name, "err", err)
			return 2
		}
		a := auth
		a.Creds = tenants.SeedPath(path, t.Name, tenants.Toolworker)
		a.User, a.Password, a.PasswordFile = "", "", ""
		wg.Go(func() {
			codes[i] = serve(ctx, log.With("tenant", t.Name), a, m.Tenant(t.Name), served)
			if codes[i] != 0 {
				cancel() // one tenant's worker failing stops the pool: restart it whole
			}
		})
	}
	wg.Wait()
	for _, c := range codes {
		if c != 0 {
			return c
		}
	}
	return 0
}
