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
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// newConfStack is a stack on a server with the repository's nats.conf,
// provisioned by admin, whose test connection is admin's and whose
// orchestrator runs as its own user.
func newConfStack(t *testing.T) *stack {
	t.Helper()
	if testing.Short() {
		t.Skip("builds and starts the binaries")
	}
	root := repoRoot(t)
	srv := testkit.StartConfig(t, filepath.Join(root, "nats.conf"))
	admin := dialRole(t, root, srv.ClientURL(), "admin")
	js, err := jetstream.New(admin.nc)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if _, err := bus.Apply(ctx, js, bus.DefaultProvision(admin.nc.MaxPayload())); err != nil {
		t.Fatal(err)
	}
	s := &stack{t: t, srv: srv, url: srv.ClientURL(), nc: admin.nc, js: js, dir: t.TempDir()}
	if err := os.WriteFile(filepath.Join(s.dir, "AGENTS.md"), []byte(failureAgents), 0o644); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { testkit.CheckLogs(t, js) })
	s.orch = start(t, s.dir, "orchestrator", append(roleFlags(root, s.url, "orchestrator"),
		"--agents", filepath.Join(s.dir, "AGENTS.md"), "--ack-wait", "5s", "--allow-scripts")...)
	s.waitServing(s.orch)
	return s
}

// roleFlags are the connection flags of a process run as role.
func roleFlags(root, url, role string) []string {
	return []string{"--nats", url, "--user", role, "--password-file", filepath.Join(root, "deploy", "dev", role+".password")}
}

// TestPushConsumerCannotForgeCancels: a consumer's deliver subject is not
// checked by the server, so whoever may create one can have the streams'
// account deliver events onto jetloop.cancel.<turn>, which the orchestrator
// and every worker hear. The viewer may not create consumers; and were a
// push consumer aimed there anyway (admin's, here), a tool call running
// meanwhile must not be cancelled: only the orchestrator's own broadcast
// (no reply, no header, no body) is a cancel.
func TestPushConsumerCannotForgeCancels(t *testing.T) {
	s := newConfStack(t)
	root := repoRoot(t)
	w := start(t, s.dir, "toolworker", append(roleFlags(root, s.url, "toolworker"), "--root", s.dir, "--tools", "sleep")...)
	s.waitServing(w)
	const turn = "forged-cancel"
	// Long enough that the forged deliveries land while it runs.
	s.submit(turn, "Any", `{"responses": [{"tool_calls": [{"name": "sleep", "arguments": {"ms": 4000}}]}, {"text": "slept"}]}`)
	s.running("sleep")

	// A push consumer delivers only while a subscription names its deliver
	// subject exactly (the processes subscribe jetloop.cancel.*): any such
	// subscriber, here an operator watching the turn's cancel, arms it.
	heard := make(chan *nats.Msg, 64)
	watch, err := s.nc.ChanSubscribe(events.CancelSubject(turn), heard)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = watch.Unsubscribe() }()

	req, err := json.Marshal(map[string]any{"stream_name": events.StreamEvents, "config": map[string]any{
		"name": "forger", "deliver_subject": events.CancelSubject(turn), "filter_subject": "jetloop.events.>",
		"deliver_policy": "all", "ack_policy": "none", "inactive_threshold": int64(time.Minute),
	}})
	if err != nil {
		t.Fatal(err)
	}
	// The viewer may not make it (TestNoRoleAimsAConsumer)...
	viewer := dialRole(t, root, s.url, "viewer")
	resp, err := viewer.nc.Request(bus.APIPrefix+".CONSUMER.CREATE."+events.StreamEvents+".forger.jetloop.events.>", req, 5*time.Second)
	if err == nil && !isAPIError(resp.Data) {
		t.Fatal("the viewer made a push consumer")
	}
	// ...and the subscribers' filter is a second fence: the same consumer,
	// made by admin, delivers what no cancel looks like.
	admin := dialRole(t, root, s.url, "admin")
	resp, err = admin.nc.Request("$JS.API.CONSUMER.CREATE."+events.StreamEvents+".forger.jetloop.events.>", req, 5*time.Second)
	if err != nil || isAPIError(resp.Data) {
		t.Fatalf("admin's push consumer: %v %s", err, resp.Data)
	}
	select {
	case m := <-heard:
		t.Logf("a forged cancel was delivered with reply %q", m.Reply)
	case <-time.After(30 * time.Second):
		t.Fatal("the push consumer delivered nothing")
	}
	// Either the call runs out its sleep and the turn finishes, or the
	// worker takes the delivery for a cancel and drops the call.
	aborted := func() bool { return strings.Contains(w.out.String(), "call aborted with its turn") }
	testkit.WaitFor(t, "the turn to finish or its call to be aborted", func() bool {
		log := s.log(turn)
		return aborted() || len(log) > 0 && log[len(log)-1].Type == events.TurnFinished
	})
	if aborted() {
		t.Fatalf("the worker took a delivery for a cancel:\n%s", w.out.String())
	}
	log, fin := s.finished(turn)
	done := of[events.ToolCompletedData](t, log, events.ToolCompleted)
	if fin.StopReason != events.StopCompleted || len(done) != 1 || done[0].IsError {
		t.Errorf("the turn finished %+v with tool results %+v", fin, done)
	}
}

