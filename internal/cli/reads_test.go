package cli

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/jetloop/jetloop/internal/events"
)

// TestReadCommandsAsReaders: the commands that read logs, which read
// through client, work as nats.conf's client and viewer users, which read
// by direct gets and may create no consumer (docs/accounts.md).
func TestReadCommandsAsReaders(t *testing.T) {
	e, srv := newRolesEnv(t)
	hi := `{"responses":[{"text":"hello there"}]}`
	submitScript(t, e.js, "done", "Wide", hi)
	e.waitType("done", events.TurnFinished)
	submitScript(t, e.js, "asks", "Asker", askJSON)
	e.waitType("asks", events.TurnPaused)
	html := filepath.Join(t.TempDir(), "done.html")
	for _, role := range []string{"client", "viewer"} {
		for _, tc := range []struct {
			args []string
			want string
		}{
			{[]string{"watch", "done"}, "▸ hello there"},
			{[]string{"replay", "done"}, "turn.finished"},
			{[]string{"replay", "--verify", "done"}, "verified: 5 events"},
			{[]string{"replay", "--html", html, "done"}, "wrote " + html},
			{[]string{"export", "done"}, `"type":"turn.finished"`},
			{[]string{"show", "asks"}, `paused: asks "which colour?"`},
			{[]string{"turns"}, "asks"},
			{[]string{"workflows"}, "WORKFLOW"},
		} {
			args := append([]string{tc.args[0], "--nats", srv.ClientURL(), "--user", role,
				"--password-file", filepath.Join("..", "..", "deploy", "dev", role+".password")}, tc.args[1:]...)
			var out, errOut bytes.Buffer
			if code := Main(t.Context(), args, &out, &errOut); code != ExitOK || !strings.Contains(out.String(), tc.want) {
				t.Errorf("%s as %s: exit %d, want %q in\n%s%s", strings.Join(tc.args, " "), role, code, tc.want, out.String(), errOut.String())
			}
			if errOut.Len() > 0 {
				t.Errorf("%s as %s complained: %s", strings.Join(tc.args, " "), role, errOut.String())
			}
		}
		if _, err := os.Stat(html); err != nil {
			t.Errorf("replay --html as %s: %v", role, err)
		}
	}
	// The client role submits too: what it watches after is read the same.
	script := e.script("hi.yaml", "responses: [{text: hello again}]\n")
	for _, args := range [][]string{
		{"submit", "--watch", "--agent", "Wide", "--script", script, "hi"},
		{"fork", "--from-step", "0", "--watch", "--script", script, "done"},
	} {
		full := append([]string{args[0], "--nats", srv.ClientURL(), "--user", "client",
			"--password-file", filepath.Join("..", "..", "deploy", "dev", "client.password")}, args[1:]...)
		var out, errOut bytes.Buffer
		if code := Main(t.Context(), full, &out, &errOut); code != ExitOK || !strings.Contains(out.String(), "▸ hello again") ||
			errOut.Len() > 0 {
			t.Errorf("%s as client: exit %d\n%s%s", strings.Join(args, " "), code, out.String(), errOut.String())
		}
	}
}
