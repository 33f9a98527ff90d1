package blackbox

import (
	"context"
	"encoding/json"
	"fmt"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/jetloop/jetloop/internal/events"
	"github.com/jetloop/jetloop/internal/testkit"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// TestOrchestratorOutlivesASilentServer: the server an orchestrator pulls
// its inputs from goes silent (SIGSTOP) for longer than the pulls'
// heartbeats allow (two missed: 30 s), then comes back; the orchestrator
// still serves and runs a turn. It used to stop on the pull's missed
// heartbeats, which a cluster node that dies leading the submissions'
// consumer causes too: the chaos soak saw every orchestrator stop at once,
// 30 s after such a node's power was pulled.
func TestOrchestratorOutlivesASilentServer(t *testing.T) {
	if testing.Short() {
		t.Skip("a server process paused for half a minute")
	}
	dir := t.TempDir()
	port := testkit.FreePort(t)
	url := fmt.Sprintf("nats://127.0.0.1:%d", port)
	srv := startPath(t, dir, filepath.Join(plainBinaries(t), "nats-server"),
		"-a", "127.0.0.1", "-p", strconv.Itoa(port), "-js", "-sd", filepath.Join(dir, "store"))
	testkit.WaitFor(t, "the server to be ready", func() bool { return strings.Contains(srv.out.String(), "Server is ready") })
	d := newDeployment(t, url)
	d.streams()
	orch := d.orchestrator()

	if err := srv.cmd.Process.Signal(syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	// The pulls notice the silence after two missed heartbeats, and stop
	// serving or pull again.
	testkit.WaitFor(t, "the orchestrator to notice the silence", func() bool {
		out := orch.out.String()
		return strings.Contains(out, "heartbeats stopped") || strings.Contains(out, "orchestrator stopped")
	})
	if err := srv.cmd.Process.Signal(syscall.SIGCONT); err != nil {
		t.Fatal(err)
	}
	if strings.Contains(orch.out.String(), "orchestrator stopped") {
		t.Fatal("the orchestrator stopped when its server went silent")
	}

	nc, err := nats.Connect(url)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	data, err := json.Marshal(events.Submit{TurnID: "after-silence", Agent: "Any", Model: "script",
		Script: json.RawMessage(`{"responses": [{"text": "still here"}]}`), Input: []events.Message{{Role: events.RoleUser, Content: "go"}}})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if _, err := js.Publish(ctx, events.SubjectSubmit, data, jetstream.WithMsgID("after-silence")); err != nil {
		t.Fatal(err)
	}
	if _, fin := testkit.Finished(t, js, "after-silence"); fin.StopReason != events.StopCompleted || fin.Output != "still here" {
		t.Fatalf("the turn after the silence finished %s with %q", fin.StopReason, fin.Output)
	}
	if code := orch.stop(t); code != 0 {
		t.Errorf("orchestrator exited %d after SIGTERM", code)
	}
}
