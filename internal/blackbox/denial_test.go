package blackbox

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/jetloop/jetloop/internal/bus"

	"github.com/jetloop/jetloop/internal/events"
	"github.com/jetloop/jetloop/internal/testkit"
	"github.com/nats-io/nats-server/v2/conf"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// denied is one thing a role must not do: a request (or, with sub, a
// subscription) on subject, which the server must refuse as a permissions
// violation naming that subject, not merely leave unanswered.
type denied struct {
	what    string
	subject string
	body    any
	sub     bool
}

// roleConn is a connection as one role that hands the server's
// asynchronous permission errors to the subtest running.
type roleConn struct {
	nc   *nats.Conn
	errs chan error
	// own is ownAccount of the role.
	own bool
}

// streamsOf are every stream of the protocol, the buckets' included.
var streamsOf = []string{events.StreamInbox, events.StreamJobs, events.StreamEvents, events.StreamDead,
	"KV_JETLOOP_TOOLS", "KV_JETLOOP_WORKERS", "KV_JETLOOP_CHECKPOINTS", "OBJ_JETLOOP_BLOBS"}

// inboxes are the reply prefixes the processes of each role use.
var inboxes = map[string]string{"orchestrator": bus.InboxOrchestrator, "toolworker": bus.InboxToolworker,
	"exampleworker": bus.InboxToolworker, "client": bus.InboxCLI, "viewer": bus.InboxCLI, "admin": bus.InboxCLI}

// ownAccount reports whether role lives in an account of its own, where a
// subject its account does not import reaches nothing: a request there has
// no responders, which is as good a refusal as a permissions violation.
func ownAccount(role string) bool { return role != "orchestrator" && role != "admin" }

// isWorker reports whether role is a tool worker deployment's.
func isWorker(role string) bool { return role == "toolworker" || role == "exampleworker" }

// TestRolesAreDenied tries, with the credentials of every role but admin,
// every destructive or forging action against the streams on a server with
// the repository's nats.conf, and requires each to be refused with a
// permissions violation; then checks that nothing changed.
func TestRolesAreDenied(t *testing.T) {
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
	// A tool's consumer as a worker makes it, and one message in each
	// stream, so that a purge or delete that got through would show.
	if _, err := ajs.CreateOrUpdateConsumer(ctx, events.StreamJobs, jetstream.ConsumerConfig{
		Durable: events.ToolConsumer("echo"), FilterSubject: events.ToolSubject("echo"), AckPolicy: jetstream.AckExplicitPolicy,
	}); err != nil {
		t.Fatal(err)
	}
	for _, subj := range []string{events.SubjectSubmit, events.ToolSubject("echo"), "jetloop.events.s1.t1", events.DeadSubject("submit"),
		"$KV.JETLOOP_TOOLS.echo", "$KV.JETLOOP_WORKERS.echo.w1", "$KV.JETLOOP_CHECKPOINTS.wf1", "$O.JETLOOP_BLOBS.M.x"} {
		if _, err := ajs.Publish(ctx, subj, []byte(`{}`)); err != nil {
			t.Fatalf("seed %s: %v", subj, err)
		}
	}
	before := state(t, ajs)

	for _, role := range append(untrusted, "orchestrator") {
		c := dialRole(t, root, srv.ClientURL(), role)
		c.own = ownAccount(role)
		for _, d := range deniedTo(role) {
			t.Run(role+"/"+d.what, func(t *testing.T) { c.mustBeDenied(t, d) })
		}
	}

	after := state(t, ajs)
	for k, v := range before {
		if after[k] != v {
			t.Errorf("%s changed: %s, was %s", k, after[k], v)
		}
	}
	for k, v := range after {
		if _, ok := before[k]; !ok {
			t.Errorf("%s appeared: %s", k, v)
		}
	}
}

// adder returns the add of what role may not do to ds. A role in an
// account of its own is tried at both the streams' account's API subjects
// and its own prefix's.
func adder(role string, ds *[]denied) func(what, subject string, body any) {
	prefixes := []string{bus.DefaultAPIPrefix}
	if ownAccount(role) {
		prefixes = append(prefixes, bus.APIPrefix)
	}
	return func(what, subject string, body any) {
		for _, p := range prefixes {
			subj, w := subject, what
			if p != bus.DefaultAPIPrefix {
				if !strings.HasPrefix(subject, bus.DefaultAPIPrefix+".") && !strings.HasPrefix(subject, "$KV.") {
					continue
				}
				subj, w = p+strings.TrimPrefix(subject, bus.DefaultAPIPrefix), what+" under "+p
				if strings.HasPrefix(subject, "$KV.") {
					subj = p + "." + subject
				}
			}
			*ds = append(*ds, denied{what: w, subject: subj, body: body})
		}
	}
}

