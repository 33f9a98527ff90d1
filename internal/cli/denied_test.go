package cli

import (
	"bytes"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// TestWrongRoleFailsFast: a command run as a user whose role may not do
// what it does fails at once, naming the user, what it was refused and the
// role the command needs, as the shipped nats.conf's users.
func TestWrongRoleFailsFast(t *testing.T) {
	e, srv := newRolesEnv(t)
	hi := e.script("hi.yaml", "responses: [{text: hello}]\n")
	for _, tc := range []struct {
		role string
		args []string
		want []string
	}{
		{"client", []string{"streams", "check"}, []string{`user "client"`, "needs the admin role"}},
		{"viewer", []string{"submit", "--agent", "Wide", "--script", hi, "hi"}, []string{`user "viewer"`, "needs the client role"}},
	} {
		args := append([]string{"--nats", srv.ClientURL(), "--user", tc.role,
			"--password-file", filepath.Join("..", "..", "deploy", "dev", tc.role+".password")}, tc.args...)
		var out, errOut bytes.Buffer
		start := time.Now()
		code := Main(t.Context(), args, &out, &errOut)
		took := time.Since(start)
		if code != ExitFailed {
			t.Errorf("%s as %s: exit %d, want %d\n%s%s", tc.args[0], tc.role, code, ExitFailed, out.String(), errOut.String())
		}
		for _, w := range tc.want {
			if !strings.Contains(errOut.String(), w) {
				t.Errorf("%s as %s does not say %q:\n%s", tc.args[0], tc.role, w, errOut.String())
			}
		}
		if n := strings.Count(errOut.String(), "\n"); n > 2 {
			t.Errorf("%s as %s: %d lines of errors:\n%s", tc.args[0], tc.role, n, errOut.String())
		}
		t.Logf("%s as %s: %s", tc.args[0], tc.role, errOut.String())
		if took > 5*time.Second {
			t.Errorf("%s as %s took %s to fail", tc.args[0], tc.role, took)
		}
	}
}

// TestWorkersAsViewer: the viewer, which may not read the buckets' values,
// still sees what is served and by whom.
func TestWorkersAsViewer(t *testing.T) {
	e, srv := newRolesEnv(t)
	args := []string{"--nats", srv.ClientURL(), "--user", "viewer", "--password-file", filepath.Join("..", "..", "deploy", "dev", "viewer.password"), "workers"}
	e.waitFor("echo listed to the viewer", func() bool {
		var out, errOut bytes.Buffer
		code := Main(t.Context(), args, &out, &errOut)
		if code != ExitOK {
			t.Fatalf("workers as viewer: exit %d\n%s%s", code, out.String(), errOut.String())
		}
		return strings.Contains(out.String(), "echo") && strings.Contains(out.String(), "WORKER")
	})
}
