package blackbox

import (
	"context"
	"encoding/json"
	"fmt"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/jetloop/jetloop/internal/bus"
	"github.com/jetloop/jetloop/internal/events"
	"github.com/jetloop/jetloop/internal/testkit"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// untrusted are the roles that live in accounts of their own: the
// toolworker (the default worker deployment, built-in tools) and
// exampleworker (a second deployment, the examples' tools) among them.
var untrusted = []string{"client", "viewer", "toolworker", "exampleworker"}

// evilStream is a stream configuration that, created, would copy every
// turn's log: the payload a reflected read must never hand the API.
var evilStream = `{"name":"EVIL","storage":"memory","sources":[{"name":"JETLOOP_EVENTS"}]}`

// reflection is a request a role may make, sent with a reply subject
// aimed at something it may not do: the server publishes its answer on
// the reply subject, which must not reach the streams' account.
type reflection struct {
	what, subject string
	body          string
}

// reflectionsOf are the reads role may make, each of which the test sends
// with every target reply subject.
func reflectionsOf(role, prefix string) []reflection {
	api := func(s string) string { return prefix + "." + s }
	switch role {
	case "client", "viewer":
		return []reflection{
			{what: "direct get of a missing event", subject: api("DIRECT.GET." + events.StreamEvents), body: `{"seq":1000000}`},
			{what: "direct get without headers", subject: api("DIRECT.GET." + events.StreamEvents), body: `{"seq":1,"no_hdr":true}`},
			{what: "MSG.GET of a missing dead letter", subject: api("STREAM.MSG.GET." + events.StreamDead), body: `{"seq":1000000}`},
			{what: "MSG.GET of an event", subject: api("STREAM.MSG.GET." + events.StreamEvents), body: `{"seq":1}`},
			{what: "KV get of a checkpoint", subject: api("DIRECT.GET.KV_JETLOOP_CHECKPOINTS.$KV.JETLOOP_CHECKPOINTS.wf1")},
			{what: "KV get of a missing checkpoint", subject: api("DIRECT.GET.KV_JETLOOP_CHECKPOINTS.$KV.JETLOOP_CHECKPOINTS.none")},
			// A reader's batched reads: many answers and an end-of-batch
			// status, each published on the reply subject.
			{what: "batched direct get", subject: api("DIRECT.GET." + events.StreamEvents), body: `{"seq":1,"next_by_subj":"jetloop.events.>","batch":10}`},
			{what: "batched direct get without headers", subject: api("DIRECT.GET." + events.StreamEvents), body: `{"seq":1,"next_by_subj":"jetloop.events.>","batch":10,"no_hdr":true}`},
			{what: "empty batched direct get", subject: api("DIRECT.GET." + events.StreamEvents), body: `{"seq":1,"next_by_subj":"jetloop.events.none.none","batch":10}`},
		}
	case "toolworker":
		return []reflection{
			{what: "KV get of its tool", subject: api("DIRECT.GET.KV_JETLOOP_TOOLS.$KV.JETLOOP_TOOLS.echo")},
			{what: "KV get of a missing worker", subject: api("DIRECT.GET.KV_JETLOOP_WORKERS.$KV.JETLOOP_WORKERS.echo.none")},
			{what: "empty no_wait pull", subject: api("CONSUMER.MSG.NEXT.JETLOOP_JOBS.tool_grep"), body: `{"batch":1,"no_wait":true}`},
			{what: "no_wait pull of a job", subject: api("CONSUMER.MSG.NEXT.JETLOOP_JOBS.tool_echo"), body: `{"batch":1,"no_wait":true}`},
			{what: "stream info", subject: api("STREAM.INFO.JETLOOP_JOBS")},
		}
	case "exampleworker":
		return []reflection{
			{what: "KV get of a missing tool", subject: api("DIRECT.GET.KV_JETLOOP_TOOLS.$KV.JETLOOP_TOOLS.invoice_total")},
			{what: "empty no_wait pull", subject: api("CONSUMER.MSG.NEXT.JETLOOP_JOBS.tool_invoice_total"), body: `{"batch":1,"no_wait":true}`},
		}
	}
	return nil
}

// reflectTargets are the reply subjects a reflected answer is aimed at:
// the streams' JetStream API (both as the streams' account names it and
// under the roles' prefix), a turn's log, the jobs and the inbox.
func reflectTargets(prefix string) []string {
	var ts []string
	for _, p := range []string{bus.DefaultAPIPrefix, prefix} {
		ts = append(ts, p+".STREAM.PURGE."+events.StreamEvents, p+".STREAM.DELETE."+events.StreamDead,
			p+".CONSUMER.DELETE."+events.StreamJobs+".tool_echo", p+".STREAM.CREATE.EVIL")
		if p == prefix && p == bus.DefaultAPIPrefix {
			break
		}
	}
	return append(ts, "jetloop.events.s1.t1", "jetloop.jobs.tool.echo", "jetloop.inbox.model.t1",
		"$KV.JETLOOP_TOOLS.forged")
}

// reflect sends every reflection of role at every target, then waits for
// an answer to a last plain request, which the server handles after them.
func (c *roleConn) reflect(t *testing.T, role, prefix string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	for _, r := range reflectionsOf(role, prefix) {
		for _, target := range reflectTargets(prefix) {
			if err := c.nc.PublishMsg(&nats.Msg{Subject: r.subject, Reply: target, Data: []byte(r.body)}); err != nil {
				t.Fatalf("%s: %s: %v", role, r.what, err)
			}
		}
	}
	if err := c.nc.FlushWithContext(ctx); err != nil {
		t.Fatal(err)
	}
	// The reads above are answered in order with this one.
	if rs := reflectionsOf(role, prefix); len(rs) > 0 {
		if _, err := c.nc.RequestWithContext(ctx, rs[0].subject, []byte(rs[0].body)); err != nil {
			t.Fatalf("%s: %s: %v", role, rs[0].what, err)
		}
	}
}

// pushTo creates, as role, a push consumer of stream delivering onto
// target: the way a KV watch or an ordered push consumer reads, with a
// deliver subject the server publishes on.
func (c *roleConn) pushTo(t *testing.T, prefix, stream, filter, target string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	name := fmt.Sprintf("push%d", time.Now().UnixNano())
	body, _ := json.Marshal(map[string]any{"stream_name": stream, "config": map[string]any{
		"name": name, "deliver_subject": target, "filter_subject": filter, "ack_policy": "none", "deliver_policy": "all",
		"inactive_threshold": int64(time.Minute)}})
	_, _ = c.nc.RequestWithContext(ctx, prefix+".CONSUMER.CREATE."+stream+"."+name+"."+filter, body)
}

// TestReflectedRepliesAreContained: for every role that is not fully
// trusted, every read it may make (direct gets, MSG.GET, pulls with and
// without messages, KV gets) sent with a reply subject aimed at the
// JetStream API, at a turn's log, at the jobs or at the inbox, and every
// push consumer (a KV watch's kind) aimed at the same, changes nothing:
// no stream is deleted, purged or created, no consumer deleted, no message
// appended.
func TestReflectedRepliesAreContained(t *testing.T) {
	root := repoRoot(t)
	srv := testkit.StartConfig(t, filepath.Join(root, "nats.conf"))
	admin := dialRole(t, root, srv.ClientURL(), "admin")
	ajs, err := jetstream.New(admin.nc)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if _, err := bus.Apply(ctx, ajs, bus.DefaultProvision(admin.nc.MaxPayload())); err != nil {
		t.Fatal(err)
	}
	for _, tool := range []string{"echo", "grep", "invoice_total"} {
		if _, err := ajs.CreateOrUpdateConsumer(ctx, events.StreamJobs, jetstream.ConsumerConfig{
			Durable: events.ToolConsumer(tool), FilterSubject: events.ToolSubject(tool), AckPolicy: jetstream.AckExplicitPolicy,
		}); err != nil {
			t.Fatal(err)
		}
	}
	// What a reflected read hands on is what the read finds: a stream's
	// configuration, so that a reply aimed at STREAM.CREATE would create it.
	for _, subj := range []string{events.ToolSubject("echo"), "jetloop.events.s1.t1", events.DeadSubject("submit"),
		"$KV.JETLOOP_TOOLS.echo", "$KV.JETLOOP_CHECKPOINTS.wf1"} {
		if _, err := ajs.Publish(ctx, subj, []byte(evilStream)); err != nil {
			t.Fatalf("seed %s: %v", subj, err)
		}
	}
	before := state(t, ajs)

	for _, role := range untrusted {
		c := dialRole(t, root, srv.ClientURL(), role)
		prefix := bus.DetectAPIPrefix(ctx, c.nc)
		if role != "viewer" && role != "client" && prefix != bus.APIPrefix {
			t.Errorf("%s: the API prefix is %s, not %s", role, prefix, bus.APIPrefix)
		}
		c.reflect(t, role, prefix)
		for _, target := range reflectTargets(prefix) {
			switch role {
			case "client", "viewer":
				c.pushTo(t, prefix, events.StreamEvents, "jetloop.events.s1.t1", target)
			case "toolworker":
				c.pushTo(t, prefix, "KV_JETLOOP_TOOLS", "$KV.JETLOOP_TOOLS.echo", target)
				c.pushTo(t, prefix, events.StreamJobs, events.ToolSubject("echo"), target)
			}
		}
	}
	// Answered after everything above: the API handles requests in order.
	ctx, cancel = context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if _, err := ajs.AccountInfo(ctx); err != nil {
		t.Fatal(err)
	}
	after := state(t, ajs)
	for k, v := range before {
		if after[k] != v {
			t.Errorf("%s changed: %s, was %s", k, after[k], v)
		}
	}
	for k, v := range after {
		if _, ok := before[k]; !ok && !strings.HasPrefix(k, "consumer") {
			t.Errorf("%s appeared: %s", k, v)
		}
	}
}

// TestWorkerDeploymentsApart: two worker deployments use the same reply
// prefix, and neither hears the other's replies; each sees its own.
func TestWorkerDeploymentsApart(t *testing.T) {
	root := repoRoot(t)
	srv := testkit.StartConfig(t, filepath.Join(root, "nats.conf"))
	admin := dialRole(t, root, srv.ClientURL(), "admin")
	ajs, err := jetstream.New(admin.nc)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if _, err := bus.Apply(ctx, ajs, bus.DefaultProvision(admin.nc.MaxPayload())); err != nil {
		t.Fatal(err)
	}
	if _, err := ajs.Publish(ctx, "$KV.JETLOOP_TOOLS.echo", []byte(`{"name":"echo"}`)); err != nil {
		t.Fatal(err)
	}
	a := dialRole(t, root, srv.ClientURL(), "toolworker")
	b := dialRole(t, root, srv.ClientURL(), "exampleworker")
	spy, err := b.nc.SubscribeSync(bus.InboxToolworker + ".>")
	if err != nil {
		t.Fatal(err)
	}
	if err := b.nc.FlushWithContext(ctx); err != nil {
		t.Fatal(err)
	}
	// toolworker reads its tool's registry entry: the answer comes on its
	// reply prefix, the same string exampleworker listens to.
	js, err := bus.JetStreamFor(ctx, a.nc, "")
	if err != nil {
		t.Fatal(err)
	}
	kv, err := js.KeyValue(ctx, "JETLOOP_TOOLS")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := kv.Get(ctx, "echo"); err != nil {
		t.Fatalf("toolworker cannot read its own tool's entry: %v", err)
	}
	// exampleworker's own request on the same prefix is the last thing it
	// hears: whatever it heard before it came from toolworker.
	if _, err := b.nc.RequestWithContext(ctx, bus.APIPrefix+".INFO", nil); err != nil {
		t.Fatal(err)
	}
	for {
		m, err := spy.NextMsg(5 * time.Second)
		if err != nil {
			t.Fatalf("exampleworker did not hear even its own reply: %v", err)
		}
		if strings.Contains(string(m.Data), "echo") {
			t.Fatalf("exampleworker heard toolworker's reply on %s: %s", m.Subject, m.Data)
		}
		if strings.Contains(string(m.Data), "account_info") || strings.Contains(string(m.Data), "memory") {
			return
		}
	}
}