// deniedOnLogs lists what role may not do to the logs' streams named:
// purge them (but the orchestrator, the logs' one writer), delete them or
// their messages, change them, or make a consumer on them; and a worker
// deployment reads none of them.
func deniedOnLogs(role string, streams []string) []denied {
	var ds []denied
	add := adder(role, &ds)
	api := func(s string, a ...any) string { return "$JS.API." + fmt.Sprintf(s, a...) }
	for _, s := range streams {
		if role != "orchestrator" {
			add("purge "+s, api("STREAM.PURGE.%s", s), map[string]any{})
		}
		add("delete "+s, api("STREAM.DELETE.%s", s), nil)
		add("update "+s+" to max_msgs 1", api("STREAM.UPDATE.%s", s), map[string]any{"name": s, "max_msgs": 1})
		add("delete a message of "+s, api("STREAM.MSG.DELETE.%s", s), map[string]any{"seq": 1})
		add("create a consumer on "+s, api("CONSUMER.CREATE.%s.spy.jetloop.events.>", s),
			map[string]any{"stream_name": s, "config": map[string]any{"name": "spy", "filter_subject": "jetloop.events.>"}})
		add("create an ordered consumer on "+s, api("CONSUMER.CREATE.%s", s),
			map[string]any{"stream_name": s, "config": map[string]any{"deliver_subject": bus.InboxCLI + ".spy", "ack_policy": "none"}})
		if isWorker(role) {
			add("read "+s+" directly", api("DIRECT.GET.%s", s), map[string]any{"seq": 1})
			add("read "+s+" by sequence", api("STREAM.MSG.GET.%s", s), map[string]any{"seq": 1})
		}
	}
	return ds
}

