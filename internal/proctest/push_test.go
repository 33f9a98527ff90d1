package proctest

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/jetloop/jetloop/internal/bus"
	"github.com/jetloop/jetloop/internal/events"
	"github.com/jetloop/jetloop/internal/natstest"
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
	srv := natstest.StartConfig(t, filepath.Join(root, "nats.conf"))
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
	t.Cleanup(func() { natstest.CheckLogs(t, js) })
	s.orch = start(t, s.dir, "orchestrator", append(roleFlags(root, s.url, "orchestrator"),
		"--agents", filepath.Join(s.dir, "AGENTS.md"), "--ack-wait", "5s", "--allow-scripts")...)
	s.waitServing(s.orch)
	return s
}

// roleFlags are the connection flags of a process run as role.
func roleFlags(root, url, role string) []string {
	return []string{"--nats", url, "--user", role, "--password-file", filepath.Join(root, "deploy", "dev", role+".password")}
}

// TestPushConsumerCannotForgeCancels: a reader may create consumers on the
// turns' logs, and a consumer's deliver subject is not checked by the
// server, so the viewer can have the streams' account deliver events onto
// jetloop.cancel.<turn>, which the orchestrator and every worker hear. A
// tool call running meanwhile must not be cancelled: only the
// orchestrator's own broadcast (no reply, no header, no body) is a cancel.
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

	viewer := dialRole(t, root, s.url, "viewer")
	req, err := json.Marshal(map[string]any{"stream_name": events.StreamEvents, "config": map[string]any{
		"name": "forger", "deliver_subject": events.CancelSubject(turn), "filter_subject": "jetloop.events.>",
		"deliver_policy": "all", "ack_policy": "none", "inactive_threshold": int64(time.Minute),
	}})
	if err != nil {
		t.Fatal(err)
	}
	resp, err := viewer.nc.Request(bus.APIPrefix+".CONSUMER.CREATE."+events.StreamEvents+".forger.jetloop.events.>", req, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if isAPIError(resp.Data) {
		// Refused outright is the stronger outcome.
		t.Logf("the consumer was refused: %s", resp.Data)
	} else {
		select {
		case m := <-heard:
			t.Logf("a forged cancel was delivered with reply %q", m.Reply)
		case <-time.After(30 * time.Second):
			t.Fatal("the push consumer delivered nothing")
		}
	}
	// Either the call runs out its sleep and the turn finishes, or the
	// worker takes the delivery for a cancel and drops the call.
	aborted := func() bool { return strings.Contains(w.out.String(), "call aborted with its turn") }
	natstest.WaitFor(t, "the turn to finish or its call to be aborted", func() bool {
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
