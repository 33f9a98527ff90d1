package metrics_test

import (
	"errors"
	"io"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/jetloop/jetloop/internal/metrics"
)

// A nil *Metrics is how metrics are off: every method does nothing.
func TestNilRecordsNothing(t *testing.T) {
	var m *metrics.Metrics
	m.KnowAgents("a")
	m.TurnStarted("a")
	m.TurnFinished("a", "completed")
	m.TurnsActive(1)
	m.TurnsPaused(1)
	m.StepStarted("a")
	m.StepChecked(time.Millisecond)
	m.ModelCall("script", metrics.OK, time.Second, 1, 1)
	m.ToolCall("echo", metrics.OK, time.Millisecond)
	m.SlotsBusy("echo", 1)
	m.Input("submit", metrics.OK)
	m.DeadLetter("submit")
	m.AppendConflict()
	m.WorkflowFinished("completed")
	m.AddCheck("x", func() error { return nil })
}

func body(t *testing.T, m *metrics.Metrics, path string) (int, string) {
	t.Helper()
	rec := httptest.NewRecorder()
	m.Handler().ServeHTTP(rec, httptest.NewRequest("GET", path, nil))
	data, _ := io.ReadAll(rec.Body)
	return rec.Code, string(data)
}

func TestLabelsStayBounded(t *testing.T) {
	m := metrics.New()
	m.KnowAgents("General")
	m.TurnStarted("General")
	m.TurnStarted("made-up-by-someone")
	m.TurnFinished("", "rejected")
	_, text := body(t, m, "/metrics")
	for _, want := range []string{
		`jetloop_turns_started_total{agent="General"} 1`,
		`jetloop_turns_started_total{agent="other"} 1`,
		`jetloop_turns_finished_total{agent="",stop_reason="rejected"} 1`,
		`jetloop_workflows_finished_total{stop_reason="max_tasks"} 0`,
		`jetloop_turns_active 0`,
		`jetloop_append_conflicts_total 0`,
		`go_goroutines`,
	} {
		if !strings.Contains(text, want) {
			t.Errorf("/metrics lacks %s", want)
		}
	}
	if strings.Contains(text, "made-up") {
		t.Error("an unknown agent's name became a label")
	}
}

func TestReadiness(t *testing.T) {
	m := metrics.New()
	if code, _ := body(t, m, "/healthz"); code != 200 {
		t.Errorf("/healthz %d", code)
	}
	if code, text := body(t, m, "/readyz"); code != 503 {
		t.Errorf("/readyz with no part registered: %d %q, want 503", code, text)
	}
	var err error = errors.New("not set up")
	m.AddCheck("orchestrator", func() error { return err })
	m.AddCheck("toolworker", func() error { return nil })
	if code, text := body(t, m, "/readyz"); code != 503 || !strings.Contains(text, "orchestrator: not set up") {
		t.Errorf("/readyz with a part not ready: %d %q", code, text)
	}
	err = nil
	if code, text := body(t, m, "/readyz"); code != 200 {
		t.Errorf("/readyz with every part ready: %d %q", code, text)
	}
}

func TestTenantsAreLabelled(t *testing.T) {
	m := metrics.NewTenants()
	a, b := m.Tenant("a"), m.Tenant("b")
	if m.Tenant("a") != a {
		t.Fatal("a tenant's metrics are made twice")
	}
	a.KnowAgents("coder")
	a.TurnStarted("coder")
	b.TurnStarted("coder")
	b.TurnStarted("coder")
	m.TurnStarted("coder") // the root records nothing
	a.AddCheck("a", func() error { return nil })
	code, text := body(t, m, "/metrics")
	if code != 200 {
		t.Fatal(code)
	}
	for _, want := range []string{
		`jetloop_turns_started_total{agent="coder",tenant="a"} 1`,
		`jetloop_turns_started_total{agent="other",tenant="b"} 2`,
	} {
		if !strings.Contains(text, want) {
			t.Errorf("no %s in\n%s", want, text)
		}
	}
	if strings.Contains(text, `jetloop_turns_started_total{agent="coder"} `) {
		t.Error("the root recorded a series without a tenant")
	}
	if code, _ := body(t, m, "/readyz"); code != 200 {
		t.Errorf("a tenant's check is not the process's: /readyz %d", code)
	}
	b.AddCheck("b", func() error { return errors.New("stopped") })
	if code, text := body(t, m, "/readyz"); code != 503 || !strings.Contains(text, "tenant b: b: stopped") {
		t.Errorf("a tenant that is not ready: /readyz %d %s", code, text)
	}
	m.DropTenant("b")
	if code, _ := body(t, m, "/readyz"); code != 200 {
		t.Errorf("a tenant no longer served still counts: /readyz %d", code)
	}
}