// deniedTo lists what role may not do.
func deniedTo(role string) []denied {
	var ds []denied
	add := adder(role, &ds)
	api := func(s string, a ...any) string { return "$JS.API." + fmt.Sprintf(s, a...) }

	// The streams of a partitioned layout of the logs, which the shipped
	// configs grant reads on (and the orchestrator purges), whether or not
	// they exist.
	ds = append(ds, deniedOnLogs(role, events.Layout{Streams: events.Partitions}.Names())...)
	for _, s := range streamsOf {
		if !(role == "orchestrator" && (s == events.StreamEvents || s == "OBJ_JETLOOP_BLOBS")) {
			add("purge "+s, api("STREAM.PURGE.%s", s), map[string]any{})
		}
		add("delete "+s, api("STREAM.DELETE.%s", s), nil)
		add("update "+s+" to max_msgs 1", api("STREAM.UPDATE.%s", s), map[string]any{"name": s, "max_msgs": 1})
		if !(role == "orchestrator" && s == events.StreamInbox) {
			add("delete a message of "+s, api("STREAM.MSG.DELETE.%s", s), map[string]any{"seq": 1})
		}
	}
	for _, c := range [][2]string{{events.StreamInbox, "orchestrator"}, {events.StreamJobs, "model_runner"}, {events.StreamJobs, events.ToolConsumer("echo")}} {
		add("delete consumer "+c[1], api("CONSUMER.DELETE.%s.%s", c[0], c[1]), nil)
	}
	// Creating a stream is the way round every subject permission: one that
	// republishes (or sources) what a role may publish onto a subject it may
	// not forges submissions, approvals, results, model answers and events.
	for _, f := range []struct{ from, onto string }{
		{"jetloop.inbox.control.forge", "jetloop.inbox.result.victim"},
		{"jetloop.inbox.result.forge", "jetloop.inbox.submit"},
		{"jetloop.stream.forge", "jetloop.events.s1.victim"},
		{"forge.>", "jetloop.inbox.model.victim"},
	} {
		add("create a stream republishing "+f.from+" onto "+f.onto, api("STREAM.CREATE.FORGE"), map[string]any{
			"name": "FORGE", "subjects": []string{f.from}, "storage": "memory",
			"republish": map[string]any{"src": ">", "dest": f.onto}})
	}
	add("create a stream sourcing the inbox", api("STREAM.CREATE.COPY"), map[string]any{
		"name": "COPY", "storage": "memory", "sources": []map[string]any{{"name": events.StreamInbox}}})

	// Other roles' consumers: reading model jobs, stealing the inbox.
	if role != "orchestrator" {
		add("create the submissions' consumer", api("CONSUMER.CREATE.%s.orchestrator", events.StreamInbox),
			map[string]any{"stream_name": events.StreamInbox, "config": map[string]any{"durable_name": "orchestrator", "filter_subjects": []string{"jetloop.inbox.*"}}})
		add("create a partition's consumer", api("CONSUMER.CREATE.%s.%s.jetloop.inbox.*.*.3", events.StreamInbox, bus.PartitionConsumer(3)),
			map[string]any{"stream_name": events.StreamInbox, "config": map[string]any{"durable_name": bus.PartitionConsumer(3), "filter_subject": "jetloop.inbox.*.*.3"}})
		add("pull from the inbox consumer", api("CONSUMER.MSG.NEXT.%s.orchestrator", events.StreamInbox), map[string]any{"batch": 1})
		add("pull from a partition's consumer", api("CONSUMER.MSG.NEXT.%s.%s", events.StreamInbox, bus.PartitionConsumer(3)), map[string]any{"batch": 1})
		add("read model jobs through a consumer of its own", api("CONSUMER.CREATE.%s.spy.jetloop.jobs.model", events.StreamJobs),
			map[string]any{"stream_name": events.StreamJobs, "config": map[string]any{"name": "spy", "filter_subject": "jetloop.jobs.model"}})
		add("turn model_runner to tool jobs", api("CONSUMER.CREATE.%s.model_runner.jetloop.jobs.tool.echo", events.StreamJobs),
			map[string]any{"stream_name": events.StreamJobs, "config": map[string]any{"durable_name": "model_runner", "filter_subject": "jetloop.jobs.tool.echo"}})
		add("pull model jobs", api("CONSUMER.MSG.NEXT.%s.model_runner", events.StreamJobs), map[string]any{"batch": 1})
		add("ack a model job", "$JS.ACK.JETLOOP_JOBS.model_runner.1.1.1.1.0", nil)
		ds = append(ds, denied{what: "subscribe to model jobs", subject: events.SubjectModel, sub: true},
			denied{what: "subscribe to the orchestrator's replies", subject: bus.InboxOrchestrator + ".>", sub: true})
	}
	// A worker deployment reaches only its own tools' consumers, jobs and
	// registry keys: the built-in tools for toolworker, the examples' for
	// exampleworker.
	var others []string
	switch role {
	case "toolworker":
		others = []string{"invoice_total", "model_runner_x"}
	case "exampleworker":
		others = []string{"echo", "shell"}
	default:
		others = []string{"echo"}
	}
	for _, tool := range others {
		if role == "orchestrator" {
			break // it creates no tool consumers, and reads the registry
		}
		add("create the consumer of tool "+tool, api("CONSUMER.CREATE.%s.tool_%s.jetloop.jobs.tool.%s", events.StreamJobs, tool, tool),
			map[string]any{"stream_name": events.StreamJobs, "config": map[string]any{"durable_name": "tool_" + tool, "filter_subject": "jetloop.jobs.tool." + tool}})
		add("pull tool "+tool, api("CONSUMER.MSG.NEXT.%s.tool_%s", events.StreamJobs, tool), map[string]any{"batch": 1})
		add("pull tool "+tool+" without waiting", api("CONSUMER.MSG.NEXT.%s.tool_%s", events.StreamJobs, tool), map[string]any{"batch": 1, "no_wait": true})
		add("ack a job of tool "+tool, "$JS.ACK.JETLOOP_JOBS.tool_"+tool+".1.1.1.1.0", nil)
		add("advertise tool "+tool, "$KV.JETLOOP_TOOLS."+tool, map[string]any{"name": tool, "workers": 1})
		add("announce a worker of tool "+tool, "$KV.JETLOOP_WORKERS."+tool+".w9", "x")
		add("read the registry entry of tool "+tool, api("DIRECT.GET.KV_JETLOOP_TOOLS.$KV.JETLOOP_TOOLS.%s", tool), nil)
	}
	// Answers: a deployment answers on its own tools' subjects only, and
	// none on the unbound one the orchestrators tell a parent on.
	for _, tool := range others {
		add("answer a call of tool "+tool, events.ToolResultSubject(tool, "x"),
			map[string]any{"turn_id": "x", "call_id": "c1", "tool": tool, "output": "forged", "final": true})
		add("hand an answer of tool "+tool+" to the turn's owner", events.DirectResultSubject(tool, "x"),
			map[string]any{"turn_id": "x", "call_id": "c1", "tool": tool, "output": "forged", "final": true})
	}
	if role != "orchestrator" {
		add("answer on the unbound result subject", events.ResultSubject("x"),
			map[string]any{"turn_id": "x", "call_id": "c1", "tool": "echo", "output": "forged", "final": true})
	}
	if isWorker(role) {
		// Reading or deleting jobs by sequence would reach every
		// deployment's jobs, and the model's.
		add("read a job by sequence", api("STREAM.MSG.GET.%s", events.StreamJobs), map[string]any{"seq": 1})
		add("read a job directly", api("DIRECT.GET.%s", events.StreamJobs), map[string]any{"seq": 1})
		add("watch the registry", api("CONSUMER.CREATE.KV_JETLOOP_TOOLS"), map[string]any{"stream_name": "KV_JETLOOP_TOOLS",
			"config": map[string]any{"deliver_subject": "_INBOX_toolworker.watch", "ack_policy": "none"}})
		add("read the events", api("DIRECT.GET.%s", events.StreamEvents), map[string]any{"seq": 1})
		add("read the stream info of the events", api("STREAM.INFO.%s", events.StreamEvents), map[string]any{"subjects_filter": ">"})
	} else if role != "orchestrator" {
		ds = append(ds, denied{what: "subscribe to the tool workers' replies", subject: bus.InboxToolworker + ".>", sub: true})
	}
	if !isWorker(role) {
		// A worker deployment may use any reply prefix: its account is
		// its own (TestWorkerDeploymentsApart).
		ds = append(ds, denied{what: "subscribe to every reply", subject: "_INBOX.>", sub: true})
	}
	ds = append(ds, denied{what: "subscribe to the inbox", subject: "jetloop.inbox.>", sub: true})

	// Publishing on the subjects of other roles.
	var foreign []string
	switch role {
	case "client":
		foreign = []string{"jetloop.inbox.result.x", "jetloop.inbox.model.x", "jetloop.inbox.timer.x", "jetloop.inbox.task.x",
			"jetloop.events.x.y", "jetloop.jobs.tool.x", "jetloop.jobs.model", "jetloop.dead.x", "jetloop.cancel.x",
			"jetloop.stream.x", "jetloop.inbox.control.a.b", "$KV.JETLOOP_TOOLS.x", "$KV.JETLOOP_CHECKPOINTS.x",
			"$KV.JETLOOP_ORCHESTRATORS.x", "$KV.JETLOOP_LIVE.0.x"}
	case "viewer":
		foreign = []string{events.SubjectSubmit, "jetloop.inbox.workflow", "jetloop.inbox.control.x", "jetloop.inbox.result.x",
			"jetloop.inbox.model.x", "jetloop.events.x.y", "jetloop.jobs.tool.x", "jetloop.dead.x", "jetloop.cancel.x",
			"jetloop.stream.x", "$KV.JETLOOP_TOOLS.x", "$KV.JETLOOP_CHECKPOINTS.x",
			"$KV.JETLOOP_ORCHESTRATORS.x", "$KV.JETLOOP_LIVE.0.x"}
	case "toolworker", "exampleworker":
		foreign = []string{events.SubjectSubmit, "jetloop.inbox.workflow", "jetloop.inbox.control.x", "jetloop.inbox.model.x",
			"jetloop.inbox.timer.x", "jetloop.inbox.task.x", "jetloop.events.x.y", "jetloop.jobs.tool.x", "jetloop.jobs.model",
			"jetloop.cancel.x", "jetloop.stream.x", "jetloop.inbox.result.a.b", "$KV.JETLOOP_CHECKPOINTS.x",
			"jetloop.dead.submit", "jetloop.inbox.control.*",
			"$KV.JETLOOP_ORCHESTRATORS.x", "$KV.JETLOOP_LIVE.0.x"}
	case "orchestrator":
		// It submits its workflows' task turns and aborts them, so it may
		// publish submissions and control messages, and tells a parent of
		// its child's end on the unbound result subject; a workflow
		// submission and a tool's answer (below) stay the client's and the
		// worker's.
		foreign = []string{"jetloop.inbox.workflow", "$KV.JETLOOP_TOOLS.x",
			"$KV.JETLOOP_WORKERS.x.y"}
	}
	for _, s := range foreign {
		add("publish on "+s, s, map[string]any{"turn_id": "x", "call_id": "c1", "tool": "echo", "output": "forged", "final": true})
	}
	deniedHooks(role, add)
	return ds
}

