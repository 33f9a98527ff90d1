package blackbox

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/jetloop/jetloop/internal/bus"
	"github.com/jetloop/jetloop/internal/events"
	"github.com/jetloop/jetloop/internal/tenants"
	"github.com/jetloop/jetloop/internal/testkit"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// secretOfB marks everything tenant b holds: no answer to tenant a's
// credentials may carry it.
const secretOfB = "SECRET-OF-B"

// dialTenant connects as role of tenant, with the role's shipped nkey seed
// and the reply prefix its processes use.
func dialTenant(t *testing.T, path, url, tenant, role string) *roleConn {
	t.Helper()
	opt, err := nats.NkeyOptionFromSeed(tenants.SeedPath(path, tenant, role))
	if err != nil {
		t.Fatal(err)
	}
	c := &roleConn{errs: make(chan error, 64), own: ownAccount(role)}
	c.nc, err = nats.Connect(url, opt, nats.CustomInboxPrefix(inboxes[role]),
		nats.ErrorHandler(func(_ *nats.Conn, _ *nats.Subscription, err error) {
			select {
			case c.errs <- err:
			default:
			}
		}))
	if err != nil {
		t.Fatalf("connect as %s of tenant %s: %v", role, tenant, err)
	}
	t.Cleanup(c.nc.Close)
	return c
}

// startTenants starts a server from the shipped multi-tenant config and
// provisions every tenant's streams as its admin.
func startTenants(t *testing.T) (path string, srv *testkit.Server, admins map[string]jetstream.JetStream) {
	t.Helper()
	path = filepath.Join(repoRoot(t), "deploy", "tenants", "tenants.yaml")
	f, err := tenants.Load(path)
	if err != nil {
		t.Fatal(err)
	}
	srv = testkit.StartConfig(t, filepath.Join(filepath.Dir(path), "nats.conf"))
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	admins = map[string]jetstream.JetStream{}
	for _, tn := range f.Tenants {
		c := dialTenant(t, path, srv.ClientURL(), tn.Name, tenants.Admin)
		js, err := jetstream.New(c.nc)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := bus.Apply(ctx, js, tn.Provision(bus.DefaultProvision(c.nc.MaxPayload()))); err != nil {
			t.Fatalf("provision tenant %s: %v", tn.Name, err)
		}
		admins[tn.Name] = js
	}
	return path, srv, admins
}

