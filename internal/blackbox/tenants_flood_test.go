package blackbox

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jetloop/jetloop/client"
	"github.com/jetloop/jetloop/internal/bus"
	"github.com/jetloop/jetloop/internal/events"
	"github.com/jetloop/jetloop/internal/tenants"
	"github.com/jetloop/jetloop/internal/testkit"
	"github.com/jetloop/jetloop/internal/testkit/inproc"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// tenantStack is the shipped multi-tenant deployment (deploy/tenants) on
// a server of its own: one orchestrator process serving every tenant of
// its tenants file, and one tool worker process per tenant, each as that
// tenant's user.
type tenantStack struct {
	t    *testing.T
	root string
	path string // deploy/tenants/tenants.yaml
	url  string
	orch *process
}

func newTenantStack(t *testing.T) *tenantStack {
	t.Helper()
	return newTenantStackWith(t, "")
}

// newTenantStackWith is newTenantStack whose tenants share one tool worker
// process (toolworker --tenants) with its file tools under shared, when
// shared is set.
func newTenantStackWith(t *testing.T, shared string) *tenantStack {
	t.Helper()
	root := repoRoot(t)
	path, srv, admins := startTenants(t)
	s := &tenantStack{t: t, root: root, path: path, url: srv.ClientURL()}
	for name := range admins {
		if shared == "" {
			w := start(t, root, "toolworker", "--nats", s.url, "--creds", tenants.SeedPath(path, name, tenants.Toolworker), "--root", t.TempDir())
			testkit.WaitFor(t, "tenant "+name+"'s tool worker to serve", func() bool { return strings.Contains(w.out.String(), "serving") })
		}
	}
	if shared != "" {
		w := start(t, root, "toolworker", "--nats", s.url, "--tenants", path, "--root", shared)
		testkit.WaitFor(t, "the shared tool worker to serve every tenant", func() bool { return strings.Count(w.out.String(), `"msg":"serving"`) == len(admins) })
	}
	s.orch = start(t, root, "orchestrator", "--nats", s.url, "--tenants", path, "--agents", "data/AGENTS.md", "--allow-scripts")
	for name := range admins {
		testkit.WaitFor(t, "the orchestrator to serve tenant "+name, func() bool {
			for line := range strings.Lines(s.orch.out.String()) {
				if strings.Contains(line, `"msg":"serving"`) && strings.Contains(line, `"tenant":"`+name+`"`) {
					return true
				}
			}
			return false
		})
	}
	return s
}

// connect connects as a tenant's user of a role (dialTenant); roles in
// accounts of their own use the API prefix.
func (s *tenantStack) connect(tenant, role string) (*nats.Conn, jetstream.JetStream) {
	s.t.Helper()
	nc := dialTenant(s.t, s.path, s.url, tenant, role).nc
	js, err := jetstream.New(nc)
	if ownAccount(role) {
		js, err = jetstream.NewWithAPIPrefix(nc, bus.APIPrefix)
	}
	if err != nil {
		s.t.Fatal(err)
	}
	return nc, js
}

// client is a Go client of a tenant, as its client user.
func (s *tenantStack) client(tenant string) *client.Client {
	s.t.Helper()
	nc, _ := s.connect(tenant, tenants.Client)
	c, err := client.New(nc, client.WithAPIPrefix(bus.APIPrefix))
	if err != nil {
		s.t.Fatal(err)
	}
	return c
}

// pending is how many submissions wait in a tenant's inbox, as its admin
// reads it.
func (s *tenantStack) pending(js jetstream.JetStream) uint64 {
	s.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	info, err := js.Stream(ctx, "JETLOOP_INBOX")
	if err != nil {
		s.t.Fatal(err)
	}
	c, err := info.Consumer(ctx, "orchestrator")
	if err != nil {
		s.t.Fatal(err)
	}
	ci, err := c.Info(ctx)
	if err != nil {
		s.t.Fatal(err)
	}
	return ci.NumPending + uint64(ci.NumAckPending)
}

func scriptOf(responses ...string) json.RawMessage {
	return json.RawMessage(`{"responses":[` + strings.Join(responses, ",") + `]}`)
}