// deniedHooks adds, through add, the hooks role may not serve: a
// deployment reaches only its own hooks' consumers and registry keys (the
// examples' deployment serves examples/go-hook's audit and cost-guard), and
// only a deployment serving hooks may answer one.
func deniedHooks(role string, add func(what, subject string, body any)) {
	var hooks []string
	switch role {
	case "exampleworker":
		hooks = []string{"review"}
	case "orchestrator":
		// It publishes hook jobs and reads the registry; it neither
		// serves nor advertises a hook, nor answers for one.
		add("advertise hook audit", "$KV.JETLOOP_TOOLS.hook.audit", map[string]any{"name": "audit", "workers": 1})
		add("answer for a hook", events.HookAnswerSubjectOf("audit", "wf1"),
			map[string]any{"workflow_id": "wf1", "task": 1, "hook": "audit", "decision": "continue"})
		return
	default:
		hooks = []string{"audit", "cost-guard"}
	}
	api := func(s string, a ...any) string { return "$JS.API." + fmt.Sprintf(s, a...) }
	for _, h := range hooks {
		c := events.HookConsumer(h)
		add("create the consumer of hook "+h, api("CONSUMER.CREATE.%s.%s.%s", events.StreamJobs, c, events.HookSubject(h)),
			map[string]any{"stream_name": events.StreamJobs, "config": map[string]any{"durable_name": c, "filter_subject": events.HookSubject(h)}})
		add("read the consumer of hook "+h, api("CONSUMER.INFO.%s.%s", events.StreamJobs, c), nil)
		add("pull hook "+h, api("CONSUMER.MSG.NEXT.%s.%s", events.StreamJobs, c), map[string]any{"batch": 1})
		add("ack a job of hook "+h, "$JS.ACK.JETLOOP_JOBS."+c+".1.1.1.1.0", nil)
		add("advertise hook "+h, "$KV.JETLOOP_TOOLS."+events.HookKey(h), map[string]any{"name": h, "workers": 1})
		add("announce a worker of hook "+h, "$KV.JETLOOP_WORKERS."+events.HookKey(h)+".w9", "x")
	}
	answer := func(h string) map[string]any {
		return map[string]any{"workflow_id": "wf1", "task": 1, "hook": h, "decision": "continue"}
	}
	add("answer for a hook on the unbound subject", events.HookAnswerSubject("wf1"), answer("audit"))
	for _, h := range hooks {
		add("answer for hook "+h, events.HookAnswerSubjectOf(h, "wf1"), answer(h))
	}
}