// TestTenantsAreIsolated: with tenant a's client, viewer and tool worker
// credentials on the shipped multi-tenant config, every route of the
// isolation tests — direct and leader reads by sequence and by subject,
// stream and account info, stream and consumer listings, KV gets and
// listings, ordered and push consumers, reflected replies, core
// subscriptions — finds nothing of tenant b's turn log, dead letter,
// checkpoint, jobs or live turns: reads land in a's own streams or are
// refused, and what a's client submits under b's turn and session ids
// reaches a's inbox only. Every forbidden action of TestRolesAreDenied is
// refused to a's roles as well, and b's streams do not change.
func TestTenantsAreIsolated(t *testing.T) {
	path, srv, admins := startTenants(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	for name, js := range admins {
		for _, tool := range []string{"echo", "grep"} {
			if _, err := js.CreateOrUpdateConsumer(ctx, events.StreamJobs, jetstream.ConsumerConfig{
				Durable: events.ToolConsumer(tool), FilterSubject: events.ToolSubject(tool), AckPolicy: jetstream.AckExplicitPolicy,
			}); err != nil {
				t.Fatalf("%s: %v", name, err)
			}
		}
	}
	// b: three events of turn tb (one a stream config, as the reflection
	// test seeds), a dead letter, a job, a checkpoint, a live turn, a tool.
	b := admins["b"]
	secret := `{"name":"EVIL","storage":"memory","sources":[{"name":"JETLOOP_EVENTS"}],"description":"` + secretOfB + `"}`
	for _, subj := range []string{"jetloop.events.sb.tb", "jetloop.events.sb.tb", "jetloop.events.sb.tb", events.DeadSubject("submit"),
		events.ToolSubject("echo"), "$KV.JETLOOP_CHECKPOINTS.wfb", "$KV.JETLOOP_LIVE.0.tb", "$KV.JETLOOP_TOOLS.echo",
		"$KV.JETLOOP_CHECKPOINTS.wf1"} {
		if _, err := b.Publish(ctx, subj, []byte(secret)); err != nil {
			t.Fatalf("seed b %s: %v", subj, err)
		}
	}
	// a: one event of its own turn, so that a read that works is seen to
	// read a's stream.
	if _, err := admins["a"].Publish(ctx, "jetloop.events.sa.ta", []byte(`{"own":"a"}`)); err != nil {
		t.Fatal(err)
	}
	beforeB, beforeA := state(t, b), state(t, admins["a"])

	url := srv.ClientURL()
	for _, role := range []string{"client", "viewer", "toolworker"} {
		c := dialTenant(t, path, url, "a", role)
		prefix := bus.DetectAPIPrefix(ctx, c.nc)
		if prefix != bus.APIPrefix {
			t.Fatalf("%s of a: API prefix %s", role, prefix)
		}
		t.Run(role+"/reads", func(t *testing.T) { c.readsFindNothingOfB(t, role) })
		t.Run(role+"/reflections", func(t *testing.T) {
			c.reflect(t, role, prefix)
			for _, target := range reflectTargets(prefix) {
				switch role {
				case "client", "viewer":
					c.pushTo(t, prefix, events.StreamEvents, "jetloop.events.sb.tb", target)
					c.pushTo(t, prefix, events.StreamEvents, "jetloop.events.>", target)
				case "toolworker":
					c.pushTo(t, prefix, "KV_JETLOOP_TOOLS", "$KV.JETLOOP_TOOLS.echo", target)
					c.pushTo(t, prefix, events.StreamJobs, events.ToolSubject("echo"), target)
				}
			}
		})
		for _, d := range deniedTo(role) {
			t.Run(role+"/"+d.what, func(t *testing.T) { c.mustBeDenied(t, d) })
		}
		t.Run(role+"/core subjects", func(t *testing.T) { c.hearsOnlyA(t, role, admins) })
	}

	// a's client submits and steers under b's ids: into a's inbox.
	client := dialTenant(t, path, url, "a", "client")
	for _, subj := range []string{events.SubjectSubmit, events.ControlSubject("tb")} {
		body := fmt.Sprintf(`{"turn_id":"tb","session_id":"sb","input":"from a","action":"abort"}`)
		if _, err := client.nc.RequestWithContext(ctx, subj, []byte(body)); err != nil {
			t.Fatalf("a's client publishes on %s: %v", subj, err)
		}
	}
	ainbox, err := admins["a"].Stream(ctx, events.StreamInbox)
	if err != nil {
		t.Fatal(err)
	}
	if n := ainbox.CachedInfo().State.Msgs; n != 2 {
		t.Errorf("a's inbox holds %d messages, want the 2 a's client sent", n)
	}

	// Answered after everything above: the API handles requests in order.
	if _, err := b.AccountInfo(ctx); err != nil {
		t.Fatal(err)
	}
	afterB := state(t, b)
	for k, v := range beforeB {
		// The tools bucket's entries expire (bus.ToolsTTL) while the
		// test runs; what is read from it is checked above.
		if afterB[k] != v && k != "stream KV_JETLOOP_TOOLS" {
			t.Errorf("b's %s changed: %s, was %s", k, afterB[k], v)
		}
	}
	for k, v := range afterB {
		if _, ok := beforeB[k]; !ok {
			t.Errorf("b's %s appeared: %s", k, v)
		}
	}
	afterA := state(t, admins["a"])
	for k, v := range beforeA {
		if k == "stream "+events.StreamInbox {
			continue // a's client's two submissions
		}
		if afterA[k] != v {
			t.Errorf("a's %s changed: %s, was %s", k, afterA[k], v)
		}
	}
}

// tenantRead is one read a role of a makes, aimed at b's data by its
// names and sequences.
type tenantRead struct {
	what, subject, body string
	// ownA: the answer must be a's own data (the read reaches a's stream).
	ownA string
}

// readsFindNothingOfB makes every read role may make, by every route, and
// requires that no answer carries b's data.
func (c *roleConn) readsFindNothingOfB(t *testing.T, role string) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	api := func(s string) string { return bus.APIPrefix + "." + s }
	reads := []tenantRead{
		{what: "account info", subject: api("INFO")},
		{what: "stream info of the events with every subject", subject: api("STREAM.INFO." + events.StreamEvents), body: `{"subjects_filter":">"}`},
		{what: "stream info of the live turns", subject: api("STREAM.INFO.KV_JETLOOP_LIVE"), body: `{"subjects_filter":">"}`},
		{what: "stream info of the jobs", subject: api("STREAM.INFO." + events.StreamJobs), body: `{"subjects_filter":">"}`},
		{what: "stream info of the tools", subject: api("STREAM.INFO.KV_JETLOOP_TOOLS"), body: `{"subjects_filter":">"}`},
		{what: "stream list", subject: api("STREAM.LIST"), body: `{}`},
		{what: "stream names", subject: api("STREAM.NAMES"), body: `{}`},
		{what: "stream names under $JS.API", subject: "$JS.API.STREAM.NAMES", body: `{}`},
		{what: "consumer list of the events", subject: api("CONSUMER.LIST." + events.StreamEvents), body: `{}`},
		{what: "consumer names of the jobs", subject: api("CONSUMER.NAMES." + events.StreamJobs), body: `{}`},
		{what: "consumer info of tool_echo", subject: api("CONSUMER.INFO." + events.StreamJobs + ".tool_echo")},
		{what: "direct get of b's turn by subject", subject: api("DIRECT.GET." + events.StreamEvents), body: `{"last_by_subj":"jetloop.events.sb.tb"}`},
		{what: "direct get of b's turn by subject in the API subject", subject: api("DIRECT.GET." + events.StreamEvents + ".jetloop.events.sb.tb")},
		{what: "direct get of sequence 2", subject: api("DIRECT.GET." + events.StreamEvents), body: `{"seq":2}`},
		{what: "leader get of sequence 2", subject: api("STREAM.MSG.GET." + events.StreamEvents), body: `{"seq":2}`},
		{what: "leader get of b's turn by subject", subject: api("STREAM.MSG.GET." + events.StreamEvents), body: `{"last_by_subj":"jetloop.events.sb.tb"}`},
		{what: "leader get of the first dead letter", subject: api("STREAM.MSG.GET." + events.StreamDead), body: `{"seq":1}`},
		{what: "KV get of b's checkpoint", subject: api("DIRECT.GET.KV_JETLOOP_CHECKPOINTS.$KV.JETLOOP_CHECKPOINTS.wfb")},
		{what: "KV get of a checkpoint both may name", subject: api("DIRECT.GET.KV_JETLOOP_CHECKPOINTS.$KV.JETLOOP_CHECKPOINTS.wf1")},
		{what: "KV get of b's live turn", subject: api("DIRECT.GET.KV_JETLOOP_LIVE.$KV.JETLOOP_LIVE.0.tb")},
		{what: "KV listing of the checkpoints", subject: api("CONSUMER.CREATE.KV_JETLOOP_CHECKPOINTS"),
			body: `{"stream_name":"KV_JETLOOP_CHECKPOINTS","config":{"deliver_subject":"_INBOX_cli.keys","ack_policy":"none","headers_only":true}}`},
		{what: "KV get of the echo tool", subject: api("DIRECT.GET.KV_JETLOOP_TOOLS.$KV.JETLOOP_TOOLS.echo")},
		{what: "pull of an echo job", subject: api("CONSUMER.MSG.NEXT." + events.StreamJobs + ".tool_echo"), body: `{"batch":1,"no_wait":true}`},
		{what: "read a job by sequence", subject: api("STREAM.MSG.GET." + events.StreamJobs), body: `{"seq":1}`},
	}
	if role != "toolworker" {
		reads = append(reads, tenantRead{what: "direct get of sequence 1", subject: api("DIRECT.GET." + events.StreamEvents), body: `{"seq":1}`, ownA: `"own":"a"`})
	}
	for _, r := range reads {
		// A request the role may not publish is dropped by the server
		// (a permissions violation, no answer): refused too.
		m, err := c.nc.Request(r.subject, []byte(r.body), 3*time.Second)
		switch {
		case (errors.Is(err, nats.ErrNoResponders) || errors.Is(err, nats.ErrTimeout)) && r.ownA == "":
			continue
		case err != nil:
			t.Errorf("%s: %v", r.what, err)
			continue
		}
		if bytes.Contains(m.Data, []byte(secretOfB)) || bytes.Contains(m.Data, []byte("sb.tb")) || strings.Contains(fmt.Sprint(m.Header), secretOfB) {
			t.Errorf("%s: a's %s read b's data: %s", r.what, role, m.Data)
		}
		if r.ownA != "" && !bytes.Contains(m.Data, []byte(r.ownA)) {
			t.Errorf("%s: got %q %v, want a's own event", r.what, m.Data, m.Header)
		}
		// Stream info counts a's messages only.
		var info struct {
			State struct {
				Msgs     uint64         `json:"messages"`
				Subjects map[string]any `json:"subjects"`
			} `json:"state"`
			Config struct {
				Name string `json:"name"`
			} `json:"config"`
		}
		if json.Unmarshal(m.Data, &info) == nil && info.Config.Name == events.StreamEvents && info.State.Msgs != 1 {
			t.Errorf("%s: %d messages, a has 1", r.what, info.State.Msgs)
		}
	}
	// A reader's tail over every turn's log (batched direct gets) finds
	// a's one event.
	if role == "toolworker" {
		return
	}
	js, err := bus.JetStreamFor(ctx, c.nc, bus.APIPrefix)
	if err != nil {
		t.Fatal(err)
	}
	tail, err := bus.NewTail(ctx, js, events.StreamEvents, "jetloop.events.>", bus.Start{})
	if err != nil {
		t.Fatal(err)
	}
	defer tail.Close()
	for n := 1; ; n++ {
		m, err := tail.Next(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if m.Subject != "jetloop.events.sa.ta" || n > 1 {
			t.Errorf("the tail read %s: %s", m.Subject, m.Data)
		}
		if m.Pending == 0 {
			break
		}
	}
	kv, err := js.KeyValue(ctx, bus.BucketCheckpoints)
	if err == nil {
		if e, err := kv.Get(ctx, "wfb"); err == nil {
			t.Errorf("KV get of b's checkpoint found %s", e.Value())
		}
	}
}

// hearsOnlyA: what b's processes publish on the core subjects a's role
// subscribes to (token deltas, cancels) never reaches it; a's own does.
// (What is published on the logs and the dead letters is exported the same
// way, to the tenant's own readers only; publishing some here would store
// it.)
func (c *roleConn) hearsOnlyA(t *testing.T, role string, admins map[string]jetstream.JetStream) {
	subj, bsubj, asubj := "jetloop.stream.>", "jetloop.stream.tb", "jetloop.stream.ta"
	if role == "toolworker" {
		subj, bsubj, asubj = "jetloop.cancel.*", "jetloop.cancel.tb", "jetloop.cancel.ta"
	}
	sub, err := c.nc.SubscribeSync(subj)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = sub.Unsubscribe() }()
	if err := c.nc.Flush(); err != nil {
		t.Fatal(err)
	}
	bnc, anc := admins["b"].Conn(), admins["a"].Conn()
	if err := bnc.Publish(bsubj, []byte(secretOfB)); err != nil {
		t.Fatal(err)
	}
	if err := bnc.Flush(); err != nil {
		t.Fatal(err)
	}
	if err := anc.Publish(asubj, []byte("a")); err != nil {
		t.Fatal(err)
	}
	m, err := sub.NextMsg(10 * time.Second)
	if err != nil {
		t.Fatalf("a's %s did not hear a's own %s: %v", role, asubj, err)
	}
	if m.Subject != asubj {
		t.Fatalf("a's %s heard %s: %s", role, m.Subject, m.Data)
	}
}

