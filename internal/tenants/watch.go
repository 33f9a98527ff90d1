package tenants

import (
	"bytes"
	"context"
	"log/slog"
	"os"
	"sync"
	"time"
)

// Reload is how often a process serving a tenants file reads it again: a
// tenant `jetloop tenants add` wrote is served within it, one removed
// stops being.
const Reload = 2 * time.Second

// Watch serves the tenants of the tenants file at path until ctx ends. It
// runs serve for each tenant the file lists, each in a goroutine with a
// context of its own (serve returns when that context ends), and reads the
// file again every reload: a tenant no longer listed, or listed so that
// same says it no longer serves as it runs, is stopped (and started again
// when still listed); a tenant added is started. A file that cannot be
// read or parsed is reported once and the tenants read before go on. When
// ctx ends every tenant is stopped at once, so a process's drain takes one
// grace, not one per tenant; Watch returns once all have returned.
//
// The orchestrator and the tool worker (--tenants) serve their tenants
// through it, so `tenants add` and `tenants remove` reach both alike.
func Watch(ctx context.Context, path string, reload time.Duration, log *slog.Logger,
	same func(running, listed *Tenant) bool, serve func(ctx context.Context, t *Tenant)) {
	type served struct {
		tenant *Tenant
		cancel context.CancelFunc
		done   sync.WaitGroup
	}
	running := map[string]*served{}
	defer func() {
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
			last = data // a bad file is reported once, not at every reading
			f, err := Parse(data)
			if err != nil {
				log.Error("bad tenants file: serving the tenants read before", "path", path, "err", err)
				break
			}
			listed := map[string]*Tenant{}
			for i := range f.Tenants {
				listed[f.Tenants[i].Name] = &f.Tenants[i]
			}
			for name, s := range running {
				if t, ok := listed[name]; !ok || !same(s.tenant, t) {
					log.Info("no longer serving a tenant as it was", "tenant", name)
					s.cancel()
					s.done.Wait()
					delete(running, name)
				}
			}
			for name, t := range listed {
				if running[name] != nil {
					continue
				}
				tctx, cancel := context.WithCancel(ctx)
				s := &served{tenant: t, cancel: cancel}
				s.done.Go(func() { serve(tctx, t) })
				running[name] = s
			}
			if len(running) == 0 {
				log.Warn("the tenants file lists no tenant", "path", path)
			}
		}
		select {
		case <-ctx.Done():
			return
		case <-time.After(reload):
		}
	}
}