// mustBeDenied does d and requires the server's refusal of its subject.
func (c *roleConn) mustBeDenied(t *testing.T, d denied) {
	t.Helper()
	for len(c.errs) > 0 {
		<-c.errs // left by an earlier subtest
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	verb := "Publish to"
	done := make(chan error, 1)
	if d.sub {
		verb = "Subscription to"
		sub, err := c.nc.SubscribeSync(d.subject)
		if err != nil {
			t.Fatal(err)
		}
		defer func() { _ = sub.Unsubscribe() }()
	} else {
		var data []byte
		if d.body != nil {
			data, _ = json.Marshal(d.body)
		}
		go func() {
			m, err := c.nc.RequestWithContext(ctx, d.subject, data)
			if err == nil && isAPIError(m.Data) {
				err = errors.New(string(m.Data))
			}
			done <- err
		}()
	}
	want := verb + ` "` + d.subject + `"`
	for {
		select {
		case err := <-c.errs:
			if strings.Contains(err.Error(), want) {
				return
			}
			t.Logf("other error: %v", err)
		case err := <-done:
			if err == nil {
				t.Fatalf("%s was allowed", d.what)
			}
			if c.own && errors.Is(err, nats.ErrNoResponders) {
				return // nothing in the role's own account answers it
			}
			if !errors.Is(err, context.Canceled) && !errors.Is(err, context.DeadlineExceeded) && !errors.Is(err, nats.ErrNoResponders) {
				// Refused by JetStream for another reason: still not by
				// the permissions this test is about.
				t.Logf("answered: %v", err)
			}
			done = nil // the violation may follow its timeout; wait for it
		case <-ctx.Done():
			t.Fatalf("%s: no permissions violation for %s", d.what, d.subject)
		}
	}
}

// isAPIError reports whether a JetStream API answer is an error.
func isAPIError(data []byte) bool {
	var r struct {
		Error *struct{} `json:"error"`
	}
	return json.Unmarshal(data, &r) == nil && r.Error != nil
}

// dialRole connects as role with its development password and the reply
// prefix its processes use.
func dialRole(t *testing.T, root, url, role string) *roleConn {
	t.Helper()
	secret, err := os.ReadFile(filepath.Join(root, "deploy", "dev", role+".password"))
	if err != nil {
		t.Fatal(err)
	}
	c := &roleConn{errs: make(chan error, 64)}
	c.nc, err = nats.Connect(url, nats.UserInfo(role, strings.TrimSpace(string(secret))),
		nats.CustomInboxPrefix(inboxes[role]),
		nats.ErrorHandler(func(_ *nats.Conn, _ *nats.Subscription, err error) {
			select {
			case c.errs <- err:
			default:
			}
		}))
	if err != nil {
		t.Fatalf("connect as %s: %v", role, err)
	}
	t.Cleanup(c.nc.Close)
	return c
}

// state is what a denied action would change, read as admin: each stream's
// configuration limits and messages, and its consumers.
func state(t *testing.T, js jetstream.JetStream) map[string]string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	out := map[string]string{}
	names := js.StreamNames(ctx)
	for name := range names.Name() {
		s, err := js.Stream(ctx, name)
		if err != nil {
			t.Fatal(err)
		}
		info := s.CachedInfo()
		out["stream "+name] = fmt.Sprintf("subjects %v max_msgs %d max_bytes %d republish %v messages %d first %d",
			info.Config.Subjects, info.Config.MaxMsgs, info.Config.MaxBytes, info.Config.RePublish, info.State.Msgs, info.State.FirstSeq)
		for c := range s.ListConsumers(ctx).Info() {
			if c.Config.Durable != "" {
				out["consumer "+name+" "+c.Name] = "filter " + c.Config.FilterSubject
			}
		}
	}
	if err := names.Err(); err != nil {
		t.Fatal(err)
	}
	return out
}