// TestTenantRunsATurn runs a turn and a workflow in tenant a of the shipped
// multi-tenant config with an orchestrator, a tool worker and the CLI of
// a's own, each connected with its role's seed: every process needs
// nothing its tenant's user may not do, and tenant b's streams see none of
// it.
func TestTenantRunsATurn(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and starts the binaries")
	}
	root := repoRoot(t)
	path := filepath.Join(root, "deploy", "tenants", "tenants.yaml")
	srv := testkit.StartConfig(t, filepath.Join(filepath.Dir(path), "nats.conf"))
	url := srv.ClientURL()
	as := func(role string) []string {
		return []string{"--nats", url, "--creds", tenants.SeedPath(path, "a", role)}
	}
	stack := &roleStack{t: t, root: root, as: as}
	stack.run()

	b := dialTenant(t, path, url, "b", tenants.Admin)
	bjs, err := jetstream.New(b.nc)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	info, err := bjs.AccountInfo(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if info.Streams != 0 || info.Store != 0 {
		t.Errorf("tenant b has %d streams, %d bytes after a's turn", info.Streams, info.Store)
	}
}

// TestTenantsServedOnceProvisioned: an orchestrator and a tool worker
// started with --tenants before the tenants are provisioned say once per
// tenant what to run, with no error and no permissions violation, and
// serve tenant a once `jetloop streams apply --tenant a` has run: a turn
// submitted as a's client completes. The worker's --root need not exist.
func TestTenantsServedOnceProvisioned(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and starts the binaries")
	}
	root := repoRoot(t)
	path := filepath.Join(root, "deploy", "tenants", "tenants.yaml")
	srv := testkit.StartConfig(t, filepath.Join(filepath.Dir(path), "nats.conf"))
	url := srv.ClientURL()
	orch := start(t, root, "orchestrator", "--tenants", path, "--nats", url, "--agents", "data/AGENTS.md", "--allow-scripts")
	worker := start(t, root, "toolworker", "--tenants", path, "--nats", url, "--root", filepath.Join(t.TempDir(), "work"))
	for _, p := range []*process{orch, worker} {
		testkit.WaitFor(t, "both tenants reported unprovisioned", func() bool {
			out := p.out.String()
			return strings.Contains(out, "tenant a is not provisioned yet: run `jetloop streams apply --tenant a") &&
				strings.Contains(out, "tenant b is not provisioned yet")
		})
	}
	if out, code := run(t, root, "--tenant", "a", "--tenants", path, "--nats", url, "streams", "apply"); code != 0 {
		t.Fatalf("streams apply --tenant a: exit %d\n%s", code, out)
	}
	out, code := run(t, root, "--tenant", "a", "--tenants", path, "--nats", url, "submit", "--watch", "--agent", "General",
		"--model", "script:scripts/demo.yaml", "What is this project?")
	if code != 0 || !strings.Contains(out, "finished: completed") {
		t.Fatalf("submit as a's client: exit %d\n%s", code, out)
	}
	for name, p := range map[string]*process{"orchestrator": orch, "toolworker": worker} {
		if code := p.stop(t); code != 0 {
			t.Errorf("%s exited %d", name, code)
		}
		out := p.out.String()
		if n := strings.Count(out, "tenant a is not provisioned yet"); n != 1 {
			t.Errorf("%s said %d times that a is not provisioned:\n%s", name, n, out)
		}
		if strings.Contains(out, `"level":"ERROR"`) || strings.Contains(strings.ToLower(out), "permissions violation") {
			t.Errorf("%s logged errors:\n%s", name, out)
		}
	}
}
