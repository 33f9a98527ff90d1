package cli

import (
	"bufio"
	"context"
	"io"
	"path/filepath"
	"strings"
	"testing"

	"github.com/jetloop/jetloop/internal/events"
)

// top --once counts the turns by status, lists the paused one with its
// question, and has the tool calls of the window with their latency.
func TestTopOnce(t *testing.T) {
	e := newEnv(t)
	submitScript(t, e.js, "top-done", "Wide", `{"responses":[{"tool_calls":[{"name":"echo","arguments":{"text":"a"}},`+
		`{"name":"echo","arguments":{"text":"b"}}]},{"text":"done"}]}`)
	e.finished("top-done")
	submitScript(t, e.js, "top-ask", "Asker", askJSON)
	e.waitType("top-ask", events.TurnPaused)
	out := e.mustRun(ExitOK, "top", "--once")
	for _, want := range []string{"running 0 · paused 1 · finished 1 (completed 1)", "dead    0 dead letters",
		"top-ask", `paused: asks "which colour?"`, "TOOLS (last 1m0s)"} {
		if !strings.Contains(out, want) {
			t.Errorf("top --once lacks %q:\n%s", want, out)
		}
	}
	var echo string
	for _, line := range strings.Split(out, "\n") {
		if f := strings.Fields(line); len(f) > 0 && f[0] == "echo" {
			echo = line
		}
	}
	// Two calls in the window, neither failed.
	if f := strings.Fields(echo); len(f) != 6 || f[1] != "2" || f[2] != "0" {
		t.Errorf("echo's line: %q\n%s", echo, out)
	}
	if strings.Contains(out, "top-done ") {
		t.Errorf("a finished turn among the running ones:\n%s", out)
	}
}

// top, live, shows a turn that starts after it did, then shows it paused.
func TestTopLive(t *testing.T) {
	e := newEnv(t)
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	out, w := io.Pipe()
	code := make(chan int, 1)
	go func() {
		code <- Main(ctx, []string{"top", "--nats", e.srv.ClientURL(), "--interval", "50ms"}, w, io.Discard)
		w.Close()
	}()
	sc := bufio.NewScanner(out)
	if !sc.Scan() || !strings.HasPrefix(sc.Text(), "jetloop top") {
		t.Fatalf("first line: %q", sc.Text())
	}
	submitScript(t, e.js, "top-live", "Asker", askJSON)
	for sc.Scan() {
		if strings.HasPrefix(sc.Text(), "top-live ") && strings.Contains(sc.Text(), "paused: asks") {
			break
		}
	}
	go func() { _, _ = io.Copy(io.Discard, out) }()
	cancel()
	if c := <-code; c != ExitOK {
		t.Fatalf("exit %d", c)
	}
}

// TestTopAsViewer: top reads what the web view reads, and so works with
// nats.conf's viewer role too.
func TestTopAsViewer(t *testing.T) {
	e, srv := newRolesEnv(t)
	submitScript(t, e.js, "ui-ro", "Asker", askJSON)
	e.waitType("ui-ro", events.TurnPaused)
	var out, errOut strings.Builder
	if code := Main(t.Context(), []string{"top", "--once", "--nats", srv.ClientURL(), "--user", "viewer", "--password-file",
		filepath.Join("..", "..", "deploy", "dev", "viewer.password")}, &out, &errOut); code != ExitOK ||
		!strings.Contains(out.String(), "paused 1") {
		t.Fatalf("top as viewer: exit %d\n%s\n%s", code, out.String(), errOut.String())
	}
	if errOut.Len() > 0 {
		t.Errorf("top as viewer complained: %s", errOut.String())
	}
}
