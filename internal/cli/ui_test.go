package cli

import (
	"bufio"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"testing"

	"github.com/jetloop/jetloop/internal/ui"
)

// jetloop ui itself: it says where it serves and that it is loopback only,
// serves there, and exits 0 when stopped.
func TestUICommand(t *testing.T) {
	e := newEnv(t)
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	out, w := io.Pipe()
	var stderr strings.Builder
	code := make(chan int, 1)
	go func() {
		code <- Main(ctx, []string{"ui", "--nats", e.srv.ClientURL(), "--addr", "127.0.0.1:0"}, w, &stderr)
		w.Close()
	}()
	sc := bufio.NewScanner(out)
	if !sc.Scan() {
		t.Fatalf("no output; stderr: %s", stderr.String())
	}
	first := sc.Text()
	url, rest, ok := strings.Cut(strings.TrimPrefix(first, "jetloop ui: "), " ")
	if !ok || !strings.HasPrefix(url, "http://127.0.0.1:") || !strings.Contains(rest, "loopback") {
		t.Fatalf("first line: %q", first)
	}
	if !sc.Scan() || !strings.Contains(sc.Text(), "control messages") {
		t.Fatalf("second line: %q", sc.Text())
	}
	go func() { _, _ = io.Copy(io.Discard, out) }()
	resp, err := http.Get(url + "api/info")
	if err != nil {
		t.Fatal(err)
	}
	var info ui.Info
	err = json.NewDecoder(resp.Body).Decode(&info)
	resp.Body.Close()
	if err != nil || !info.CanControl || !info.CanRetry {
		t.Fatalf("info: %+v %v", info, err)
	}
	cancel()
	if c := <-code; c != ExitOK {
		t.Fatalf("exit %d; stderr: %s", c, stderr.String())
	}
}
