package main

import (
	"context"
	"errors"
	"log/slog"
	"slices"

	"github.com/jetloop/jetloop/internal/agents"
	"github.com/jetloop/jetloop/internal/backoff"
	"github.com/jetloop/jetloop/internal/bus"
	"github.com/jetloop/jetloop/internal/metrics"
	"github.com/jetloop/jetloop/internal/orchestrator"
	"github.com/jetloop/jetloop/internal/tenants"
	"github.com/nats-io/nats.go/jetstream"
)

// serveTenants serves every tenant of the tenants file at path until ctx
// ends (tenants.Supervisor), each by an orchestrator of its own: its own
// consumers, shards and model runners, so one tenant's flood of
// submissions or slow model calls waits on its own share, never on
// another's.
func serveTenants(ctx context.Context, path, url string, auth bus.Auth, m *metrics.Metrics, log *slog.Logger,
	set *agents.Set, shards int, opts []orchestrator.Option) error {
	// The tenants share the process's shards' worth of inputs handled at
	// once: alone a tenant has them all, with others an equal share.
	fair := orchestrator.NewFairness(shards)
	opts = append(slices.Clip(opts), orchestrator.WithFairness(fair))
	serve := func(ctx context.Context, t *tenants.Tenant, creds string) error {
		a := auth
		a.Creds, a.User, a.Password, a.PasswordFile = creds, "", "", ""
		quota := orchestrator.Quota{InFlight: t.InFlight, Rate: t.SubmitRate, Burst: t.Burst(), SoftStorage: t.SoftStorage}
		log.Info("serving a tenant", "tenant", t.Name, "in_flight", t.InFlight, "submit_rate", t.SubmitRate, "submit_burst", t.Burst())
		// The tenant's orchestrator adds the tenant to what it logs itself.
		return runTenant(ctx, url, a, log, set, append(slices.Clip(opts), orchestrator.WithTenant(t.Name, quota), orchestrator.WithMetrics(m.Tenant(t.Name))))
	}
	s, err := tenants.NewSupervisor(path, tenants.Orchestrator, log, serve, tenants.WithSame(sameQuota), tenants.WithStopped(m.DropTenant))
	if err != nil {
		return err
	}
	return s.Run(ctx)
}

// sameQuota reports whether a tenant's orchestrator still serves as listed:
// a changed quota or orchestrator user restarts it.
func sameQuota(a, b *tenants.Tenant) bool {
	return a.InFlight == b.InFlight && a.SubmitRate == b.SubmitRate && a.Burst() == b.Burst() &&
		a.SoftStorage == b.SoftStorage && a.Users[tenants.Orchestrator] == b.Users[tenants.Orchestrator] && a.Keys == b.Keys
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