// pushTargets are the subjects a push consumer's deliveries would harm if
// aimed at them: every consumer's pull and reset subjects, which the
// server holds as exact subscriptions and takes every delivery on as a
// request (a pull that never ends; a reset that hands a running job to a
// second worker), and the exact subjects jetloop's processes subscribe to
// (a watched turn's deltas, an operator's one cancel).
func pushTargets() []string {
	consumers := [][2]string{{events.StreamInbox, bus.InboxConsumer}, {events.StreamJobs, bus.ModelConsumer}}
	for p := range bus.Partitions {
		consumers = append(consumers, [2]string{events.StreamInbox, bus.PartitionConsumer(p)})
	}
	for _, tool := range []string{"echo", "sleep", "invoice_total", "word_count"} {
		consumers = append(consumers, [2]string{events.StreamJobs, events.ToolConsumer(tool)})
	}
	for _, hook := range []string{"audit", "cost-guard"} {
		consumers = append(consumers, [2]string{events.StreamJobs, events.HookConsumer(hook)})
	}
	var out []string
	for _, c := range consumers {
		out = append(out, "$JS.API.CONSUMER.MSG.NEXT."+c[0]+"."+c[1], "$JS.API.CONSUMER.RESET."+c[0]+"."+c[1])
	}
	return append(out, events.DeltaSubject("t1"), events.CancelSubject("t1"))
}

