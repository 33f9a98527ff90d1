package tenants

import (
	"context"
	"errors"
	"log/slog"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jetloop/jetloop/internal/backoff"
	"github.com/jetloop/jetloop/internal/testkit"
)

// records is what a supervisor's logger was told.
type records struct {
	mu   sync.Mutex
	msgs []string
}

func (r *records) Enabled(context.Context, slog.Level) bool { return true }
func (r *records) Handle(_ context.Context, rec slog.Record) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.msgs = append(r.msgs, rec.Message)
	return nil
}
func (r *records) WithAttrs([]slog.Attr) slog.Handler { return r }
func (r *records) WithGroup(string) slog.Handler      { return r }
func (r *records) count(prefix string) int {
	r.mu.Lock()
	defer r.mu.Unlock()
	n := 0
	for _, m := range r.msgs {
		if strings.HasPrefix(m, prefix) {
			n++
		}
	}
	return n
}

// TestSupervisor: each tenant is served with its role's seed; one whose
// server fails is served again, one not provisioned is said once and
// waited for, a permanent failure gives the tenant up alone, and the end of
// the context stops every tenant before Run returns, each counted out.
func TestSupervisor(t *testing.T) {
	p := write(t, "tenants:\n  - name: a\n"+users()+"  - name: b\n"+users()+"    keys: /keys/b\n"+
		"  - name: c\n"+users()+"  - name: d\n"+users())
	var (
		mu      sync.Mutex
		creds   = map[string]string{}
		tries   = map[string]int{}
		stopped = map[string]int{}
		running = map[string]bool{}
	)
	serve := func(ctx context.Context, tn *Tenant, seed string) error {
		mu.Lock()
		creds[tn.Name] = seed
		tries[tn.Name]++
		n := tries[tn.Name]
		mu.Unlock()
		switch {
		case tn.Name == "b" && n < 3:
			return errors.New("b's server is away")
		case tn.Name == "c" && n < 3:
			return ErrNotProvisioned
		case tn.Name == "d":
			return backoff.Permanent(errors.New("d's configuration is bad"))
		}
		mu.Lock()
		running[tn.Name] = true
		mu.Unlock()
		<-ctx.Done()
		mu.Lock()
		running[tn.Name] = false
		mu.Unlock()
		return nil
	}
	log := &records{}
	s, err := NewSupervisor(p, Orchestrator, slog.New(log), serve,
		WithReload(5*time.Millisecond, backoff.Policy{First: time.Millisecond, Max: 5 * time.Millisecond}),
		WithStopped(func(name string) { mu.Lock(); stopped[name]++; mu.Unlock() }))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- s.Run(ctx) }()
	testkit.WaitFor(t, "a, b and c to be served", func() bool {
		mu.Lock()
		defer mu.Unlock()
		return running["a"] && running["b"] && running["c"]
	})
	testkit.WaitFor(t, "d to be given up", func() bool { return log.count("cannot serve the tenant") >= 2 })
	if n := log.count("tenant c is not provisioned"); n != 1 {
		t.Errorf("c not provisioned was said %d times, want once", n)
	}
	cancel()
	select {
	case err := <-done:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("Run did not return after its context ended")
	}
	mu.Lock()
	defer mu.Unlock()
	for name, r := range running {
		if r {
			t.Errorf("%s still served after Run returned", name)
		}
	}
	want := map[string]string{
		"a": SeedPath(p, "a", Orchestrator),
		"b": filepath.Join("/keys/b", "orchestrator.nk"),
		"c": SeedPath(p, "c", Orchestrator),
		"d": SeedPath(p, "d", Orchestrator),
	}
	for name, w := range want {
		if creds[name] != w {
			t.Errorf("%s served with %q, want %q", name, creds[name], w)
		}
	}
	if tries["b"] != 3 || tries["c"] != 3 || tries["d"] != 1 {
		t.Errorf("tries %v, want b and c 3, d 1", tries)
	}
	// Each failed try and each tenant's end drop what the process counted
	// of it.
	if stopped["a"] != 1 || stopped["b"] != 3 || stopped["c"] != 3 || stopped["d"] != 2 {
		t.Errorf("stopped %v, want a 1, b 3, c 3, d 2", stopped)
	}
}

func TestSupervisorRefusesAnUnusableFile(t *testing.T) {
	serve := func(context.Context, *Tenant, string) error { return nil }
	for name, path := range map[string]string{
		"missing":    filepath.Join(t.TempDir(), "none.yaml"),
		"no tenants": write(t, "tenants: []\n"),
		"bad":        write(t, "tenants: [oops"),
	} {
		s, err := NewSupervisor(path, Toolworker, slog.New(slog.DiscardHandler), serve)
		if err != nil {
			t.Fatal(err)
		}
		if err := s.Run(t.Context()); err == nil {
			t.Errorf("%s: Run served", name)
		}
	}
}

func TestTenantSeedPath(t *testing.T) {
	p := filepath.Join("/etc", "jetloop", "tenants.yaml")
	for _, tc := range []struct{ keys, want string }{
		{"", "/etc/jetloop/a/client.nk"},
		{"/home/u/.config/jetloop/tenants/a", "/home/u/.config/jetloop/tenants/a/client.nk"},
		{"keys/a", "/etc/jetloop/keys/a/client.nk"},
	} {
		tn := Tenant{Name: "a", Keys: tc.keys}
		if got := tn.SeedPath(p, Client); got != tc.want {
			t.Errorf("keys %q: %s, want %s", tc.keys, got, tc.want)
		}
	}
}
