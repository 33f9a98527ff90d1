package orchestrator_test

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/jetloop/jetloop/internal/orchestrator"

	"github.com/jetloop/jetloop/worker"

	"github.com/jetloop/jetloop/internal/events"
	"github.com/jetloop/jetloop/internal/metrics"
)

// serveMetrics serves m on a free loopback port until the test ends and
// returns its base URL.
func serveMetrics(t *testing.T, m *metrics.Metrics) string {
	t.Helper()
	srv, err := m.Listen("127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		if err := srv.Serve(ctx); err != nil {
			t.Errorf("metrics: %v", err)
		}
	}()
	t.Cleanup(func() { cancel(); <-done })
	return "http://" + srv.Addr()
}

// get returns the status and body of a GET.
func get(t *testing.T, url string) (int, string) {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return resp.StatusCode, string(body)
}

// scrape reads /metrics as series → value; a series is written as the
// exposition format writes it, labels sorted by name:
// `jetloop_inputs_total{kind="submit",outcome="ok"}`.
func scrape(t *testing.T, base string) map[string]float64 {
	t.Helper()
	code, body := get(t, base+"/metrics")
	if code != http.StatusOK {
		t.Fatalf("/metrics: %d %s", code, body)
	}
	out := map[string]float64{}
	sc := bufio.NewScanner(strings.NewReader(body))
	for sc.Scan() {
		line := sc.Text()
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		i := strings.LastIndexByte(line, ' ')
		v, err := strconv.ParseFloat(line[i+1:], 64)
		if err != nil {
			t.Fatalf("bad line %q: %v", line, err)
		}
		out[line[:i]] = v
	}
	return out
}