// TestNoRoleAimsAConsumer: no untrusted role can create a consumer, so none
// can aim a push consumer's deliveries at another consumer's pull or reset
// subject or at a subject a process holds, nor make consumers without
// bound. Each role tries every consumer-creating request its account could
// import (at its own prefix and the streams' account's), with every
// target as the deliver subject, on the logs, the dead letters and the
// jobs (its own tool's consumer name and filter for a worker), and a run
// of ordered consumers as a reader makes them; admin then finds no consumer
// but the ones it made, and the inbox's consumers have no waiting pulls.
func TestNoRoleAimsAConsumer(t *testing.T) {
	root := repoRoot(t)
	srv := testkit.StartConfig(t, filepath.Join(root, "nats.conf"))
	admin := dialRole(t, root, srv.ClientURL(), "admin")
	ajs, err := jetstream.New(admin.nc)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	p := bus.DefaultProvision(admin.nc.MaxPayload())
	if _, err := bus.Apply(ctx, ajs, p); err != nil {
		t.Fatal(err)
	}
	for _, tool := range []string{"echo", "sleep", "invoice_total", "word_count"} {
		cfg, _ := bus.JobConsumerFor(tool)
		if _, err := ajs.CreateOrUpdateConsumer(ctx, events.StreamJobs, cfg); err != nil {
			t.Fatal(err)
		}
	}
	for _, subj := range []string{"jetloop.events.s1.t1", events.DeadSubject("submit"), events.ToolSubject("echo")} {
		if _, err := ajs.Publish(ctx, subj, []byte(`{}`)); err != nil {
			t.Fatalf("seed %s: %v", subj, err)
		}
	}
	before := state(t, ajs)

	own := map[string][]string{"toolworker": {"echo", "grep"}, "exampleworker": {"invoice_total"}}
	for _, role := range untrusted {
		c := dialRole(t, root, srv.ClientURL(), role)
		type create struct{ stream, name, filter string }
		creates := []create{
			{events.StreamEvents, "spy", "jetloop.events.>"},
			{events.StreamDead, "spy", "jetloop.dead.>"},
			{events.StreamJobs, "spy", "jetloop.jobs.>"},
		}
		// A worker's own tools' consumers: one made already, one not yet
		// (which the old imports let it make with any body).
		for _, tool := range own[role] {
			creates = append(creates, create{events.StreamJobs, events.ToolConsumer(tool), events.ToolSubject(tool)},
				create{events.StreamJobs, events.ToolConsumer(tool) + "_2", events.ToolSubject(tool)})
		}
		if role == "exampleworker" {
			creates = append(creates, create{events.StreamJobs, events.HookConsumer("cost-guard"), events.HookSubject("cost-guard")})
		}
		for _, target := range pushTargets() {
			for _, cr := range creates {
				// Its own prefix: $JS.API in its own account reaches no
				// JetStream, and is refused by its permissions
				// (TestRolesAreDenied).
				for _, api := range []string{bus.APIPrefix} {
					body, _ := json.Marshal(map[string]any{"stream_name": cr.stream, "config": map[string]any{
						"name": cr.name, "durable_name": cr.name, "filter_subject": cr.filter,
						"deliver_subject": target, "ack_policy": "explicit", "ack_wait": int64(time.Millisecond)}})
					for _, subj := range []string{
						api + ".CONSUMER.CREATE." + cr.stream + "." + cr.name + "." + cr.filter,
						api + ".CONSUMER.CREATE." + cr.stream + "." + cr.name,
						api + ".CONSUMER.CREATE." + cr.stream,
						api + ".CONSUMER.DURABLE.CREATE." + cr.stream + "." + cr.name,
					} {
						if created(ctx, c.nc, subj, body) {
							t.Errorf("%s aimed a consumer at %s with %s", role, target, subj)
						}
					}
				}
			}
		}
		// A reader's ordered consumers, as nats.go makes them, one after
		// another: each would live until it expires.
		for i := range 20 {
			for _, cr := range creates[:2] {
				name := fmt.Sprintf("ordered_%d", i)
				body, _ := json.Marshal(map[string]any{"stream_name": cr.stream, "config": map[string]any{
					"name": name, "filter_subject": cr.filter, "deliver_policy": "all", "ack_policy": "none",
					"mem_storage": true, "inactive_threshold": int64(5 * time.Minute), "num_replicas": 1}})
				if created(ctx, c.nc, bus.APIPrefix+".CONSUMER.CREATE."+cr.stream+"."+name+"."+cr.filter, body) {
					t.Errorf("%s created an ordered consumer on %s", role, cr.stream)
				}
			}
		}
	}

	after := state(t, ajs)
	for k, v := range after {
		if before[k] != v {
			t.Errorf("%s: %s, was %q", k, v, before[k])
		}
	}
	for _, name := range []string{events.StreamEvents, events.StreamDead, events.StreamJobs, events.StreamInbox} {
		s, err := ajs.Stream(ctx, name)
		if err != nil {
			t.Fatal(err)
		}
		for ci := range s.ListConsumers(ctx).Info() {
			if ci.Config.DeliverSubject != "" || ci.NumWaiting > 0 && name == events.StreamInbox {
				t.Errorf("consumer %s of %s: deliver subject %q, %d waiting pulls", ci.Name, name, ci.Config.DeliverSubject, ci.NumWaiting)
			}
		}
		if n := s.CachedInfo().State.Consumers; name != events.StreamJobs && name != events.StreamInbox && n != 0 {
			t.Errorf("%s has %d consumers, want none", name, n)
		}
	}
}

// created sends a consumer-creating request and reports whether the server
// made a consumer: an answer without an error. No responders, a timeout and
// a permissions violation are refusals.
func created(ctx context.Context, nc *nats.Conn, subject string, body []byte) bool {
	rctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	m, err := nc.RequestWithContext(rctx, subject, body)
	return err == nil && !isAPIError(m.Data)
}