// TestLiteralWildcardInboxSubjectsAreDeadLettered: a publish on an inbox
// subject whose id token is a literal * or > is not mapped into a
// partition (the server maps literal subjects only) and used to sit in the
// inbox for ever, unconsumed: a client filled the 1 GiB inbox so in
// seconds. Published as the client and as the orchestrator, each is either
// refused at publish or a dead letter with a reason, and the inbox ends
// empty.
func TestLiteralWildcardInboxSubjectsAreDeadLettered(t *testing.T) {
	s := newConfStack(t)
	root := repoRoot(t)
	subjects := []string{"jetloop.inbox.control.*", "jetloop.inbox.control.>", "jetloop.inbox.result.*", "jetloop.inbox.*.*", "jetloop.inbox.>"}
	stored := map[string]bool{}
	for _, role := range []string{"client", "orchestrator"} {
		c := dialRole(t, root, s.url, role)
		for _, subj := range subjects {
			m, err := c.nc.Request(subj, []byte(`{"action":"abort"}`), 5*time.Second)
			var ack jetstream.PubAck
			if err != nil || json.Unmarshal(m.Data, &ack) != nil || ack.Stream == "" {
				continue // refused at publish (or not for the inbox at all)
			}
			t.Logf("%s: %s stored as seq %d", role, subj, ack.Sequence)
			stored[subj] = true
		}
	}
	if len(stored) == 0 {
		t.Fatal("nothing was stored: the test proves nothing")
	}
	testkit.WaitForOr(t, "the inbox to be empty", func() bool {
		i, err := s.js.Stream(context.Background(), events.StreamInbox)
		if err != nil {
			return false
		}
		info, err := i.Info(context.Background())
		return err == nil && info.State.Msgs == 0
	}, func() {
		i, _ := s.js.Stream(context.Background(), events.StreamInbox)
		info, _ := i.Info(context.Background(), jetstream.WithSubjectFilter(">"))
		t.Logf("left in the inbox: %v", info.State.Subjects)
	})
	dead := map[string]string{}
	for _, m := range testkit.Stored(t, s.js, events.StreamDead) {
		dead[m.Header.Get("Jetloop-Subject")] = m.Subject + ": " + m.Header.Get(events.HeaderError)
	}
	for subj := range stored {
		if reason, ok := dead[subj]; !ok || !strings.Contains(reason, ": ") || strings.HasSuffix(reason, ": ") {
			t.Errorf("%s: dead letter %q, want one with a reason", subj, reason)
		} else {
			t.Logf("%s -> %s", subj, reason)
		}
	}
}

