package bench

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"testing"
	"time"

	"github.com/jetloop/jetloop/internal/bus"
	"github.com/jetloop/jetloop/internal/tenants"
	"github.com/jetloop/jetloop/internal/testkit"
	"github.com/jetloop/jetloop/internal/testkit/inproc"
)

// TestRoleLoadWorksAsTheUntrustedRoles runs the tenants phase's load of a's
// untrusted roles briefly on the shipped deploy/tenants: each role does its
// work (reads of a's logs, subscriptions held, presence puts), and the
// server refuses none of it, so the figure measures what the roles may do.
func TestRoleLoadWorksAsTheUntrustedRoles(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	path, config := inproc.CopyTenants(t, filepath.Join("..", "..", "deploy"))
	srv := testkit.StartConfig(t, config)
	seed := func(role string) string { return tenants.SeedPath(path, "a", role) }
	nc, js, err := dial(srv.ClientURL(), "admin", bus.Auth{Creds: seed(tenants.Admin), Inbox: bus.InboxCLI}, discard())
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	f, err := tenants.Load(path)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := bus.Apply(ctx, js, f.Get("a").Provision(bus.DefaultProvision(nc.MaxPayload()))); err != nil {
		t.Fatal(err)
	}
	// A log for the readers: what they read is stored bytes, whatever they say.
	for i := range 30 {
		if _, err := js.Publish(ctx, fmt.Sprintf("jetloop.events.s1.t%d", i%3), []byte(`{}`)); err != nil {
			t.Fatal(err)
		}
	}
	l, err := startRoleLoad(ctx, srv.ClientURL(), seed)
	if err != nil {
		t.Fatal(err)
	}
	if err := l.busy(ctx); err != nil {
		t.Fatal(errors.Join(err, l.stop()))
	}
	if err := l.stop(); err != nil {
		t.Fatalf("a's roles went beyond what they may do: %v", err)
	}
	if l.reads.Load() < 30 || l.follows.Load() == 0 || l.puts.Load() == 0 || l.subs != 2*heldSubs {
		t.Fatalf("%d reads, %d follows, %d puts, %d subscriptions held; want a whole log read, puts, %d held",
			l.reads.Load(), l.follows.Load(), l.puts.Load(), l.subs, 2*heldSubs)
	}
	// The puts landed in a's bucket, with values of the largest size.
	kv, err := js.KeyValue(ctx, bus.BucketWorkers)
	if err != nil {
		t.Fatal(err)
	}
	e, err := kv.Get(ctx, "echo.bench-roles-0")
	if err != nil {
		t.Fatal(err)
	}
	if len(e.Value()) != bus.WorkerValueMax {
		t.Fatalf("a presence value of %d bytes, want %d", len(e.Value()), bus.WorkerValueMax)
	}
}