// TestTenantsUnderFlood is the tenants issue's scenario on the shipped
// multi-tenant config: tenant a queues 20,000 submissions and 300 slow
// model calls while tenant b runs 20 ordinary turns. b's turns all finish
// while a still has thousands queued, and a's credentials can neither
// read, join, control nor count b's turns.
func TestTenantsUnderFlood(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and starts the binaries")
	}
	s := newTenantStack(t)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()

	// a's flood: 300 turns whose model takes two minutes to answer, then
	// 20,000 submissions, published as fast as the server takes them.
	anc, ajs := s.connect("a", tenants.Client)
	_, aadmin := s.connect("a", tenants.Admin)
	slow := scriptOf(`{"text":"slow","delay_ms":120000}`)
	quick := scriptOf(`{"text":"quick"}`)
	flood := func(prefix string, n int, script json.RawMessage) {
		for i := range n {
			id := fmt.Sprintf("%s-%d", prefix, i)
			data, _ := json.Marshal(events.Submit{TurnID: id, Agent: "General", Model: "script", Script: script, Input: client.Text("go")})
			if _, err := ajs.PublishAsync(events.SubjectSubmit, data, jetstream.WithMsgID(id)); err != nil {
				t.Fatal(err)
			}
			// In windows of 500: the server stores them one fsync each.
			if i%500 == 499 || i == n-1 {
				select {
				case <-ajs.PublishAsyncComplete():
				case <-ctx.Done():
					t.Fatal("a's flood was not stored")
				}
			}
		}
	}
	stored := time.Now()
	flood("a-slow", 300, slow)
	flood("a-flood", 20_000, quick)
	_ = anc
	t.Logf("a's flood stored in %v", time.Since(stored).Round(time.Millisecond))

	// b's 20 ordinary turns, each with a tool call, all at once.
	b := s.client("b")
	var wg sync.WaitGroup
	var mu sync.Mutex
	var took []time.Duration
	began := time.Now()
	for i := range 20 {
		wg.Go(func() {
			id := fmt.Sprintf("b-turn-%d", i)
			t0 := time.Now()
			if _, err := b.Submit(ctx, client.TurnRequest{TurnID: id, Agent: "General", Model: "script", Input: client.Text("go"),
				Script: scriptOf(`{"tool_calls":[{"name":"echo","arguments":{"text":"b"}}]}`, `{"text":"done"}`)}); err != nil {
				t.Error(err)
				return
			}
			res, err := b.Wait(ctx, id)
			if err != nil {
				t.Errorf("b's turn %s: %v", id, err)
				return
			}
			if res.StopReason != client.StopCompleted {
				t.Errorf("b's turn %s: %s", id, res.StopReason)
			}
			mu.Lock()
			took = append(took, time.Since(t0))
			mu.Unlock()
		})
	}
	wg.Wait()
	left := s.pending(aadmin)
	t.Logf("b's 20 turns finished in %v (slowest %v) with %d of a's submissions still queued", time.Since(began).Round(time.Millisecond), slowest(took), left)
	if t.Failed() {
		return
	}
	if left < 1000 {
		t.Errorf("a's flood was served before b's turns finished: %d left queued", left)
	}

	// a's credentials and b's turns: a's client reads and steers in a's
	// own streams, where no b turn is.
	a := s.client("a")
	ictx, icancel := context.WithTimeout(ctx, 30*time.Second)
	defer icancel()
	if _, err := a.Events(ictx, "b-turn-0"); !errors.Is(err, client.ErrTurnNotFound) {
		t.Errorf("a's client reading b's turn: %v, want it not found", err)
	}
	if _, err := a.Turn(ictx, "b-turn-0"); !errors.Is(err, client.ErrTurnNotFound) {
		t.Errorf("a's client describing b's turn: %v, want it not found", err)
	}
	if err := a.Abort(ictx, "b-turn-1", "hostile"); !errors.Is(err, client.ErrTurnNotFound) {
		t.Errorf("a's client aborting b's turn: %v, want it not found", err)
	}
	events, err := ajs.Stream(ictx, "JETLOOP_EVENTS")
	if err != nil {
		t.Fatal(err)
	}
	info, err := events.Info(ictx, jetstream.WithSubjectFilter("jetloop.events.>"))
	if err != nil {
		t.Fatal(err)
	}
	for subject := range info.State.Subjects {
		if strings.Contains(subject, "b-turn") {
			t.Errorf("a's stream info counts b's turn %s", subject)
		}
	}
	if res, err := b.Wait(ctx, "b-turn-1"); err != nil || res.StopReason != client.StopCompleted {
		t.Errorf("b's turn after a's abort: %v %v", res.StopReason, err)
	}
	if strings.Contains(strings.ToLower(s.orch.out.String()), "permissions violation") {
		t.Errorf("the orchestrator was denied something:\n%s", s.orch.out.String())
	}
}