// TestForeignToolResultIsDeadLettered: a worker deployment answers, from
// its own account, a call of a tool it does not serve (the default
// deployment's sleep). On its own tool's subject the result is a dead
// letter, whether it names its own tool (not the call's) or the call's
// (not the subject's); on the sleep's subject or the unbound one nothing
// in its account answers. The call is still answered by its own worker.
func TestForeignToolResultIsDeadLettered(t *testing.T) {
	s := newConfStack(t)
	root := repoRoot(t)
	w := start(t, s.dir, "toolworker", append(roleFlags(root, s.url, "toolworker"), "--root", s.dir, "--tools", "sleep")...)
	s.waitServing(w)
	const turn = "foreign-result"
	s.submit(turn, "Any", `{"responses": [{"tool_calls": [{"name": "sleep", "arguments": {"ms": 8000}}]}, {"text": "slept"}]}`)
	s.running("sleep")
	var call string
	for _, c := range of[events.ToolRequestedData](t, s.log(turn), events.ToolRequested) {
		call = c.CallID
	}
	other := dialRole(t, root, s.url, "exampleworker")
	for i, tc := range []struct {
		subject, tool string
		dead          string // the dead letter's reason; "" when not stored
	}{
		{events.ToolResultSubject("word_count", turn), "word_count", `a call of "sleep"`},
		{events.ToolResultSubject("word_count", turn), "sleep", "published on tool word_count's subject"},
		{events.ToolResultSubject("sleep", turn), "sleep", ""},
		{events.ResultSubject(turn), "sleep", ""},
	} {
		forged, err := json.Marshal(events.ToolResult{TurnID: turn, CallID: call, Tool: tc.tool, Output: "forged", Final: true, Attempt: 1})
		if err != nil {
			t.Fatal(err)
		}
		msg := nats.NewMsg(tc.subject)
		msg.Data = forged
		msg.Header.Set(jetstream.MsgIDHeader, fmt.Sprintf("forged-%d", i))
		m, err := other.nc.RequestMsg(msg, 5*time.Second)
		if tc.dead == "" {
			if !errors.Is(err, nats.ErrNoResponders) {
				t.Errorf("a result of %s on %s: %v %v, want no responders", tc.tool, tc.subject, m, err)
			}
			continue
		}
		if err != nil {
			t.Fatal(err)
		}
		var ack jetstream.PubAck
		if json.Unmarshal(m.Data, &ack) != nil || ack.Stream != events.StreamInbox {
			t.Fatalf("the result was not stored: %s", m.Data)
		}
		testkit.WaitFor(t, "the forged result to be a dead letter: "+tc.dead, func() bool {
			ds, err := s.js.Stream(context.Background(), events.StreamDead)
			if err != nil {
				return false
			}
			msg, err := ds.GetLastMsgForSubject(context.Background(), events.DeadSubject("result"))
			return err == nil && strings.Contains(msg.Header.Get(events.HeaderError), tc.dead)
		})
	}
	// Handed to the turn's owner: refused on its own tool's subject (a
	// result of sleep there is not its to give), and the sleep's subject
	// is not in its account.
	forged, err := json.Marshal(events.ToolResult{TurnID: turn, CallID: call, Tool: "sleep", Output: "forged", Final: true, Attempt: 1})
	if err != nil {
		t.Fatal(err)
	}
	if m, err := other.nc.Request(events.DirectResultSubject("word_count", turn), forged, 5*time.Second); err != nil || m.Header.Get(events.HeaderError) == "" {
		t.Errorf("a result of sleep handed over on word_count's subject: %v %v, want a refusal", m, err)
	}
	if m, err := other.nc.Request(events.DirectResultSubject("sleep", turn), forged, 5*time.Second); !errors.Is(err, nats.ErrNoResponders) {
		t.Errorf("a result of sleep handed over on sleep's subject: %v %v, want no responders", m, err)
	}
	log, fin := s.finished(turn)
	done := of[events.ToolCompletedData](t, log, events.ToolCompleted)
	if fin.StopReason != events.StopCompleted || len(done) != 1 || done[0].Output == "forged" {
		t.Errorf("the turn finished %+v with tool results %+v", fin, done)
	}
}