// TestWorkerValuesAreBounded: a worker deployment writes only its own keys
// of the workers' bucket, and each value is capped, so that it cannot fill
// its tenant's storage: a value over the cap is refused, one under it is
// stored.
func TestWorkerValuesAreBounded(t *testing.T) {
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
	w := dialRole(t, root, srv.ClientURL(), "toolworker")
	wjs, err := jetstream.NewWithAPIPrefix(w.nc, bus.APIPrefix)
	if err != nil {
		t.Fatal(err)
	}
	kv, err := wjs.KeyValue(ctx, bus.BucketWorkers)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := kv.Put(ctx, "echo.w1", []byte(time.Now().UTC().Format(time.RFC3339Nano))); err != nil {
		t.Fatalf("a worker's presence: %v", err)
	}
	if _, err := kv.Put(ctx, "echo.w2", make([]byte, bus.WorkerValueMax+1)); err == nil {
		t.Fatalf("a value of %d bytes was stored in %s", bus.WorkerValueMax+1, bus.BucketWorkers)
	}
	s, err := ajs.Stream(ctx, "KV_"+bus.BucketWorkers)
	if err != nil {
		t.Fatal(err)
	}
	if cfg := s.CachedInfo().Config; cfg.MaxBytes <= 0 || cfg.MaxMsgSize != bus.WorkerValueMax {
		t.Errorf("%s: max_bytes %d, max_msg_size %d", bus.BucketWorkers, cfg.MaxBytes, cfg.MaxMsgSize)
	}
}

// TestUntrustedAccountsAreBounded: every shipped configuration (the
// development one, production's and the tenants') gives every account of
// an untrusted role limits on connections, subscriptions and payload, and
// every streams' account a storage limit; and the server enforces them: a
// viewer's publish over its payload limit closes its connection.
func TestUntrustedAccountsAreBounded(t *testing.T) {
	root := repoRoot(t)
	t.Setenv("JETLOOP_STORE_DIR", t.TempDir())
	t.Setenv("JETLOOP_TLS_CERT", "cert.pem")
	t.Setenv("JETLOOP_TLS_KEY", "key.pem")
	for _, role := range []string{"ADMIN", "ORCHESTRATOR", "TOOLWORKER", "CLIENT", "VIEWER"} {
		t.Setenv("JETLOOP_"+role+"_NKEY", "UDNO32UHZBNWEBVWZTPMLJ2BMKPHW7CBCM4TPXSUHS3NMTZAIWRHFJB4")
	}
	for _, path := range []string{"nats.conf", "deploy/production/nats.conf", "deploy/tenants/nats.conf"} {
		m, err := conf.ParseFile(filepath.Join(root, path))
		if err != nil {
			t.Fatalf("%s: %v", path, err)
		}
		accounts, _ := m["accounts"].(map[string]any)
		if len(accounts) == 0 {
			t.Fatalf("%s: no accounts", path)
		}
		for name, a := range accounts {
			acc, _ := a.(map[string]any)
			switch {
			case name == "SYS":
			case strings.HasPrefix(name, "JETLOOP"):
				js, _ := acc["jetstream"].(map[string]any)
				if js["max_file"] == nil || js["max_mem"] == nil {
					t.Errorf("%s: %s has no storage limit: %v", path, name, acc["jetstream"])
				}
			default:
				lim, _ := acc["limits"].(map[string]any)
				for _, k := range []string{"max_connections", "max_subscriptions", "max_payload"} {
					if n, ok := lim[k].(int64); !ok || n <= 0 {
						t.Errorf("%s: %s: %s is %v", path, name, k, lim[k])
					}
				}
				if acc["jetstream"] != nil {
					t.Errorf("%s: %s has JetStream of its own", path, name)
				}
			}
		}
	}

	srv := testkit.StartConfig(t, filepath.Join(root, "nats.conf"))
	v := dialRole(t, root, srv.ClientURL(), "viewer")
	closed := make(chan struct{})
	v.nc.SetClosedHandler(func(*nats.Conn) { close(closed) })
	err := v.nc.Publish("JETLOOP.API.INFO", make([]byte, 100<<10))
	if errors.Is(err, nats.ErrMaxPayload) {
		return // the server told the client its limit, and nats.go keeps it
	}
	if err != nil {
		t.Fatal(err)
	}
	_ = v.nc.Flush()
	select {
	case <-closed:
	case <-time.After(10 * time.Second):
		t.Fatal("a viewer's 100 KiB publish was taken")
	}
}