// TestMetricsOfARun scrapes the endpoint of a real orchestrator and tool
// worker sharing one registry (as in jetloop dev) and checks each figure
// against the logs of the turns it ran.
func TestMetricsOfARun(t *testing.T) {
	m := metrics.New()
	base := serveMetrics(t, m)
	if code, _ := get(t, base+"/healthz"); code != http.StatusOK {
		t.Errorf("/healthz before setup: %d, want 200", code)
	}
	if code, body := get(t, base+"/readyz"); code != http.StatusServiceUnavailable {
		t.Errorf("/readyz before setup: %d %q, want 503", code, body)
	}

	h := newHarness(t)
	h.workerWith(t.TempDir(), []worker.Option{worker.WithMetrics(m)}, func(w *worker.Worker) { m.AddCheck("toolworker "+w.Name(), w.Serving) })
	// An input held past the ack wait comes again and is counted twice:
	// with the harness's 1 s, a loaded machine can make that happen.
	h.orchestrator(orchestrator.WithMetrics(m), orchestrator.WithAckWait(30*time.Second))
	h.waitFor("/readyz", func() bool { code, _ := get(t, base+"/readyz"); return code == http.StatusOK })

	// Turns that end every usual way, with calls that end every usual way.
	turns := []events.Submit{
		// completed, after an echo (ok) and a read of a missing file (error)
		script("m-done", "General", `{"responses": [
			{"tool_calls": [{"name": "echo", "arguments": {"text": "hi"}}, {"name": "read_file", "arguments": {"path": "missing.txt"}}]},
			{"text": "done"}]}`),
		// step_cap after two steps, then a summary call
		script("m-capped", "Capped", `{"responses": [{"tool_calls": [{"name": "echo", "arguments": {"text": "again"}}]}], "repeat_last": true}`),
		// a tool the agent may not use, and one no worker serves: both
		// refused by the orchestrator, both counted as "other"
		script("m-refused", "Reader", `{"responses": [
			{"tool_calls": [{"name": "read_file", "arguments": {"path": "x"}}, {"name": "rm_everything", "arguments": {}}]},
			{"text": "ok"}]}`),
		// rejected: no such agent
		{TurnID: "m-rejected", Agent: "Nobody", Model: "script"},
	}
	for _, sub := range turns {
		h.submit(sub)
	}
	want := map[string]float64{}
	workerResults := 0
	for _, sub := range turns {
		log, fin := h.finished(sub.TurnID)
		started := of[events.TurnStartedData](t, log, events.TurnStarted)
		agent := ""
		if len(started) > 0 {
			agent = started[0].Agent
			want[fmt.Sprintf(`jetloop_turns_started_total{agent=%q}`, agent)]++
			want[fmt.Sprintf(`jetloop_steps_total{agent=%q}`, agent)] += float64(fin.Metrics.Steps)
		}
		want[fmt.Sprintf(`jetloop_turns_finished_total{agent=%q,stop_reason=%q}`, agent, fin.StopReason)]++
		want[`jetloop_model_calls_total{outcome="ok",provider="script"}`] += float64(fin.Metrics.ModelCalls)
		want[`jetloop_model_tokens_total{direction="input",provider="script"}`] += float64(fin.Metrics.InputTokens)
		want[`jetloop_model_tokens_total{direction="output",provider="script"}`] += float64(fin.Metrics.OutputTokens)
		want[`jetloop_inputs_total{kind="model",outcome="ok"}`] += float64(fin.Metrics.ModelCalls)
		offered := map[string]bool{}
		if len(started) > 0 {
			for _, name := range started[0].Tools {
				offered[name] = true
			}
		}
		for _, c := range of[events.ToolCompletedData](t, log, events.ToolCompleted) {
			outcome := "ok"
			if c.IsError {
				outcome = "error"
			}
			tool := c.Name
			if !offered[tool] {
				tool = "other"
			}
			if c.Worker != "orchestrator" {
				workerResults++
			}
			want[fmt.Sprintf(`jetloop_tool_calls_total{outcome=%q,tool=%q}`, outcome, tool)]++
		}
	}
	want[`jetloop_inputs_total{kind="submit",outcome="ok"}`] = 3
	want[`jetloop_inputs_total{kind="submit",outcome="dead_letter"}`] = 1
	want[`jetloop_inputs_total{kind="result",outcome="ok"}`] = float64(workerResults)
	want[`jetloop_dead_letters_total{kind="submit"}`] = 1
	want[`jetloop_turns_active`] = 0
	want[`jetloop_turns_paused`] = 0
	want[`jetloop_worker_slots_busy{tool="echo"}`] = 0
	want[`jetloop_append_conflicts_total`] = 0
	want[`jetloop_workflows_finished_total{stop_reason="completed"}`] = 0

	// The figures that checked a sanity of the test itself.
	if want[`jetloop_tool_calls_total{outcome="error",tool="other"}`] != 2 || want[`jetloop_tool_calls_total{outcome="ok",tool="echo"}`] != 3 ||
		want[`jetloop_turns_finished_total{agent="Capped",stop_reason="step_cap"}`] != 1 {
		t.Fatalf("the turns did not run as the test expects: %v", want)
	}
	// The last result's input is acknowledged, then counted: wait for it.
	var got map[string]float64
	h.waitFor("every input counted", func() bool {
		got = scrape(t, base)
		return got[`jetloop_inputs_total{kind="result",outcome="ok"}`] == float64(workerResults) &&
			got[`jetloop_inputs_total{kind="model",outcome="ok"}`] == want[`jetloop_inputs_total{kind="model",outcome="ok"}`]
	})
	for series, v := range want {
		if got[series] != v {
			t.Errorf("%s = %v, want %v", series, got[series], v)
		}
	}
	for series := range got {
		if strings.Contains(series, "m-done") || strings.Contains(series, "m-capped") {
			t.Errorf("a label carries an id: %s", series)
		}
	}
	for _, series := range []string{`jetloop_step_duration_seconds_count`, `jetloop_model_call_duration_seconds_count{provider="script"}`,
		`jetloop_tool_call_duration_seconds_count{tool="echo"}`} {
		if got[series] == 0 {
			t.Errorf("%s = 0: nothing observed", series)
		}
	}
	if got[`jetloop_step_duration_seconds_count`] != want[`jetloop_steps_total{agent="General"}`]+want[`jetloop_steps_total{agent="Capped"}`]+want[`jetloop_steps_total{agent="Reader"}`] {
		t.Errorf("step durations %v, want one per step", got[`jetloop_step_duration_seconds_count`])
	}
}

// TestReadinessFollowsTheServer: /readyz says not ready while the server
// is unreachable, and ready again once it is back.
func TestReadinessFollowsTheServer(t *testing.T) {
	m := metrics.New()
	base := serveMetrics(t, m)
	h := newHarness(t)
	h.workerWith(t.TempDir(), []worker.Option{worker.WithMetrics(m)}, func(w *worker.Worker) { m.AddCheck("toolworker "+w.Name(), w.Serving) })
	stop := h.orchestrator(orchestrator.WithMetrics(m))
	ready := func() bool { code, _ := get(t, base+"/readyz"); return code == http.StatusOK }
	h.waitFor("ready", ready)

	h.Server.Shutdown()
	h.Server.WaitForShutdown()
	h.waitFor("not ready while the server is down", func() bool { return !ready() })
	_, body := get(t, base+"/readyz")
	if !strings.Contains(body, "orchestrator") || !strings.Contains(body, "toolworker") {
		t.Errorf("/readyz names no part: %q", body)
	}
	if code, _ := get(t, base+"/healthz"); code != http.StatusOK {
		t.Errorf("/healthz while the server is down: %d, want 200", code)
	}

	// On its port and store, stopped when the test ends after the
	// harness's processes and its check of the logs.
	h.Server.Restart(t)
	h.waitFor("ready once the server is back", ready)

	// A stopped orchestrator is not ready either.
	stop()
	if ready() {
		t.Error("ready after the orchestrator stopped")
	}
}
