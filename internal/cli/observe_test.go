package cli

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jetloop/jetloop/internal/events"
	"github.com/jetloop/jetloop/internal/testkit"
	"github.com/nats-io/nats.go"
)

// lockedBuffer is a writer several goroutines may share.
type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// freeAddr returns a loopback address nothing listens on now.
func freeAddr(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	return addr
}

// TestDevServesMetrics runs `jetloop dev --metrics-addr` and a turn through
// it: /readyz turns ready, /metrics counts the turn and its call.
func TestDevServesMetrics(t *testing.T) {
	dir := t.TempDir()
	agentsPath := filepath.Join(dir, "AGENTS.md")
	if err := os.WriteFile(agentsPath, []byte("---\nname: Dev\nmodel: script\n---\nA dev agent.\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	natsURL, metricsAddr := "nats://"+freeAddr(t), freeAddr(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var out, errOut lockedBuffer
	exited := make(chan int, 1)
	go func() {
		exited <- Main(ctx, []string{"dev", "--nats", natsURL, "--data", filepath.Join(dir, "data"), "--root", t.TempDir(),
			"--agents", agentsPath, "--metrics-addr", metricsAddr}, &out, &errOut)
	}()
	base := "http://" + metricsAddr
	status := func(path string) (int, string) {
		resp, err := http.Get(base + path)
		if err != nil {
			return 0, err.Error()
		}
		defer resp.Body.Close()
		body, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(body)
	}
	testkit.WaitFor(t, "dev to be ready", func() bool {
		select {
		case code := <-exited:
			t.Fatalf("dev exited %d: %s", code, errOut.String())
		default:
		}
		code, _ := status("/readyz")
		return code == http.StatusOK
	})
	if code, _ := status("/healthz"); code != http.StatusOK {
		t.Errorf("/healthz: %d", code)
	}

	nc, err := nats.Connect(natsURL)
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	sub := events.Submit{TurnID: "dev-metrics", Agent: "Dev", Model: "script",
		Script: json.RawMessage(`{"responses": [{"tool_calls": [{"name": "echo", "arguments": {"text": "hi"}}]}, {"text": "done"}]}`),
		Input:  []events.Message{{Role: events.RoleUser, Content: "go"}}}
	if err := Submit(ctx, nc, sub); err != nil {
		t.Fatal(err)
	}
	want := []string{
		`jetloop_turns_finished_total{agent="Dev",stop_reason="completed"} 1`,
		`jetloop_tool_calls_total{outcome="ok",tool="echo"} 1`,
		`jetloop_steps_total{agent="Dev"} 2`,
		`jetloop_turns_active 0`,
	}
	var body string
	testkit.WaitFor(t, "the turn in /metrics", func() bool {
		_, body = status("/metrics")
		for _, w := range want {
			if !strings.Contains(body, w+"\n") {
				return false
			}
		}
		return true
	})

	cancel()
	select {
	case code := <-exited:
		if code != ExitOK {
			t.Errorf("dev exited %d: %s", code, errOut.String())
		}
	case <-time.After(time.Minute):
		t.Fatal("dev did not stop")
	}
}

// TestDevUIAndInterrupt: jetloop dev --ui serves the web view on its own
// stack, and dev stopped by SIGINT exits 130, as help says.
func TestDevUIAndInterrupt(t *testing.T) {
	dir := t.TempDir()
	natsURL, uiAddr := "nats://"+freeAddr(t), freeAddr(t)
	ctx, cancel := context.WithCancelCause(context.Background())
	defer cancel(nil)
	var out, errOut lockedBuffer
	exited := make(chan int, 1)
	go func() {
		exited <- Main(ctx, []string{"dev", "--nats", natsURL, "--data", filepath.Join(dir, "data"), "--root", t.TempDir(),
			"--ui", "--ui-addr", uiAddr}, &out, &errOut)
	}()
	testkit.WaitFor(t, "dev's web view", func() bool {
		select {
		case code := <-exited:
			t.Fatalf("dev exited %d: %s", code, errOut.String())
		default:
		}
		resp, err := http.Get("http://" + uiAddr + "/")
		if err != nil {
			return false
		}
		resp.Body.Close()
		return resp.StatusCode == http.StatusOK
	})
	if !strings.Contains(out.String(), "jetloop ui: http://"+uiAddr) {
		t.Errorf("dev does not say where the view is:\n%s", out.String())
	}
	cancel(&Interrupt{Signal: os.Interrupt}) // what SignalContext does on SIGINT
	if code := <-exited; code != ExitInterrupted {
		t.Fatalf("dev after SIGINT: exit %d, want %d\n%s", code, ExitInterrupted, errOut.String())
	}
}
