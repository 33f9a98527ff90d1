package main

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"os"
	"slices"
	"sync"
	"time"

	"github.com/jetloop/jetloop/internal/agents"
	"github.com/jetloop/jetloop/internal/backoff"
	"github.com/jetloop/jetloop/internal/bus"
	"github.com/jetloop/jetloop/internal/metrics"
	"github.com/jetloop/jetloop/internal/orchestrator"
	"github.com/jetloop/jetloop/internal/tenants"
	"github.com/nats-io/nats.go/jetstream"
)

// tenantsReload is how often the tenants file is read again: a tenant added
// by `jetloop tenants add` is served within it, one removed stops being.
const tenantsReload = 2 * time.Second

// serveTenants serves every tenant of the tenants file at path until ctx
// ends, each through a connection of its own to its account, as its
// orchestrator user (the seed beside the file). Each tenant has its own
// orchestrator: its own consumers, shards and model runners, so one
// tenant's flood of submissions or slow model calls waits on its own
// share, never on another's. A tenant that cannot be served (its streams
// not provisioned yet, its server away) is tried again, without holding
// up the others.
func serveTenants(ctx context.Context, path, url string, auth bus.Auth, m *metrics.Metrics, log *slog.Logger,
	set *agents.Set, shards int, opts []orchestrator.Option) error {
	running := map[string]*served{}
	// The tenants share the process's shards' worth of inputs handled at
	// once: alone a tenant has them all, with others an equal share.
	fair := orchestrator.NewFairness(shards)
	opts = append(slices.Clip(opts), orchestrator.WithFairness(fair))
	defer func() {
		// Every tenant drains at once: a stop takes one grace, not one
		// per tenant.
		for _, s := range running {
			s.cancel()
		}
		for _, s := range running {
			s.done.Wait()
		}
	}()
	var last []byte
	for {
		data, err := os.ReadFile(path)
		switch {
		case err != nil:
			log.Error("cannot read the tenants file: serving the tenants read before", "path", path, "err", err)
		case !bytes.Equal(data, last):
			last = data // a bad file is reported once, not every reading
			f, err := tenants.Load(path)
			if err != nil {
				log.Error("bad tenants file: serving the tenants read before", "err", err)
				break
			}
			want := map[string]*tenants.Tenant{}
			for i := range f.Tenants {
				want[f.Tenants[i].Name] = &f.Tenants[i]
			}
			for name, s := range running {
				if t, ok := want[name]; !ok || !sameQuota(s.tenant, t) {
					log.Info("no longer serving a tenant as it was", "tenant", name)
					s.stop()
					m.DropTenant(name)
					delete(running, name)
				}
			}
			for name, t := range want {
				if running[name] == nil {
					running[name] = serveTenant(ctx, path, url, auth, m.Tenant(name), log, set, t, opts)
				}
			}
			if len(running) == 0 {
				log.Warn("the tenants file lists no tenant", "path", path)
			}
		}
		select {
		case <-ctx.Done():
			return nil
		case <-time.After(tenantsReload):
		}
	}
}

func sameQuota(a, b *tenants.Tenant) bool {
	return a.InFlight == b.InFlight && a.SubmitRate == b.SubmitRate && a.Burst() == b.Burst() &&
		a.SoftStorage == b.SoftStorage && a.Users[tenants.Orchestrator] == b.Users[tenants.Orchestrator]
}

// served is one tenant's orchestrator, running.
type served struct {
	tenant *tenants.Tenant
	cancel context.CancelFunc
	done   sync.WaitGroup
}

func (s *served) stop() {
	s.cancel()
	s.done.Wait()
}

func serveTenant(parent context.Context, path, url string, auth bus.Auth, m *metrics.Metrics, log *slog.Logger,
	set *agents.Set, t *tenants.Tenant, opts []orchestrator.Option) *served {
	ctx, cancel := context.WithCancel(parent)
	s := &served{tenant: t, cancel: cancel}
	// The tenant's orchestrator adds the tenant to what it logs itself.
	olog, log := log, log.With("tenant", t.Name)
	auth.Creds = tenants.SeedPath(path, t.Name, tenants.Orchestrator)
	auth.User, auth.Password, auth.PasswordFile = "", "", ""
	quota := orchestrator.Quota{InFlight: t.InFlight, Rate: t.SubmitRate, Burst: t.Burst(), SoftStorage: t.SoftStorage}
	opts = append(slices.Clip(opts), orchestrator.WithTenant(t.Name, quota), orchestrator.WithMetrics(m))
	s.done.Go(func() {
		retry := backoff.Policy{First: time.Second, Max: 30 * time.Second}
		err := retry.Do(ctx, func(int) error {
			err := runTenant(ctx, url, auth, olog, set, opts)
			if err == nil || ctx.Err() != nil {
				return nil
			}
			log.Error("cannot serve the tenant: trying again", "err", err)
			return err
		})
		if err != nil {
			log.Error("cannot serve the tenant", "err", err)
		}
	})
	log.Info("serving a tenant", "in_flight", t.InFlight, "submit_rate", t.SubmitRate, "submit_burst", t.Burst())
	return s
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
