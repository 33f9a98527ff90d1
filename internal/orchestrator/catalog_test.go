package orchestrator

import (
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/jetloop/jetloop/internal/bus"
	"github.com/jetloop/jetloop/internal/events"
	"github.com/jetloop/jetloop/internal/testkit"
	"github.com/nats-io/nats.go/jetstream"
)

// A cluster that loses its quorum for longer than the tools' TTL leaves
// the registry's streams without a leader: no worker can refresh its
// entries, and the server drops them as soon as it is back. A turn started
// then must still be offered the tools served before, until their workers
// have had the TTL to write again; a worker that never does still loses
// its tools.
func TestCatalogKeepsToolsThroughARegistryOutage(t *testing.T) {
	// Long enough that a loaded machine's late probes of the registry
	// (each up to a second) are a small part of it.
	const ttl = 8 * time.Second
	c := testkit.StartCluster(t, 3)
	_, js := c.Connect(t)
	ctx := t.Context()
	var tools jetstream.KeyValue
	for _, bucket := range []string{events.BucketTools, bus.BucketWorkers} {
		kv, err := js.CreateKeyValue(ctx, jetstream.KeyValueConfig{Bucket: bucket, TTL: ttl,
			Storage: jetstream.FileStorage, Replicas: 3})
		if err != nil {
			t.Fatal(err)
		}
		if bucket == events.BucketTools {
			tools = kv
		}
	}
	info, _ := json.Marshal(events.ToolInfo{Name: "shell", Description: "runs a command",
		Parameters: json.RawMessage(`{"type":"object"}`), TimeoutMs: 5000, Workers: 1})
	// A replicated bucket just made may not have elected its leader yet.
	testkit.WaitFor(t, "the registry to take a put", func() bool {
		_, err := tools.Put(ctx, "shell", info)
		return err == nil
	})
	cat, err := watchTools(ctx, js, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	offered := func() bool {
		return slices.ContainsFunc(cat.live(), func(s events.ToolSpec) bool { return s.Name == "shell" })
	}
	testkit.WaitFor(t, "the catalog to offer shell", offered)

	// The nodes that lead the registry's streams go, and one more: the one
	// left has no quorum, and the streams no leader.
	leaders := map[string]bool{}
	for _, name := range registryStreams {
		s, err := js.Stream(ctx, name)
		if err != nil {
			t.Fatal(err)
		}
		leaders[s.CachedInfo().Cluster.Leader] = true
	}
	var kept *testkit.Node
	for _, n := range c.Nodes {
		if !leaders[n.Name] && kept == nil {
			kept = n
		}
	}
	// Refreshed last just before: what ages it from here is the outage's
	// doing.
	if _, err := tools.Put(ctx, "shell", info); err != nil {
		t.Fatal(err)
	}
	var gone []*testkit.Node
	var wg sync.WaitGroup
	for _, n := range c.Nodes {
		if n != kept {
			gone = append(gone, n)
			wg.Go(n.Kill)
		}
	}
	wg.Wait()
	testkit.WaitFor(t, "the registry to be out for longer than its TTL", func() bool {
		return cat.out.total(time.Now()) > ttl
	})
	if !offered() {
		t.Fatal("shell is not offered while the registry cannot be written")
	}
	for _, n := range gone {
		n.Restart(t)
	}
	testkit.WaitFor(t, "the registry to be writable", func() bool { return writable(ctx, js, time.Second) })
	if _, err := tools.Get(ctx, "shell"); !errors.Is(err, jetstream.ErrKeyNotFound) {
		t.Logf("the server still holds shell's entry (%v)", err)
	}
	if !offered() {
		t.Fatal("right after the registry came back, shell is not offered: its worker had no time to refresh it")
	}
	// Its worker never refreshes it: it goes within the TTL.
	back := time.Now()
	testkit.WaitFor(t, "shell to leave the catalog", func() bool { return !offered() })
	if d := time.Since(back); d > ttl+2*time.Second {
		t.Errorf("shell left the catalog %s after the registry came back, want within its TTL (%s)", d, ttl)
	}
}

// Without an outage, an entry not refreshed leaves the catalog after the
// TTL: a dead worker's tools are not offered.
func TestCatalogDropsAToolNotRefreshed(t *testing.T) {
	const ttl = time.Second
	s := testkit.Start(t)
	_, js := s.Connect(t)
	ctx := t.Context()
	tools, err := js.CreateKeyValue(ctx, jetstream.KeyValueConfig{Bucket: events.BucketTools, TTL: ttl})
	if err != nil {
		t.Fatal(err)
	}
	info, _ := json.Marshal(events.ToolInfo{Name: "echo", Parameters: json.RawMessage(`{"type":"object"}`), Workers: 1})
	put := time.Now()
	if _, err := tools.Put(ctx, "echo", info); err != nil {
		t.Fatal(err)
	}
	cctx, cancel := context.WithCancel(ctx)
	defer cancel()
	cat, err := watchTools(cctx, js, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	testkit.WaitFor(t, "echo to leave the catalog", func() bool { return len(cat.live()) == 0 })
	if d := time.Since(put); d < ttl || d > 3*ttl {
		t.Errorf("echo left the catalog %s after its last refresh, want about its TTL (%s)", d, ttl)
	}
}