func slowest(d []time.Duration) time.Duration {
	var m time.Duration
	for _, x := range d {
		m = max(m, x)
	}
	return m
}

// TestTenantsShareAToolWorker: one toolworker --tenants serves both
// tenants, each through its own account, each tenant's files apart.
func TestTenantsShareAToolWorker(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and starts the binaries")
	}
	root := t.TempDir()
	s := newTenantStackWith(t, root)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	for _, tenant := range []string{"a", "b"} {
		c := s.client(tenant)
		id := "write-" + tenant
		if _, err := c.Submit(ctx, client.TurnRequest{TurnID: id, Agent: "General", Model: "script", Input: client.Text("go"),
			Script: scriptOf(`{"tool_calls":[{"name":"write_file","arguments":{"path":"x.txt","content":"`+tenant+`"}}]}`, `{"text":"done"}`)}); err != nil {
			t.Fatal(err)
		}
		if res, err := c.Wait(ctx, id); err != nil || res.StopReason != client.StopCompleted {
			t.Fatalf("tenant %s: %v %v", tenant, res.StopReason, err)
		}
	}
	for _, tenant := range []string{"a", "b"} {
		data, err := os.ReadFile(filepath.Join(root, tenant, "x.txt"))
		if err != nil || string(data) != tenant {
			t.Errorf("tenant %s's file: %q %v", tenant, data, err)
		}
	}
}

// TestTenantAddedIsServed: `jetloop tenants add` is the one command that
// adds a tenant. Against a running server, an orchestrator serving the
// tenants file and a shared tool worker pool serving it too, it makes the
// tenant's accounts and streams, and both processes serve the new tenant
// without a restart: a turn of its client that calls a tool completes,
// the tool's file written under the pool's root for that tenant. Removed,
// the tenant stops being served by both.
func TestTenantAddedIsServed(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and starts the binaries")
	}
	root := repoRoot(t)
	path, config := inproc.CopyTenants(t, filepath.Join(root, "deploy"))
	srv := testkit.StartConfigAsWritten(t, config)
	url := srv.ClientURL()
	shared := t.TempDir()
	orch := start(t, root, "orchestrator", "--nats", url, "--tenants", path, "--agents", "data/AGENTS.md", "--allow-scripts")
	pool := start(t, root, "toolworker", "--nats", url, "--tenants", path, "--root", shared)
	logged := func(p *process, msg, tenant string) func() bool {
		return func() bool {
			for line := range strings.Lines(p.out.String()) {
				if strings.Contains(line, `"msg":"`+msg+`"`) && strings.Contains(line, `"tenant":"`+tenant+`"`) {
					return true
				}
			}
			return false
		}
	}
	jl := func(args ...string) string {
		t.Helper()
		out, code := run(t, root, append(args, "--nats", url, "--tenants", path)...)
		if code != 0 {
			t.Fatalf("jetloop %v: exit %d\n%s", args, code, out)
		}
		return out
	}
	jl("tenants", "add", "c")
	testkit.WaitFor(t, "the pool to serve tenant c", logged(pool, "serving", "c"))
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	nc := dialTenant(t, path, url, "c", tenants.Client).nc
	c, err := client.New(nc, client.WithAPIPrefix(bus.APIPrefix))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.Submit(ctx, client.TurnRequest{TurnID: "in-c", Agent: "General", Model: "script", Input: client.Text("go"),
		Script: scriptOf(`{"tool_calls":[{"name":"write_file","arguments":{"path":"x.txt","content":"c"}}]}`, `{"text":"done"}`)}); err != nil {
		t.Fatal(err)
	}
	if res, err := c.Wait(ctx, "in-c"); err != nil || res.StopReason != client.StopCompleted {
		t.Fatalf("c's turn: %v %v", res.StopReason, err)
	}
	if data, err := os.ReadFile(filepath.Join(shared, "c", "x.txt")); err != nil || string(data) != "c" {
		t.Errorf("c's file under the pool's root: %q %v", data, err)
	}
	jl("tenants", "remove", "c")
	testkit.WaitFor(t, "the orchestrator to stop serving c", logged(orch, "no longer serving a tenant as it was", "c"))
	testkit.WaitFor(t, "the pool to stop serving c", logged(pool, "no longer serving a tenant as it was", "c"))
}
