package orchestrator_test

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/jetloop/jetloop/internal/events"
	"github.com/jetloop/jetloop/internal/orchestrator"
	"github.com/jetloop/jetloop/internal/testkit"
	"github.com/jetloop/jetloop/internal/testkit/inproc"
	"github.com/jetloop/jetloop/internal/tools"
	"github.com/jetloop/jetloop/worker"
	"github.com/nats-io/nats.go"
)

// stallConf is a server whose orchestrator user may not write the log of
// turn t-stalled: the server drops each append with a permissions error and
// never answers it, so every append of that turn waits out its whole
// deadline, as appends do while a stream's leader fails over.
const stallConf = `
jetstream { max_file_store: 1TB }
accounts {
  J {
    jetstream: enabled
    users: [
      { user: all, password: all }
      { user: orch, password: orch, permissions: { publish: { deny: ["jetloop.events.*.t-stalled"] } } }
    ]
  }
}
no_auth_user: all
`

// gate is a tool whose calls return once the test opens it.
type gate struct {
	called chan struct{}
	open   chan struct{}
}

func (g *gate) Spec() events.ToolSpec {
	return events.ToolSpec{Name: "gate", Description: "Waits for the test.", Parameters: json.RawMessage(`{"type":"object"}`)}
}

// waitCalled returns once the gate has been called, failing the test after
// a minute.
func (g *gate) waitCalled(t *testing.T) {
	t.Helper()
	select {
	case <-g.called:
	case <-time.After(time.Minute):
		t.Fatal("the gate was never called")
	}
}

func (g *gate) Call(ctx context.Context, _ json.RawMessage) (tools.Result, error) {
	select {
	case g.called <- struct{}{}:
	default:
	}
	select {
	case <-g.open:
		return tools.Result{Output: "opened"}, nil
	case <-ctx.Done():
		return tools.Result{}, ctx.Err()
	}
}

// TestAStalledTurnDoesNotHoldUpItsShard: one shard serves two turns; the
// writes of one stall (each append waits out its deadline, 10 s), and the
// other's tool result, arriving meanwhile, is applied at once and its turn
// finishes — it does not wait behind the stalled input. (A shard that
// handled its inputs strictly one after another failed this: the result
// waited the whole stall.)
func TestAStalledTurnDoesNotHoldUpItsShard(t *testing.T) {
	conf := filepath.Join(t.TempDir(), "nats.conf")
	if err := os.WriteFile(conf, []byte(stallConf), 0o644); err != nil {
		t.Fatal(err)
	}
	h := newHarnessOn(t, testkit.StartConfig(t, conf), nil)
	g := &gate{called: make(chan struct{}, 1), open: make(chan struct{})}
	h.worker(func(w *worker.Worker) {
		if err := tools.Register(w, g); err != nil {
			t.Error(err)
		}
	})

	denied := make(chan struct{}, 1)
	nc, err := nats.Connect(h.Server.ClientURL(), nats.UserInfo("orch", "orch"),
		nats.ErrorHandler(func(_ *nats.Conn, _ *nats.Subscription, err error) {
			if strings.Contains(err.Error(), "Permissions Violation for Publish to \"jetloop.events.t-stalled.t-stalled\"") {
				select {
				case denied <- struct{}{}:
				default:
				}
			}
		}))
	if err != nil {
		t.Fatal(err)
	}
	_, _, kill := inproc.Orchestrator(t, nc, h.Log, h.Agents, orchestrator.WithShards(1), orchestrator.WithAllowScripts(true))
	// As a crash: the stalled append ends with the connection, not with
	// its deadline.
	t.Cleanup(kill)

	h.submit(script("t-fast", "General", `{"responses": [
		{"tool_calls": [{"name": "gate", "arguments": {}}]},
		{"text": "through"}]}`))
	g.waitCalled(t)
	h.submit(script("t-stalled", "General", `{"responses": [{"text": "never stored"}]}`))
	select {
	case <-denied:
	case <-time.After(time.Minute):
		t.Fatal("the stalled turn's append was never sent")
	}

	close(g.open)
	opened := time.Now()
	_, fin := h.finished("t-fast")
	if fin.StopReason != events.StopCompleted || fin.Output != "through" {
		t.Fatalf("t-fast finished %+v", fin)
	}
	// Its stalled neighbour's append waits 10 s: well beyond this, and
	// beyond what a loaded machine adds.
	if took := time.Since(opened); took > 7*time.Second {
		t.Fatalf("t-fast took %s to finish after its tool answered: it waited behind the stalled turn", took)
	}
	if h.last("t-stalled") != "" {
		t.Fatal("t-stalled has a log: its appends did not stall")
	}
}
