package main

import (
	"context"
	"errors"
	"log/slog"
	"slices"
	"time"

	"github.com/jetloop/jetloop/internal/agents"
	"github.com/jetloop/jetloop/internal/backoff"
	"github.com/jetloop/jetloop/internal/bus"
	"github.com/jetloop/jetloop/internal/metrics"
	"github.com/jetloop/jetloop/internal/orchestrator"
	"github.com/jetloop/jetloop/internal/tenants"
	"github.com/nats-io/nats.go/jetstream"
)

// serveTenants serves every tenant of the tenants file at path until ctx
// ends (tenants.Watch: a tenant `jetloop tenants add` wrote is served within
// tenants.Reload, one removed stops being), each through a connection of
// its own to its account, as its orchestrator user (the seed beside the
// file). Each tenant has its own orchestrator: its own consumers, shards
// and model runners, so one tenant's flood of submissions or slow model
// calls waits on its own share, never on another's. A tenant that cannot
// be served (its streams not provisioned yet, its server away) is tried
// again, without holding up the others.
func serveTenants(ctx context.Context, path, url string, auth bus.Auth, m *metrics.Metrics, log *slog.Logger,
	set *agents.Set, shards int, opts []orchestrator.Option) error {
	// The tenants share the process's shards' worth of inputs handled at
	// once: alone a tenant has them all, with others an equal share.
	fair := orchestrator.NewFairness(shards)
	opts = append(slices.Clip(opts), orchestrator.WithFairness(fair))
	tenants.Watch(ctx, path, tenants.Reload, log, sameQuota, func(ctx context.Context, t *tenants.Tenant) {
		serveTenant(ctx, path, url, auth, m, log, set, t, opts)
	})
	return nil
}

// sameQuota reports whether a tenant's orchestrator still serves as listed:
// a changed quota or orchestrator user restarts it.
func sameQuota(a, b *tenants.Tenant) bool {
	return a.InFlight == b.InFlight && a.SubmitRate == b.SubmitRate && a.Burst() == b.Burst() &&
		a.SoftStorage == b.SoftStorage && a.Users[tenants.Orchestrator] == b.Users[tenants.Orchestrator]
}

// serveTenant runs one tenant's orchestrator until ctx ends, starting it
// again after a failure.
func serveTenant(ctx context.Context, path, url string, auth bus.Auth, m *metrics.Metrics, log *slog.Logger,
	set *agents.Set, t *tenants.Tenant, opts []orchestrator.Option) {
	// The tenant's orchestrator adds the tenant to what it logs itself.
	olog, log := log, log.With("tenant", t.Name)
	auth.Creds = tenants.SeedPath(path, t.Name, tenants.Orchestrator)
	auth.User, auth.Password, auth.PasswordFile = "", "", ""
	quota := orchestrator.Quota{InFlight: t.InFlight, Rate: t.SubmitRate, Burst: t.Burst(), SoftStorage: t.SoftStorage}
	opts = append(slices.Clip(opts), orchestrator.WithTenant(t.Name, quota), orchestrator.WithMetrics(m.Tenant(t.Name)))
	// A tenant no longer served stops counting in the process's readiness.
	defer m.DropTenant(t.Name)
	log.Info("serving a tenant", "in_flight", t.InFlight, "submit_rate", t.SubmitRate, "submit_burst", t.Burst())
	retry := backoff.Policy{First: time.Second, Max: 30 * time.Second}
	waiting := false
	err := retry.Do(ctx, func(int) error {
		err := runTenant(ctx, url, auth, olog, set, opts)
		switch {
		case err == nil || ctx.Err() != nil:
			return nil
		case errors.Is(err, tenants.ErrNotProvisioned):
			if !waiting { // said once: the operator knows what to run
				log.Warn(tenants.NotProvisioned(path, t.Name))
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

func runTenant(ctx context.Context, url string, auth bus.Auth, log *slog.Logger, set *agents.Set, opts []orchestrator.Option) error {
	copts, err := auth.Options()
	if err != nil {
		return backoff.Permanent(err)
	}
	nc, err := bus.Connect(url, "jetloop orchestrator", func(err error) { log.Warn("nats", "err", err) }, copts...)
	if err != nil {
		return err
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		return err
	}
	if err := tenants.CheckProvisioned(ctx, js); err != nil {
		return err
	}
	o, err := orchestrator.New(nc, js, log, set, opts...)
	if err != nil {
		return backoff.Permanent(err)
	}
	if err := o.Run(ctx); err != nil {
		return err
	}
	if ctx.Err() == nil {
		return errors.New("the orchestrator stopped")
	}
	return nil
}
