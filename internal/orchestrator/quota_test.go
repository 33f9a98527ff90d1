package orchestrator_test

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/jetloop/jetloop/internal/bus"
	"github.com/jetloop/jetloop/internal/events"
	"github.com/jetloop/jetloop/internal/orchestrator"
	"github.com/jetloop/jetloop/internal/testkit"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// tenantsConf is a server with two tenants' accounts, each with its own
// streams: a, whose storage is bounded, and b.
const tenantsConf = `
jetstream { }
accounts {
  A { jetstream { max_file: 24M, max_mem: 16M }, users: [ { user: a, password: a } ] }
  B { jetstream: enabled, users: [ { user: b, password: b } ] }
}
`

// twoTenants starts that server and a harness on each account, each with
// an orchestrator held to its quota, and a tool worker.
func twoTenants(t *testing.T, qa, qb orchestrator.Quota) (a, b *harness) {
	t.Helper()
	path := filepath.Join(t.TempDir(), "nats.conf")
	if err := os.WriteFile(path, []byte(tenantsConf), 0o600); err != nil {
		t.Fatal(err)
	}
	srv := testkit.StartConfig(t, path)
	// Within an account whose storage is bounded, a stream's own bound
	// would be reserved from it: the tenant's streams are bounded by the
	// account alone.
	p := bus.DefaultProvision(1 << 20)
	p.MaxBytes, p.WorkersMaxBytes = -1, -1
	a = newHarnessAs(t, srv, &p, nats.UserInfo("a", "a"))
	b = newHarnessAs(t, srv, &p, nats.UserInfo("b", "b"))
	a.orchestrator(orchestrator.WithTenant("a", qa))
	b.orchestrator(orchestrator.WithTenant("b", qb))
	a.worker()
	b.worker()
	return a, b
}

// pausing is a turn that waits for the approval of its echo: in flight until
// it is answered.
func pausing(turn string) events.Submit {
	return script(turn, "Gated", `{"responses":[{"tool_calls":[{"name":"echo","arguments":{"text":"y"}}]},{"text":"ok"}]}`)
}

func plain(turn string) events.Submit {
	return script(turn, "General", `{"responses":[{"text":"hi"}]}`)
}

// refused waits for a turn to end rejected by a quota and returns why.
func refused(h *harness, turn, quota string) {
	h.t.Helper()
	_, fin := h.finished(turn)
	if fin.StopReason != events.StopRejected || !strings.Contains(fin.Error, quota) {
		h.t.Fatalf("turn %s: want rejected by the %s quota, got %s %q", turn, quota, fin.StopReason, fin.Error)
	}
}

func completed(h *harness, turn string) {
	h.t.Helper()
	if _, fin := h.finished(turn); fin.StopReason != events.StopCompleted {
		h.t.Fatalf("turn %s: want completed, got %s %q", turn, fin.StopReason, fin.Error)
	}
}

func TestQuotaTurnsInFlight(t *testing.T) {
	a, b := twoTenants(t, orchestrator.Quota{InFlight: 2}, orchestrator.Quota{InFlight: 2})
	for _, turn := range []string{"a1", "a2"} {
		a.submit(pausing(turn))
		a.waitType(turn, events.TurnPaused)
	}
	a.submit(pausing("a3"))
	refused(a, "a3", "2 turns and workflows in flight")
	// Another tenant at the same count is its own.
	for _, turn := range []string{"b1", "b2"} {
		b.submit(plain(turn))
		completed(b, turn)
	}
	// A turn that finishes makes room, once the count is read again.
	a.control("a1", events.Control{Action: events.ActionAbort})
	a.finished("a1")
	a.waitFor("room for a turn once one finished", func() bool {
		turn := fmt.Sprintf("a4-%d", time.Now().UnixNano())
		a.submit(plain(turn))
		_, fin := a.finished(turn)
		return fin.StopReason == events.StopCompleted
	})
}

func TestQuotaSubmissionRate(t *testing.T) {
	a, b := twoTenants(t, orchestrator.Quota{Rate: 0.001, Burst: 2}, orchestrator.Quota{})
	for _, turn := range []string{"a1", "a2"} {
		a.submit(plain(turn))
		completed(a, turn)
	}
	a.submit(plain("a3"))
	refused(a, "a3", "submissions per second")
	for i := range 5 {
		turn := fmt.Sprintf("b%d", i)
		b.submit(plain(turn))
		completed(b, turn)
	}
}

func TestQuotaStorage(t *testing.T) {
	a, b := twoTenants(t, orchestrator.Quota{SoftStorage: 50}, orchestrator.Quota{})
	// A turn running when the tenant fills up still finishes.
	a.submit(pausing("running"))
	a.waitType("running", events.TurnPaused)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	filler, err := a.js.CreateStream(ctx, jetstream.StreamConfig{Name: "FILLER", Subjects: []string{"filler"}})
	if err != nil {
		t.Fatal(err)
	}
	chunk := make([]byte, 512<<10)
	for range 26 { // 13 MiB of the account's 24
		if _, err := a.js.Publish(ctx, "filler", chunk); err != nil {
			t.Fatal(err)
		}
	}
	a.waitFor("a submission refused for storage", func() bool {
		turn := fmt.Sprintf("s%d", time.Now().UnixNano())
		a.submit(plain(turn))
		_, fin := a.finished(turn)
		return fin.StopReason == events.StopRejected && strings.Contains(fin.Error, "storage quota")
	})
	b.submit(plain("b1"))
	completed(b, "b1")
	yes := true
	a.control("running", events.Control{Action: events.ActionApprove, CallID: approvalCall(a, "running"), Approved: &yes})
	completed(a, "running")
	if err := filler.Purge(ctx); err != nil {
		t.Fatal(err)
	}
	a.waitFor("a submission accepted once storage is freed", func() bool {
		turn := fmt.Sprintf("f%d", time.Now().UnixNano())
		a.submit(plain(turn))
		_, fin := a.finished(turn)
		return fin.StopReason == events.StopCompleted
	})
}

// approvalCall is the call a paused turn waits to have approved.
func approvalCall(h *harness, turn string) string {
	h.t.Helper()
	var req events.TurnPausedData
	if err := json.Unmarshal(h.waitType(turn, events.TurnPaused).Data, &req); err != nil {
		h.t.Fatal(err)
	}
	return req.CallID
}
