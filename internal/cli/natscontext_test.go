package cli

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestNATSContexts: the nats CLI's contexts choose the server, so that one
// `nats context select` serves both tools, in the order --nats, NATS_URL,
// --context (or NATS_CONTEXT), the selected context.
func TestNATSContexts(t *testing.T) {
	e := newEnv(t)
	cfg := t.TempDir()
	t.Setenv("XDG_CONFIG_HOME", cfg)
	t.Setenv("NATS_URL", "")
	t.Setenv("NATS_CONTEXT", "")
	dir := filepath.Join(cfg, "nats", "context")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	write := func(name, content string) {
		t.Helper()
		if err := os.WriteFile(name, []byte(content), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	good, dead := e.srv.ClientURL(), deadURL(t)
	write(filepath.Join(dir, "dev.json"), `{"description": "the test's server", "url": "`+good+`"}`)
	write(filepath.Join(dir, "gone.json"), `{"url": "`+dead+`"}`)
	run := func(env map[string]string, args ...string) (int, string) {
		t.Helper()
		for k, v := range env {
			t.Setenv(k, v)
		}
		defer func() {
			for k := range env {
				t.Setenv(k, "")
			}
		}()
		var out, errOut bytes.Buffer
		code := Main(t.Context(), args, &out, &errOut)
		return code, out.String() + errOut.String()
	}
	write(filepath.Join(cfg, "nats", "context.txt"), "dev\n")
	for _, tc := range []struct {
		env  map[string]string
		args []string
		want int
	}{
		{nil, []string{"turns"}, ExitOK}, // the selected context
		{nil, []string{"--nats", dead, "turns"}, ExitFailed},
		{map[string]string{"NATS_URL": dead}, []string{"turns"}, ExitFailed},
		{nil, []string{"--context", "gone", "turns"}, ExitFailed},
		{map[string]string{"NATS_CONTEXT": "gone"}, []string{"turns"}, ExitFailed},
		{map[string]string{"NATS_CONTEXT": "gone"}, []string{"--context", "dev", "turns"}, ExitOK},
		{map[string]string{"NATS_URL": good}, []string{"--context", "gone", "turns"}, ExitOK},
		{nil, []string{"--context", "nope", "turns"}, ExitFailed},
	} {
		code, out := run(tc.env, tc.args...)
		if code != tc.want {
			t.Errorf("%v %s: exit %d, want %d\n%s", tc.env, strings.Join(tc.args, " "), code, tc.want, out)
		}
	}
	if _, out := run(nil, "--context", "nope", "turns"); !strings.Contains(out, `nats context "nope"`) {
		t.Errorf("an unknown context:\n%s", out)
	}
}
